package allocator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

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
	evs := snap.DeviceTraces[dev]
	t := &Trace{Device: dev, Events: evs, pools: map[int]snapshot.PoolID{}}
	streams := map[uint64]bool{}
	for _, ev := range evs {
		if ev.Action == snapshot.ActionAlloc {
			t.allocs++
			streams[ev.Stream] = true
		}
	}
	t.Streams = len(streams)
	if t.allocs == 0 {
		return nil, fmt.Errorf("device %d: %w", dev, ErrNoTrace)
	}
	t.classifyReleases(snap)
	t.findPools(snap)
	if err := t.reconstruct(snap, &set); err != nil {
		return nil, err
	}
	t.recordedTimeline(set.GCThreshold > 0)
	t.numberBlocks()
	return t, nil
}

// numberBlocks gives every block of the start state and every allocation an id, and each
// free event the id of the block it frees: replays then keep blocks in a slice instead of a
// map by address.
func (t *Trace) numberBlocks() {
	cur := map[uint64]int32{}
	next := int32(0)
	number := func(blocks []BlockSpec) []int32 {
		out := make([]int32, len(blocks))
		for j, b := range blocks {
			out[j] = -1
			if !b.Unmapped && b.State != snapshot.StateInactive {
				out[j] = next
				cur[b.Addr] = next
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
	t.ids = make([]int32, len(t.Events))
	for i, ev := range t.Events {
		t.ids[i] = -1
		switch ev.Action {
		case snapshot.ActionAlloc:
			t.ids[i] = next
			cur[ev.Addr] = next
			next++
		case snapshot.ActionFreeRequested:
			if id, ok := cur[ev.Addr]; ok {
				t.ids[i] = id
			}
		case snapshot.ActionFreeCompleted:
			if id, ok := cur[ev.Addr]; ok {
				t.ids[i] = id
				delete(cur, ev.Addr)
			}
		}
	}
	t.nIDs = int(next)
}

// classifyReleases finds the runs of segment_free / segment_unmap events the program asked for
// (torch.cuda.empty_cache()): a run whose stacks go through empty_cache, or that no new
// segment or oom follows. A run followed by a segment_alloc, segment_map or oom is the
// allocator's own (a cudaMalloc failed, garbage collection): the model decides those itself.
func (t *Trace) classifyReleases(snap *snapshot.Snapshot) {
	evs := t.Events
	for i := 0; i < len(evs); {
		if !isSegmentRelease(evs[i].Action) {
			i++
			continue
		}
		j, ec := i, false
		for j < len(evs) && isSegmentRelease(evs[j].Action) {
			if st := evs[j].Stack; !ec && st > snapshot.EmptyStack {
				ec = isEmptyCacheFrames(snap.StackFrames(st))
			}
			j++
		}
		next := snapshot.ActionOther
		if j < len(evs) {
			next = evs[j].Action
		}
		if ec || (next != snapshot.ActionSegmentAlloc && next != snapshot.ActionSegmentMap && next != snapshot.ActionOOM) {
			t.explicit = append(t.explicit, i)
		}
		i = j
	}
	t.EmptyCacheCalls = len(t.explicit)
}

// findPools assigns private pools to requests: the event's pool_id (newest PyTorch), else the
// pool of the final segment holding the address.
func (t *Trace) findPools(snap *snapshot.Snapshot) {
	type span struct {
		addr, end uint64
		pool      snapshot.PoolID
	}
	var private []span
	for _, s := range snap.Segments {
		if s.Device == t.Device && s.PoolID != DefaultPool {
			private = append(private, span{s.Address, s.Address + uint64(s.TotalSize), s.PoolID})
		}
	}
	slices.SortFunc(private, func(x, y span) int { return cmp.Compare(x.addr, y.addr) })
	for i, ev := range t.Events {
		if ev.Action != snapshot.ActionAlloc && ev.Action != snapshot.ActionOOM {
			continue
		}
		if ev.Extra > 0 && int(ev.Extra) < len(snap.EventExtras) {
			if p := snap.EventExtras[ev.Extra].PoolID; p != DefaultPool {
				t.pools[i] = p
				continue
			}
		}
		if len(private) == 0 || ev.Action == snapshot.ActionOOM {
			continue
		}
		k, _ := slices.BinarySearchFunc(private, ev.Addr+1, func(s span, a uint64) int { return cmp.Compare(s.addr, a) })
		if k > 0 && ev.Addr < private[k-1].end {
			t.pools[i] = private[k-1].pool
		}
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
func (t *Trace) reconstruct(snap *snapshot.Snapshot, set *Settings) error {
	evs := t.Events
	firstSeg := map[uint64]int{}
	firstBlk := map[uint64]int{}
	expandable := set.ExpandableSegments
	for i, ev := range evs {
		switch ev.Action {
		case snapshot.ActionSegmentAlloc, snapshot.ActionSegmentFree:
			if _, ok := firstSeg[ev.Addr]; !ok {
				firstSeg[ev.Addr] = i
			}
		case snapshot.ActionSegmentMap, snapshot.ActionSegmentUnmap:
			expandable = true
		case snapshot.ActionAlloc, snapshot.ActionFreeRequested, snapshot.ActionFreeCompleted:
			if _, ok := firstBlk[ev.Addr]; !ok {
				firstBlk[ev.Addr] = i
			}
		}
		t.maxAddr = max(t.maxAddr, ev.Addr+uint64(max(ev.Size, 0)))
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
		if _, ok := firstSeg[s.Address]; ok {
			continue
		}
		segs = append(segs, &startSeg{addr: s.Address, size: s.TotalSize, stream: s.Stream, pool: s.PoolID, small: s.SegmentType == "small"})
	}
	for addr, i := range firstSeg {
		ev := evs[i]
		if ev.Action != snapshot.ActionSegmentFree {
			continue
		}
		pool := DefaultPool
		if ev.Extra > 0 && int(ev.Extra) < len(snap.EventExtras) {
			pool = snap.EventExtras[ev.Extra].PoolID
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
	for addr, i := range firstBlk {
		ev := evs[i]
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
			if _, ok := firstBlk[b.Address]; !ok {
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

// recordedTimeline replays the recorded segment events: the recorded segment sequences,
// reserved at each oom and its peak, and the cudaMalloc failures the allocator recovered from.
func (t *Trace) recordedTimeline(gc bool) {
	res := t.StartReserved
	t.PeakReserved = res
	evs := t.Events
	explicit := t.explicit
	for i, ev := range evs {
		switch ev.Action {
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
	}
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
}

// Run replays the trace through a fresh allocator.
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
	if opt.Baseline {
		cfg.OnEvent = func(ev Event) {
			switch ev.Action {
			case snapshot.ActionSegmentAlloc:
				res.SegmentAllocs = append(res.SegmentAllocs, Recorded{cur, ev.Addr, ev.Size})
			case snapshot.ActionSegmentMap:
				res.SegmentMaps = append(res.SegmentMaps, Recorded{cur, ev.Addr, ev.Size})
			}
		}
	}
	a = New(cfg)
	live := make([]*Block, t.nIDs)
	if err := t.install(a, live); err != nil {
		return nil, err
	}
	explicit := t.explicit
	for i := range t.Events {
		if i&0xffff == 0 {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("replay: %w", err)
			}
		}
		ev := &t.Events[i]
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
			if id := t.ids[i]; id >= 0 && live[id] != nil {
				a.FreeRequested(live[id])
			} else {
				res.UnknownFrees++
			}
		case snapshot.ActionFreeCompleted:
			id := t.ids[i]
			if id < 0 || live[id] == nil {
				res.UnknownFrees++
				continue
			}
			a.FreeRequested(live[id])
			a.Complete(live[id])
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
	return res, nil
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
