"""A multi-rank run with one outlier rank: each of 4 ranks trains 3 steps and dumps
multirank/rank{R}.pickle; rank 1 also keeps 3 x 512 MiB of gathered predictions.

Ranks use device R when there are 4 GPUs, else all share --device (the files then all say
device 0, which memsnap handles). No collective is needed. Expected: memsnap summarize on the
directory flags rank 1 as the outlier, and top-stacks on rank1.pickle names gather_predictions.
"""
import os

import torch
import torch.multiprocessing as mp

import common

RANKS = 4


def gather_predictions():
    return [torch.empty(512 * 2**20, dtype=torch.uint8, device="cuda") for _ in range(3)]


def rank_main(rank, out, device):
    torch.cuda.set_device(rank if torch.cuda.device_count() >= RANKS else device)
    common.start_recording()
    model = common.Model(depth=2).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    kept = gather_predictions() if rank == 1 else []  # the outlier
    common.train(model, opt, 3, {3: f"rank{rank}.pickle"}, out)
    common.stop_recording()
    del kept


if __name__ == "__main__":
    a = common.parse_args(__doc__)
    out = os.path.join(a.out, "multirank")
    os.makedirs(out, exist_ok=True)
    mp.spawn(rank_main, args=(out, a.device), nprocs=RANKS)
