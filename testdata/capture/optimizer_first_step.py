"""Not a leak: Adam's state appears on the first optimizer step, then stays flat.

Dumps right before the first opt.step() (optimizer_first_step_before.pickle) and at the same
point of step 10 (optimizer_step10.pickle). Expected: memsnap diff reports
optimizer_state_first_step (exp_avg / exp_avg_sq created in AdamW._init_group), and no leak.
"""
import torch

import common

a = common.parse_args(__doc__)
common.start_recording()
model = common.Model(depth=2).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(1, 11):
    x, y = common.batch()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    del x, y
    if step == 1:
        common.dump(a.out, "optimizer_first_step_before.pickle")
    if step == 10:
        common.dump(a.out, "optimizer_step10.pickle")
    opt.step()
    opt.zero_grad(set_to_none=True)
    del loss
common.stop_recording()
