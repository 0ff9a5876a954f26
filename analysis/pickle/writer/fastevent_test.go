package writer

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// fastEvent must write exactly what the general path writes. The trace mixes every kind of
// event and value the fast path takes or declines: every action (oom and unknown ones with
// their own fields), events with and without time, stacks and extras, integers of every
// opcode size (negative, past 2^32, past 2^63), stacks first seen mid-trace, enough memo
// entries for 4-byte gets and enough bytes for several 64 KiB frames.
func TestFastEventsMatchGeneralPath(t *testing.T) {
	in := snapshot.NewInterner()
	var stacks []snapshot.StackID
	for i := range 400 {
		f := in.Frame(snapshot.Frame{Filename: "model.py", Line: int64(i), Name: "forward"})
		stacks = append(stacks, in.Stack([]snapshot.FrameID{f}))
	}
	extras := []snapshot.EventExtra{{}, {CompileContext: "graph 1"}, {ActionName: "future_action"}, {UserMetadata: "m"}}
	ints := []int64{0, 1, 255, 256, 65535, 65536, math.MaxInt32, math.MaxInt32 + 1, 1 << 40, math.MaxInt64, -1, -256, math.MinInt32, math.MinInt32 - 1, math.MinInt64}
	uints := []uint64{0, 200, 70000, 1 << 33, 0x7f3a00000000, math.MaxInt64, math.MaxInt64 + 1, math.MaxUint64}
	actions := []snapshot.Action{snapshot.ActionAlloc, snapshot.ActionFreeRequested, snapshot.ActionFreeCompleted,
		snapshot.ActionSegmentAlloc, snapshot.ActionSegmentFree, snapshot.ActionSegmentMap, snapshot.ActionSegmentUnmap,
		snapshot.ActionSnapshot, snapshot.ActionOOM, snapshot.ActionAnnotate, snapshot.ActionOther}
	r := rand.New(rand.NewPCG(1, 2))
	var evs []snapshot.Event
	for i := range 6000 {
		ev := snapshot.Event{Action: actions[r.IntN(len(actions))], Addr: uints[r.IntN(len(uints))], Size: ints[r.IntN(len(ints))],
			Stream: uints[r.IntN(len(uints))], Stack: snapshot.NoStack}
		if r.IntN(3) > 0 {
			ev.TimeUS = ints[r.IntN(len(ints))]
		}
		switch k := r.IntN(10); {
		case k == 0:
			ev.Stack = snapshot.EmptyStack
		case k < 8:
			// The stacks come into use gradually: their lists are first written mid-trace.
			ev.Stack = stacks[r.IntN(1+min(i/10, len(stacks)-1))]
		}
		if r.IntN(20) == 0 {
			ev.Extra = snapshot.MakeExtraID(uint32(1 + r.IntN(len(extras)-1)))
		}
		if ev.Action == snapshot.ActionOther {
			ev.Extra = snapshot.MakeExtraID(2)
		}
		evs = append(evs, ev)
	}
	snap := &snapshot.Snapshot{Frames: in.Frames, Stacks: in.Stacks, EventExtras: extras,
		DeviceTraces: [][]snapshot.Event{evs, evs[:100], nil}}
	defer func() { fastEvents = true }()
	for _, opt := range []Options{{Protocol: 4}, {Protocol: 5}, {Protocol: 2}, {Protocol: 4, Gzip: true}} {
		fastEvents = false
		want, err := Encode(snap, opt)
		if err != nil {
			t.Fatal(err)
		}
		fastEvents = true
		got, err := Encode(snap, opt)
		if err != nil {
			t.Fatal(err)
		}
		if !opt.Gzip && len(want) < 3*frameTarget {
			t.Fatalf("protocol %d: %d bytes: too few for several frames", opt.Protocol, len(want))
		}
		if !bytes.Equal(got, want) {
			i := 0
			for i < len(got) && i < len(want) && got[i] == want[i] {
				i++
			}
			t.Errorf("protocol %d gzip %v: the fast path's %d bytes differ from the general path's %d from byte %d", opt.Protocol, opt.Gzip, len(got), len(want), i)
		}
	}
}
