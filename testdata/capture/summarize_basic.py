"""Summarize fixture: a few profiled steps with default-stream small and large pools, a side
stream block, and a private (CUDA graph) pool, then one snapshot.

Writes summarize_basic.pickle, plus the same snapshot as protocol 5, gzip, gzip JSON and the
oldest bare segment-list form (see formats.py).
"""
import torch

import common
import formats

a = common.parse_args(__doc__)
common.start_recording()
model = common.Model(depth=2).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
side = torch.cuda.Stream()
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
    for step in range(3):
        x, y = common.batch()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        prof.step()
with torch.cuda.stream(side):
    side_buf = torch.empty(256 * 1024, dtype=torch.uint8, device="cuda")  # side-stream block
# A private pool: capture a CUDA graph; its output lives in the graph's pool.
static_x = torch.randn(2048, 1024, device="cuda")
torch.cuda.synchronize()
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    static_y = static_x * 2
g.replay()
path = common.dump(a.out, "summarize_basic.pickle")
common.stop_recording()
formats.write_variants(path)
