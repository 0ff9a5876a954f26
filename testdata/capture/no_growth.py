"""A correct training loop: steps 5 and 50 hold the same live memory.

Writes no_growth_step5.pickle and no_growth_step50.pickle. Expected: memsnap diff reports
no_growth (no site grows in both bytes and blocks).
"""
import torch

import common

a = common.parse_args(__doc__)
common.start_recording()
model = common.Model(depth=2).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
common.train(model, opt, 50, {5: "no_growth_step5.pickle", 50: "no_growth_step50.pickle"}, a.out)
common.stop_recording()
