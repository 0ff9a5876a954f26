"""OOM caused by memory held outside this process's PyTorch allocator (verdict outside_pytorch).

A child process takes all but about 128 MiB of the device; this process, holding a small model
and its optimizer state, then asks for 1 GiB. Writes outside_pytorch_oom.pickle. Expected:
memsnap oom-report says outside_pytorch (device free far below what PyTorch reserved explains).
"""
import time

import torch
import torch.multiprocessing as mp

import common


def hog(device, ready, done):
    torch.cuda.set_device(device)
    free, _ = torch.cuda.mem_get_info()
    ballast = torch.empty(free - 128 * 2**20, dtype=torch.uint8, device="cuda")
    ready.set()
    done.wait()
    del ballast


if __name__ == "__main__":
    a = common.parse_args(__doc__)
    common.start_recording()
    model = common.Model(depth=2).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = common.batch()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    ctx = mp.get_context("spawn")
    ready, done = ctx.Event(), ctx.Event()
    p = ctx.Process(target=hog, args=(a.device, ready, done))
    p.start()
    ready.wait(timeout=120)
    time.sleep(1)
    try:
        big = torch.empty(2**30, dtype=torch.uint8, device="cuda")
        print("no OOM: the other process did not take the memory")
    except torch.cuda.OutOfMemoryError as e:
        print("OOM as intended:", str(e).splitlines()[0])
    common.dump(a.out, "outside_pytorch_oom.pickle")
    common.stop_recording()
    done.set()
    p.join()
