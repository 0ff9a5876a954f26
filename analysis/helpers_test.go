package analysis

import "github.com/memsnap/memsnap/analysis/snapshot"

// tb builds small snapshots by hand.
type tb struct {
	in   *snapshot.Interner
	snap *snapshot.Snapshot
}

func newTB() *tb {
	return &tb{in: snapshot.NewInterner(), snap: &snapshot.Snapshot{Path: "hand.pickle"}}
}

// stack interns frames given as file, line, name triples, innermost first.
func (t *tb) stack(fr ...any) snapshot.StackID {
	ids := []snapshot.FrameID{}
	for i := 0; i+2 < len(fr); i += 3 {
		ids = append(ids, t.in.Frame(snapshot.Frame{Filename: fr[i].(string), Line: int64(fr[i+1].(int)), Name: fr[i+2].(string)}))
	}
	return t.in.Stack(ids)
}

func (t *tb) seg(dev int, addr uint64, stream uint64, blocks ...snapshot.Block) {
	s := snapshot.Segment{Device: dev, Address: addr, Stream: stream, SegmentType: "large", Stack: snapshot.EmptyStack}
	a := addr
	for _, b := range blocks {
		b.Address = a
		a += uint64(b.Size)
		s.TotalSize += b.Size
		if b.State == snapshot.StateActiveAllocated {
			s.AllocatedSize += b.Size
			s.RequestedSize += b.RequestedSize
		}
		if b.State != snapshot.StateInactive {
			s.ActiveSize += b.Size
		}
		s.Blocks = append(s.Blocks, b)
	}
	if s.TotalSize == 2*mib {
		s.SegmentType = "small"
	}
	t.snap.Segments = append(t.snap.Segments, s)
}

func (t *tb) ev(dev int, e snapshot.Event) {
	for len(t.snap.DeviceTraces) <= dev {
		t.snap.DeviceTraces = append(t.snap.DeviceTraces, nil)
	}
	t.snap.DeviceTraces[dev] = append(t.snap.DeviceTraces[dev], e)
	t.snap.Caps.HasTrace = true
}

func (t *tb) done() *snapshot.Snapshot {
	t.snap.Frames = t.in.Frames
	t.snap.Stacks = t.in.Stacks
	return t.snap
}

func alloc(addr uint64, size int64, st snapshot.StackID) snapshot.Event {
	return snapshot.Event{Action: snapshot.ActionAlloc, Addr: addr, Size: size, Stack: st}
}
func freeReq(addr uint64, size int64) snapshot.Event {
	return snapshot.Event{Action: snapshot.ActionFreeRequested, Addr: addr, Size: size, Stack: snapshot.NoStack}
}
func freeDone(addr uint64, size int64) snapshot.Event {
	return snapshot.Event{Action: snapshot.ActionFreeCompleted, Addr: addr, Size: size, Stack: snapshot.NoStack}
}
func segAlloc(addr uint64, size int64) snapshot.Event {
	return snapshot.Event{Action: snapshot.ActionSegmentAlloc, Addr: addr, Size: size, Stack: snapshot.NoStack}
}
func segFree(addr uint64, size int64) snapshot.Event {
	return snapshot.Event{Action: snapshot.ActionSegmentFree, Addr: addr, Size: size, Stack: snapshot.NoStack}
}

func blk(size int64, state snapshot.BlockState, st snapshot.StackID) snapshot.Block {
	req := size
	return snapshot.Block{Size: size, RequestedSize: req, State: state, Stack: st}
}
