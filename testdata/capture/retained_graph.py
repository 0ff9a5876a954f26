"""Leak: the autograd graph of every step is retained.

loss.backward(retain_graph=True) plus losses.append(loss) keeps each step's loss tensor alive,
and through its grad_fn every saved activation of that step (fc1, gelu and fc2 outputs). Writes
retained_graph_step5.pickle and retained_graph_step50.pickle. Expected: memsnap diff reports
retained_autograd_graph at the losses.append line, with the forward sites growing together.
"""
import torch

import common

a = common.parse_args(__doc__)
common.start_recording()
model = common.Model(depth=2).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
losses = []
common.train(model, opt, 50, {5: "retained_graph_step5.pickle", 50: "retained_graph_step50.pickle"}, a.out,
             retain_graph=True, losses=losses)
common.stop_recording()
