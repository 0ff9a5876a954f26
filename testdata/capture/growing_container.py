"""Leak: a list keeps one GPU tensor per step.

history.append(logits.detach().clone()) keeps a copy of the logits on the GPU every step (no
graph: detached). Writes growing_container_step5.pickle and growing_container_step50.pickle.
Expected: memsnap diff reports growing_container at the history.append line, +45 blocks of the
logits size; the fix is .cpu() or a bounded container.
"""
import torch

import common

a = common.parse_args(__doc__)
common.start_recording()
model = common.Model(depth=2).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
history = []


def keep(step, loss, logits):
    history.append(logits.detach().clone())  # the leak


common.train(model, opt, 50, {5: "growing_container_step5.pickle", 50: "growing_container_step50.pickle"}, a.out,
             after_backward=keep)
common.stop_recording()
