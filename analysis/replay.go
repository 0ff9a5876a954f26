package analysis

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/memsnap/memsnap/analysis/internal/hugepage"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// ReplayOptions selects the device and bounds the lists of a replay.
type ReplayOptions struct {
	Device      int                `json:"device"`
	Limit       int                `json:"limit"` // list length bound; 0 means 10
	Attribution AttributionOptions `json:"attribution"`
	// StagesOffset is the first stage listed (stages are paged by it and Limit).
	StagesOffset int `json:"stages_offset,omitempty"`
}

// ActionCount is the number of trace events of one action.
type ActionCount struct {
	Action string `json:"action"`
	Count  int64  `json:"count"`
}

// SiteBytes is memory held by one site.
type SiteBytes struct {
	SiteIdentity
	Category string  `json:"category"`
	Bytes    int64   `json:"bytes"`
	Blocks   int     `json:"blocks"`
	Percent  float64 `json:"percent"`
	// Evidence is set when the category comes from the blocks themselves (user_container).
	Evidence string `json:"evidence,omitempty"`
}

// DelayedFrees summarises blocks whose free_completed came later than their free_requested
// (the block was still in use by another stream: record_stream / cross-stream use).
type DelayedFrees struct {
	Count          int         `json:"count"`
	Bytes          int64       `json:"bytes"`
	MaxDelayEvents int         `json:"max_delay_events"`
	MaxDelayUS     int64       `json:"max_delay_us"`
	PendingAtEnd   int         `json:"pending_at_end"` // freed but not yet completed when the file was written
	Streams        []string    `json:"streams"`
	Sites          []SiteBytes `json:"sites"`
}

// GCFrees summarises frees made by the cyclic garbage collector.
type GCFrees struct {
	Count  int         `json:"count"`
	Bytes  int64       `json:"bytes"`
	Bursts int         `json:"bursts"` // runs of consecutive GC frees
	Sites  []SiteBytes `json:"sites"`  // allocation sites of the freed blocks
	Advice string      `json:"advice"`
	// AdviceRule: the rule of the advice table (advice.go) that gave Advice.
	AdviceRule string `json:"advice_rule"`
}

// isGCStack reports whether a free's stack runs inside the cyclic garbage collector.
func isGCStack(frames []snapshot.Frame) bool {
	for _, f := range frames {
		n := f.Name
		if strings.Contains(n, "gc_collect") || strings.Contains(n, "collect_generation") ||
			(n == "collect" && strings.HasSuffix(normPath(f.Filename), "gc")) {
			return true
		}
	}
	return false
}

// RepeatingSite is a site that allocates across the trace and whose blocks are never freed.
type RepeatingSite struct {
	SiteIdentity
	Category    string `json:"category"`
	Evidence    string `json:"evidence,omitempty"` // set for user_container
	Survivors   int    `json:"survivors"`          // blocks allocated in the trace and alive at its end
	Bytes       int64  `json:"bytes"`              // their bytes
	Iterations  int    `json:"iterations"`         // distinct iterations they were allocated in
	Allocations int    `json:"allocations"`        // all allocations of the site in the trace
	// Expected: memory that stays on purpose (optimizer state made by the first step).
	Expected bool `json:"expected"`
}

// ReplayResult is the memory of one device over its recorded trace.
type ReplayResult struct {
	Path          string        `json:"path"`
	Device        int           `json:"device"`
	HasTrace      bool          `json:"has_trace"`
	Events        int           `json:"events"`
	DroppedEvents int64         `json:"dropped_events"`
	EventCounts   []ActionCount `json:"event_counts"`
	FirstTimeUS   int64         `json:"first_time_us"`
	LastTimeUS    int64         `json:"last_time_us"`
	DurationUS    int64         `json:"duration_us"`
	// Start*: reconstructed memory when the trace starts (see Replay for how).
	StartAllocatedBytes int64 `json:"start_allocated_bytes"`
	StartReservedBytes  int64 `json:"start_reserved_bytes"`
	// End*: replayed memory after the last event; Final*: the segments in the file.
	EndAllocatedBytes   int64 `json:"end_allocated_bytes"`
	EndReservedBytes    int64 `json:"end_reserved_bytes"`
	FinalAllocatedBytes int64 `json:"final_allocated_bytes"`
	FinalReservedBytes  int64 `json:"final_reserved_bytes"`
	// Consistent: the replay ends exactly at the file's final state.
	Consistent          bool  `json:"consistent"`
	PeakAllocatedBytes  int64 `json:"peak_allocated_bytes"`
	PeakAllocatedEvent  int   `json:"peak_allocated_event"` // index into the device trace; -1 = before the first event
	PeakAllocatedTimeUS int64 `json:"peak_allocated_time_us"`
	PeakReservedBytes   int64 `json:"peak_reserved_bytes"`
	PeakReservedEvent   int   `json:"peak_reserved_event"`
	PeakActiveBytes     int64 `json:"peak_active_bytes"`
	// PreTrace*: blocks alive before the trace starts (frees without allocs, live blocks without allocs).
	PreTraceBlocks int   `json:"pre_trace_blocks"`
	PreTraceBytes  int64 `json:"pre_trace_bytes"`
	// PeakSites: the sites holding allocated memory at the allocated peak, largest first.
	PeakSites []SiteBytes `json:"peak_sites"`
	// ActivationBytesAtPeak: bytes at the peak whose role is activation (saved for backward).
	ActivationBytesAtPeak int64 `json:"activation_bytes_at_peak"`
	// Workload: training, inference or unknown (see summarize), with the evidence.
	Workload         string `json:"workload"`
	WorkloadEvidence string `json:"workload_evidence"`
	// GradMode is whether the trace's forward passes kept an autograd graph, read from how
	// their allocations ended (never from frames); nil without a trace.
	GradMode *GradMode `json:"grad_mode,omitempty"`
	// Frameworks are the frameworks the file's frames show (Lightning, HF Trainer,
	// Accelerate, FSDP1/FSDP2, DDP, DataParallel, DeepSpeed, Megatron, vLLM, SGLang, PyG,
	// torch.compile), each with the first frame that proves it.
	Frameworks []Framework `json:"frameworks,omitempty"`
	// Unwind lists what followed each out-of-memory error: the exception unwinding the pass
	// and the framework's teardown (stages named "unwind"); roles and steps never read them.
	Unwind []UnwindSpan `json:"unwind,omitempty"`
	// CheckpointingAdvice is set only when the trace shows a backward pass and activations are
	// material at the peak: what activation checkpointing could save there.
	CheckpointingAdvice string `json:"checkpointing_advice,omitempty"`
	// ForwardOnlyAdvice is set when the trace shows a forward pass that saves activations for a
	// backward (grad enabled) and no backward pass, with the activations material at the peak:
	// what inference_mode would not keep, if no backward follows.
	ForwardOnlyAdvice string `json:"forward_only_advice,omitempty"`
	// PeakPhase is what the device was doing at the allocated peak: forward, backward, optimizer
	// or "" (unknown: no frames say).
	PeakPhase string `json:"peak_phase"`
	// PeakOutsideOptimizerBytes is the highest allocated level outside optimizer steps, set when
	// the peak is inside one.
	PeakOutsideOptimizerBytes int64 `json:"peak_outside_optimizer_bytes,omitempty"`
	// Stages are the forward passes, backward passes and optimizer steps of the trace with their
	// allocated bytes at start, peak and end (at most 300; StagesTotal counts them all).
	Stages      []Stage `json:"stages"`
	StagesTotal int     `json:"stages_total"`
	// StagesOffset and StagesNextOffset: stages holds stages [offset, next) of stages_total.
	StagesOffset     int `json:"stages_offset"`
	StagesNextOffset int `json:"stages_next_offset"`
	// StagePeaks is the stage with the highest peak of each kind, over every stage.
	StagePeaks []Stage `json:"stage_peaks,omitempty"`
	// OptimizerAdvice is set only when an optimizer step sets the peak and its temporaries and
	// re-allocated state are material there.
	OptimizerAdvice string `json:"optimizer_advice,omitempty"`
	// Advice: the advice above (checkpointing, forward-only, optimizer), each with the rule of
	// the advice table (advice.go) that gave it.
	Advice       []AdviceItem `json:"advice"`
	DelayedFrees DelayedFrees `json:"delayed_frees"`
	// IterationSource says where steps come from (see StepInfo.Source); Iterations counts them.
	IterationSource string `json:"iteration_source"`
	Iterations      int    `json:"iterations"`
	// IterationPeriodAllocs / IterationPeriodEvents: the length of one iteration in alloc events
	// (the detected period) and in trace events (median distance between iteration starts).
	IterationPeriodAllocs int `json:"iteration_period_allocs"`
	IterationPeriodEvents int `json:"iteration_period_events"`
	// IterationStartEvents: trace event index where each iteration starts (at most 1000).
	IterationStartEvents []int `json:"iteration_start_events"`
	// Sawtooth: allocated memory per complete iteration (trough, rise, growth).
	Sawtooth       Sawtooth        `json:"sawtooth"`
	RepeatingSites []RepeatingSite `json:"repeating_sites"`
	OOMEvents      int             `json:"oom_events"`
	// GCFrees: blocks freed by Python's cyclic garbage collector (free stacks pass through
	// gc_collect): tensors kept alive by reference cycles until a GC pass.
	GCFrees GCFrees `json:"gc_frees"`
	// SizesAreRequested: the trace records requested bytes (newer PyTorch), so allocated memory over
	// time counts requested bytes; the final state counts rounded block sizes.
	SizesAreRequested bool `json:"sizes_are_requested"`
	// PeakAllocatedBasis: "requested" or "rounded", the bytes the allocated peaks count.
	PeakAllocatedBasis string `json:"peak_allocated_basis"`
	// SegmentBursts: runs of segment_free / segment_unmap events, named (explicit empty_cache()
	// calls, the allocator's cudaMalloc-failure retries) with their advice (bursts.go).
	SegmentBursts []SegmentBurst `json:"segment_bursts"`
	Notes         []string       `json:"notes"`
}

// liveBlk is a block that is allocated or awaiting its free_completed during a replay. It is
// kept small (40 bytes): a dense engine holds one per trace address and a walk reaches them in
// no particular order, so their size is what the walk's cache misses cost.
type liveBlk struct {
	size     int64
	stream   uint64
	allocIdx int32 // -1: alive before the trace (event indexes fit in 32 bits, as in TraceIndex)
	stack    snapshot.StackID
	// freeReqIdx is the block's free_requested event (-1: none yet); its time is that event's.
	freeReqIdx int32
	pending    bool
}

type segRec struct {
	size   int64
	stream uint64
}

// engine replays one device trace event by event.
type engine struct {
	snap      *snapshot.Snapshot
	evs       []snapshot.Event
	next      int // next event to apply
	live      map[uint64]*liveBlk
	segs      map[uint64]segRec
	allocated int64
	active    int64
	reserved  int64
	// seeds
	preBlocks   int
	preBytes    int64
	finalAlloc  int64
	finalActive int64
	finalRes    int64
	unmatched   int // frees with no live block even after seeding
	// requested: the trace's sizes are requested bytes (newer PyTorch), not rounded block sizes;
	// blocks seeded from the final state then count their requested_size.
	requested bool
	// finalBlocks: the file's final allocated and pending blocks by address (map engines);
	// dense engines read them from seed by block id.
	finalBlocks map[uint64]snapshot.Block
	seed        *engineSeed
	doubleAlloc int
	onFreeDone  func(i int, b *liveBlk)
	onFree      func(i int, b *liveBlk)
	// Live blocks come from chunks and are reused once completely freed (callbacks do not
	// keep them): a multi-million-event trace then allocates nothing per event.
	chunk    []liveBlk
	freeBlks []*liveBlk
	// Dense engines (engineSeed.engine) keep the live blocks at the trace's block addresses in
	// blks, by the trace index's block id (inUse marks the live ones), instead of in live: live
	// then holds only blocks seeded from the final state at addresses without any event, which
	// no event touches. eachLive and liveCount see both.
	x       *snapshot.TraceIndex
	blks    []liveBlk
	inUse   []bool
	nUsed   int
	touched int64 // see touch
}

func (e *engine) newBlk(b liveBlk) *liveBlk {
	if n := len(e.freeBlks); n > 0 {
		p := e.freeBlks[n-1]
		e.freeBlks = e.freeBlks[:n-1]
		*p = b
		return p
	}
	if len(e.chunk) == cap(e.chunk) {
		e.chunk = make([]liveBlk, 0, 4096)
	}
	e.chunk = append(e.chunk, b)
	return &e.chunk[len(e.chunk)-1]
}

// eachLive calls f for every live block (allocated or awaiting its free_completed).
func (e *engine) eachLive(f func(addr uint64, b *liveBlk)) {
	for addr, b := range e.live {
		f(addr, b)
	}
	for id, on := range e.inUse {
		if on {
			f(e.x.Blocks[id], &e.blks[id])
		}
	}
}

// liveCount is the number of live blocks.
func (e *engine) liveCount() int { return len(e.live) + e.nUsed }

// newEngine is an engine whose live blocks are all in the live map, for callers that read or
// change it.
func newEngine(snap *snapshot.Snapshot, device int) *engine {
	return newEngineSeed(snap, device).engine(false)
}

// engineSeed is what every replay of a device trace starts from, worked out once: the final
// state, the blocks and segments alive before the first event, whether sizes are requested.
type engineSeed struct {
	snap *snapshot.Snapshot
	evs  []snapshot.Event
	x    *snapshot.TraceIndex
	// finals: the device's final allocated and pending blocks, in segment order; finalID[id]:
	// the index in finals of the last one at block id's address (-1: none), nFinalIDs how many
	// block ids have one. Map engines get them by address (finalBlocks), built on demand.
	finals      []snapshot.Block
	finalID     []int32
	nFinalIDs   int
	finalOnly   []finalBlock      // alive at the end, at addresses without any event
	first       []int32           // first event of each block id
	segs        map[uint64]segRec // alive before the first event (each engine copies it)
	finalAlloc  int64
	finalActive int64
	finalRes    int64
	segNet      int64
	requested   bool
}

type finalBlock struct {
	b   snapshot.Block
	seg *snapshot.Segment
}

func newEngineSeed(snap *snapshot.Snapshot, device int) *engineSeed {
	sd := &engineSeed{snap: snap, segs: map[uint64]segRec{}}
	if device >= 0 && device < len(snap.DeviceTraces) {
		sd.evs = snap.DeviceTraces[device]
	}
	x := snap.TraceIndex(device)
	sd.x = x
	// Final state of this device. blockIDs: every block that is not inactive at a trace
	// address, with its block id, for the requested-sizes test below (one lookup per block).
	type idBlock struct {
		id int32
		b  *snapshot.Block
	}
	// Sized up front: a long trace's final state has a hundred thousand blocks or more, which
	// slices grown by append would copy and leave behind several times over.
	nLive := 0
	for _, si := range snap.SegmentsOn(device) {
		if s := &snap.Segments[si]; s.Device == device {
			for bi := range s.Blocks {
				if s.Blocks[bi].State != snapshot.StateInactive {
					nLive++
				}
			}
		}
	}
	blockIDs := make([]idBlock, 0, nLive)
	sd.finals = make([]snapshot.Block, 0, nLive)
	finalAt := map[uint64]int{}
	sd.finalID = make([]int32, len(x.Blocks))
	for i := range sd.finalID {
		sd.finalID[i] = -1
	}
	for _, si := range snap.SegmentsOn(device) {
		s := &snap.Segments[si]
		if s.Device != device {
			continue
		}
		sd.finalRes += s.TotalSize
		sums := s.Sums()
		sd.finalAlloc += sums.Allocated
		sd.finalActive += sums.Active()
		for bi := range s.Blocks {
			b := &s.Blocks[bi]
			if b.State == snapshot.StateInactive {
				continue
			}
			id, traced := x.Block(b.Address)
			if traced {
				blockIDs = append(blockIDs, idBlock{id, b})
			}
			if b.State != snapshot.StateActiveAllocated && b.State != snapshot.StateActivePendingFree {
				continue
			}
			if traced {
				if sd.finalID[id] < 0 {
					sd.nFinalIDs++
				}
				sd.finalID[id] = int32(len(sd.finals)) // the last block at an address wins
			} else if k, dup := finalAt[b.Address]; dup {
				sd.finalOnly[k] = finalBlock{*b, s}
			} else {
				finalAt[b.Address] = len(sd.finalOnly)
				sd.finalOnly = append(sd.finalOnly, finalBlock{*b, s})
			}
			sd.finals = append(sd.finals, *b)
		}
	}
	// The first block event per address, each address's last alloc and the first segment
	// event per segment address come from the index and its tally, built while the file
	// loaded; so does whether an alloc size is not a multiple of 512 (see
	// traceSizesAreRequested, whose test is made here on the final blocks).
	evs := sd.evs
	t := &x.Tally
	sd.first = x.BlockFirst
	_, _, _, sd.segNet = t.Peaks()
	sd.requested = t.OddAllocSize
	for _, fb := range blockIDs {
		if sd.requested {
			break
		}
		if sz, ok := t.LastAllocSize(fb.id); ok && sd.finalID[fb.id] >= 0 {
			sd.requested = sz != fb.b.Size && sz == fb.b.RequestedSize
		}
	}
	// firstSeg: each segment address's first event; segFrees: those that are a free or an
	// unmap.
	firstSeg := func(id int32) snapshot.Action { return evs[x.SegmentFirst[id]].Action }
	var segFrees []int
	for _, i := range x.SegmentFirst {
		if a := evs[i].Action; a == snapshot.ActionSegmentFree || a == snapshot.ActionSegmentUnmap {
			segFrees = append(segFrees, int(i))
		}
	}
	// Segments alive before the trace: in the final state without a segment event first, or
	// first seen freed.
	for _, si := range snap.SegmentsOn(device) {
		s := &snap.Segments[si]
		if s.Device != device {
			continue
		}
		id, ok := x.Segment(s.Address)
		if !ok || firstSeg(id) == snapshot.ActionSegmentFree || firstSeg(id) == snapshot.ActionSegmentUnmap {
			sd.segs[s.Address] = segRec{s.TotalSize, s.Stream}
		}
	}
	for _, i := range segFrees {
		ev := &evs[i]
		if _, ok := sd.segs[ev.Addr]; !ok {
			sd.segs[ev.Addr] = segRec{ev.Size, ev.Stream}
		}
	}
	return sd
}

// finalBlocks is the file's final allocated and pending blocks of the device by address (the
// last block at an address wins).
func (sd *engineSeed) finalBlocks() map[uint64]snapshot.Block {
	m := make(map[uint64]snapshot.Block, len(sd.finals))
	for _, b := range sd.finals {
		m[b.Address] = b
	}
	return m
}

// engine starts a replay from the seed; dense keeps trace blocks in slots (see engine.x),
// for callers that see live blocks only through eachLive and liveCount.
func (sd *engineSeed) engine(dense bool) *engine {
	e := &engine{snap: sd.snap, evs: sd.evs, live: map[uint64]*liveBlk{}, segs: make(map[uint64]segRec, len(sd.segs)),
		seed: sd, finalAlloc: sd.finalAlloc, finalActive: sd.finalActive, finalRes: sd.finalRes, requested: sd.requested}
	x := sd.x
	if dense {
		e.x, e.blks, e.inUse = x, make([]liveBlk, len(x.Blocks)), make([]bool, len(x.Blocks))
	} else {
		e.finalBlocks = sd.finalBlocks()
	}
	put := func(id int, addr uint64, b liveBlk) {
		if dense {
			e.blks[id], e.inUse[id] = b, true
			e.nUsed++
		} else {
			e.live[addr] = e.newBlk(b)
		}
	}
	// Seed blocks alive before the trace: the first event of their address is a free.
	for id, i := range sd.first {
		ev := &sd.evs[i]
		switch ev.Action {
		case snapshot.ActionFreeRequested:
			put(id, ev.Addr, liveBlk{size: ev.Size, stack: snapshot.NoStack, stream: ev.Stream, allocIdx: -1, freeReqIdx: -1})
			e.allocated += ev.Size
			e.active += ev.Size
			e.preBlocks++
			e.preBytes += ev.Size
		case snapshot.ActionFreeCompleted:
			put(id, ev.Addr, liveBlk{size: ev.Size, stack: snapshot.NoStack, stream: ev.Stream, allocIdx: -1, pending: true, freeReqIdx: -1})
			e.active += ev.Size
			e.preBlocks++
			e.preBytes += ev.Size
		}
	}
	// ... and blocks alive at the end whose address has no event at all.
	for _, f := range sd.finalOnly {
		size := f.b.Size
		if e.requested && f.b.RequestedSize > 0 {
			size = f.b.RequestedSize
		}
		b := e.newBlk(liveBlk{size: size, stack: f.b.Stack, stream: f.seg.Stream, allocIdx: -1, freeReqIdx: -1})
		e.active += b.size
		if f.b.State == snapshot.StateActivePendingFree {
			b.pending = true
		} else {
			e.allocated += b.size
		}
		e.live[f.b.Address] = b
		e.preBlocks++
		e.preBytes += b.size
	}
	// Reserved: offset from the final state by the trace's net segment change.
	e.reserved = e.finalRes - sd.segNet
	for addr, s := range sd.segs {
		e.segs[addr] = s
	}
	return e
}

// allocatedAt is the state a dense engine reaches after event p (-1: before the first),
// as far as allocated blocks go: the blocks allocated and not yet freed then, exactly those
// run would leave (liveSites reads nothing else; pending blocks and the counters are not
// kept). A block is allocated after p when the last event at its address up to p is an
// alloc (any free leaves it pending or gone), or when no event there comes before p and the
// seed has it allocated (alive before the trace, or at the end without any event). One pass
// over the events up to p that only notes the last event per address: much cheaper than
// replaying them.
func (sd *engineSeed) allocatedAt(ctx context.Context, p int) (*engine, error) {
	e := sd.engine(true)
	e.next = p + 1
	last := make([]int, len(sd.x.Blocks)) // the last event at each block id, plus one
	evs := sd.evs[:min(p+1, len(sd.evs))]
	for i := range evs {
		if i&0xfffff == 0 {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("replay: %w", err)
			}
		}
		if snapshot.BlockEvent(evs[i].Action) {
			last[sd.x.Slot[i]] = i + 1
		}
	}
	for id, l := range last {
		if l == 0 {
			continue // the seed's state stands
		}
		if ev := &evs[l-1]; ev.Action == snapshot.ActionAlloc {
			e.blks[id] = liveBlk{size: ev.Size, stack: ev.Stack, stream: ev.Stream, allocIdx: int32(l - 1), freeReqIdx: -1}
			if !e.inUse[id] {
				e.inUse[id] = true
				e.nUsed++
			}
		} else if e.inUse[id] {
			e.inUse[id] = false
			e.nUsed--
		}
	}
	return e, nil
}

// allocatedBefore is allocatedAt(p) worked out from end, a dense engine that has applied
// every event, by going back from the last event instead of forward from the first: a block
// with no event after p is after p as it is at the end, and the others are settled by their
// last event at or before p, found by scanning back from p until every one is (those without
// any keep the seed's state). Cheaper than allocatedAt when p is late in the trace (the peak
// often is); allocatedAt is used when it is not.
func (sd *engineSeed) allocatedBefore(ctx context.Context, end *engine, p int) (*engine, error) {
	evs, x := sd.evs, sd.x
	if end == nil || end.blks == nil || end.seed != sd || !end.done() || p < len(evs)/2 {
		return sd.allocatedAt(ctx, p)
	}
	// The blocks seeded from the final state at addresses without events (end.live) are the
	// same at every point, and liveSites only reads them: they are shared.
	e := &engine{snap: sd.snap, evs: evs, next: p + 1, live: end.live, seed: sd, finalAlloc: sd.finalAlloc,
		finalActive: sd.finalActive, finalRes: sd.finalRes, requested: sd.requested,
		x: x, blks: slices.Clone(end.blks), inUse: slices.Clone(end.inUse), nUsed: end.nUsed}
	// open[id]: 1 while block id has an event after p and its state after p is not settled.
	open := make([]uint8, len(x.Blocks))
	var ids []int32
	for i := len(evs) - 1; i > p; i-- {
		if snapshot.BlockEvent(evs[i].Action) {
			if id := x.Slot[i]; open[id] == 0 {
				open[id] = 1
				ids = append(ids, id)
			}
		}
	}
	set := func(id int32, b liveBlk, on bool) {
		if on {
			e.blks[id] = b
		}
		if on != e.inUse[id] {
			e.inUse[id] = on
			if on {
				e.nUsed++
			} else {
				e.nUsed--
			}
		}
	}
	left := len(ids)
	for i := p; i >= 0 && left > 0; i-- {
		if (p-i)&0xfffff == 0 {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("replay: %w", err)
			}
		}
		ev := &evs[i]
		if !snapshot.BlockEvent(ev.Action) {
			continue
		}
		id := x.Slot[i]
		if open[id] != 1 {
			continue
		}
		open[id] = 2
		left--
		// allocatedAt's rule: allocated when the last event is an alloc, else gone (a free
		// leaves the block pending or freed, which liveSites does not read).
		set(id, liveBlk{size: ev.Size, stack: ev.Stack, stream: ev.Stream, allocIdx: int32(i), freeReqIdx: -1}, ev.Action == snapshot.ActionAlloc)
	}
	for _, id := range ids {
		if open[id] != 1 {
			continue
		}
		// No event at or before p: the seed's state (see engineSeed.engine).
		ev := &evs[sd.first[id]]
		switch ev.Action {
		case snapshot.ActionFreeRequested:
			set(id, liveBlk{size: ev.Size, stack: snapshot.NoStack, stream: ev.Stream, allocIdx: -1, freeReqIdx: -1}, true)
		case snapshot.ActionFreeCompleted:
			set(id, liveBlk{size: ev.Size, stack: snapshot.NoStack, stream: ev.Stream, allocIdx: -1, pending: true, freeReqIdx: -1}, true)
		default:
			set(id, liveBlk{}, false)
		}
	}
	return e, nil
}

// liveAt is the live block at the address of block event i (nil: none).
func (e *engine) liveAt(i int) *liveBlk {
	if e.blks == nil {
		return e.live[e.evs[i].Addr]
	}
	if id := e.x.Slot[i]; e.inUse[id] {
		return &e.blks[id]
	}
	return nil
}

// step applies event e.next.
func (e *engine) step() {
	i := e.next
	e.next++
	ev := &e.evs[i]
	switch ev.Action {
	case snapshot.ActionAlloc, snapshot.ActionFreeRequested, snapshot.ActionFreeCompleted:
		if e.blks != nil {
			e.stepDense(i, ev)
			return
		}
		b := e.live[ev.Addr]
		switch ev.Action {
		case snapshot.ActionAlloc:
			if b != nil {
				e.doubleAlloc++
				if !b.pending {
					e.allocated -= b.size
				}
				e.active -= b.size
				e.freeBlks = append(e.freeBlks, b)
			}
			e.live[ev.Addr] = e.newBlk(liveBlk{size: ev.Size, stack: ev.Stack, stream: ev.Stream, allocIdx: int32(i), freeReqIdx: -1})
			e.allocated += ev.Size
			e.active += ev.Size
		case snapshot.ActionFreeRequested:
			if b == nil {
				e.unmatched++
				return
			}
			e.freeRequested(i, ev, b)
		case snapshot.ActionFreeCompleted:
			if b == nil {
				e.unmatched++
				return
			}
			e.freeCompleted(i, b)
			delete(e.live, ev.Addr)
			if e.onFreeDone != nil {
				e.onFreeDone(i, b)
			}
			e.freeBlks = append(e.freeBlks, b)
		}
	case snapshot.ActionSegmentAlloc, snapshot.ActionSegmentMap:
		e.reserved += ev.Size
		if ev.Action == snapshot.ActionSegmentAlloc {
			e.segs[ev.Addr] = segRec{ev.Size, ev.Stream}
		}
	case snapshot.ActionSegmentFree, snapshot.ActionSegmentUnmap:
		e.reserved -= ev.Size
		if ev.Action == snapshot.ActionSegmentFree {
			delete(e.segs, ev.Addr)
		}
	}
}

// stepDense is step for a block event of a dense engine.
func (e *engine) stepDense(i int, ev *snapshot.Event) {
	id := e.x.Slot[i]
	b, on := &e.blks[id], e.inUse[id]
	switch ev.Action {
	case snapshot.ActionAlloc:
		if on {
			e.doubleAlloc++
			if !b.pending {
				e.allocated -= b.size
			}
			e.active -= b.size
		} else {
			e.inUse[id] = true
			e.nUsed++
		}
		*b = liveBlk{size: ev.Size, stack: ev.Stack, stream: ev.Stream, allocIdx: int32(i), freeReqIdx: -1}
		e.allocated += ev.Size
		e.active += ev.Size
	case snapshot.ActionFreeRequested:
		if !on {
			e.unmatched++
			return
		}
		e.freeRequested(i, ev, b)
	case snapshot.ActionFreeCompleted:
		if !on {
			e.unmatched++
			return
		}
		e.freeCompleted(i, b)
		e.inUse[id] = false
		e.nUsed--
		if e.onFreeDone != nil {
			e.onFreeDone(i, b)
		}
	}
}

func (e *engine) freeRequested(i int, ev *snapshot.Event, b *liveBlk) {
	if !b.pending {
		b.pending = true
		b.freeReqIdx = int32(i)
		e.allocated -= b.size
		if e.onFree != nil {
			e.onFree(i, b)
		}
	}
}

func (e *engine) freeCompleted(i int, b *liveBlk) {
	if !b.pending {
		e.allocated -= b.size
		if e.onFree != nil {
			e.onFree(i, b)
		}
	}
	e.active -= b.size
}

// consistent reports whether the replayed live blocks are exactly the file's final active blocks
// (same addresses, states and sizes, rounded or requested).
func (e *engine) consistent() bool {
	if e.unmatched > 0 || e.doubleAlloc > 0 || e.reserved != e.finalRes {
		return false
	}
	matches := func(fb *snapshot.Block, b *liveBlk) bool {
		return (fb.State == snapshot.StateActivePendingFree) == b.pending && (b.size == fb.Size || b.size == fb.RequestedSize)
	}
	if e.blks == nil {
		if e.liveCount() != len(e.finalBlocks) {
			return false
		}
		for addr, b := range e.live {
			if fb, found := e.finalBlocks[addr]; !found || !matches(&fb, b) {
				return false
			}
		}
		return true
	}
	// A dense engine's live map holds the final blocks at addresses without events, seeded as
	// they are in the file and touched by no event: they match. The blocks at trace addresses
	// must be the final blocks there.
	sd := e.seed
	if e.nUsed != sd.nFinalIDs {
		return false
	}
	for id, on := range e.inUse {
		if on {
			if k := sd.finalID[id]; k < 0 || !matches(&sd.finals[k], &e.blks[id]) {
				return false
			}
		}
	}
	return true
}

func (e *engine) done() bool { return e.next >= len(e.evs) }

// run applies events up to (excluding) index stop, checking ctx now and then.
func (e *engine) run(ctx context.Context, stop int) error {
	for e.next < stop && !e.done() {
		if e.next&0xffff == 0 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("replay: %w", err)
			}
		}
		e.step()
	}
	return nil
}

// liveSites groups the allocated (not pending) live blocks by site.
// peakMix is what liveSites adds up over every live block, beyond the listed sites.
type peakMix struct {
	activation int64
	optTemp    int64 // optimizer step temporaries
	optNew     int64 // optimizer state allocated in the optimizer run that is running now
	optSite    string
	optOwn     bool // the optimizer temporaries come from the user's own optimizer code
}

func (e *engine) liveSites(roles *Roles, dev, limit int) ([]SiteBytes, peakMix) {
	type agg struct {
		at     Attribution
		bytes  int64
		blocks int
		sizes  []int64 // rows of role other only: the container test reads them
		allocs []int
		rep    representative
	}
	var rows []agg
	var idx stackRows
	var total int64
	var mix peakMix
	var optTop int64
	now := e.next - 1
	e.eachLive(func(addr uint64, b *liveBlk) {
		if b.pending {
			return
		}
		at := roles.Live(dev, b.stack, addr, b.size, int(b.allocIdx), now)
		if at.ctx == ctxOptimizer {
			switch {
			case at.Category == CategoryTemporary:
				mix.optTemp += b.size
				if b.size > optTop || (b.size == optTop && at.Site < mix.optSite) {
					optTop, mix.optSite, mix.optOwn = b.size, at.Site, at.Kind == SiteKindUser && !isTorchPath(normPath(at.File))
				}
			case at.Category == CategoryOptimizerState && roles.sameOptimizerRun(dev, int(b.allocIdx), now):
				mix.optNew += b.size
			}
		}
		cat := at.Category
		if cat == CategoryUserContainer { // the row of Attribution.rowKey
			cat = CategoryOther
		}
		k, added := idx.row(&at, cat, b.stack, true)
		if added {
			rows = append(rows, agg{at: at})
		}
		g := &rows[k]
		if g.rep.take(at.Category, b.size, b.stack, addr) {
			g.at = at
		}
		g.bytes += b.size
		g.blocks++
		if cat == CategoryOther {
			g.sizes = append(g.sizes, b.size)
			if b.allocIdx >= 0 {
				g.allocs = append(g.allocs, int(b.allocIdx))
			}
		}
		total += b.size
		if at.Category == CategoryActivation {
			mix.activation += b.size
		}
	})
	out := make([]SiteBytes, 0, len(rows))
	for i := range rows {
		g := &rows[i]
		sb := SiteBytes{SiteIdentity: g.at.SiteIdentity, Category: g.at.Category, Evidence: g.at.Evidence,
			Bytes: g.bytes, Blocks: g.blocks, Percent: pct(g.bytes, total)}
		if sb.Category == CategoryOther || sb.Category == CategoryUserContainer {
			if ev := roles.containerGuess(dev, sb.SiteIdentity, histOf(g.sizes), g.allocs); ev != "" {
				sb.Category, sb.Evidence = CategoryUserContainer, ev
			}
		}
		out = append(out, sb)
	}
	sortSiteBytes(out)
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, mix
}

// histOf counts sizes by size.
func histOf(sizes []int64) sizeHist {
	h := sizeHist{}
	for _, s := range sizes {
		h.add(s)
	}
	return h
}

// stackRows numbers the rows (site and role) blocks are grouped into, remembering for each
// stack the row its last block went to: a stack's blocks nearly always share one row, so a
// row's key is built and looked up once per stack, not once per block (a peak holds ~10^5
// blocks of ~10^3 stacks).
type stackRows struct {
	keys  siteKeys
	index map[string]int
	last  []stackRow // by stack id + 1
}

type stackRow struct {
	id  SiteIdentity
	cat string
	row int // row number + 1; 0: none yet
}

// row returns the row of a block of stack whose site is at's and whose row role is cat (the
// key is at's site key and cat), numbering rows in order of first appearance; added says
// that the row is new (the caller appends it). With add false a row that does not exist is
// not made: row returns -1.
func (c *stackRows) row(at *Attribution, cat string, stack snapshot.StackID, add bool) (int, bool) {
	k := int(stack) + 1
	if k >= 0 && k < len(c.last) {
		if h := &c.last[k]; h.row > 0 && h.cat == cat && h.id == at.SiteIdentity {
			return h.row - 1, false
		}
	}
	key := c.keys.siteKey(*at, stack) + "\x00" + cat
	if c.index == nil {
		c.index = map[string]int{}
	}
	i, ok := c.index[key]
	if !ok {
		if !add {
			return -1, false
		}
		i = len(c.index)
		c.index[key] = i
	}
	if k >= 0 {
		if k >= len(c.last) {
			c.last = append(c.last, make([]stackRow, k+1-len(c.last))...)
		}
		c.last[k] = stackRow{id: at.SiteIdentity, cat: cat, row: i + 1}
	}
	return i, !ok
}

// siteKeys caches SiteIdentity.key by stack: a site's key is built once, not once per block.
// A stack's blocks nearly always share their site (only a frameless block alive before the
// trace gets another); an entry is used only when the site is the one it was built for.
type siteKeys struct {
	ids  []SiteIdentity // by stack id + 1
	keys []string
	// The stack's row key (see rowKey) and the site key and category it was built from.
	rows, rowSites, rowCats []string
}

func (c *siteKeys) siteKey(at Attribution, stack snapshot.StackID) string {
	k := int(stack) + 1
	if k < 0 {
		return at.key()
	}
	if k >= len(c.keys) {
		c.ids = append(c.ids, make([]SiteIdentity, k+1-len(c.ids))...)
		c.keys = append(c.keys, make([]string, k+1-len(c.keys))...)
	}
	if c.keys[k] == "" || c.ids[k] != at.SiteIdentity {
		c.ids[k], c.keys[k] = at.SiteIdentity, at.key()
	}
	return c.keys[k]
}

// rowKey is Attribution.rowKey with the site's key from the cache.
func (c *siteKeys) rowKey(at Attribution, stack snapshot.StackID) string {
	cat := at.Category
	if cat == CategoryUserContainer {
		cat = CategoryOther
	}
	site := c.siteKey(at, stack)
	k := int(stack) + 1
	if k < 0 {
		return site + "\x00" + cat
	}
	if k >= len(c.rows) {
		n := k + 1 - len(c.rows)
		c.rows = append(c.rows, make([]string, n)...)
		c.rowSites = append(c.rowSites, make([]string, n)...)
		c.rowCats = append(c.rowCats, make([]string, n)...)
	}
	// Usually the very strings of the last block of this stack: equal at a glance.
	if c.rows[k] == "" || c.rowSites[k] != site || c.rowCats[k] != cat {
		c.rows[k], c.rowSites[k], c.rowCats[k] = site+"\x00"+cat, site, cat
	}
	return c.rows[k]
}

func sortSiteBytes(s []SiteBytes) {
	slices.SortFunc(s, func(a, b SiteBytes) int {
		return siteOrder(a.Bytes, b.Bytes, a.SiteIdentity, b.SiteIdentity, a.Category, b.Category)
	})
}

// Replay replays device's trace. See ReplayDevice.
func Replay(ctx context.Context, snap *snapshot.Snapshot, device int) (*ReplayResult, error) {
	return ReplayDevice(ctx, snap, ReplayOptions{Device: device})
}

// ReplayAll replays every device that has segments or trace events.
func ReplayAll(ctx context.Context, snap *snapshot.Snapshot, opt ReplayOptions) ([]*ReplayResult, error) {
	if snap == nil {
		return nil, fmt.Errorf("replay: no snapshot")
	}
	out := []*ReplayResult{}
	devs := snap.Devices()
	if len(devs) == 0 {
		return out, nil
	}
	// One role table for every device: the stacks are attributed once.
	roles, err := NewRoles(snap, opt.Attribution)
	if err != nil {
		return nil, err
	}
	for _, d := range devs {
		o := opt
		o.Device = d
		r, err := replayDevice(ctx, snap, roles, o)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// ReplayDevice walks one device's trace and rebuilds allocated, active and reserved memory over time.
//
// How the starting state is rebuilt (traces usually start late and the ring buffer drops the
// oldest events): a block is taken as alive before the trace when the first trace event of its
// address is a free (free_requested: allocated; free_completed: pending), or when it is alive in
// the file's final segments and its address has no event at all. Allocated memory starts at the
// sum of those blocks, which for a consistent file equals the final allocated bytes minus the
// trace's net change, so the replay lands exactly on the file's final state (Consistent says
// whether it did). Reserved memory starts at the final reserved bytes minus the net of the
// trace's segment_alloc/map and segment_free/unmap events. A file without a trace gets the final
// state as its only point.
func ReplayDevice(ctx context.Context, snap *snapshot.Snapshot, opt ReplayOptions) (*ReplayResult, error) {
	if snap == nil {
		return nil, fmt.Errorf("replay: no snapshot")
	}
	roles, err := NewRoles(snap, opt.Attribution)
	if err != nil {
		return nil, err
	}
	return replayDevice(ctx, snap, roles, opt)
}

// replayDevice is ReplayDevice with the role table of snap made for opt.Attribution (shared
// by callers that replay several devices, or need the roles for more than the replay). The
// roles are this call's until it returns.
func replayDevice(ctx context.Context, snap *snapshot.Snapshot, roles *Roles, opt ReplayOptions) (*ReplayResult, error) {
	limit := opt.Limit
	if limit <= 0 {
		limit = 10
	}
	dev := opt.Device
	rw, err := replayWalk(ctx, snap, roles, dev, true)
	if err != nil {
		return nil, err
	}
	seed, e, r, w := rw.seed, rw.e, rw.r, rw.w
	rw.frees.finish(roles, dev, e, limit)
	// The workload is the process's: it may read the other devices' phases, which are made
	// here, before two goroutines read the role table.
	roles.Workload(dev)
	// The peak's sites and the steps read the walk and the roles only, and fill different
	// fields of r: they run side by side (the roles' caches take locks).
	alongside(func() { replaySteps(roles, dev, e, r, w, limit) },
		func() { err = explainPeak(ctx, seed, e, roles, dev, r, w.after, limit) })
	if err != nil {
		return nil, err
	}
	r.SegmentBursts = []SegmentBurst{}
	if w.releases > 0 { // segmentBursts reads every event to find none
		r.SegmentBursts = segmentBursts(snap, roles, dev)
	}
	r.Notes = replayNotes(snap, roles, dev, e, r, w.hasSegEvents)
	r.pageStages(opt.StagesOffset, limit)
	return r, nil
}

// replayPeak is the part of replayDevice that diff reads, and no more: the walk's counts and
// peaks, HasTrace, and the sites live at the allocated peak (PeakSites, the same as
// replayDevice's). The rest of the result is left empty.
func replayPeak(ctx context.Context, snap *snapshot.Snapshot, roles *Roles, dev, limit int) (*ReplayResult, error) {
	rw, err := replayWalk(ctx, snap, roles, dev, false)
	if err != nil {
		return nil, err
	}
	if err := rw.peakSites(ctx, roles, dev, limit); err != nil {
		return nil, err
	}
	return rw.r, nil
}

// peakSites sets the walk's result's PeakSites: the sites live at the allocated peak.
func (rw *replayed) peakSites(ctx context.Context, roles *Roles, dev, limit int) error {
	r := rw.r
	if !r.HasTrace {
		return nil // a state-only file has no peak to explain
	}
	pe, err := rw.seed.allocatedBefore(ctx, rw.e, r.PeakAllocatedEvent)
	if err != nil {
		return err
	}
	r.PeakSites, _ = pe.liveSites(roles, dev, limit)
	return nil
}

// replayed is a device's trace walked, with what the walk leaves.
type replayed struct {
	seed  *engineSeed
	e     *engine
	r     *ReplayResult
	w     *walk
	frees *freeWatch // nil unless asked for
}

// replayWalk walks device dev's trace and readies roles' trace context for dev. full: the
// whole replay follows (watch the frees, ready what the roles of live blocks read).
func replayWalk(ctx context.Context, snap *snapshot.Snapshot, roles *Roles, dev int, full bool) (*replayed, error) {
	watch, warm := full, full
	// The walk needs no roles, and the roles' trace context (phases, steps, lifetimes) needs
	// no walk: they are worked out at once, on two goroutines (and the stacks' attributions
	// on the idle cores meanwhile, see attrTable). roles is the other goroutine's until it is
	// done. A panic on either goroutine reaches the caller (alongside).
	rw := &replayed{}
	var err error
	alongside(func() {
		if warm {
			roles.warmLive(dev)
		} else {
			roles.deviceLifetimes(dev)
		}
	}, func() {
		rw.seed = newEngineSeed(snap, dev)
		rw.e = rw.seed.engine(true)
		rw.r = newReplayResult(snap, rw.e, dev)
		if watch {
			rw.frees = watchFrees(snap, rw.e, rw.r)
		}
		rw.w, err = walkTrace(ctx, rw.e, rw.r)
	})
	if err != nil {
		return nil, err
	}
	rw.r.HasTrace = roles.device(dev).hasTrace
	return rw, nil
}

// warmLive works out device dev's lifetimes and what the roles of live blocks read after a
// walk (Roles.Live, for the blocks at the peak and at the end), for a caller to run beside
// its walk while that core has nothing else to do: the backward passes, and each stack's role
// refined by the trace (a stack's blocks at the end nearly all have allocations in it).
func (r *Roles) warmLive(dev int) {
	d := r.deviceLifetimes(dev)
	d.backwardRuns()
	for k, n := range d.allocsByStack {
		if n > 0 {
			r.Stack(dev, snapshot.StackID(k-1))
		}
	}
}

// newReplayResult is the result before the walk: the file's final state and the engine's
// reconstruction of the state at the first event.
func newReplayResult(snap *snapshot.Snapshot, e *engine, dev int) *ReplayResult {
	r := &ReplayResult{Path: snap.Path, Device: dev, Events: len(e.evs),
		EventCounts: []ActionCount{}, PeakSites: []SiteBytes{}, RepeatingSites: []RepeatingSite{}, Stages: []Stage{},
		Notes: []string{}, PeakAllocatedEvent: -1, PeakReservedEvent: -1, IterationSource: "none", Advice: []AdviceItem{}}
	r.DelayedFrees = DelayedFrees{Streams: []string{}, Sites: []SiteBytes{}}
	r.GCFrees = GCFrees{Sites: []SiteBytes{}}
	if dev >= 0 && dev < len(snap.DroppedEvents) {
		r.DroppedEvents = snap.DroppedEvents[dev]
	}
	r.FinalAllocatedBytes, r.FinalReservedBytes = e.finalAlloc, e.finalRes
	r.StartAllocatedBytes, r.StartReservedBytes = e.allocated, e.reserved
	r.PreTraceBlocks, r.PreTraceBytes = e.preBlocks, e.preBytes
	r.PeakAllocatedBytes, r.PeakReservedBytes, r.PeakActiveBytes = e.allocated, e.reserved, e.active
	return r
}

// freeSite adds up the blocks of one stack.
type freeSite struct {
	bytes  int64
	blocks int
	stack  snapshot.StackID
}

// freeWatch collects, during the walk, frees delayed by another stream (record_stream) and
// frees made by Python's garbage collector (needs frames on frees).
type freeWatch struct {
	r       *ReplayResult
	delayed map[snapshot.StackID]*freeSite
	gc      map[snapshot.StackID]*freeSite
	streams map[uint64]bool
	// gcStack[id+1]: whether stack id runs inside the garbage collector (0: not yet known,
	// 1: no, 2: yes); every free asks.
	gcStack []uint8
	lastGC  int
}

func addFree(m map[snapshot.StackID]*freeSite, b *liveBlk) {
	s := m[b.stack]
	if s == nil {
		s = &freeSite{stack: b.stack}
		m[b.stack] = s
	}
	s.bytes += b.size
	s.blocks++
}

// watchFrees hooks a freeWatch into e.
func watchFrees(snap *snapshot.Snapshot, e *engine, r *ReplayResult) *freeWatch {
	w := &freeWatch{r: r, delayed: map[snapshot.StackID]*freeSite{}, gc: map[snapshot.StackID]*freeSite{},
		streams: map[uint64]bool{}, gcStack: make([]uint8, len(snap.Stacks)+1), lastGC: -2}
	e.onFreeDone = func(i int, b *liveBlk) {
		if b.freeReqIdx < 0 || int(b.freeReqIdx) == i-1 {
			return
		}
		d := &r.DelayedFrees
		d.Count++
		d.Bytes += b.size
		d.MaxDelayEvents = max(d.MaxDelayEvents, i-int(b.freeReqIdx))
		if t, req := e.evs[i].TimeUS, e.evs[b.freeReqIdx].TimeUS; t > 0 && req > 0 {
			d.MaxDelayUS = max(d.MaxDelayUS, t-req)
		}
		w.streams[b.stream] = true
		addFree(w.delayed, b)
	}
	e.onFree = func(i int, b *liveBlk) {
		st := e.evs[i].Stack
		if k := int(st) + 1; k >= 0 && k < len(w.gcStack) {
			if w.gcStack[k] == 0 {
				w.gcStack[k] = 1
				if isGCStack(snap.StackFrames(st)) {
					w.gcStack[k] = 2
				}
			}
			if w.gcStack[k] != 2 {
				return
			}
		} else if !isGCStack(snap.StackFrames(st)) { // an id beyond the file's stacks
			return
		}
		g := &r.GCFrees
		g.Count++
		g.Bytes += b.size
		if w.lastGC < i-2 {
			g.Bursts++
		}
		w.lastGC = i
		addFree(w.gc, b)
	}
	return w
}

// finish turns what the walk collected into the result's sites, streams and advice.
func (w *freeWatch) finish(roles *Roles, dev int, e *engine, limit int) {
	r := w.r
	e.eachLive(func(_ uint64, b *liveBlk) {
		if b.pending && b.freeReqIdx >= 0 {
			r.DelayedFrees.PendingAtEnd++
			w.streams[b.stream] = true
		}
	})
	for s := range w.streams {
		r.DelayedFrees.Streams = append(r.DelayedFrees.Streams, fmt.Sprintf("0x%x", s))
	}
	slices.Sort(r.DelayedFrees.Streams)
	for _, s := range w.delayed {
		at := roles.Stack(dev, s.stack)
		r.DelayedFrees.Sites = append(r.DelayedFrees.Sites, SiteBytes{SiteIdentity: at.SiteIdentity, Category: at.Category,
			Bytes: s.bytes, Blocks: s.blocks, Percent: pct(s.bytes, r.DelayedFrees.Bytes)})
	}
	r.DelayedFrees.Sites = mergeSiteBytes(r.DelayedFrees.Sites, limit)

	r.GCFrees.Sites = []SiteBytes{}
	for _, g := range w.gc {
		at := roles.Stack(dev, g.stack)
		r.GCFrees.Sites = append(r.GCFrees.Sites, SiteBytes{SiteIdentity: at.SiteIdentity, Category: at.Category,
			Bytes: g.bytes, Blocks: g.blocks})
	}
	r.GCFrees.Sites = mergeSiteBytes(r.GCFrees.Sites, limit)
	if it, ok := adviseOne("replay", &adviceIn{replay: r, gcOnly: true}); ok {
		r.GCFrees.Advice, r.GCFrees.AdviceRule = it.Text, it.Rule
		r.Advice = append(r.Advice, it)
	}
}

// walk is what the walk over the trace leaves for the later steps.
type walk struct {
	hasSegEvents   bool
	releases       int64 // segment_free and segment_unmap events
	allocsPerStack []int // allocations per stack id + 1 (NoStack is -1)
	// before and after: allocated bytes around every event, two views of one array (an
	// event's level before it is the level after the one before).
	before, after []int64
}

// touchAhead is how many events ahead a dense walk reads their blocks (touch).
const touchAhead = 32

// touch reads the blocks that events [i, j) will update, one after the other. A walk meets
// its blocks in no particular order, and most are not in the cache: there each block would
// stall the walk for a memory access in turn, while these reads do not depend on each other,
// so their misses overlap, and the walk then finds the blocks cached (on the benchmark file
// the walk takes a third less time). Segment events' ids index blocks too: a harmless read.
func (e *engine) touch(i, j int) {
	var sum int64
	blks := e.blks
	for _, id := range e.x.Slot[i:j] {
		if uint(id) < uint(len(blks)) {
			sum += blks[id].size
		}
	}
	e.touched += sum // kept, so that the reads are not left out
}

// walkTrace applies every event, tracking peaks, event counts and the time span.
func walkTrace(ctx context.Context, e *engine, r *ReplayResult) (*walk, error) {
	var counts [256]int64
	lvl := hugepage.Make[int64](len(e.evs)+1, len(e.evs)+1)
	lvl[0] = e.allocated
	w := &walk{allocsPerStack: make([]int, len(e.snap.Stacks)+1), before: lvl[:len(e.evs)], after: lvl[1:]}
	// The peaks and times are kept in locals (registers) during the walk, not in r.
	first, last := r.FirstTimeUS, r.LastTimeUS
	peakAlloc, peakAllocEv, peakAllocUS := r.PeakAllocatedBytes, r.PeakAllocatedEvent, r.PeakAllocatedTimeUS
	peakRes, peakResEv, peakActive := r.PeakReservedBytes, r.PeakReservedEvent, r.PeakActiveBytes
	for e.next < len(e.evs) {
		i := e.next
		if i&0xffff == 0 {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("replay: %w", err)
			}
		}
		if i%touchAhead == 0 && e.blks != nil {
			e.touch(i, min(i+touchAhead, len(e.evs)))
		}
		ev := &e.evs[i]
		counts[ev.Action]++
		switch ev.Action {
		case snapshot.ActionSegmentAlloc, snapshot.ActionSegmentFree, snapshot.ActionSegmentMap, snapshot.ActionSegmentUnmap:
			w.hasSegEvents = true
		case snapshot.ActionAlloc:
			k := max(int(ev.Stack)+1, 0)
			if k >= len(w.allocsPerStack) {
				w.allocsPerStack = append(w.allocsPerStack, make([]int, k+1-len(w.allocsPerStack))...)
			}
			w.allocsPerStack[k]++
		}
		if ev.TimeUS > 0 {
			if first == 0 {
				first = ev.TimeUS
			}
			last = ev.TimeUS
		}
		e.step()
		lvl[i+1] = e.allocated
		if e.allocated > peakAlloc {
			peakAlloc, peakAllocEv, peakAllocUS = e.allocated, i, ev.TimeUS
		}
		if e.reserved > peakRes {
			peakRes, peakResEv = e.reserved, i
		}
		peakActive = max(peakActive, e.active)
	}
	r.FirstTimeUS, r.LastTimeUS = first, last
	r.PeakAllocatedBytes, r.PeakAllocatedEvent, r.PeakAllocatedTimeUS = peakAlloc, peakAllocEv, peakAllocUS
	r.PeakReservedBytes, r.PeakReservedEvent, r.PeakActiveBytes = peakRes, peakResEv, peakActive
	r.OOMEvents += int(counts[snapshot.ActionOOM])
	w.releases = counts[snapshot.ActionSegmentFree] + counts[snapshot.ActionSegmentUnmap]
	r.DurationUS = r.LastTimeUS - r.FirstTimeUS
	r.EndAllocatedBytes, r.EndReservedBytes = e.allocated, e.reserved
	r.Consistent = e.consistent()
	r.SizesAreRequested, r.PeakAllocatedBasis = e.requested, sizeBasis(e.requested)
	for _, act := range snapshot.Actions() {
		if c := counts[act]; c > 0 {
			r.EventCounts = append(r.EventCounts, ActionCount{Action: act.String(), Count: c})
		}
	}
	if c := counts[snapshot.ActionOther]; c > 0 {
		r.EventCounts = append(r.EventCounts, ActionCount{Action: "other", Count: c})
	}
	return w, nil
}

// explainPeak replays again up to the allocated peak and says who is live there, what the
// device was doing, and the advice the mix at the peak supports (checkpointing, optimizer).
func explainPeak(ctx context.Context, seed *engineSeed, end *engine, roles *Roles, dev int, r *ReplayResult, after []int64, limit int) error {
	pe, err := seed.allocatedBefore(ctx, end, r.PeakAllocatedEvent)
	if err != nil {
		return err
	}
	var mix peakMix
	r.PeakSites, mix = pe.liveSites(roles, dev, limit)
	r.ActivationBytesAtPeak = mix.activation
	r.Workload, r.WorkloadEvidence = roles.Workload(dev)
	if !r.HasTrace {
		r.PeakSites, r.ActivationBytesAtPeak = []SiteBytes{}, 0 // a state-only file has no peak to explain
		return nil
	}
	g := roles.GradMode(dev)
	r.GradMode = &g
	r.Unwind = roles.UnwindSpans(dev)
	r.Frameworks = roles.Frameworks()
	r.PeakPhase = roles.phaseName(dev, r.PeakAllocatedEvent)
	if r.PeakPhase == "optimizer" {
		r.PeakOutsideOptimizerBytes = roles.peakOutside(dev, phaseOptimizer, after)
	}
	// The advice table (advice.go) reads the peak's mix.
	r.Advice = append(r.Advice, advise("replay", &adviceIn{replay: r, mix: mix, hasBwd: roles.HasBackward(dev), idiom: checkpointingIdiom(r.PeakSites)})...)
	for _, it := range r.Advice {
		switch it.Rule {
		case "replay.optimizer.in-place", "replay.optimizer.fused":
			r.OptimizerAdvice = it.Text
		case "replay.checkpointing":
			r.CheckpointingAdvice = it.Text
		case "replay.forward-only":
			r.ForwardOnlyAdvice = it.Text
		}
	}
	return nil
}

// checkpointingIdiom names how the activations' model library turns checkpointing on: the
// library of the activation site holding the most at the peak (Hugging Face models have their
// own switch; torch.utils.checkpoint on the repeated blocks otherwise).
func checkpointingIdiom(sites []SiteBytes) string {
	if i := slices.IndexFunc(sites, func(s SiteBytes) bool { return s.Category == CategoryActivation }); i >= 0 { // largest first
		f := normPath(sites[i].File)
		switch {
		case strings.Contains(f, "/transformers/models/"):
			return "model.gradient_checkpointing_enable() on this Hugging Face transformers model"
		case strings.Contains(f, "/diffusers/models/"):
			return "enable_gradient_checkpointing() on this diffusers model"
		}
	}
	return "torch.utils.checkpoint on the repeated blocks"
}

// replaySteps fills in the steps, the per-step sawtooth and the sites whose allocations
// survive across steps.
func replaySteps(roles *Roles, dev int, e *engine, r *ReplayResult, w *walk, limit int) {
	steps := roles.Steps(dev)
	starts := steps.Starts
	r.IterationSource, r.Iterations, r.IterationPeriodAllocs = steps.Source, len(starts), steps.Period
	if len(starts) > 1 {
		d := make([]int, 0, len(starts)-1)
		for k := 1; k < len(starts); k++ {
			d = append(d, starts[k]-starts[k-1])
		}
		slices.Sort(d)
		r.IterationPeriodEvents = d[len(d)/2]
	}
	r.IterationStartEvents = emptyIfNil(starts)
	if len(r.IterationStartEvents) > maxIterationStarts {
		r.IterationStartEvents = r.IterationStartEvents[:maxIterationStarts]
	}
	r.Sawtooth = sawtooth(starts, w.before, w.after)
	r.Stages, r.StagesTotal = roles.stages(dev, w.before, w.after)
	r.RepeatingSites = repeatingSites(roles, dev, e, starts, w.allocsPerStack, limit)
}

// replayNotes says what the trace cannot tell and what the numbers stand on.
func replayNotes(snap *snapshot.Snapshot, roles *Roles, dev int, e *engine, r *ReplayResult, hasSegEvents bool) []string {
	notes := []string{}
	if !r.HasTrace {
		notes = append(notes, "the file has no trace for this device: peak and start values are the final state only")
	}
	switch {
	case !r.HasTrace:
	case snap.Caps.TraceStart == "ring_buffer":
		notes = append(notes, fmt.Sprintf("%s: the oldest events are lost, %s (%s) alive before its first event", ringBufferWrapped(snap.Caps), count(e.preBlocks, "block"), FormatBytes(e.preBytes)))
	case e.preBlocks > 0:
		notes = append(notes, fmt.Sprintf("the trace starts late (recording was switched on after the first allocations; not a ring-buffer wrap: the event count is not a round max_entries): %s (%s) %s alive before its first event; their allocation sites are unknown unless they are still alive at the end", count(e.preBlocks, "block"), FormatBytes(e.preBytes), were(e.preBlocks)))
	}
	if r.DroppedEvents > 0 {
		notes = append(notes, fmt.Sprintf("%d oldest events were dropped by the loader's event bound", r.DroppedEvents))
	}
	if r.HasTrace && !hasSegEvents && r.FinalReservedBytes > 0 {
		notes = append(notes, "the trace has no segment events: reserved memory is the final value throughout")
	}
	if r.HasTrace && !r.Consistent {
		notes = append(notes, fmt.Sprintf("the replay does not land on the file's final state (allocated %s vs %s, reserved %s vs %s, %d frees without a block, %d allocs over a live block)",
			FormatBytes(e.allocated), FormatBytes(e.finalAlloc), FormatBytes(e.reserved), FormatBytes(e.finalRes), e.unmatched, e.doubleAlloc))
	}
	if r.SizesAreRequested {
		notes = append(notes, "the trace records requested sizes: allocated over time counts requested bytes, slightly below the rounded block sizes PyTorch's allocated_bytes counts")
	}
	if r.HasTrace && !snap.Caps.FramesOnFrees {
		notes = append(notes, "free events carry no stacks: frees by the garbage collector (reference cycles) cannot be recognised")
	}
	switch {
	case r.IterationSource == IterationsFromPeriodicity:
		notes = append(notes, fmt.Sprintf("guess: the trace has no frames to tell forward, backward and optimizer phases apart, so steps are inferred from its repeating sequence of %d allocations (repeated layers inside one pass look the same); record with context=\"all\" or under torch.profiler for exact steps", r.IterationPeriodAllocs))
	case r.HasTrace && r.IterationSource == IterationsNone:
		if roles.HasBackward(dev) {
			notes = append(notes, "no ProfilerStep annotations and no forward pass after a backward pass: the trace holds at most one step, so nothing can be said to grow from step to step")
		} else {
			notes = append(notes, "no ProfilerStep annotations and no backward pass or optimizer step: steps are unknown (repeated layers or requests inside one pass are not steps), so nothing can be said to grow from step to step")
		}
	}
	if r.HasTrace && r.FirstTimeUS == 0 {
		notes = append(notes, "the trace has no timestamps (time_us): positions are event indices")
	}
	if r.StartReservedBytes < 0 {
		notes = append(notes, "the segment events do not add up to the final segments (reserved would start negative)")
	}
	return notes
}

// mergeSiteBytes merges entries with the same site and sorts them, largest first.
func mergeSiteBytes(in []SiteBytes, limit int) []SiteBytes {
	m := map[string]int{}
	out := []SiteBytes{}
	var total int64
	for _, s := range in {
		total += s.Bytes
		k := s.File + "\x00" + s.Function + "\x00" + fmt.Sprint(s.Line) + "\x00" + s.Site
		if j, ok := m[k]; ok {
			out[j].Bytes += s.Bytes
			out[j].Blocks += s.Blocks
			continue
		}
		m[k] = len(out)
		out = append(out, s)
	}
	for i := range out {
		out[i].Percent = pct(out[i].Bytes, total)
	}
	sortSiteBytes(out)
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}

// repeatingSites finds sites whose trace allocations survive to the end across at least two
// real steps: memory allocated every step and never freed. Without steps (a single pass, or
// steps unknown) nothing can be said to repeat. Optimizer state created in the first step only is
// expected and labelled so.
func repeatingSites(roles *Roles, dev int, e *engine, starts []int, allocs []int, limit int) []RepeatingSite {
	out := []RepeatingSite{}
	if len(starts) < 2 {
		return out
	}
	type agg struct {
		at     Attribution
		surv   int
		bytes  int64
		steps  []int // the steps its survivors were allocated in (with repeats)
		allocs int
		sizes  []int64 // rows of role other only: the container test reads them
	}
	var rows []agg
	var idx stackRows
	e.eachLive(func(addr uint64, b *liveBlk) {
		if b.allocIdx < 0 || b.pending {
			return
		}
		at := roles.Live(dev, b.stack, addr, b.size, int(b.allocIdx), len(e.evs))
		k, added := idx.row(&at, at.Category, b.stack, true)
		if added {
			rows = append(rows, agg{at: at})
		}
		g := &rows[k]
		if at.Category == CategoryOther {
			g.sizes = append(g.sizes, b.size)
		}
		g.surv++
		g.bytes += b.size
		// before the first step: setup, not a step
		if st := stepOf(starts, int(b.allocIdx)); st >= 0 && (len(g.steps) == 0 || g.steps[len(g.steps)-1] != st) {
			g.steps = append(g.steps, st)
		}
	})
	for k, n := range allocs {
		if n == 0 {
			continue
		}
		at := roles.Stack(dev, snapshot.StackID(k-1))
		if i, _ := idx.row(&at, at.Category, snapshot.StackID(k-1), false); i >= 0 {
			rows[i].allocs += n
		}
	}
	for i := range rows {
		g := &rows[i]
		slices.Sort(g.steps)
		g.steps = slices.Compact(g.steps)
		iters := len(g.steps)
		firstOnly := iters == 1 && g.steps[0] == 0 && g.at.Category == CategoryOptimizerState
		if iters < 2 && !firstOnly {
			continue
		}
		rs := RepeatingSite{SiteIdentity: g.at.SiteIdentity, Category: g.at.Category, Survivors: g.surv, Bytes: g.bytes,
			Iterations: iters, Allocations: g.allocs}
		if firstOnly {
			rs.Expected = true
			rs.Evidence = "optimizer state created by the first optimizer step and kept: expected, not a leak"
		} else if rs.Category == CategoryOther {
			if ev := containerEvidence(rs.SiteIdentity, histOf(g.sizes), acrossSteps(iters)); ev != "" {
				rs.Category, rs.Evidence = CategoryUserContainer, ev
			}
		}
		out = append(out, rs)
	}
	slices.SortFunc(out, func(x, y RepeatingSite) int {
		return siteOrder(x.Bytes, y.Bytes, x.SiteIdentity, y.SiteIdentity, x.Category, y.Category)
	})
	if len(out) > limit {
		out = out[:limit]
	}
	return out
}

// Text renders the replay for a person or an agent.
func (r *ReplayResult) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "device %d: ", r.Device)
	if !r.HasTrace {
		fmt.Fprintf(&b, "no trace; final allocated %s, reserved %s\n", FormatBytes(r.FinalAllocatedBytes), FormatBytes(r.FinalReservedBytes))
	} else {
		fmt.Fprintf(&b, "%d events", r.Events)
		if r.DurationUS > 0 {
			fmt.Fprintf(&b, " over %.3f s", float64(r.DurationUS)/1e6)
		}
		b.WriteString(" (")
		for i, c := range r.EventCounts {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s %d", c.Action, c.Count)
		}
		b.WriteString(")\n")
		fmt.Fprintf(&b, "  peak allocated %s (event %d), peak reserved %s; start %s / %s, end %s / %s\n",
			FormatBytes(r.PeakAllocatedBytes), r.PeakAllocatedEvent, FormatBytes(r.PeakReservedBytes),
			FormatBytes(r.StartAllocatedBytes), FormatBytes(r.StartReservedBytes),
			FormatBytes(r.EndAllocatedBytes), FormatBytes(r.EndReservedBytes))
	}
	if len(r.PeakSites) > 0 {
		b.WriteString("  live at the peak:\n")
		for _, s := range r.PeakSites {
			fmt.Fprintf(&b, "    %9s %5.1f%% %4d %s  %s [%s]\n", FormatBytes(s.Bytes), s.Percent, s.Blocks, blocksCol(s.Blocks), SiteText(s.Site, s.Function), s.Category)
			if s.Category == CategoryUserContainer && s.Percent >= 1 {
				// Held by the caller past its pass: the reason is the finding (as top-stacks).
				fmt.Fprintf(&b, "        why: %s\n", s.Evidence)
			}
		}
	}
	if r.Workload != "" {
		fmt.Fprintf(&b, "  workload: %s (%s)\n", r.Workload, r.WorkloadEvidence)
	}
	if len(r.Frameworks) > 0 {
		parts := make([]string, len(r.Frameworks))
		for i, f := range r.Frameworks {
			parts[i] = f.Name + " (" + f.Evidence + ")"
		}
		fmt.Fprintf(&b, "  frameworks: %s\n", strings.Join(parts, "; "))
	}
	if g := r.GradMode; g != nil && g.Mode != GradUnknown {
		fmt.Fprintf(&b, "  grad mode: %s (%s)\n", g.Mode, g.Evidence)
	}
	for _, u := range r.Unwind {
		fmt.Fprintf(&b, "  after the OOM at event %d: events %d–%d unwind the pass (%s, %s freed)", u.OOMEvent, u.StartEvent, u.EndEvent, count(u.FreedBlocks, "block"), FormatBytes(u.FreedBytes))
		if len(u.Teardown) > 0 {
			fmt.Fprintf(&b, "; teardown: %s", strings.Join(u.Teardown, ", "))
		}
		if u.Resumed {
			b.WriteString("; the program caught the error and a new pass began")
		}
		b.WriteString(": not used for roles or steps\n")
	}
	if r.ForwardOnlyAdvice != "" {
		fmt.Fprintf(&b, "  %s\n", r.ForwardOnlyAdvice)
	}
	if r.CheckpointingAdvice != "" {
		fmt.Fprintf(&b, "  %s\n", r.CheckpointingAdvice)
	}
	if r.OptimizerAdvice != "" {
		fmt.Fprintf(&b, "  %s\n", r.OptimizerAdvice)
	}
	b.WriteString(stagesListText(r))
	if d := r.DelayedFrees; d.Count > 0 || d.PendingAtEnd > 0 {
		fmt.Fprintf(&b, "  %d delayed frees (%s, up to %d events later) on streams %s: blocks used on another stream (record_stream); %d still pending at the end\n",
			d.Count, FormatBytes(d.Bytes), d.MaxDelayEvents, strings.Join(d.Streams, ", "), d.PendingAtEnd)
		for _, s := range d.Sites {
			fmt.Fprintf(&b, "    %9s %4d %s  %s\n", FormatBytes(s.Bytes), s.Blocks, blocksCol(s.Blocks), s.Site)
		}
	}
	if g := r.GCFrees; g.Count > 0 {
		fmt.Fprintf(&b, "  %s (%s) freed by the garbage collector in %s: %s\n", count(g.Count, "block"), FormatBytes(g.Bytes), count(g.Bursts, "burst"), g.Advice)
	}
	switch r.IterationSource {
	case IterationsFromAnnotations:
		fmt.Fprintf(&b, "  %s (ProfilerStep or Optimizer.step annotations)", count(r.Iterations, "step"))
	case IterationsFromMetadata:
		fmt.Fprintf(&b, "  %s (a new user_metadata value at each start)", count(r.Iterations, "step"))
	case IterationsFromPhases:
		fmt.Fprintf(&b, "  %s (a forward pass after each backward pass or optimizer step)", count(r.Iterations, "step"))
	case IterationsFromPeriodicity:
		fmt.Fprintf(&b, "  %s (guess: the trace repeats every %d allocations", count(r.Iterations, "step"), r.IterationPeriodAllocs)
		if r.IterationPeriodEvents > 0 {
			fmt.Fprintf(&b, ", about %d events", r.IterationPeriodEvents)
		}
		b.WriteString(")")
	}
	if r.IterationSource != IterationsNone {
		if st := r.Sawtooth; st.Iterations > 0 {
			// A first step that makes what the later ones keep (workspaces, optimizer state)
			// starts lower and rises most: say so, or its rise reads as every step's.
			start, rise := FormatBytes(st.FirstStartBytes), ""
			if d := st.LastStartBytes - st.FirstStartBytes; st.Iterations > 1 && st.GrowthPerIterationBytes <= 0 && (d > mib || d*10 > st.LastStartBytes) {
				start += fmt.Sprintf(" (the last at %s)", FormatBytes(st.LastStartBytes))
				// A later step starting near the last start rises at most to the highest peak.
				if st.MaxRiseIndex == 0 && st.MaxRiseBytes*5 > (st.MaxPeakBytes-st.LastStartBytes)*6 {
					rise = " (the first step: most likely one-time memory that later steps keep)"
				}
			}
			fmt.Fprintf(&b, "; sawtooth over %d complete steps: starts at %s, rises by up to %s within a step%s (peak %s)",
				st.Iterations, start, FormatBytes(st.MaxRiseBytes), rise, FormatBytes(st.MaxPeakBytes))
			if st.GrowthPerIterationBytes > 0 {
				fmt.Fprintf(&b, "; each step leaves %s more allocated than the one before (%s at the start of the last)",
					FormatBytes(st.GrowthPerIterationBytes), FormatBytes(st.LastStartBytes))
			} else if st.Iterations > 1 {
				b.WriteString("; no growth from one step to the next")
			}
		}
		b.WriteString("\n")
	}
	for _, s := range r.RepeatingSites {
		if s.Expected {
			fmt.Fprintf(&b, "  %s [%s]: %s (%s) made by the first step and kept (expected)\n", s.Site, s.Category, count(s.Survivors, "block"), FormatBytes(s.Bytes))
			continue
		}
		fmt.Fprintf(&b, "  %s [%s] allocates without freeing: %s (%s) alive at the end from %s\n", s.Site, s.Category, count(s.Survivors, "block"), FormatBytes(s.Bytes), count(s.Iterations, "step"))
	}
	writeSegmentBursts(&b, r.SegmentBursts)
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	return b.String()
}

// traceSizesAreRequested tells whether a device trace records requested bytes (newer PyTorch)
// rather than rounded block sizes: an alloc size that is not a multiple of 512 says so
// (oddAllocSize), and so does a block alive at the end whose last alloc event (lastAlloc) has
// its requested_size, not its size.
func traceSizesAreRequested(snap *snapshot.Snapshot, device int, oddAllocSize bool, lastAlloc func(addr uint64) (int64, bool)) bool {
	if oddAllocSize {
		return true
	}
	for _, si := range snap.SegmentsOn(device) {
		if s := &snap.Segments[si]; s.Device == device {
			for _, b := range s.Blocks {
				if b.State == snapshot.StateInactive {
					continue
				}
				if sz, ok := lastAlloc(b.Address); ok && sz != b.Size && sz == b.RequestedSize {
					return true
				}
			}
		}
	}
	return false
}
