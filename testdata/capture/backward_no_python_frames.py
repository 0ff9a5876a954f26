"""Backward allocations without Python frames: recorded with stacks="python".

With Python-only stacks, allocations the autograd engine makes in backward (gradients,
activation gradients) have empty frame lists. Writes backward_no_python_frames.pickle after step
3's backward. Expected: memsnap top-stacks lists their memory as <no Python frame> instead of
dropping it, and says why.
"""
import torch

import common

a = common.parse_args(__doc__)
common.start_recording(stacks="python")
model = common.Model(depth=2).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(1, 4):
    x, y = common.batch()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    if step == 3:
        common.dump(a.out, "backward_no_python_frames.pickle")
        break
    opt.step()
    opt.zero_grad(set_to_none=True)
common.stop_recording()
