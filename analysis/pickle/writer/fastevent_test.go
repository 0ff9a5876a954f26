package writer

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
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

// failAfter fails every write once n bytes went through.
type failAfter struct{ n int }

var errDiskFull = errors.New("no space left on device")

func (f *failAfter) Write(p []byte) (int, error) {
	if f.n < len(p) {
		return 0, errDiskFull
	}
	f.n -= len(p)
	return len(p), nil
}

// Gzip output compresses on a goroutine of its own: a failed write of the compressed stream
// and a failed encoding each end EncodeTo with their error (not a hang), and a complete one
// decompresses to the plain pickle.
func TestEncodeGzipBehind(t *testing.T) {
	snap := testSnapshot()
	plain, err := Encode(snap, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := EncodeTo(context.Background(), &buf, snap, Options{Gzip: true}); err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(zr); err != nil || !bytes.Equal(got, plain) {
		t.Errorf("gzip output decompresses to %d bytes (%v), want the %d of the pickle", len(got), err, len(plain))
	}
	if err := EncodeTo(context.Background(), &failAfter{n: 10}, snap, Options{Gzip: true}); !errors.Is(err, errDiskFull) {
		t.Errorf("a failing output: %v, want %v", err, errDiskFull)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	big := &snapshot.Snapshot{DeviceTraces: [][]snapshot.Event{make([]snapshot.Event, 1<<17)}}
	if err := EncodeTo(ctx, io.Discard, big, Options{Gzip: true}); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled encoding: %v, want context.Canceled", err)
	}
}

// JSON copies a frames list it wrote before instead of writing it again: the output must not
// change, with or without indentation (the list's indentation depends on its depth: a block's
// list is deeper than an event's), and with a budget that keeps only some lists.
func TestJSONRepeatsMatchWritingOut(t *testing.T) {
	in := snapshot.NewInterner()
	var stacks []snapshot.StackID
	for i := range 50 {
		f := in.Frame(snapshot.Frame{Filename: "mo\"del\\.py", Line: int64(i), Name: "forwärd\n"})
		g := in.Frame(snapshot.Frame{Filename: "train.py", Line: 7, Name: "step"})
		stacks = append(stacks, in.Stack([]snapshot.FrameID{f, g}))
	}
	var evs []snapshot.Event
	var blocks []snapshot.Block
	for i := range 2000 {
		st := stacks[(i*7)%len(stacks)]
		evs = append(evs, snapshot.Event{Action: snapshot.ActionAlloc, Addr: uint64(i) * 512, Size: 512, Stack: st})
		if i < 200 {
			blocks = append(blocks, snapshot.Block{Address: uint64(i) * 512, Size: 512, State: snapshot.StateActiveAllocated, Stack: st})
		}
	}
	snap := &snapshot.Snapshot{Frames: in.Frames, Stacks: in.Stacks, DeviceTraces: [][]snapshot.Event{evs},
		Segments: []snapshot.Segment{{Address: 0, TotalSize: 2000 * 512, SegmentType: "large", Stack: stacks[3], Blocks: blocks}}}
	defer func(n int) { maxRepeatBytes = n }(maxRepeatBytes)
	for _, indent := range []bool{false, true} {
		opt := Options{JSON: true, JSONIndent: indent}
		maxRepeatBytes = 0
		want, err := Encode(snap, opt)
		if err != nil {
			t.Fatal(err)
		}
		for _, budget := range []int{64 << 20, 1000} {
			maxRepeatBytes = budget
			got, err := Encode(snap, opt)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				i := 0
				for i < len(got) && i < len(want) && got[i] == want[i] {
					i++
				}
				t.Errorf("indent %v, budget %d: %d bytes differ from the %d written out from byte %d", indent, budget, len(got), len(want), i)
			}
		}
	}
}
