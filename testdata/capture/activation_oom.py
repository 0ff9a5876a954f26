"""OOM from activations (verdict capacity): one forward pass whose saved activations outgrow
the device.

The batch is sized from the free memory so that about 30 of the 48 blocks fit: the forward
fails in a block's fc1 with live tensors filling the device. Writes activation_oom.pickle.
Expected: memsnap oom-report says capacity, names the fc1 line in common.Block.forward, and
activation memory dominates. --cap-gib limits PyTorch with set_per_process_memory_fraction
instead (faster on big GPUs; the oom event's device_free then shows the real, larger, free memory).
"""
import torch

import common

a = common.parse_args(__doc__, cap_gib=(float, 0.0, "cap PyTorch at this many GiB (0 = the whole device)"))
free, total = torch.cuda.mem_get_info()
if a.cap_gib > 0:
    torch.cuda.set_per_process_memory_fraction(min(1.0, a.cap_gib * 2**30 / total))
    free = min(free, int(a.cap_gib * 2**30))
dim, hidden, depth = 1024, 4096, 48
per_row = 4 * (2 * hidden + dim)  # fc1, gelu and fc2 outputs saved per block, float32
rows = max(64, int(free / (30 * per_row * 1.0)))
common.start_recording()
model = common.Model(dim=dim, hidden=hidden, depth=depth).cuda()
x = torch.randn(rows, dim, device="cuda")
try:
    model(x).sum().backward()
    raise SystemExit("no OOM: lower --cap-gib or raise depth")
except torch.cuda.OutOfMemoryError as e:
    print("OOM as intended:", str(e).splitlines()[0])
common.dump(a.out, "activation_oom.pickle")
common.stop_recording()
