package load

import (
	"testing"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// TestComputeCaps: what a file can answer, from its traces' tallies, case by case; a trace
// naming stack ids beyond what a tally records is counted event by event, with the same
// answer.
func TestComputeCaps(t *testing.T) {
	frames := []snapshot.Frame{{Filename: "train.py", Line: 3, Name: "step"}, {Filename: "CUDACachingAllocator.cpp", Line: 9, Name: "malloc"}}
	stacks := [][]snapshot.FrameID{{}, {0}, {1}} // 1: Python, 2: C++
	seg := func(blocks ...snapshot.Block) []snapshot.Segment {
		return []snapshot.Segment{{Address: 0x1000, TotalSize: 4096, Blocks: blocks}}
	}
	cases := []struct {
		name string
		segs []snapshot.Segment
		evs  []snapshot.Event
		want snapshot.Capabilities
	}{
		{"state only", seg(snapshot.Block{Address: 0x1000, Size: 512, State: snapshot.StateActiveAllocated, Stack: 1}), nil,
			snapshot.Capabilities{FramesOnBlocks: true, PythonOnly: true}},
		{"complete, frames on allocs", seg(snapshot.Block{Address: 0x1000, Size: 512, State: snapshot.StateActiveAllocated, Stack: 1}),
			[]snapshot.Event{{Action: snapshot.ActionAlloc, Addr: 0x1000, Size: 512, Stack: 1}, {Action: snapshot.ActionAlloc, Addr: 0x1200, Size: 512, Stack: 2},
				{Action: snapshot.ActionFreeRequested, Addr: 0x1200, Size: 512, Stack: snapshot.EmptyStack}, {Action: snapshot.ActionFreeCompleted, Addr: 0x1200, Size: 512}},
			snapshot.Capabilities{HasTrace: true, FramesOnBlocks: true, FramesOnAllocs: true, CppFrames: true, TraceStart: "complete"}},
		{"late start: a free first, frames on frees", nil,
			[]snapshot.Event{{Action: snapshot.ActionFreeRequested, Addr: 0x1200, Size: 512, Stack: 1}, {Action: snapshot.ActionAlloc, Addr: 0x1400, Size: 512, Stack: snapshot.NoStack}},
			snapshot.Capabilities{HasTrace: true, FramesOnFrees: true, PythonOnly: true, TraceIncomplete: true, TraceStart: "late_start"}},
		{"late start: a live block without its alloc", seg(snapshot.Block{Address: 0x1000, Size: 512, State: snapshot.StateActiveAllocated}),
			[]snapshot.Event{{Action: snapshot.ActionAlloc, Addr: 0x1400, Size: 512}, {Action: snapshot.ActionSnapshot}, {Action: snapshot.ActionAlloc, Addr: 0x1600, Size: 512}},
			snapshot.Capabilities{HasTrace: true, TraceIncomplete: true, TraceStart: "late_start"}},
		{"one event is no history", nil, []snapshot.Event{{Action: snapshot.ActionAlloc, Addr: 0x1400, Size: 512, Stack: 2}, {Action: snapshot.ActionSnapshot}},
			snapshot.Capabilities{FramesOnAllocs: true, CppFrames: true}},
	}
	for _, c := range cases {
		for _, beyond := range []bool{false, true} {
			evs := append([]snapshot.Event(nil), c.evs...)
			if beyond && len(evs) > 0 {
				// A stack id no tally records (and the snapshot lacks): it names nothing, and
				// the other events' stacks are counted one by one.
				evs = append(evs, snapshot.Event{Action: snapshot.ActionSnapshot, Stack: 1 << 30})
			}
			s := &snapshot.Snapshot{Frames: frames, Stacks: stacks, Segments: c.segs, DeviceTraces: [][]snapshot.Event{evs}}
			s.KeepTraceIndexes(nil)
			if _, complete := s.TraceIndex(0).Tally.StacksNamed(); complete == (beyond && len(evs) > 0) {
				t.Fatalf("%s: the tally records every stack: %v", c.name, complete)
			}
			computeCaps(s)
			if s.Caps != c.want {
				t.Errorf("%s (stack beyond the tally %v): caps %+v, want %+v", c.name, beyond, s.Caps, c.want)
			}
		}
	}
}
