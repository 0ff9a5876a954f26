"""Shared helpers for the capture scripts: a small transformer-free MLP model, memory-history
recording with the settings memsnap's fixtures assume, and snapshot dumping.

Every script takes --out DIR (default ./snapshots) and --device N, records with
context="all", stacks="all" (unless the scenario needs stacks="python"), and writes files named
like the synthetic fixtures in testdata/scenarios/ so the same eval cases can point at them.
"""
import argparse
import os

import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        h = self.fc1(x)  # activation: fc1 output (saved for backward)
        h = torch.nn.functional.gelu(h)  # activation: gelu output
        return x + self.fc2(h)  # activation: fc2 output


class Model(nn.Module):
    def __init__(self, dim=1024, hidden=4096, depth=8, classes=1000):
        super().__init__()
        self.blocks = nn.ModuleList(Block(dim, hidden) for _ in range(depth))
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        for blk in self.blocks:
            x = blk(x)
        return self.head(x)


def parse_args(description, **extra):
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--out", default="snapshots", help="directory for the snapshot files")
    ap.add_argument("--device", type=int, default=0, help="CUDA device index")
    for name, (kind, default, help_) in extra.items():
        ap.add_argument("--" + name.replace("_", "-"), type=kind, default=default, help=help_)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("these scripts need a CUDA GPU (torch.cuda.is_available() is False)")
    os.makedirs(a.out, exist_ok=True)
    torch.cuda.set_device(a.device)
    return a


def start_recording(stacks="all", max_entries=200_000):
    """Record every allocator event with Python and C++ stacks (the defaults memsnap expects)."""
    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks=stacks, max_entries=max_entries)


def stop_recording():
    torch.cuda.memory._record_memory_history(enabled=None)


def dump(out_dir, name, sync=True):
    """Write a snapshot. sync=False keeps in-flight work in flight (pending frees stay pending)."""
    path = os.path.join(out_dir, name)
    if sync:
        torch.cuda.synchronize()
    torch.cuda.memory._dump_snapshot(path)
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")
    return path


def batch(n=64, dim=1024, classes=1000, device="cuda"):
    return torch.randn(n, dim, device=device), torch.randint(0, classes, (n,), device=device)


def train(model, opt, steps, dumps, out_dir, after_backward=None, retain_graph=False, losses=None):
    """Run `steps` training steps; at the end of each step listed in `dumps` ({step: filename})
    dump a snapshot. after_backward(step, loss, logits) runs after loss.backward()."""
    for step in range(1, steps + 1):
        x, y = batch()
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits, y)
        loss.backward(retain_graph=retain_graph)
        if losses is not None:
            losses.append(loss)  # the bug under test keeps each step's loss tensor (and its graph)
        if after_backward is not None:
            after_backward(step, loss, logits)
        opt.step()
        opt.zero_grad(set_to_none=True)
        del x, y, logits, loss
        if step in dumps:
            dump(out_dir, dumps[step])
