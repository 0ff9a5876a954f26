package allocator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unsafe"

	"github.com/memsnap/memsnap/analysis/internal/prefetch"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// Trace is one device's recorded request sequence (device_traces[d]) made ready to replay
// through the model: the requests (alloc and oom events: sizes, streams, order, pools), the
// frees as recorded (free_requested, then free_completed, however late), the explicit cache
// releases (torch.cuda.empty_cache()), and the state before the first event.
type Trace struct {
	Device int
	Events []snapshot.Event
	// Start is "empty" when the trace covers the allocator from its start (no segment existed
	// before the first event), else "reconstructed": the segments and blocks alive at the first
	// event, in their recorded layout, rebuilt from the file's final state and the trace.
	Start string
	// StartReserved / StartAllocated are the reserved bytes and the live block bytes at the
	// first event.
	StartReserved  int64
	StartAllocated int64
	// SegmentAllocs / SegmentMaps are the recorded cudaMalloc'd segments and mapped ranges, in
	// order.
	SegmentAllocs []Recorded
	SegmentMaps   []Recorded
	// OOMs are the indexes of the oom events; ReservedAtOOM the recorded reserved bytes at each
	// (after the allocator released its cache).
	OOMs          []int
	ReservedAtOOM []int64
	// PeakReserved is the recorded peak of reserved bytes (segment events replayed).
	PeakReserved int64
	// PeakReservedInTrace is the recorded peak over the states after each event: the state
	// before the first event counts only when there is no event (see RunResult's).
	PeakReservedInTrace int64
	// EmptyCacheCalls counts the segment-release bursts replayed as explicit
	// torch.cuda.empty_cache() calls.
	EmptyCacheCalls int
	// MallocFailures counts the recorded cudaMalloc failures that the allocator recovered from
	// (a release of its cache, then a new segment); FailureBound is the smallest reserved +
	// request among them: the device could not hold that much. 0 when none.
	MallocFailures int
	FailureBound   int64
	// Streams counts the streams the trace allocates on.
	Streams int
	// ForeignSegments counts recorded segment_alloc / segment_map sizes PyTorch's native caching
	// allocator never makes (a segment is 2 MiB, 20 MiB or a multiple of 2 MiB from 10 MiB; a
	// mapping a multiple of 2 MiB): another allocator backend or a synthetic file wrote them.
	ForeignSegments int
	// Notes say what the reconstruction could not rebuild exactly.
	Notes []string

	specs    []SegmentSpec
	esGroups []esGroup
	// ids[i] is the block of alloc / free event i (-1: none, or a free of an unknown block);
	// startIDs the blocks of the start state, per segment (specs, then esGroups) and block.
	ids      []int32
	startIDs [][]int32
	nIDs     int
	explicit []int // event indexes where an explicit release starts
	pools    map[int]snapshot.PoolID
	maxAddr  uint64
	allocs   int
}

// Recorded is one recorded segment event.
type Recorded struct {
	Event int
	Addr  uint64
	Size  int64
}

// esGroup is an expandable segment alive at the first event: its mapped ranges and blocks;
// its reserved range is sized when the capacity is known.
type esGroup struct {
	base   uint64
	end    uint64 // end of the last mapped range
	stream uint64
	pool   snapshot.PoolID
	small  bool
	blocks []BlockSpec // mapped blocks and the unmapped gaps between ranges, from base to end
}

// ErrNoTrace is returned for a device (or file) without allocation events.
var ErrNoTrace = errors.New("no allocation events")

func isSegmentRelease(a snapshot.Action) bool {
	return a == snapshot.ActionSegmentFree || a == snapshot.ActionSegmentUnmap
}

func isEmptyCacheFrames(frames []snapshot.Frame) bool {
	for _, f := range frames {
		p := strings.ReplaceAll(f.Filename, "\\", "/")
		if (f.Name == "empty_cache" && strings.HasSuffix(p, "cuda/memory.py")) || strings.Contains(f.Name, "THCPModule_emptyCache") {
			return true
		}
	}
	return false
}

// NewTrace prepares device dev of snap for replay; set is the file's own settings (they
// decide how blocks alive before the trace were rounded).
func NewTrace(snap *snapshot.Snapshot, dev int, set Settings) (*Trace, error) {
	if dev < 0 || dev >= len(snap.DeviceTraces) {
		return nil, fmt.Errorf("device %d: %w", dev, ErrNoTrace)
	}
	t := &Trace{Device: dev, Events: snap.DeviceTraces[dev], pools: map[int]snapshot.PoolID{}}
	// The trace's addresses numbered densely (the loader builds this while it decodes): the
	// passes below keep per-address state in slices instead of maps. The events are read in
	// two passes (the second needs the start state the first one's findings rebuild): each
	// pass over millions of events is a stream from memory.
	x := snap.TraceIndex(dev)
	sc := t.scan(snap, x, set.ExpandableSegments)
	if t.allocs == 0 {
		return nil, fmt.Errorf("device %d: %w", dev, ErrNoTrace)
	}
	if err := t.reconstruct(snap, x, &set, sc); err != nil {
		return nil, err
	}
	t.timeline(x, set.GCThreshold > 0)
	return t, nil
}

// traceScan is what the first pass finds for reconstruct: firstSeg[k] is the first
// segment_alloc or segment_free at the trace's segment address k (-1: none); firstBlk[k] the
// first event at block address k (ids are numbered in order of first appearance, so id k
// first appears when k ids are known); expandable: the settings or segment_map /
// segment_unmap events say the device uses expandable segments.
type traceScan struct {
	firstSeg, firstBlk []int32
	expandable         bool
}

// scan is the first pass over the events: the allocations and their streams, the runs of
// segment releases the program asked for (classifyRelease), the private pools of requests
// (as findPool), the highest address, and what reconstruct needs.
func (t *Trace) scan(snap *snapshot.Snapshot, x *snapshot.TraceIndex, expandable bool) *traceScan {
	evs := t.Events
	sc := &traceScan{firstSeg: make([]int32, len(x.Segments)), firstBlk: make([]int32, 0, len(x.Blocks)), expandable: expandable}
	for k := range sc.firstSeg {
		sc.firstSeg[k] = -1
	}
	private := privateSpans(snap, t.Device)
	var streams []uint64
	// The run of segment releases under way: its first event (-1: none), whether a stack of
	// it goes through empty_cache.
	run, ec := -1, false
	for i := range evs {
		ev := &evs[i]
		if isSegmentRelease(ev.Action) {
			if run < 0 {
				run, ec = i, false
			}
			if st := ev.Stack; !ec && st > snapshot.EmptyStack {
				ec = isEmptyCacheFrames(snap.StackFrames(st))
			}
		} else if run >= 0 {
			t.classifyRelease(run, ec, ev.Action)
			run = -1
		}
		switch ev.Action {
		case snapshot.ActionAlloc:
			t.allocs++
			if n := len(streams); n == 0 || streams[n-1] != ev.Stream {
				if !slices.Contains(streams, ev.Stream) {
					streams = append(streams, ev.Stream)
				}
			}
			t.findPool(snap, private, i)
			if int(x.Slot[i]) == len(sc.firstBlk) {
				sc.firstBlk = append(sc.firstBlk, int32(i))
			}
		case snapshot.ActionOOM:
			t.findPool(snap, private, i)
		case snapshot.ActionFreeRequested, snapshot.ActionFreeCompleted:
			if int(x.Slot[i]) == len(sc.firstBlk) {
				sc.firstBlk = append(sc.firstBlk, int32(i))
			}
		case snapshot.ActionSegmentAlloc, snapshot.ActionSegmentFree:
			if k := x.Slot[i]; sc.firstSeg[k] < 0 {
				sc.firstSeg[k] = int32(i)
			}
		case snapshot.ActionSegmentMap, snapshot.ActionSegmentUnmap:
			sc.expandable = true
		}
		if ev.Action != snapshot.ActionOOM { // whose Addr is its device_free
			t.maxAddr = max(t.maxAddr, ev.Addr+uint64(max(ev.Size, 0)))
		}
	}
	if run >= 0 {
		t.classifyRelease(run, ec, snapshot.ActionOther)
	}
	t.Streams = len(streams)
	t.EmptyCacheCalls = len(t.explicit)
	return sc
}

// numberStart gives every live block of the start state an id (the allocations of the
// trace get the next ones, and each free event the id of the block it frees: replays then keep
// blocks in a slice instead of a map by address). It returns cur, the block now at each of
// the trace's block addresses (-1: none), and the next id.
func (t *Trace) numberStart(x *snapshot.TraceIndex) ([]int32, int32) {
	cur := make([]int32, len(x.Blocks))
	for k := range cur {
		cur[k] = -1
	}
	next := int32(0)
	number := func(blocks []BlockSpec) []int32 {
		out := make([]int32, len(blocks))
		for j, b := range blocks {
			out[j] = -1
			if !b.Unmapped && b.State != snapshot.StateInactive {
				out[j] = next
				// An address no event of the trace names needs no entry: nothing frees it.
				if k, ok := x.Block(b.Addr); ok {
					cur[k] = next
				}
				next++
			}
		}
		return out
	}
	for _, sp := range t.specs {
		t.startIDs = append(t.startIDs, number(sp.Blocks))
	}
	for _, g := range t.esGroups {
		t.startIDs = append(t.startIDs, number(g.blocks))
	}
	return cur, next
}

// classifyRelease classifies the run of segment_free / segment_unmap events from event i,
// followed by an event of action next (ActionOther: the end of the trace): the program asked
// for it (torch.cuda.empty_cache()) when its stacks go through empty_cache (ec), or when no
// new segment or oom follows. A run followed by a segment_alloc, segment_map or oom is the
// allocator's own (a cudaMalloc failed, garbage collection): the model decides those itself.
func (t *Trace) classifyRelease(i int, ec bool, next snapshot.Action) {
	if ec || (next != snapshot.ActionSegmentAlloc && next != snapshot.ActionSegmentMap && next != snapshot.ActionOOM) {
		t.explicit = append(t.explicit, i)
	}
}

// poolSpan is a final segment of a private pool.
type poolSpan struct {
	addr, end uint64
	pool      snapshot.PoolID
}

// privateSpans returns device dev's final segments of private pools, by address.
func privateSpans(snap *snapshot.Snapshot, dev int) []poolSpan {
	var private []poolSpan
	for _, s := range snap.Segments {
		if s.Device == dev && s.PoolID != DefaultPool {
			private = append(private, poolSpan{s.Address, s.Address + uint64(s.TotalSize), s.PoolID})
		}
	}
	slices.SortFunc(private, func(x, y poolSpan) int { return cmp.Compare(x.addr, y.addr) })
	return private
}

// findPool assigns a private pool to request i (an alloc or oom event): the event's pool_id
// (newest PyTorch), else (alloc) the pool of the final segment holding the address.
func (t *Trace) findPool(snap *snapshot.Snapshot, private []poolSpan, i int) {
	ev := &t.Events[i]
	if ev.Extra.Index() > 0 && ev.Extra.Index() < len(snap.EventExtras) {
		if p := snap.EventExtras[ev.Extra.Index()].PoolID; p != DefaultPool {
			t.pools[i] = p
			return
		}
	}
	if len(private) == 0 || ev.Action == snapshot.ActionOOM {
		return
	}
	k, _ := slices.BinarySearchFunc(private, ev.Addr+1, func(s poolSpan, a uint64) int { return cmp.Compare(s.addr, a) })
	if k > 0 && ev.Addr < private[k-1].end {
		t.pools[i] = private[k-1].pool
	}
}

// startBlock is a block alive at the first event.
type startBlock struct {
	addr      uint64
	size      int64 // exact size (from the final state), or 0: inferred from requested
	requested int64
	state     snapshot.BlockState
}

type startSeg struct {
	addr   uint64
	size   int64
	stream uint64
	pool   snapshot.PoolID
	small  bool
	blocks []startBlock
}

// reconstruct rebuilds the segments and blocks alive before the first event: segments of the
// final state the trace never allocated or freed, and segments whose first event is their
// segment_free; blocks whose first event is a free (pre-trace blocks), and blocks alive at the
// end with no event at all. Free space between them is cached free blocks, merged.
func (t *Trace) reconstruct(snap *snapshot.Snapshot, x *snapshot.TraceIndex, set *Settings, sc *traceScan) error {
	evs := t.Events
	firstSeg, firstBlk, expandable := sc.firstSeg, sc.firstBlk, sc.expandable
	segAllocFreed := func(addr uint64) bool {
		k, ok := x.Segment(addr)
		return ok && firstSeg[k] >= 0
	}
	var segs []*startSeg
	var esFinal []snapshot.Segment
	for _, s := range snap.Segments {
		if s.Device != t.Device {
			continue
		}
		t.maxAddr = max(t.maxAddr, s.Address+uint64(s.TotalSize))
		if s.IsExpandable {
			esFinal = append(esFinal, s)
			continue
		}
		if segAllocFreed(s.Address) {
			continue
		}
		segs = append(segs, &startSeg{addr: s.Address, size: s.TotalSize, stream: s.Stream, pool: s.PoolID, small: s.SegmentType == "small"})
	}
	for k, i := range firstSeg {
		if i < 0 || evs[i].Action != snapshot.ActionSegmentFree {
			continue
		}
		addr, ev := x.Segments[k], evs[i]
		pool := DefaultPool
		if ev.Extra.Index() > 0 && ev.Extra.Index() < len(snap.EventExtras) {
			pool = snap.EventExtras[ev.Extra.Index()].PoolID
		}
		segs = append(segs, &startSeg{addr: addr, size: ev.Size, stream: ev.Stream, pool: pool, small: ev.Size == SmallBuffer})
	}
	slices.SortFunc(segs, func(x, y *startSeg) int { return cmp.Compare(x.addr, y.addr) })
	// Drop overlapping segments (a file inconsistent with itself).
	kept := segs[:0]
	dropped := 0
	for _, s := range segs {
		if n := len(kept); n > 0 && kept[n-1].addr+uint64(kept[n-1].size) > s.addr {
			dropped++
			continue
		}
		kept = append(kept, s)
	}
	segs = kept
	if dropped > 0 {
		t.Notes = append(t.Notes, fmt.Sprintf("%d segments alive before the trace overlap others (the file contradicts itself) and were left out of the start state", dropped))
	}
	var blocks []startBlock
	for k, i := range firstBlk {
		addr, ev := x.Blocks[k], evs[i]
		switch ev.Action {
		case snapshot.ActionFreeRequested:
			blocks = append(blocks, startBlock{addr: addr, requested: ev.Size, state: snapshot.StateActiveAllocated})
		case snapshot.ActionFreeCompleted:
			blocks = append(blocks, startBlock{addr: addr, requested: ev.Size, state: snapshot.StateActivePendingFree})
		}
	}
	for _, s := range snap.Segments {
		if s.Device != t.Device {
			continue
		}
		for _, b := range s.Blocks {
			if b.State == snapshot.StateInactive || b.State == snapshot.StateUnknown {
				continue
			}
			if _, ok := x.Block(b.Address); !ok {
				blocks = append(blocks, startBlock{addr: b.Address, size: b.Size, requested: b.RequestedSize, state: b.State})
			}
		}
	}
	slices.SortFunc(blocks, func(x, y startBlock) int { return cmp.Compare(x.addr, y.addr) })
	if expandable || len(esFinal) > 0 {
		blocks = t.reconstructExpandable(esFinal, blocks, set)
	}
	unplaced := 0
	for _, b := range blocks {
		k, _ := slices.BinarySearchFunc(segs, b.addr+1, func(s *startSeg, a uint64) int { return cmp.Compare(s.addr, a) })
		if k == 0 || b.addr >= segs[k-1].addr+uint64(segs[k-1].size) {
			unplaced++
			continue
		}
		segs[k-1].blocks = append(segs[k-1].blocks, b)
	}
	if unplaced > 0 {
		t.Notes = append(t.Notes, fmt.Sprintf("%d blocks alive before the trace lie in no segment known to be alive then, and were left out of the start state", unplaced))
	}
	inferred := 0
	for _, s := range segs {
		spec := SegmentSpec{Addr: s.addr, Size: s.size, Stream: s.stream, Pool: s.pool, Small: s.small}
		spec.Blocks, inferred = layout(s.addr, s.addr+uint64(s.size), s.blocks, set, s.small, inferred)
		t.specs = append(t.specs, spec)
		t.StartReserved += s.size
	}
	for _, g := range t.esGroups {
		for _, b := range g.blocks {
			if !b.Unmapped {
				t.StartReserved += b.Size
			}
		}
	}
	for _, sp := range t.specs {
		for _, b := range sp.Blocks {
			if b.State == snapshot.StateActiveAllocated {
				t.StartAllocated += b.Size
			}
		}
	}
	for _, g := range t.esGroups {
		for _, b := range g.blocks {
			if b.State == snapshot.StateActiveAllocated && !b.Unmapped {
				t.StartAllocated += b.Size
			}
		}
	}
	t.Start = "empty"
	if len(t.specs) > 0 || len(t.esGroups) > 0 {
		t.Start = "reconstructed"
	}
	if inferred > 0 {
		t.Notes = append(t.Notes, fmt.Sprintf("%d blocks alive before the trace were freed in it: their sizes are rebuilt from the requested sizes and the layout (rounded, plus a remainder too small to split off)", inferred))
	}
	return nil
}

// layout lays out one mapped range [start, end): the live blocks (exact sizes, or rebuilt from
// the requested size: rounded, plus the rest up to the next block when the allocator would
// not have split it off) and cached free blocks in the gaps.
func layout(start, end uint64, blocks []startBlock, set *Settings, small bool, inferred int) ([]BlockSpec, int) {
	var out []BlockSpec
	at := start
	for i, b := range blocks {
		if b.addr < at {
			continue // overlaps the previous block: the file contradicts itself
		}
		next := end
		if i+1 < len(blocks) {
			next = min(blocks[i+1].addr, end)
		}
		size := b.size
		if size <= 0 {
			inferred++
			size = set.RoundSize(max(b.requested, 1))
			rest := int64(next - b.addr)
			switch {
			case rest <= size:
			case set.ExpandableSegments || small:
				if rest-size < MinBlockSize {
					size = rest
				}
			case set.MaxSplitSize > 0 && size >= set.MaxSplitSize:
				if rest < size+LargeBuffer {
					size = rest
				}
			case rest-size <= SmallSize:
				size = rest
			}
		}
		size = min(size, int64(next-b.addr))
		if size <= 0 {
			continue
		}
		if b.addr > at {
			out = append(out, BlockSpec{Addr: at, Size: int64(b.addr - at), State: snapshot.StateInactive})
		}
		out = append(out, BlockSpec{Addr: b.addr, Size: size, Requested: b.requested, State: b.state})
		at = b.addr + uint64(size)
	}
	if at < end {
		out = append(out, BlockSpec{Addr: at, Size: int64(end - at), State: snapshot.StateInactive})
	}
	return out, inferred
}

type span struct {
	addr, end uint64
	stream    uint64
	small     bool
	pool      snapshot.PoolID
}

// reconstructExpandable rebuilds the expandable segments mapped at the first event: the final
// mapped ranges, less what the trace mapped, plus what it unmapped (walking it backwards).
// Ranges of one pool and stream become one segment whose gaps are unmapped. It returns the
// blocks that lie outside every such range.
func (t *Trace) reconstructExpandable(final []snapshot.Segment, blocks []startBlock, set *Settings) []startBlock {
	var ranges []span
	for _, s := range final {
		ranges = append(ranges, span{s.Address, s.Address + uint64(s.TotalSize), s.Stream, s.SegmentType == "small", s.PoolID})
	}
	groupOf := func(addr, end, stream uint64, size int64) (bool, snapshot.PoolID) {
		for _, r := range ranges {
			if r.stream == stream && r.addr <= end && addr <= r.end {
				return r.small, r.pool
			}
		}
		return size%LargeBuffer != 0, DefaultPool
	}
	evs := t.Events
	for i := len(evs) - 1; i >= 0; i-- {
		ev := evs[i]
		switch ev.Action {
		case snapshot.ActionSegmentMap:
			ranges = subtract(ranges, ev.Addr, ev.Addr+uint64(ev.Size))
		case snapshot.ActionSegmentUnmap:
			small, pool := groupOf(ev.Addr, ev.Addr+uint64(ev.Size), ev.Stream, ev.Size)
			ranges = append(ranges, span{ev.Addr, ev.Addr + uint64(ev.Size), ev.Stream, small, pool})
		}
	}
	ranges = coalesce(ranges)
	if len(ranges) == 0 {
		return blocks
	}
	type key struct {
		stream uint64
		small  bool
		pool   snapshot.PoolID
	}
	groups := map[key][]span{}
	var order []key
	for _, r := range ranges {
		k := key{r.stream, r.small, r.pool}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	inside := make([]bool, len(blocks))
	misaligned := 0
	for _, k := range order {
		rs := groups[k]
		page := pageSize(k.small)
		// One segment per group when every range is page-aligned from the first; else one per range.
		aligned := true
		for _, r := range rs {
			if (r.addr-rs[0].addr)%uint64(page) != 0 || (r.end-r.addr)%uint64(page) != 0 {
				aligned = false
			}
		}
		var parts [][]span
		if aligned {
			parts = [][]span{rs}
		} else {
			misaligned++
			for _, r := range rs {
				parts = append(parts, []span{r})
			}
		}
		for _, p := range parts {
			g := esGroup{base: p[0].addr, end: p[len(p)-1].end, stream: k.stream, pool: k.pool, small: k.small}
			at := g.base
			for _, r := range p {
				if r.addr > at {
					g.blocks = append(g.blocks, BlockSpec{Addr: at, Size: int64(r.addr - at), Unmapped: true})
				}
				var in []startBlock
				for j, b := range blocks {
					if b.addr >= r.addr && b.addr < r.end {
						in = append(in, b)
						inside[j] = true
					}
				}
				var bs []BlockSpec
				bs, _ = layout(r.addr, r.end, in, set, k.small, 0)
				g.blocks = append(g.blocks, bs...)
				at = r.end
			}
			t.esGroups = append(t.esGroups, g)
		}
	}
	if misaligned > 0 {
		t.Notes = append(t.Notes, "the expandable segments mapped before the trace are not page-aligned to one base: each mapped range starts its own segment in the start state")
	}
	t.Notes = append(t.Notes, "expandable segments alive before the trace are rebuilt from their mapped ranges; the unmapped address space around them is not recorded, so growth after the last range is modelled")
	var rest []startBlock
	for j, b := range blocks {
		if !inside[j] {
			rest = append(rest, b)
		}
	}
	return rest
}

// subtract removes [a, e) from the ranges.
func subtract(rs []span, a, e uint64) []span {
	var out []span
	for _, r := range rs {
		if r.end <= a || e <= r.addr {
			out = append(out, r)
			continue
		}
		if r.addr < a {
			l := r
			l.end = a
			out = append(out, l)
		}
		if e < r.end {
			h := r
			h.addr = e
			out = append(out, h)
		}
	}
	return out
}

// coalesce sorts ranges and joins touching ones of the same stream, pool and kind.
func coalesce(rs []span) []span {
	slices.SortFunc(rs, func(x, y span) int { return cmp.Compare(x.addr, y.addr) })
	var out []span
	for _, r := range rs {
		if n := len(out); n > 0 && out[n-1].end >= r.addr && out[n-1].stream == r.stream && out[n-1].small == r.small && out[n-1].pool == r.pool {
			out[n-1].end = max(out[n-1].end, r.end)
			continue
		}
		out = append(out, r)
	}
	return out
}

// timeline is the second pass over the events. It replays the recorded segment events: the
// recorded segment sequences, reserved at each oom and its peak, and the cudaMalloc failures
// the allocator recovered from. And it numbers the blocks (numberStart): every allocation
// gets the next id, and each free event the id of the block it frees.
func (t *Trace) timeline(x *snapshot.TraceIndex, gc bool) {
	cur, next := t.numberStart(x)
	t.ids = make([]int32, len(t.Events))
	res := t.StartReserved
	t.PeakReserved = res
	evs := t.Events
	t.PeakReservedInTrace = res
	if len(evs) > 0 {
		t.PeakReservedInTrace = 0
	}
	explicit := t.explicit
	for i := range evs {
		ev := &evs[i]
		t.ids[i] = -1
		switch ev.Action {
		case snapshot.ActionAlloc:
			t.ids[i] = next
			cur[x.Slot[i]] = next
			next++
		case snapshot.ActionFreeRequested:
			t.ids[i] = cur[x.Slot[i]]
		case snapshot.ActionFreeCompleted:
			k := x.Slot[i]
			t.ids[i] = cur[k]
			cur[k] = -1
		case snapshot.ActionSegmentAlloc:
			res += ev.Size
			t.SegmentAllocs = append(t.SegmentAllocs, Recorded{i, ev.Addr, ev.Size})
			if ev.Size != SmallBuffer && ev.Size != LargeBuffer && (ev.Size < MinLargeAlloc || ev.Size%RoundLarge != 0) {
				t.ForeignSegments++
			}
		case snapshot.ActionSegmentMap:
			res += ev.Size
			t.SegmentMaps = append(t.SegmentMaps, Recorded{i, ev.Addr, ev.Size})
			if ev.Size <= 0 || ev.Size%SmallBuffer != 0 {
				t.ForeignSegments++
			}
		case snapshot.ActionSegmentFree, snapshot.ActionSegmentUnmap:
			if len(explicit) > 0 && explicit[0] == i {
				explicit = explicit[1:]
			} else if !gc && (i == 0 || !isSegmentRelease(evs[i-1].Action)) {
				// The allocator's own release: a cudaMalloc of the next segment failed first
				// (with garbage collection on, a release may come first without a failure).
				j := i
				for j < len(evs) && isSegmentRelease(evs[j].Action) {
					j++
				}
				if j < len(evs) && (evs[j].Action == snapshot.ActionSegmentAlloc || evs[j].Action == snapshot.ActionSegmentMap) {
					t.MallocFailures++
					if b := res + evs[j].Size; t.FailureBound == 0 || b < t.FailureBound {
						t.FailureBound = b
					}
				}
			}
			res -= ev.Size
		case snapshot.ActionOOM:
			t.OOMs = append(t.OOMs, i)
			t.ReservedAtOOM = append(t.ReservedAtOOM, res)
		}
		t.PeakReserved = max(t.PeakReserved, res)
		t.PeakReservedInTrace = max(t.PeakReservedInTrace, res)
	}
	t.nIDs = int(next)
}

// RunOptions configure one replay of a Trace.
type RunOptions struct {
	Settings Settings
	Capacity int64 // 0 = unbounded
	// Baseline: the replay of the file's own settings, compared with the recording: new
	// segments take the recorded addresses while the model's cudaMalloc sizes match the
	// recorded ones (so ties between equal blocks break as they did), and the model's segment
	// sequences are kept.
	Baseline bool
	// Events, when positive, replays only the first Events events: a caller that needs only the
	// outcomes of the oom events up to one stops there (the stats then cover those events).
	Events int
	// noRecycle turns off the recycling of blocks (tests: it must change nothing).
	noRecycle bool
}

// OOMOutcome is what a replay did at a recorded oom event.
type OOMOutcome struct {
	Event int
	Fits  bool
	// Headroom is capacity − reserved after serving the request (≥ 0), or capacity − (reserved
	// + what the last cudaMalloc / mapping asked for) when it failed (< 0): how far the request
	// was from failing or from fitting.
	Headroom int64
}

// RunResult is one replay of a Trace.
type RunResult struct {
	Stats Stats
	// SegmentAllocs / SegmentMaps: the model's segment_alloc / segment_map sizes with the trace
	// event during which each happened (Baseline only).
	SegmentAllocs []Recorded
	SegmentMaps   []Recorded
	OOMs          []OOMOutcome
	// NewOOMs counts recorded allocations the model could not serve; FirstNewOOM is the event
	// of the first (-1: none).
	NewOOMs     int
	FirstNewOOM int
	// UnknownFrees counts frees of addresses the model holds no block for (blocks of
	// allocations it could not serve, or blocks the start state could not place).
	UnknownFrees int
	// PeakReservedInTrace is the highest reserved memory the trace's events reach: Stats'
	// PeakReserved less the state before the first event, when that state alone was the peak
	// (a trace that opens by releasing memory: an empty_cache() starting the window).
	PeakReservedInTrace int64
}

// Run replays the trace through a fresh allocator. It only reads the trace: replays of one
// trace may run at the same time on several goroutines.
func (t *Trace) Run(ctx context.Context, opt RunOptions) (*RunResult, error) {
	res := &RunResult{FirstNewOOM: -1, OOMs: make([]OOMOutcome, 0, len(t.OOMs))}
	var a *Allocator
	// New segments go above every recorded address, unless the baseline takes the recorded one.
	synth := (t.maxAddr + 1<<42) &^ (RoundLarge - 1)
	k, diverged := 0, false
	cur := 0
	cfg := Config{Settings: opt.Settings, Capacity: opt.Capacity}
	cfg.SegmentAddr = func(size int64, _ uint64, expandable bool) uint64 {
		if opt.Baseline && !expandable && !diverged {
			if k < len(t.SegmentAllocs) && t.SegmentAllocs[k].Size == size && !a.Overlaps(t.SegmentAllocs[k].Addr, size) {
				k++
				return t.SegmentAllocs[k-1].Addr
			}
			diverged = true
		}
		addr := synth
		synth += uint64((size + RoundLarge - 1) / RoundLarge * RoundLarge)
		return addr
	}
	a = New(cfg)
	// The loop below forgets a block once the trace frees it, so blocks can be recycled.
	a.recycle = !opt.noRecycle
	if opt.Baseline {
		a.onSegment = func(ev Event) {
			switch ev.Action {
			case snapshot.ActionSegmentAlloc:
				res.SegmentAllocs = append(res.SegmentAllocs, Recorded{cur, ev.Addr, ev.Size})
			case snapshot.ActionSegmentMap:
				res.SegmentMaps = append(res.SegmentMaps, Recorded{cur, ev.Addr, ev.Size})
			}
		}
	}
	live := make([]*Block, t.nIDs)
	if err := t.install(a, live); err != nil {
		return nil, err
	}
	explicit := t.explicit
	evs := t.Events
	if opt.Events > 0 && opt.Events < len(evs) {
		evs = evs[:opt.Events]
	}
	check := 0 // the event from which the context is checked next
	startReserved, afterEvents := a.reserved, int64(0)
	for i := 0; i < len(evs); i++ {
		if i > 0 {
			afterEvents = max(afterEvents, a.reserved) // the state after event i-1
		}
		if i >= check {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("replay: %w", err)
			}
			check = i + 1<<16
		}
		t.prefetchFrees(live, i)
		ev := &evs[i]
		cur = i
		switch ev.Action {
		case snapshot.ActionAlloc:
			b, err := a.Malloc(ev.Size, ev.Stream, t.poolAt(i))
			if err != nil {
				res.NewOOMs++
				if res.FirstNewOOM < 0 {
					res.FirstNewOOM = i
				}
				continue
			}
			live[t.ids[i]] = b
		case snapshot.ActionFreeRequested:
			id := t.ids[i]
			if id < 0 || live[id] == nil {
				res.UnknownFrees++
				continue
			}
			if j := i + 1; j < len(evs) && evs[j].Action == snapshot.ActionFreeCompleted && t.ids[j] == id {
				// Its free_completed comes next (no other stream used the block, the usual
				// case): both at once, as that event alone would do (a free it completes).
				a.release(live[id])
				live[id] = nil
				i = j
				continue
			}
			a.FreeRequested(live[id])
		case snapshot.ActionFreeCompleted:
			id := t.ids[i]
			if id < 0 || live[id] == nil {
				res.UnknownFrees++
				continue
			}
			a.release(live[id])
			live[id] = nil
		case snapshot.ActionOOM:
			o := OOMOutcome{Event: i}
			b, err := a.Malloc(ev.Size, ev.Stream, t.poolAt(i))
			var oe *OOMError
			switch {
			case err == nil:
				o.Fits = true
				if opt.Capacity > 0 {
					o.Headroom = opt.Capacity - a.Reserved()
				}
				// What the program did instead is what the trace holds next: the request's
				// memory is given back at once.
				a.FreeRequested(b)
				a.Complete(b)
			case errors.As(err, &oe):
				o.Headroom = opt.Capacity - (oe.Reserved + oe.Need)
			}
			res.OOMs = append(res.OOMs, o)
		case snapshot.ActionSegmentFree, snapshot.ActionSegmentUnmap:
			if len(explicit) > 0 && explicit[0] == i {
				explicit = explicit[1:]
				a.EmptyCache()
			}
		}
	}
	res.Stats = a.Stats()
	res.PeakReservedInTrace = res.Stats.PeakReserved
	if len(evs) > 0 && res.Stats.PeakReserved <= startReserved {
		res.PeakReservedInTrace = max(afterEvents, a.reserved)
	}
	return res, nil
}

// freeAhead is how many events ahead prefetchFrees starts on a free's block.
const freeAhead = 6

// prefetchFrees prefetches, in three steps, what the frees of the coming events will touch:
// the live slot of the event 2×freeAhead ahead, the block of the event freeAhead ahead (its
// slot has arrived by then), and the neighbours the block of the event freeAhead/2 ahead may
// merge with. The events touch blocks all over a working set larger than the caches, and
// each event's memory accesses depend on one another, so without this a replay mostly waits
// for memory. Only ids are read (an allocation's slot is empty until it happens, and is
// written soon after: its prefetch is not wasted either).
func (t *Trace) prefetchFrees(live []*Block, i int) {
	ids := t.ids
	if j := i + 2*freeAhead; j < len(ids) {
		if id := ids[j]; id >= 0 {
			prefetch.Line(unsafe.Pointer(&live[id]))
		}
	}
	if j := i + freeAhead; j < len(ids) {
		if id := ids[j]; id >= 0 && live[id] != nil {
			prefetch.Line(unsafe.Pointer(live[id]))
		}
	}
	if j := i + freeAhead/2; j < len(ids) {
		if id := ids[j]; id >= 0 && live[id] != nil {
			if b := live[id]; b.prev != nil {
				prefetch.Line(unsafe.Pointer(b.prev))
			}
			if b := live[id]; b.next != nil {
				prefetch.Line(unsafe.Pointer(b.next))
			}
		}
	}
}

func (t *Trace) poolAt(i int) snapshot.PoolID {
	if len(t.pools) == 0 {
		return DefaultPool
	}
	if p, ok := t.pools[i]; ok {
		return p
	}
	return DefaultPool
}

// install adds the start state to a fresh allocator and keeps the live blocks' handles by id.
func (t *Trace) install(a *Allocator, live []*Block) error {
	k := 0
	add := func(spec SegmentSpec) error {
		hs, err := a.AddSegment(spec)
		if err != nil {
			return fmt.Errorf("start state: %w", err)
		}
		for j, id := range t.startIDs[k] {
			if id >= 0 {
				live[id] = hs[j]
			}
		}
		k++
		return nil
	}
	for _, sp := range t.specs {
		if err := add(sp); err != nil {
			return err
		}
	}
	for _, g := range t.esGroups {
		page := pageSize(g.small)
		n := a.addressSpace(page)
		used := int64(g.end - g.base)
		tail := max(n-used, page)
		tail = (tail + page - 1) / page * page
		spec := SegmentSpec{Addr: g.base, Size: used + tail, Stream: g.stream, Pool: g.pool, Small: g.small, Expandable: true,
			Blocks: append(slices.Clone(g.blocks), BlockSpec{Addr: g.end, Size: tail, Unmapped: true})}
		if err := add(spec); err != nil {
			return err
		}
	}
	return nil
}
