package analysis

import (
	"context"
	"testing"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// lateTrace: a block of 4 MiB alive before the trace is freed inside it; a 2 MiB block alive
// at the end has no alloc in the trace; the trace allocates and frees a 6 MiB block and leaves a
// 1 MiB block alive.
func lateTrace() *snapshot.Snapshot {
	t := newTB()
	user := t.stack("/home/u/proj/train.py", 42, "step")
	pre := t.stack("/home/u/proj/model.py", 7, "build")
	const base, m = uint64(0x7f0000000000), uint64(mib)
	// Final state: segment A (20 MiB) holds [pre 2 MiB alive][1 MiB alive][17 MiB free].
	t.seg(0, base, 0,
		blk(2*mib, snapshot.StateActiveAllocated, pre),
		blk(1*mib, snapshot.StateActiveAllocated, user),
		blk(17*mib, snapshot.StateInactive, snapshot.EmptyStack))
	t.ev(0, freeReq(base+100*m, 4*mib)) // freed block from before the trace (segment B)
	t.ev(0, freeDone(base+100*m, 4*mib))
	t.ev(0, segFree(base+100*m, 20*mib))
	t.ev(0, alloc(base+3*m, 6*mib, user))
	t.ev(0, alloc(base+2*m, 1*mib, user))
	t.ev(0, freeReq(base+3*m, 6*mib))
	t.ev(0, freeDone(base+3*m, 6*mib))
	s := t.done()
	s.Caps.TraceIncomplete = true
	return s
}

func TestReplayLateStart(t *testing.T) {
	s := lateTrace()
	r, err := Replay(context.Background(), s, 0)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		got, want int64
	}{
		{"start allocated", r.StartAllocatedBytes, 6 * mib}, // 4 MiB freed + 2 MiB alive throughout
		{"start reserved", r.StartReservedBytes, 40 * mib},  // 20 final + 20 freed
		{"peak allocated", r.PeakAllocatedBytes, 9 * mib},   // 2 + 6 + 1
		{"peak event", int64(r.PeakAllocatedEvent), 4},
		{"peak reserved", r.PeakReservedBytes, 40 * mib},
		{"end allocated", r.EndAllocatedBytes, 3 * mib},
		{"end reserved", r.EndReservedBytes, 20 * mib},
		{"pre blocks", int64(r.PreTraceBlocks), 2},
		{"pre bytes", r.PreTraceBytes, 6 * mib},
		{"events", int64(r.Events), 7},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s = %d, want %d", tc.name, tc.got, tc.want)
		}
	}
	if !r.Consistent {
		t.Errorf("not consistent: %v", r.Notes)
	}
	if len(r.PeakSites) != 2 || r.PeakSites[0].Site != "train.py:42" || r.PeakSites[0].Bytes != 7*mib || r.PeakSites[0].Blocks != 2 ||
		r.PeakSites[1].Site != "model.py:7" || r.PeakSites[1].Bytes != 2*mib {
		t.Errorf("peak sites = %+v", r.PeakSites)
	}
	want := map[string]int64{"alloc": 2, "free_requested": 2, "free_completed": 2, "segment_free": 1}
	if len(r.EventCounts) != len(want) {
		t.Errorf("event counts = %+v", r.EventCounts)
	}
	for _, c := range r.EventCounts {
		if want[c.Action] != c.Count {
			t.Errorf("count %s = %d, want %d", c.Action, c.Count, want[c.Action])
		}
	}
	if r.Text() == "" {
		t.Error("empty text")
	}
}

func TestReplayDelayedFree(t *testing.T) {
	tb := newTB()
	st := tb.stack("/w/train.py", 10, "comm")
	tb.seg(0, 0x1000000, 7, blk(20*mib, snapshot.StateInactive, snapshot.EmptyStack))
	tb.ev(0, segAlloc(0x1000000, 20*mib))
	e := alloc(0x1000000, 2*mib, st)
	e.Stream = 7
	tb.ev(0, e)
	tb.ev(0, freeReq(0x1000000, 2*mib))
	tb.ev(0, alloc(0x1200000, 1*mib, st))
	tb.ev(0, freeReq(0x1200000, 1*mib))
	tb.ev(0, freeDone(0x1200000, 1*mib))
	tb.ev(0, freeDone(0x1000000, 2*mib))
	s := tb.done()
	r, err := Replay(context.Background(), s, 0)
	if err != nil {
		t.Fatal(err)
	}
	d := r.DelayedFrees
	if d.Count != 1 || d.Bytes != 2*mib || d.MaxDelayEvents != 4 || len(d.Streams) != 1 || d.Streams[0] != "0x7" ||
		len(d.Sites) != 1 || d.Sites[0].Site != "train.py:10" {
		t.Errorf("delayed frees = %+v", d)
	}
	if r.PeakAllocatedBytes != 2*mib || r.PeakActiveBytes != 3*mib || r.StartReservedBytes != 0 || r.PeakReservedBytes != 20*mib || !r.Consistent {
		t.Errorf("replay = %+v", r)
	}
}

func TestReplayGCFrees(t *testing.T) {
	tb := newTB()
	st := tb.stack("/w/model.py", 12, "forward", "/w/train.py", 40, "main")
	gc := tb.stack("??", 0, "gc_collect_main", "??", 0, "subtype_dealloc", "/w/train.py", 44, "main")
	plain := tb.stack("/w/train.py", 45, "main")
	tb.seg(0, 0x1000000, 0, blk(20*mib, snapshot.StateInactive, snapshot.EmptyStack))
	tb.ev(0, segAlloc(0x1000000, 20*mib))
	tb.ev(0, alloc(0x1000000, 2*mib, st))
	tb.ev(0, alloc(0x1200000, 2*mib, st))
	tb.ev(0, alloc(0x1400000, 2*mib, st))
	for i, a := range []uint64{0x1000000, 0x1200000} {
		e := freeReq(a, 2*mib)
		e.Stack = gc
		tb.ev(0, e)
		tb.ev(0, freeDone(a, 2*mib))
		_ = i
	}
	e := freeReq(0x1400000, 2*mib)
	e.Stack = plain
	tb.ev(0, e)
	tb.ev(0, freeDone(0x1400000, 2*mib))
	s := tb.done()
	s.Caps.FramesOnFrees = true
	r, err := Replay(context.Background(), s, 0)
	if err != nil {
		t.Fatal(err)
	}
	g := r.GCFrees
	if g.Count != 2 || g.Bytes != 4*mib || g.Bursts != 1 || len(g.Sites) != 1 || g.Sites[0].Site != "model.py:12" || g.Sites[0].Blocks != 2 {
		t.Errorf("gc frees = %+v", g)
	}
}
