"""Pending frees across streams: batches made on the default stream are used on a side stream
(record_stream), then freed while the side stream is still busy.

Their free_completed events come only after the side stream's work finishes, and the last two
are still active_pending_free when the snapshot is taken (no synchronize before dumping).
Writes cross_stream_pending.pickle. Expected: memsnap summarize shows pending free bytes and
top-stacks --state pending names the prefetch line.
"""
import torch

import common

a = common.parse_args(__doc__)
common.start_recording()
side = torch.cuda.Stream()
MiB = 2**20
for i in range(6):
    b = torch.empty(2 * MiB, dtype=torch.uint8, device="cuda")  # prefetch
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)  # keep the side stream busy (~0.1 s)
        acc = b.float().sum()  # reduce_on_side
    b.record_stream(side)
    del b  # free_requested now; free_completed once the side stream passes this point
common.dump(a.out, "cross_stream_pending.pickle", sync=False)
common.stop_recording()
torch.cuda.synchronize()
