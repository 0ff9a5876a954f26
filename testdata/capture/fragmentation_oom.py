"""OOM from fragmentation: enough cached free memory, but no free block large enough.

50 rounds of: a 9.5 MiB activation (a 20 MiB segment is created for it) and a 10.5 MiB
long-lived KV-cache block that takes the rest of that segment; then the activations are freed,
leaving 50 holes of 9.5 MiB that never merge (each lies in its own segment, next to a live
block). PyTorch is capped just above what it holds, so a 32 MiB request cannot get a new
segment. Writes fragmentation_oom.pickle. Expected: memsnap oom-report says fragmentation
(475 MiB cached free, largest free block 9.5 MiB) and suggests expandable_segments:True.
"""
import torch

import common

a = common.parse_args(__doc__)
MiB = 2**20
_, total = torch.cuda.mem_get_info()
common.start_recording()
acts, kv = [], []
for i in range(50):
    acts.append(torch.empty(int(9.5 * MiB), dtype=torch.uint8, device="cuda"))  # activation
    kv.append(torch.empty(int(10.5 * MiB), dtype=torch.uint8, device="cuda"))  # KV cache (kept)
del acts  # 50 x 9.5 MiB holes
reserved = torch.cuda.memory_reserved()
torch.cuda.set_per_process_memory_fraction((reserved + 24 * MiB) / total)
try:
    big = torch.empty(32 * MiB, dtype=torch.uint8, device="cuda")
    raise SystemExit("no OOM: the allocator found room")
except torch.cuda.OutOfMemoryError as e:
    print("OOM as intended:", str(e).splitlines()[0])
common.dump(a.out, "fragmentation_oom.pickle")
common.stop_recording()
