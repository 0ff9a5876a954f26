package snapshot

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestTraceTally: the tally of a small trace, value by value.
func TestTraceTally(t *testing.T) {
	evs := []Event{
		{Action: ActionSegmentAlloc, Addr: 0x1000, Size: 8192, TimeUS: 5},
		{Action: ActionFreeRequested, Addr: 0x1400, Size: 2048, Stack: 3}, // alive before the trace
		{Action: ActionFreeCompleted, Addr: 0x1400, Size: 2048, Stack: 3},
		{Action: ActionAlloc, Addr: 0x1000, Size: 1024, Stack: 1, TimeUS: 9},
		{Action: ActionAlloc, Addr: 0x1000, Size: 1000, Stack: 2}, // again without a free: counted once
		{Action: ActionAlloc, Addr: 0x1800, Size: 512, Stack: NoStack},
		{Action: ActionFreeRequested, Addr: 0x1800, Size: 512, Stack: EmptyStack},
		Event{Action: ActionOOM, Size: 1 << 40, Stack: 2}.WithDeviceFree(4096),
		{Action: ActionSegmentFree, Addr: 0x1000, Size: 8192},
		{Action: ActionSnapshot},
	}
	x := NewTraceIndex(evs)
	tl := &x.Tally
	want := map[Action]int64{ActionSegmentAlloc: 1, ActionFreeRequested: 2, ActionFreeCompleted: 1, ActionAlloc: 3,
		ActionOOM: 1, ActionSegmentFree: 1, ActionSnapshot: 1}
	for a := range Action(numActions) {
		if tl.Actions[a] != want[a] {
			t.Errorf("%s: %d events, want %d", a, tl.Actions[a], want[a])
		}
	}
	if tl.MinSize != 0 || tl.MaxSize != 8192 || tl.MaxOOMSize != 1<<40 || tl.MinDeviceFree != 0 || tl.MaxDeviceFree != 4096 ||
		tl.MinTimeUS != 0 || tl.MaxTimeUS != 9 || tl.SizeSum != 8192+2048+2048+1024+1000+512+512+8192 || tl.SizeSumOverflow {
		t.Errorf("ranges %+v", *tl)
	}
	// The oom events by their index in the trace, also when the indexer is fed in parts.
	parts := NewTraceIndexer(0)
	parts.Add(evs[:5])
	parts.Add(evs[5:])
	if px := parts.Finish(evs); !slices.Equal(tl.OOMEvents, []int{7}) || !slices.Equal(px.Tally.OOMEvents, []int{7}) {
		t.Errorf("oom events %v (in parts %v), want [7]", tl.OOMEvents, px.Tally.OOMEvents)
	}
	if !tl.OddAllocSize || !tl.FreeBeforeAlloc {
		t.Errorf("odd alloc size %v, free before alloc %v: want both", tl.OddAllocSize, tl.FreeBeforeAlloc)
	}
	// Running: -2048 (the early free), +1024, then 1000 replaces 1024, +512 (the highest, -536,
	// below the start), -512 at its request.
	allocated, before, segments, segNet := tl.Peaks()
	if allocated != 0 || before != 2048 || segments != 8192 || segNet != 0 {
		t.Errorf("peaks %d %d %d %d, want 0 2048 8192 0", allocated, before, segments, segNet)
	}
	for _, c := range []struct {
		addr     uint64
		size     int64
		live, in bool
	}{
		{0x1400, 0, false, false},  // completed free
		{0x1000, 1000, true, true}, // the last alloc
		{0x1800, 512, true, true},  // pending: still allocated in the trace
		{0x9999, 0, false, false},  // no event
	} {
		id, ok := x.Block(c.addr)
		if !ok {
			id = -1
		}
		if size, live := tl.LastAlloc(id); size != c.size || live != c.live || tl.AllocatedInTrace(id) != c.in {
			t.Errorf("block %#x: last alloc %d live %v in trace %v, want %d %v %v", c.addr, size, live, tl.AllocatedInTrace(id), c.size, c.live, c.in)
		}
	}
	if n, complete := tl.StacksNamed(); n != 4 || !complete {
		t.Errorf("stacks named %d %v, want 4 true", n, complete)
	}
	for id, w := range [][3]bool{{}, {true, true, false}, {true, true, false}, {true, false, true}, {}} {
		if named, alloc, free := tl.StackUse(StackID(id)); [3]bool{named, alloc, free} != w {
			t.Errorf("stack %d: %v %v %v, want %v", id, named, alloc, free, w)
		}
	}
	// Ids in order of first appearance, with their first events (in parts as well).
	px := parts.Finish(evs)
	for _, ix := range []*TraceIndex{x, px} {
		if !slices.Equal(ix.Blocks, []uint64{0x1400, 0x1000, 0x1800}) || !slices.Equal(ix.BlockFirst, []int32{1, 3, 5}) ||
			!slices.Equal(ix.Segments, []uint64{0x1000}) || !slices.Equal(ix.SegmentFirst, []int32{0}) {
			t.Errorf("blocks %#x first %v, segments %#x first %v", ix.Blocks, ix.BlockFirst, ix.Segments, ix.SegmentFirst)
		}
	}
}

// TestTraceTallyLastAllocSize: the size of a block's last alloc whatever followed it (a
// completed free, a second alloc without a free), and none for a block the trace only frees.
func TestTraceTallyLastAllocSize(t *testing.T) {
	evs := []Event{
		{Action: ActionFreeRequested, Addr: 0x1000, Size: 4096}, // alive before the trace
		{Action: ActionFreeCompleted, Addr: 0x1000, Size: 4096},
		{Action: ActionFreeRequested, Addr: 0x2000, Size: 2048}, // alive before, then allocated again
		{Action: ActionFreeCompleted, Addr: 0x2000, Size: 2048},
		{Action: ActionAlloc, Addr: 0x2000, Size: 1536},
		{Action: ActionAlloc, Addr: 0x3000, Size: 512}, // freed after its last alloc
		{Action: ActionFreeRequested, Addr: 0x3000, Size: 512},
		{Action: ActionFreeCompleted, Addr: 0x3000, Size: 512},
		{Action: ActionAlloc, Addr: 0x4000, Size: 1024}, // allocated twice without a free
		{Action: ActionAlloc, Addr: 0x4000, Size: 3072},
		{Action: ActionFreeRequested, Addr: 0x4000, Size: 3072}, // pending at the end
		{Action: ActionFreeRequested, Addr: 0x5000, Size: 8192}, // alive before, pending at the end
	}
	x := NewTraceIndex(evs)
	for _, c := range []struct {
		addr     uint64
		size     int64
		ok       bool
		lastSize int64 // LastAlloc's
		live     bool
	}{
		{0x1000, 0, false, 0, false},
		{0x2000, 1536, true, 1536, true},
		{0x3000, 512, true, 0, false},
		{0x4000, 3072, true, 3072, true},
		{0x5000, 0, false, 8192, true},
		{0x6000, 0, false, 0, false}, // no event
	} {
		id, found := x.Block(c.addr)
		if !found {
			id = -1
		}
		size, ok := x.Tally.LastAllocSize(id)
		last, live := x.Tally.LastAlloc(id)
		if size != c.size || ok != c.ok || last != c.lastSize || live != c.live {
			t.Errorf("block %#x: last alloc size %d %v, LastAlloc %d %v; want %d %v, %d %v", c.addr, size, ok, last, live, c.size, c.ok, c.lastSize, c.live)
		}
	}
	if !slices.Equal(x.BlockFirst, []int32{0, 2, 5, 8, 11}) {
		t.Errorf("first events %v", x.BlockFirst)
	}
}

// TestTraceTallyLimits: a size sum past int64 and a negative size are flagged; stack ids
// beyond what the tally records make it say so rather than grow.
func TestTraceTallyLimits(t *testing.T) {
	x := NewTraceIndex([]Event{{Action: ActionAlloc, Size: math.MaxInt64}, {Action: ActionAlloc, Addr: 512, Size: 1}})
	if !x.Tally.SizeSumOverflow {
		t.Error("a sum past int64 is not flagged")
	}
	x = NewTraceIndex([]Event{{Action: ActionAlloc, Size: -5}})
	if x.Tally.MinSize != -5 || !x.Tally.SizeSumOverflow {
		t.Errorf("negative size: min %d, flagged %v", x.Tally.MinSize, x.Tally.SizeSumOverflow)
	}
	x = NewTraceIndex([]Event{{Action: ActionAlloc, Stack: 7}, {Action: ActionAlloc, Addr: 512, Stack: maxStackUse}})
	if n, complete := x.Tally.StacksNamed(); n != 8 || complete {
		t.Errorf("stacks named %d %v, want 8 false", n, complete)
	}
}

// TestTraceTallyReplays: on random traces, the tally's peaks and block states are those of a
// plain replay keeping a map by address (the definition the summary's peaks had before the
// tally), and adding the trace in parts changes nothing.
func TestTraceTallyReplays(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for round := range 200 {
		var evs []Event
		for range 1 + r.IntN(400) {
			acts := []Action{ActionAlloc, ActionAlloc, ActionFreeRequested, ActionFreeCompleted, ActionSegmentAlloc, ActionSegmentFree, ActionSegmentMap, ActionSegmentUnmap, ActionOOM, ActionSnapshot}
			evs = append(evs, Event{Action: acts[r.IntN(len(acts))], Addr: uint64(r.IntN(20)) * 512, Size: int64(r.IntN(8)) * 512, Stack: StackID(r.IntN(6) - 1)})
		}
		type blk struct {
			size               int64
			set, pending, gone bool
			in                 bool
		}
		seen := map[uint64]*blk{}
		var before, running, maxRunning, segNet, segRunning, maxSeg int64
		incomplete := false
		for _, e := range evs {
			b := seen[e.Addr]
			if b == nil && BlockEvent(e.Action) {
				b = &blk{}
				seen[e.Addr] = b
			}
			switch e.Action {
			case ActionAlloc:
				if b.set && !b.gone && !b.pending {
					running -= b.size
				}
				*b = blk{size: e.Size, set: true, in: true}
				running += e.Size
			case ActionFreeRequested:
				incomplete = incomplete || !b.in
				switch {
				case !b.set:
					before += e.Size
					running -= e.Size
					*b = blk{size: e.Size, set: true, pending: true}
				case !b.gone && !b.pending:
					running -= b.size
					b.pending = true
				}
			case ActionFreeCompleted:
				incomplete = incomplete || !b.in
				switch {
				case !b.set:
					*b = blk{set: true, gone: true}
				case !b.gone:
					if !b.pending {
						running -= b.size
					}
					*b = blk{set: true, gone: true}
				}
			case ActionSegmentAlloc, ActionSegmentMap:
				segNet += e.Size
				segRunning += e.Size
			case ActionSegmentFree, ActionSegmentUnmap:
				segNet -= e.Size
				segRunning -= e.Size
			}
			maxRunning, maxSeg = max(maxRunning, running), max(maxSeg, segRunning)
		}
		b := NewTraceIndexer(0)
		for i := 0; i < len(evs); {
			n := min(len(evs)-i, 1+r.IntN(50))
			b.Add(evs[i : i+n])
			i += n
		}
		x := b.Finish(evs)
		tl := &x.Tally
		if a, bf, s, sn := tl.Peaks(); a != maxRunning || bf != before || s != maxSeg || sn != segNet {
			t.Fatalf("round %d: peaks %d %d %d %d, want %d %d %d %d", round, a, bf, s, sn, maxRunning, before, maxSeg, segNet)
		}
		if tl.FreeBeforeAlloc != incomplete {
			t.Fatalf("round %d: free before alloc %v, want %v", round, tl.FreeBeforeAlloc, incomplete)
		}
		for addr, want := range seen {
			id, _ := x.Block(addr)
			if size, live := tl.LastAlloc(id); size != want.size || live != !want.gone || tl.AllocatedInTrace(id) != want.in {
				t.Fatalf("round %d block %#x: %d %v %v, want %+v", round, addr, size, live, tl.AllocatedInTrace(id), *want)
			}
		}
	}
}
