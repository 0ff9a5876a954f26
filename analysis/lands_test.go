package analysis

import (
	"context"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// TestSummaryLandsOnFinalState: summarize says what replay says about whether the trace ends on
// the file's final state (issue 31: "nothing notable" beside a replay that does not land).
func TestSummaryLandsOnFinalState(t *testing.T) {
	build := func(freed bool) *snapshot.Snapshot {
		b := newTB()
		st := b.stack("train.py", 3, "main")
		b.seg(0, 0x100000, 1, blk(mib, snapshot.StateActiveAllocated, st), blk(mib, snapshot.StateInactive, snapshot.NoStack))
		b.ev(0, segAlloc(0x100000, 2*mib))
		b.ev(0, alloc(0x100000, mib, st))
		if freed { // the trace frees the block the file still holds
			b.ev(0, freeReq(0x100000, mib))
			b.ev(0, freeDone(0x100000, mib))
		}
		snap := b.done()
		snap.Caps.FramesOnBlocks, snap.Caps.FramesOnAllocs, snap.Caps.FramesOnFrees = true, true, true
		return snap
	}
	for _, tc := range []struct {
		name  string
		freed bool
	}{{"lands", false}, {"does not land", true}} {
		t.Run(tc.name, func(t *testing.T) {
			snap := build(tc.freed)
			s, err := Summarize(context.Background(), snap, SummaryOptions{})
			if err != nil {
				t.Fatal(err)
			}
			r, err := Replay(context.Background(), snap, 0)
			if err != nil {
				t.Fatal(err)
			}
			if got := s.Devices[0].Trace.LandsOnFinalState; got != !tc.freed || got != r.Consistent {
				t.Fatalf("summarize lands %v, replay consistent %v, want %v", got, r.Consistent, !tc.freed)
			}
			if notable := strings.HasPrefix(s.CannotAnswer, "nothing notable"); notable == tc.freed {
				t.Errorf("cannot answer %q", s.CannotAnswer)
			}
			if tc.freed && !strings.Contains(s.CannotAnswer, "the trace does not land on the file's final state (device 0") {
				t.Errorf("cannot answer %q", s.CannotAnswer)
			}
		})
	}
	// The same verdict on traces with every oddity (frees first, allocs over live blocks, frees
	// of unknown blocks, pending frees).
	for seed := uint64(1); seed <= 40; seed++ {
		snap := randomTrace(seed, 200)
		s, err := Summarize(context.Background(), snap, SummaryOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r, err := Replay(context.Background(), snap, 0)
		if err != nil {
			t.Fatal(err)
		}
		if s.Devices[0].Trace.LandsOnFinalState != r.Consistent {
			t.Errorf("seed %d: summarize lands %v, replay consistent %v", seed, s.Devices[0].Trace.LandsOnFinalState, r.Consistent)
		}
	}
}
