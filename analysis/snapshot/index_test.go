package snapshot

import (
	"math/rand/v2"
	"testing"
)

// TestTraceIndex: ids are dense in order of first appearance, blocks and segments apart, and
// every address finds its id; Compact keeps the index of a moved trace; a copy of the
// snapshot does not share its indexes.
func TestTraceIndex(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var evs []Event
	for range 50000 {
		a := Action(1 + r.IntN(int(ActionOOM)))
		addr := uint64(r.IntN(3000)) * 512
		if r.IntN(100) == 0 {
			addr = ^uint64(0) - uint64(r.IntN(3)) // the largest addresses, and 0, are addresses too
		}
		evs = append(evs, Event{Action: a, Addr: addr})
	}
	x := NewTraceIndex(evs)
	blocks, segs := map[uint64]int32{}, map[uint64]int32{}
	for i, e := range evs {
		var m map[uint64]int32
		var list []uint64
		switch {
		case BlockEvent(e.Action):
			m, list = blocks, x.Blocks
		case SegmentEvent(e.Action):
			m, list = segs, x.Segments
		default:
			if x.Slot[i] != -1 {
				t.Fatalf("event %d (%s) has slot %d", i, e.Action, x.Slot[i])
			}
			continue
		}
		id, ok := m[e.Addr]
		if !ok {
			id = int32(len(m))
			m[e.Addr] = id
		}
		if x.Slot[i] != id || list[id] != e.Addr {
			t.Fatalf("event %d: slot %d, want %d", i, x.Slot[i], id)
		}
	}
	for addr, id := range blocks {
		if got, ok := x.Block(addr); !ok || got != id {
			t.Fatalf("block %#x: %d %v, want %d", addr, got, ok, id)
		}
	}
	for addr, id := range segs {
		if got, ok := x.Segment(addr); !ok || got != id {
			t.Fatalf("segment %#x: %d %v, want %d", addr, got, ok, id)
		}
	}
	if _, ok := x.Block(12345); ok {
		t.Fatal("an address without events has an id")
	}

	s := &Snapshot{DeviceTraces: [][]Event{append(make([]Event, 0, 2*len(evs)+8192), evs...)}}
	s.KeepTraceIndexes(nil)
	first := s.TraceIndex(0)
	if s.TraceIndex(0) != first {
		t.Fatal("the index is built again")
	}
	s.Compact()
	if got := s.TraceIndex(0); got.first != &s.DeviceTraces[0][0] || &got.Slot[0] != &first.Slot[0] {
		t.Fatal("Compact lost the index")
	}
	c := *s
	c.DeviceTraces = [][]Event{evs[:100]}
	if got := c.TraceIndex(0); len(got.Slot) != 100 || s.TraceIndex(0).n != len(evs) {
		t.Fatal("a copy with other events shares the index")
	}
}

// TestTraceIndexerReserve: an index built in chunks, its room reserved in steps as the
// decoder's list grows, has the room asked for and equals the index of the whole trace.
func TestTraceIndexerReserve(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	evs := make([]Event, 20000)
	for i := range evs {
		evs[i] = Event{Action: Action(1 + r.IntN(int(ActionOOM))), Addr: uint64(r.IntN(500)) * 512}
	}
	b := NewTraceIndexer(1000)
	b.Add(evs[:1000])
	b.Reserve(15000)
	if c := cap(b.x.Slot); c != 15000 {
		t.Fatalf("capacity %d after Reserve(15000)", c)
	}
	b.Reserve(100) // never shrinks
	b.Add(evs[1000:15000])
	b.Reserve(20000)
	b.Add(evs[15000:])
	got, want := b.Finish(evs), NewTraceIndex(evs)
	if len(got.Slot) != len(want.Slot) || len(got.Blocks) != len(want.Blocks) || len(got.Segments) != len(want.Segments) {
		t.Fatalf("chunked index: %d slots, %d blocks, %d segments; whole: %d, %d, %d",
			len(got.Slot), len(got.Blocks), len(got.Segments), len(want.Slot), len(want.Blocks), len(want.Segments))
	}
	for i := range want.Slot {
		if got.Slot[i] != want.Slot[i] {
			t.Fatalf("event %d: slot %d, want %d", i, got.Slot[i], want.Slot[i])
		}
	}
}
