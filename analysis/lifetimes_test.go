package analysis

import (
	"context"
	"testing"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// TestLifetimesSegmentSlots: a trace with more segment addresses than block addresses. The
// lifetimes pass fetches ahead the record of the block an event names by the event's trace
// index slot, and a segment event's slot numbers segments: it read past the block table
// (an index-out-of-range panic in every command that reads roles, found by FuzzAnalyses).
func TestLifetimesSegmentSlots(t *testing.T) {
	b := newTB()
	st := b.stack("/home/u/proj/model.py", 12, "forward", "/home/u/proj/train.py", 40, "main")
	b.seg(0, 0x7f0000000000, 0, blk(1<<20, snapshot.StateActiveAllocated, st), blk(1<<20, snapshot.StateInactive, snapshot.EmptyStack))
	b.ev(0, alloc(0x7f0000000000, 1<<20, st))
	for k := range 10 { // segment ids 0-9 against one block id
		b.ev(0, segAlloc(0x7f1000000000+uint64(k)<<24, 2<<20))
		b.ev(0, segFree(0x7f1000000000+uint64(k)<<24, 2<<20))
	}
	snap := b.done()
	rep, err := ReplaySnapshot(context.Background(), snap, nil, ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d := rep.Devices[0]
	if d.Events != 21 || d.PeakAllocatedBytes != 1<<20 || d.PeakReservedBytes != 4<<20 || d.StartReservedBytes != 2<<20 {
		t.Errorf("replay: %d events, peak allocated %d, peak reserved %d, start reserved %d; want 21, %d, %d, %d",
			d.Events, d.PeakAllocatedBytes, d.PeakReservedBytes, d.StartReservedBytes, 1<<20, 4<<20, 2<<20)
	}
	ts, err := TopStacks(snap, TopStacksOptions{Device: AllDevices})
	if err != nil {
		t.Fatal(err)
	}
	if len(ts.Sites) != 1 || ts.Sites[0].Site != "model.py:12" || ts.Sites[0].Bytes != 1<<20 {
		t.Errorf("top-stacks: %+v, want one row model.py:12 of 1 MiB", ts.Sites)
	}
}
