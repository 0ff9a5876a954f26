package sim

import (
	"errors"
	"testing"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

var st = Op("empty", Py("/w/train.py", 10, "main"))

func mustAlloc(t *testing.T, s *Sim, size int64, stream uint64) uint64 {
	t.Helper()
	a, err := s.Alloc(size, stream, st)
	if err != nil {
		t.Fatalf("alloc %d: %v", size, err)
	}
	return a
}

func mustFree(t *testing.T, s *Sim, a uint64) {
	t.Helper()
	if err := s.Free(a, FreeAt(Py("/w/train.py", 11, "main"))); err != nil {
		t.Fatal(err)
	}
}

func snap(t *testing.T, s *Sim) *snapshot.Snapshot {
	t.Helper()
	sn := s.Snapshot()
	if err := CheckInvariants(sn); err != nil {
		t.Fatalf("invariants: %v", err)
	}
	return sn
}

type blk struct {
	size, req int64
	state     snapshot.BlockState
}

func blocksOf(seg snapshot.Segment) []blk {
	var out []blk
	for _, b := range seg.Blocks {
		out = append(out, blk{b.Size, b.RequestedSize, b.State})
	}
	return out
}

func TestRoundAndSegmentSize(t *testing.T) {
	for _, c := range []struct{ n, round, seg int64 }{
		{1, 512, 2 * MiB},
		{512, 512, 2 * MiB},
		{513, 1024, 2 * MiB},
		{MiB, MiB, 2 * MiB},
		{MiB + 1, MiB + 512, 20 * MiB},
		{10*MiB - 512, 10*MiB - 512, 20 * MiB},
		{10 * MiB, 10 * MiB, 10 * MiB},
		{11*MiB + 1, 11*MiB + 512, 12 * MiB},
		{100 * MiB, 100 * MiB, 100 * MiB},
	} {
		if got := RoundSize(c.n); got != c.round {
			t.Errorf("RoundSize(%d) = %d, want %d", c.n, got, c.round)
		}
		if got := AllocationSize(RoundSize(c.n)); got != c.seg {
			t.Errorf("AllocationSize(%d) = %d, want %d", c.n, got, c.seg)
		}
	}
}

func TestPoolsSplitAndSegments(t *testing.T) {
	s := New(Config{})
	a := mustAlloc(t, s, 1000, 0)     // small: 1024 of a 2 MiB segment
	d := mustAlloc(t, s, 10*MiB+1, 0) // 12 MiB segment, 10 MiB+512 used, remainder > 1 MiB: split
	c := mustAlloc(t, s, 11*MiB, 0)   // 12 MiB segment, remainder 1 MiB not split
	b := mustAlloc(t, s, 3*MiB, 0)    // 2 MiB-512 hole too small: new 20 MiB segment
	e := mustAlloc(t, s, 2000, 0)     // reuses the small segment
	_ = []uint64{a, b, c, d, e}
	sn := snap(t, s)
	if len(sn.Segments) != 4 {
		t.Fatalf("segments = %d, want 4", len(sn.Segments))
	}
	want := [][]blk{
		{{1024, 1000, snapshot.StateActiveAllocated}, {2048, 2000, snapshot.StateActiveAllocated}, {2*MiB - 3072, 0, snapshot.StateInactive}},
		{{10*MiB + 512, 10*MiB + 1, snapshot.StateActiveAllocated}, {2*MiB - 512, 0, snapshot.StateInactive}},
		{{12 * MiB, 11 * MiB, snapshot.StateActiveAllocated}},
		{{3 * MiB, 3 * MiB, snapshot.StateActiveAllocated}, {17 * MiB, 0, snapshot.StateInactive}},
	}
	types := []string{"small", "large", "large", "large"}
	for i, seg := range sn.Segments {
		got := blocksOf(seg)
		if len(got) != len(want[i]) {
			t.Fatalf("segment %d blocks %+v, want %+v", i, got, want[i])
		}
		for j := range got {
			if got[j] != want[i][j] {
				t.Errorf("segment %d block %d = %+v, want %+v", i, j, got[j], want[i][j])
			}
		}
		if seg.SegmentType != types[i] {
			t.Errorf("segment %d type %s, want %s", i, seg.SegmentType, types[i])
		}
	}
	if s.Reserved() != 2*MiB+20*MiB+12*MiB+12*MiB {
		t.Errorf("reserved = %d", s.Reserved())
	}
	if e != a+1024 {
		t.Errorf("second small alloc at %#x, want %#x", e, a+1024)
	}
}

func TestMergeBestFitReuse(t *testing.T) {
	s := New(Config{})
	x := mustAlloc(t, s, 2*MiB, 0)
	y := mustAlloc(t, s, 4*MiB, 0)
	z := mustAlloc(t, s, 3*MiB, 0)
	// Segment: x 2 | y 4 | z 3 | free 11.
	mustFree(t, s, y)
	// Best fit: 3.5 MiB request takes the 4 MiB hole (not the 11 MiB tail); remainder 0.5 MiB
	// is not split in the large pool (needs > 1 MiB), so the block stays 4 MiB.
	w := mustAlloc(t, s, 3*MiB+MiB/2, 0)
	if w != y {
		t.Fatalf("best fit gave %#x, want the 4 MiB hole at %#x", w, y)
	}
	mustFree(t, s, w)
	mustFree(t, s, x)
	sn := snap(t, s)
	got := blocksOf(sn.Segments[0])
	// x and y merged into 6 MiB; the merged block keeps the requested size of x (freed last).
	want := []blk{{6 * MiB, 2 * MiB, snapshot.StateInactive}, {3 * MiB, 3 * MiB, snapshot.StateActiveAllocated}, {11 * MiB, 0, snapshot.StateInactive}}
	if len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("blocks %+v, want %+v", got, want)
	}
	mustFree(t, s, z)
	sn = snap(t, s)
	got = blocksOf(sn.Segments[0])
	if len(got) != 1 || got[0] != (blk{20 * MiB, 3 * MiB, snapshot.StateInactive}) {
		t.Fatalf("after full free blocks %+v", got)
	}
	// Different streams never share cached blocks.
	o := mustAlloc(t, s, 2*MiB, 7)
	if o >= sn.Segments[0].Address && o < sn.Segments[0].Address+uint64(20*MiB) {
		t.Fatalf("stream 7 reused stream 0's segment")
	}
	if s.Reserved() != 40*MiB {
		t.Errorf("reserved %d, want 40 MiB", s.Reserved())
	}
}

func TestOOMAfterReleasingCache(t *testing.T) {
	s := New(Config{Capacity: 100 * MiB, OutsideBytes: 10 * MiB})
	a := mustAlloc(t, s, 40*MiB, 0)
	b := mustAlloc(t, s, 40*MiB, 0)
	mustFree(t, s, a)
	// 40 MiB cached + 40 MiB used + 10 outside; 50 MiB needs the cached segment released.
	c := mustAlloc(t, s, 50*MiB, 0)
	sn := snap(t, s)
	if len(sn.Segments) != 2 || s.Reserved() != 90*MiB {
		t.Fatalf("segments %d reserved %d", len(sn.Segments), s.Reserved())
	}
	var acts []snapshot.Action
	for _, ev := range sn.DeviceTraces[0] {
		acts = append(acts, ev.Action)
	}
	wantActs := []snapshot.Action{snapshot.ActionSegmentAlloc, snapshot.ActionAlloc, snapshot.ActionSegmentAlloc, snapshot.ActionAlloc,
		snapshot.ActionFreeRequested, snapshot.ActionFreeCompleted, snapshot.ActionSegmentFree, snapshot.ActionSegmentAlloc, snapshot.ActionAlloc}
	if len(acts) != len(wantActs) {
		t.Fatalf("actions %v, want %v", acts, wantActs)
	}
	for i := range acts {
		if acts[i] != wantActs[i] {
			t.Fatalf("actions %v, want %v", acts, wantActs)
		}
	}
	_, err := s.Alloc(MiB*2, 0, st) // needs a 20 MiB segment, only 10 free
	var oom *OOMError
	if !errors.As(err, &oom) {
		t.Fatalf("err = %v, want OOM", err)
	}
	if oom.Requested != 2*MiB || oom.DeviceFree != 0 || oom.Reserved != 90*MiB {
		t.Errorf("oom = %+v", oom)
	}
	sn = snap(t, s)
	evs := sn.DeviceTraces[0]
	last := evs[len(evs)-1]
	if last.Action != snapshot.ActionOOM || last.Size != 2*MiB || last.DeviceFree() != 0 {
		t.Errorf("last event %+v", last)
	}
	_, _ = b, c
}

func TestFragmentationOOM(t *testing.T) {
	// 10 segments of 20 MiB, each a 9.5 MiB hole next to a pinned 10.5 MiB block (the
	// 9.5 MiB request took the whole 10.5 MiB remainder: 1 MiB is not worth splitting):
	// 95 MiB inactive, but a 10 MiB request fits no hole and no segment can be released.
	s := New(Config{Capacity: 205 * MiB})
	var holes []uint64
	for i := 0; i < 10; i++ {
		holes = append(holes, mustAlloc(t, s, 9*MiB+MiB/2, 0))
		mustAlloc(t, s, 9*MiB+MiB/2, 0)
	}
	for _, h := range holes {
		mustFree(t, s, h)
	}
	if s.Reserved() != 200*MiB {
		t.Fatalf("reserved %d", s.Reserved())
	}
	_, err := s.Alloc(10*MiB, 0, st)
	var oom *OOMError
	if !errors.As(err, &oom) {
		t.Fatalf("want OOM, got %v", err)
	}
	if oom.DeviceFree != 5*MiB || oom.Reserved-oom.Allocated != 95*MiB || oom.Requested != 10*MiB {
		t.Errorf("oom %+v", oom)
	}
	sn := snap(t, s)
	var inactive int64
	for _, seg := range sn.Segments {
		inactive += seg.TotalSize - seg.ActiveSize
	}
	if inactive != 95*MiB || len(sn.Segments) != 10 {
		t.Errorf("inactive %d over %d segments", inactive, len(sn.Segments))
	}
}

func TestPendingFree(t *testing.T) {
	s := New(Config{})
	a := mustAlloc(t, s, 4*MiB, 0)
	if err := s.RecordStream(a, 99); err != nil {
		t.Fatal(err)
	}
	mustFree(t, s, a)
	sn := snap(t, s)
	b := sn.Segments[0].Blocks[0]
	if b.State != snapshot.StateActivePendingFree || sn.Segments[0].ActiveSize != 4*MiB || sn.Segments[0].AllocatedSize != 0 || sn.Segments[0].RequestedSize != 4*MiB {
		t.Fatalf("pending block %+v seg %+v", b, sn.Segments[0])
	}
	// A new request cannot take the pending block.
	c := mustAlloc(t, s, 4*MiB, 0)
	if c == a {
		t.Fatal("pending block reused")
	}
	if err := s.Complete(a); err != nil {
		t.Fatal(err)
	}
	sn = snap(t, s)
	evs := sn.DeviceTraces[0]
	var fr, fc int = -1, -1
	for i, ev := range evs {
		if ev.Addr == a && ev.Action == snapshot.ActionFreeRequested {
			fr = i
		}
		if ev.Addr == a && ev.Action == snapshot.ActionFreeCompleted {
			fc = i
		}
	}
	if fr < 0 || fc != fr+3 { // free_requested, snapshot, alloc, free_completed
		t.Fatalf("free_requested at %d, free_completed at %d", fr, fc)
	}
	// Delayed free_completed carries the allocation's frames.
	if evs[fc].Stack != evs[0+1].Stack {
		t.Errorf("delayed free_completed stack %d, alloc stack %d", evs[fc].Stack, evs[1].Stack)
	}
	if err := s.Complete(a); err == nil {
		t.Error("second Complete succeeded")
	}
}

func TestContextModes(t *testing.T) {
	for _, c := range []struct {
		ctx                        string
		blockFrames, allocFrames   bool
		freeHasKey, freeIsAllocCtx bool
	}{
		{"all", true, true, true, false},
		{"alloc", true, true, true, true},
		{"state", true, false, false, false},
		{"none", false, false, false, false},
	} {
		s := New(Config{Context: c.ctx})
		a := mustAlloc(t, s, 100, 0)
		mustAlloc(t, s, 100, 0)
		mustFree(t, s, a)
		sn := snap(t, s)
		evs := sn.DeviceTraces[0]
		alloc, free := evs[1], evs[3]
		if got := sn.Segments[0].Blocks[1].Stack > 0; got != c.blockFrames {
			t.Errorf("%s: block frames %v", c.ctx, got)
		}
		if got := alloc.Stack > 0; got != c.allocFrames {
			t.Errorf("%s: alloc frames %v", c.ctx, got)
		}
		if got := free.Stack != snapshot.NoStack; got != c.freeHasKey {
			t.Errorf("%s: free frames key %v", c.ctx, got)
		}
		if c.freeHasKey && (free.Stack == alloc.Stack) != c.freeIsAllocCtx {
			t.Errorf("%s: free stack %d alloc stack %d", c.ctx, free.Stack, alloc.Stack)
		}
		if c.ctx == "none" && (sn.Segments[0].Stack != snapshot.EmptyStack || alloc.Stack != snapshot.NoStack) {
			t.Errorf("none: segment stack %d alloc %d", sn.Segments[0].Stack, alloc.Stack)
		}
	}
}

func TestStacksPythonAndBackward(t *testing.T) {
	s := New(Config{Stacks: "python"})
	mustAlloc(t, s, 100, 0)
	if _, err := s.Alloc(100, 0, Backward("AddmmBackward0")); err != nil {
		t.Fatal(err)
	}
	sn := snap(t, s)
	bl := sn.Segments[0].Blocks
	if f := sn.StackFrames(bl[0].Stack); len(f) != 1 || f[0] != Py("/w/train.py", 10, "main") {
		t.Errorf("python stack %+v", f)
	}
	if bl[1].Stack != snapshot.EmptyStack {
		t.Errorf("backward block stack %d, want empty", bl[1].Stack)
	}
	if !sn.Caps.PythonOnly || sn.Caps.CppFrames {
		t.Errorf("caps %+v", sn.Caps)
	}
	s = New(Config{})
	mustAlloc(t, s, 100, 0)
	sn = snap(t, s)
	f := sn.StackFrames(sn.Segments[0].Blocks[0].Stack)
	if len(f) != len(allocChain)+len(opFrames["empty"])+1+len(interpreterTail) || f[0].Name != "torch::unwind::unwind()" {
		t.Errorf("all-stacks frames %d, first %+v", len(f), f[0])
	}
	if !sn.Caps.CppFrames {
		t.Error("CppFrames false")
	}
}

func TestRingBufferAndSnapshotEvent(t *testing.T) {
	s := New(Config{MaxEntries: 4})
	for i := 0; i < 3; i++ {
		a := mustAlloc(t, s, 100, 0)
		mustFree(t, s, a)
	}
	sn := snap(t, s)
	evs := sn.DeviceTraces[0]
	if len(evs) != 4 || !sn.Caps.RingBufferFull || !sn.Caps.TraceIncomplete || sn.Caps.MaxEntries != 4 {
		t.Fatalf("events %d caps %+v", len(evs), sn.Caps)
	}
	if evs[0].Action != snapshot.ActionFreeCompleted || evs[3].Action != snapshot.ActionFreeCompleted {
		t.Errorf("kept %v..%v", evs[0].Action, evs[3].Action)
	}
	sn2 := snap(t, s)
	last := sn2.DeviceTraces[0][3]
	if last.Action != snapshot.ActionSnapshot || last.Size != 0 || last.Stack != snapshot.NoStack {
		t.Errorf("snapshot event %+v", last)
	}
}

func TestExpandable(t *testing.T) {
	s := New(Config{Expandable: true, Capacity: GiB})
	a := mustAlloc(t, s, 30*MiB, 0) // maps 40 MiB
	b := mustAlloc(t, s, 5*MiB, 0)  // fits in the 10 MiB tail
	if b != a+30*MiB {
		t.Fatalf("b at %#x, want right after a", b)
	}
	c := mustAlloc(t, s, 10*MiB, 0) // tail 5 MiB: maps 20 MiB more
	mustFree(t, s, c)
	sn := snap(t, s)
	if len(sn.Segments) != 1 || sn.Segments[0].TotalSize != 60*MiB || !sn.Segments[0].IsExpandable {
		t.Fatalf("segments %+v", sn.Segments)
	}
	s.EmptyCache() // tail free block is 25 MiB starting at 35 MiB: page 40..60 unmapped
	sn = snap(t, s)
	if sn.Segments[0].TotalSize != 40*MiB || s.Reserved() != 40*MiB {
		t.Fatalf("after empty_cache total %d", sn.Segments[0].TotalSize)
	}
	var maps, unmaps int
	for _, ev := range sn.DeviceTraces[0] {
		switch ev.Action {
		case snapshot.ActionSegmentMap:
			maps++
		case snapshot.ActionSegmentUnmap:
			unmaps++
			if ev.Size != 20*MiB || ev.Addr != sn.Segments[0].Address+40*MiB {
				t.Errorf("unmap %+v", ev)
			}
		}
	}
	if maps != 2 || unmaps != 1 {
		t.Errorf("maps %d unmaps %d", maps, unmaps)
	}
}

func TestMaxSplitSize(t *testing.T) {
	s := New(Config{MaxSplitSize: 64 * MiB})
	a := mustAlloc(t, s, 100*MiB, 0)
	mustFree(t, s, a)
	// A 30 MiB request must not split the cached 100 MiB block: new segment.
	b := mustAlloc(t, s, 30*MiB, 0)
	if b == a {
		t.Fatal("oversize block split for a small request")
	}
	// An 90 MiB request may take the 100 MiB block (< request + 20 MiB) without splitting.
	c := mustAlloc(t, s, 90*MiB, 0)
	if c != a {
		t.Fatal("oversize request did not reuse the near-fit block")
	}
	sn := snap(t, s)
	if sn.Settings.MaxSplitSize != 64*MiB || sn.Settings.AllocConf != "max_split_size_mb:64" {
		t.Errorf("settings %+v", sn.Settings)
	}
	for _, seg := range sn.Segments {
		if seg.Address == a && len(seg.Blocks) != 1 {
			t.Errorf("oversize block split: %+v", seg.Blocks)
		}
	}
}

func TestBadInput(t *testing.T) {
	s := New(Config{})
	if _, err := s.Alloc(0, 0, st); err == nil {
		t.Error("alloc 0 succeeded")
	}
	if err := s.Free(12345, Stack{}); !errors.Is(err, ErrNotAllocated) {
		t.Errorf("free unknown: %v", err)
	}
	if err := s.RecordStream(12345, 1); err == nil {
		t.Error("record_stream unknown succeeded")
	}
}

func TestLateRecordingAndCompileContext(t *testing.T) {
	s := New(Config{CompileContext: "N/A"})
	s.SetRecording(false)
	early := mustAlloc(t, s, 4*MiB, 0)
	s.SetRecording(true)
	mustAlloc(t, s, 4*MiB, 0)
	mustFree(t, s, early)
	sn := snap(t, s)
	evs := sn.DeviceTraces[0]
	// Only the second alloc and the free are recorded (the segment_alloc happened before).
	if len(evs) != 3 || evs[0].Action != snapshot.ActionAlloc || !sn.Caps.TraceIncomplete || sn.Caps.RingBufferFull {
		t.Fatalf("events %+v caps %+v", evs, sn.Caps)
	}
	if sn.Segments[0].Stack != snapshot.EmptyStack {
		t.Errorf("segment created while not recording has stack %d", sn.Segments[0].Stack)
	}
	if evs[0].Extra.Index() != 1 || sn.EventExtras[1].CompileContext != "N/A" {
		t.Errorf("extra %d extras %+v", evs[0].Extra.Index(), sn.EventExtras)
	}
}
