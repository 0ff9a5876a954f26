package analysis

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/memsnap/memsnap/analysis/load"
	"github.com/memsnap/memsnap/analysis/pickle/writer"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// FuzzAnalyses builds a snapshot from the fuzzer's bytes (segments and blocks, trace events of
// every action at a few addresses, stacks of the forward, backward and optimizer passes, of the
// garbage collector and of empty_cache, allocator settings), writes it as PyTorch does and loads
// it back, so that what reaches the analyses is what the loader accepts, and then runs every
// analysis a command or an MCP tool runs, and renders each answer. Inconsistent traces (frees
// of blocks never allocated, blocks allocated twice, segments freed while in use, oom events
// anywhere) are the point: none may panic or run long.
func FuzzAnalyses(f *testing.F) {
	f.Add([]byte{0, 2, 0x11, 0x22, 1, 0, 3, 0, 2, 0, 3, 0, 3, 0, 3, 0})
	f.Add([]byte{1, 3, 0x31, 0x12, 0x23, 1, 1, 4, 1, 2, 1, 4, 2, 3, 1, 4, 3, 9, 2, 7, 0, 5, 0, 1, 0})
	f.Add([]byte{6, 1, 0x44, 1, 0x10, 4, 0, 1, 0x13, 5, 2, 1, 0x23, 6, 1, 2, 0x10, 4, 0, 3, 0x10, 4, 0, 9, 0, 8, 0})
	f.Add([]byte{0x0b, 2, 0x52, 0x35, 4, 0x80, 6, 0, 6, 0x80, 6, 1, 1, 0x81, 2, 2, 2, 0x81, 2, 0, 3, 0x81, 2, 0, 7, 0x80, 6, 0, 10, 0, 0, 4})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4096 {
			return
		}
		snap := fuzzSnapshot(data)
		raw, err := writer.Encode(snap, writer.Options{})
		if err != nil {
			return // not a snapshot PyTorch could write
		}
		s, err := load.Reader(context.Background(), bytes.NewReader(raw), "fuzz.pickle", int64(len(raw)), load.Options{})
		if err != nil {
			return
		}
		start := time.Now()
		runEveryAnalysis(t, s)
		if d := time.Since(start); d > 10*time.Second {
			n := 0
			for _, evs := range s.DeviceTraces {
				n += len(evs)
			}
			t.Fatalf("the analyses of %d events took %v", n, d)
		}
	})
}

// runEveryAnalysis runs what the commands and the MCP tools run on s, with their usual
// options and a few others, and renders every answer. Errors are answers too; a panic is not.
func runEveryAnalysis(t *testing.T, s *snapshot.Snapshot) {
	t.Helper()
	ctx := context.Background()
	var out strings.Builder
	text := func(v interface{ Text() string }, err error) {
		if err == nil {
			out.WriteString(v.Text())
		}
	}
	// Every block is counted once, in every view of the final state.
	var blockBytes int64
	for _, seg := range s.Segments {
		for _, b := range seg.Blocks {
			blockBytes += b.Size
		}
	}
	sum, err := Summarize(ctx, s, SummaryOptions{})
	text(sum, err)
	if tot := sum.Totals; err == nil && tot.AllocatedBytes+tot.PendingFreeBytes+tot.InactiveBytes != blockBytes {
		t.Fatalf("summarize: allocated %d + pending %d + inactive %d, want the blocks' %d", tot.AllocatedBytes, tot.PendingFreeBytes, tot.InactiveBytes, blockBytes)
	}
	for _, g := range []string{"site", "stack", "file", "function", "annotation", "compile_context"} {
		for _, st := range []string{"allocated", "all"} {
			r, err := TopStacks(s, TopStacksOptions{Device: AllDevices, GroupBy: g, State: st})
			text(r, err)
			if err == nil && st == "all" && r.TotalBytes != blockBytes {
				t.Fatalf("top-stacks by %s: %d bytes in all, want the blocks' %d", g, r.TotalBytes, blockBytes)
			}
		}
	}
	frag, err := Fragmentation(s, FragOptions{Device: AllDevices})
	text(frag, err)
	rep, err := ReplaySnapshot(ctx, s, nil, ReplayOptions{})
	text(rep, err)
	oom, err := OOMReport(ctx, s, OOMOptions{})
	text(oom, err)
	for _, opt := range []WhatIfOptions{{}, {Recommend: true}, {DeviceMemory: 64 << 20, Recommend: true}} {
		w, err := WhatIf(ctx, s, nil, opt)
		text(w, err)
	}
	d, err := Diff(s, s, DiffOptions{Device: AllDevices})
	text(d, err)
	for _, k := range []string{PictureTimeline, PictureSegments} {
		p, err := Picture(ctx, s, PictureOptions{Kind: k})
		if err == nil && p == nil {
			t.Fatalf("picture %s: no result and no error", k)
		}
	}
	for _, opt := range []TrimOptions{{Device: -1, LastEvents: 3}, {Device: 0, Window: true, Start: 1, End: 4}} {
		if _, r, err := Trim(ctx, s, opt); err == nil && r == nil {
			t.Fatalf("trim: no report and no error")
		}
	}
	c, err := Check(ctx, s, CheckOptions{MaxPeakBytes: 1 << 20, MaxReservedBytes: 1 << 20, Baseline: s, MaxGrowthPercent: 10, Device: AllDevices})
	text(c, err)
}

// fuzzSnapshot reads a snapshot from data: a flags byte, then segments, then four bytes per
// trace event (see FuzzAnalyses). Every byte string makes one.
func fuzzSnapshot(data []byte) *snapshot.Snapshot {
	next := func() byte {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return b
	}
	t := newTB()
	flags := next()
	t.snap.Settings.ExpandableSegments = flags&1 != 0
	t.snap.Settings.Present = flags&0x10 != 0
	if flags&0x20 != 0 {
		t.snap.Settings.MaxSplitSize = 4 << 20
	}
	const (
		user  = "/home/u/proj/train.py"
		model = "/home/u/proj/model.py"
	)
	stacks := []snapshot.StackID{
		snapshot.NoStack,
		snapshot.EmptyStack,
		t.stack(model, 12, "forward", "torch/nn/modules/module.py", 1527, "_call_impl", user, 40, "main"),
		t.stack("torch/autograd/graph.py", 744, "_engine_run_backward", "torch/_tensor.py", 522, "backward", user, 44, "main"),
		t.stack("torch/optim/adam.py", 160, "step", "torch/optim/optimizer.py", 385, "wrapper", user, 46, "main"),
		t.stack(user, 30, "<listcomp>", user, 52, "main"),
		t.stack("torch/cuda/memory.py", 170, "empty_cache", user, 60, "main"),
		t.stack("??", 0, "c10::cuda::CUDACachingAllocator::malloc", "torch/nn/functional.py", 2000, "linear", model, 20, "forward"),
		t.stack(user, 70, "__del__", "gc", 0, "collect", user, 72, "main"),
	}
	stack := func(b byte) snapshot.StackID { return stacks[int(b)%len(stacks)] }
	// Per-event strings: a step's user metadata, a compiled region, a private pool (CUDA graphs).
	t.snap.EventExtras = []snapshot.EventExtra{{}, {UserMetadata: "step=1"}, {CompileContext: "[0/1] torch/_inductor"}, {PoolID: snapshot.PoolID{1, 2}}}
	twoDevices := flags&2 != 0
	timed := flags&4 != 0
	const base = uint64(0x7f0000000000)
	// Segments: how many, then for each a size byte and a byte per block (state and stack).
	nSeg := int(next() % 4)
	var segAddrs []uint64
	addr := base
	for k := 0; k < nSeg; k++ {
		sb := next()
		size := int64(2 << 20)
		if sb&1 != 0 {
			size = 20 << 20
		}
		nBlk := 1 + int(sb>>1)%4
		blocks := make([]snapshot.Block, 0, nBlk)
		for j := 0; j < nBlk; j++ {
			bb := next()
			st := []snapshot.BlockState{snapshot.StateActiveAllocated, snapshot.StateActivePendingFree, snapshot.StateInactive, snapshot.StateInactive}[bb&3]
			sz := size / int64(nBlk) &^ 511
			if j == nBlk-1 {
				sz = size - sz*int64(nBlk-1)
			}
			b := blk(sz, st, stack(bb>>2))
			if st == snapshot.StateInactive {
				b.Stack, b.RequestedSize = snapshot.EmptyStack, 0
			}
			blocks = append(blocks, b)
		}
		dev := 0
		if twoDevices && sb&0x80 != 0 {
			dev = 1
		}
		t.seg(dev, addr, uint64(sb>>6&1), blocks...)
		sg := &t.snap.Segments[len(t.snap.Segments)-1]
		sg.IsExpandable = flags&8 != 0 && sb&0x20 != 0
		if flags&0x40 != 0 && sb&0x20 != 0 {
			sg.PoolID = snapshot.PoolID{1, 2}
		}
		segAddrs = append(segAddrs, addr)
		addr += uint64(size) + 32<<20
	}
	sizes := []int64{512, 1024, 4096, 1 << 20, 2 << 20, 6 << 20, 20 << 20, 1000, 0, 8 << 30}
	tick := int64(1_700_000_000_000_000)
	for len(data) >= 4 {
		a, where, sb, sk := next(), next(), next(), next()
		act := snapshot.Action(1 + int(a)%10) // alloc … annotate
		ev := snapshot.Event{Action: act, Size: sizes[int(sb)%len(sizes)], Stack: stack(sk), Stream: uint64(sk >> 6 & 1),
			Extra: snapshot.MakeExtraID(uint32(a/10) % uint32(len(t.snap.EventExtras)))}
		switch slot := uint64(where & 15); {
		case act == snapshot.ActionSegmentAlloc || act == snapshot.ActionSegmentFree || act == snapshot.ActionSegmentMap || act == snapshot.ActionSegmentUnmap:
			if len(segAddrs) > 0 && slot < 8 {
				ev.Addr = segAddrs[int(slot)%len(segAddrs)]
			} else {
				ev.Addr = base + 1<<32 + slot<<26
			}
		case len(segAddrs) > 0 && slot < 8:
			ev.Addr = segAddrs[int(slot)%len(segAddrs)] + slot*(512<<10)
		default:
			ev.Addr = base + 1<<32 + slot<<26
		}
		if act == snapshot.ActionOOM {
			ev = ev.WithDeviceFree(int64(sb) << 20)
		}
		if act == snapshot.ActionSnapshot || act == snapshot.ActionAnnotate {
			ev.Addr, ev.Size = 0, 0
		}
		if timed {
			tick += int64(sb) + 1
			ev.TimeUS = tick
		}
		dev := 0
		if twoDevices && where&0x80 != 0 {
			dev = 1
		}
		t.ev(dev, ev)
	}
	if flags&0x80 != 0 && timed {
		t.snap.Annotations = []snapshot.Annotation{{Name: "forward", Stage: "START", TimeUS: 1_700_000_000_000_001},
			{Name: "forward", Stage: "END", TimeUS: tick - 1}, {Name: "optimizer_step", Stage: "START", TimeUS: tick}}
	}
	return t.done()
}
