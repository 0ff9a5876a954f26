// Package sim simulates PyTorch's CUDA caching allocator (SNAPSHOT_FORMAT.md §7) and records
// what PyTorch's memory history records: segments and blocks with their stacks, the device
// trace (segment_alloc, alloc, free_requested, free_completed, segment_free, segment_map,
// segment_unmap, oom, snapshot), external annotations and allocator settings. Snapshot returns
// a *snapshot.Snapshot, so tests and fixtures can be built with exactly known ground truth.
// Named scenarios (scenarios.go) build realistic training-loop snapshots on top of it.
//
// The allocator itself is analysis/allocator's model, the one the what-if analysis replays
// traces through: the simulator adds the recording (stacks, clock, ring buffer, recording on
// and off). cudaMalloc fails only for capacity; segment addresses are never reused.
package sim

import (
	"errors"
	"fmt"
	"slices"

	"github.com/memsnap/memsnap/analysis/allocator"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// Allocator constants (c10/cuda/CUDACachingAllocator.cpp), as analysis/allocator defines them.
const (
	MinBlockSize  = allocator.MinBlockSize  // kMinBlockSize: every size rounds up to a multiple of this
	SmallSize     = allocator.SmallSize     // kSmallSize: requests up to this use the small pool
	SmallBuffer   = allocator.SmallBuffer   // kSmallBuffer: small-pool segment size
	LargeBuffer   = allocator.LargeBuffer   // kLargeBuffer: large-pool segment size for requests < MinLargeAlloc
	MinLargeAlloc = allocator.MinLargeAlloc // kMinLargeAlloc
	RoundLarge    = allocator.RoundLarge    // kRoundLarge: larger segments round up to this
	MiB           = 1 << 20                 // convenience
	GiB           = 1 << 30                 // convenience
	DefaultBase   = allocator.DefaultBase
)

// DefaultPool is the default memory pool id (0, 0).
var DefaultPool = allocator.DefaultPool

// Config configures a simulation. Zero values give PyTorch's defaults where one exists.
type Config struct {
	Device       int   // device index of every segment and event
	NumDevices   int   // number of device_traces lists (at least Device+1)
	Capacity     int64 // total device memory; cudaMalloc fails beyond it (default 16 GiB)
	OutsideBytes int64 // device memory used outside PyTorch (other processes, CUDA context)
	Expandable   bool  // expandable_segments:True
	MaxSplitSize int64 // max_split_size in bytes; 0 = unset (written as -1)
	// RoundupPower2Divisions and GCThreshold are the other allocator settings (zero: off).
	RoundupPower2Divisions [allocator.NumIntervals]int
	GCThreshold            float64
	// Context is _record_memory_history's context: "all" (default), "alloc", "state", "none".
	Context string
	// Stacks is "all" (default: C++ and Python frames) or "python".
	Stacks string
	// MaxEntries bounds the trace ring buffer (oldest events dropped); 0 = unbounded.
	MaxEntries int
	StartUS    int64  // time_us of the first event (default 1_717_000_000_000_000)
	TickUS     int64  // clock advance per recorded event (default 3)
	BaseAddr   uint64 // address of the first segment (default DefaultBase)
	// CompileContext, when non-empty, is stamped on every event (2.8+ writes "N/A").
	CompileContext string
}

// Sim is one device's caching allocator plus its memory-history recorder. Not safe for
// concurrent use.
type Sim struct {
	cfg       Config
	in        *snapshot.Interner
	a         *allocator.Allocator
	live      map[uint64]*liveMeta // allocated and pending-free blocks by address
	segStack  map[uint64]snapshot.StackID
	now       int64
	recording bool
	lateStart bool // recording was turned on while blocks were alive
	events    []snapshot.Event
	dropped   int64
	annots    []snapshot.Annotation
	// What the allocator's next events are recorded with: the current request's block and
	// event contexts, the free's context, and the context of frees completed inside the call.
	bctx, ectx, freeCtx, doneCtx snapshot.StackID
	doneSet                      bool
}

// liveMeta is what the recorder keeps of a live block.
type liveMeta struct {
	b          *allocator.Block
	stack      snapshot.StackID // context_when_allocated (EmptyStack when none)
	allocStack snapshot.StackID // the alloc event's frames (for delayed free_completed)
}

// OOMError is returned by Alloc when the device cannot satisfy the request even after every
// cached segment was released. An oom event was recorded.
type OOMError struct {
	Device     int
	Requested  int64 // the rounded request
	DeviceFree int64 // what cudaMemGetInfo reported
	Capacity   int64
	Reserved   int64 // reserved by PyTorch after releasing the cache
	Allocated  int64 // bytes in allocated blocks
	Need       int64 // what the last cudaMalloc (or page mapping) asked for
}

func (e *OOMError) Error() string {
	return fmt.Sprintf("CUDA out of memory. Tried to allocate %s. GPU %d has a total capacity of %s of which %s is free. "+
		"Of the allocated memory %s is allocated by PyTorch, and %s is reserved by PyTorch but unallocated.",
		human(e.Requested), e.Device, human(e.Capacity), human(e.DeviceFree), human(e.Allocated), human(e.Reserved-e.Allocated))
}

func human(b int64) string {
	switch {
	case b >= GiB:
		return fmt.Sprintf("%.2f GiB", float64(b)/GiB)
	case b >= MiB:
		return fmt.Sprintf("%.2f MiB", float64(b)/MiB)
	}
	return fmt.Sprintf("%d bytes", b)
}

// New returns a simulation with recording on.
func New(cfg Config) *Sim {
	if cfg.Capacity == 0 {
		cfg.Capacity = 16 * GiB
	}
	if cfg.Context == "" {
		cfg.Context = "all"
	}
	if cfg.Stacks == "" {
		cfg.Stacks = "all"
	}
	if cfg.StartUS == 0 {
		cfg.StartUS = 1_717_000_000_000_000
	}
	if cfg.TickUS == 0 {
		cfg.TickUS = 3
	}
	if cfg.BaseAddr == 0 {
		cfg.BaseAddr = DefaultBase
	}
	if cfg.NumDevices < cfg.Device+1 {
		cfg.NumDevices = cfg.Device + 1
	}
	s := &Sim{cfg: cfg, in: snapshot.NewInterner(), live: map[uint64]*liveMeta{}, segStack: map[uint64]snapshot.StackID{},
		now: cfg.StartUS, recording: true}
	next := cfg.BaseAddr
	s.a = allocator.New(allocator.Config{
		Settings: s.allocatorSettings(),
		Capacity: cfg.Capacity - cfg.OutsideBytes,
		// Virtual addresses one after the other, 2 MiB aligned, never reused; an expandable
		// segment reserves as much as the whole device.
		SegmentAddr: func(size int64, _ uint64, _ bool) uint64 {
			addr := next
			next += uint64((size + RoundLarge - 1) / RoundLarge * RoundLarge)
			return addr
		},
		AddressSpace: cfg.Capacity,
		OnEvent:      s.onEvent,
	})
	return s
}

func (s *Sim) allocatorSettings() allocator.Settings {
	return allocator.Settings{ExpandableSegments: s.cfg.Expandable, MaxSplitSize: max(s.cfg.MaxSplitSize, 0),
		RoundupPower2Divisions: s.cfg.RoundupPower2Divisions, GCThreshold: s.cfg.GCThreshold}
}

// Config returns the effective configuration (defaults filled in).
func (s *Sim) Config() Config { return s.cfg }

// RoundSize is the allocator's round_size with the default settings: at least 512 B, a
// multiple of 512 B.
func RoundSize(n int64) int64 {
	var st allocator.Settings
	return st.RoundSize(n)
}

// AllocationSize is get_allocation_size: the segment size cudaMalloc'd for a rounded request.
func AllocationSize(rounded int64) int64 { return allocator.AllocationSize(rounded) }

// Reserved returns the bytes held in segments (mapped bytes for expandable segments).
func (s *Sim) Reserved() int64 { return s.a.Reserved() }

// Allocated returns the bytes in allocated (not pending, not inactive) blocks.
func (s *Sim) Allocated() int64 { return s.a.Allocated() }

// DeviceFree returns what cudaMemGetInfo would report as free now.
func (s *Sim) DeviceFree() int64 { return s.cfg.Capacity - s.cfg.OutsideBytes - s.a.Reserved() }

// Now returns the current trace clock in microseconds.
func (s *Sim) Now() int64 { return s.now }

// Advance moves the trace clock forward by us microseconds (e.g. between steps).
func (s *Sim) Advance(us int64) {
	if us > 0 {
		s.now += us
	}
}

// SetRecording turns memory-history recording on or off (torch.cuda.memory._record_memory_history).
// While off, no events are recorded and new blocks get no frames. Turning it on while blocks
// are alive makes the trace incomplete.
func (s *Sim) SetRecording(on bool) {
	if on && !s.recording && len(s.live) > 0 {
		s.lateStart = true
	}
	s.recording = on
}

// Annotate records an external annotation (record_function span) on the trace clock.
func (s *Sim) Annotate(name, stage string) {
	s.now += s.cfg.TickUS
	s.annots = append(s.annots, snapshot.Annotation{Name: name, Stage: stage, Device: s.cfg.Device, TimeUS: s.now})
}

// intern returns the stack id of st as captured under the configured Stacks mode.
func (s *Sim) intern(st Stack) snapshot.StackID {
	fr := st.frames(s.cfg.Stacks)
	ids := make([]snapshot.FrameID, len(fr))
	for i, f := range fr {
		ids[i] = s.in.Frame(f)
	}
	return s.in.Stack(ids)
}

// contexts returns (block context, alloc-event context) for an allocation stack.
func (s *Sim) contexts(st Stack) (blockCtx, eventCtx snapshot.StackID) {
	if !s.recording || s.cfg.Context == "none" {
		return snapshot.EmptyStack, snapshot.NoStack
	}
	id := s.intern(st)
	if s.cfg.Context == "state" {
		return id, snapshot.NoStack
	}
	return id, id
}

func (s *Sim) record(ev snapshot.Event) {
	if !s.recording {
		return
	}
	if s.cfg.Context == "none" || s.cfg.Context == "state" {
		ev.Stack = snapshot.NoStack
	}
	s.now += s.cfg.TickUS
	ev.TimeUS = s.now
	if s.cfg.CompileContext != "" {
		ev.Extra = snapshot.MakeExtraID(1) // Snapshot.EventExtras[1] = {CompileContext}
	}
	s.events = append(s.events, ev)
	if s.cfg.MaxEntries > 0 && len(s.events) > s.cfg.MaxEntries {
		n := len(s.events) - s.cfg.MaxEntries
		s.events = append(s.events[:0], s.events[n:]...)
		s.dropped += int64(n)
	}
}

// onEvent records what the allocator reports, with the stacks the recorder knows.
func (s *Sim) onEvent(ev allocator.Event) {
	out := snapshot.Event{Action: ev.Action, Addr: ev.Addr, Size: ev.Size, Stream: ev.Stream, Stack: snapshot.NoStack}
	switch ev.Action {
	case snapshot.ActionAlloc:
		s.live[ev.Addr] = &liveMeta{b: ev.Block, stack: s.bctx, allocStack: s.ectx}
		out.Stack = s.ectx
	case snapshot.ActionOOM:
		out = out.WithDeviceFree(s.DeviceFree())
		out.Stack = s.ectx
	case snapshot.ActionSegmentAlloc:
		s.segStack[ev.Addr] = s.bctx
		out.Stack = s.ectx
	case snapshot.ActionSegmentMap:
		if _, ok := s.segStack[ev.Addr]; !ok {
			s.segStack[ev.Addr] = s.bctx
		}
		out.Stack = s.ectx
	case snapshot.ActionSegmentFree, snapshot.ActionSegmentUnmap:
		delete(s.segStack, ev.Addr)
	case snapshot.ActionFreeRequested:
		out.Stack = s.freeCtx
	case snapshot.ActionFreeCompleted:
		m := s.live[ev.Addr]
		delete(s.live, ev.Addr)
		if m != nil {
			out.Stack = m.allocStack
		}
		if s.doneSet && s.doneCtx != snapshot.NoStack {
			out.Stack = s.doneCtx // PyTorch: context ? context : block->context_when_allocated
		}
	}
	s.record(out)
}

// Alloc allocates size bytes on stream in the default pool. On failure it returns an
// *OOMError (after recording an oom event).
func (s *Sim) Alloc(size int64, stream uint64, st Stack) (uint64, error) {
	return s.AllocPool(size, stream, DefaultPool, st)
}

// AllocPool allocates from a given pool (a non-default pool models a private pool such as a
// CUDA graph's).
func (s *Sim) AllocPool(size int64, stream uint64, pool snapshot.PoolID, st Stack) (uint64, error) {
	if size <= 0 {
		return 0, fmt.Errorf("sim: alloc of %d bytes: size must be positive", size)
	}
	s.bctx, s.ectx = s.contexts(st)
	// Frees completed inside the call (the cudaMalloc-failure path synchronizes) carry the
	// request's context when one is recorded.
	s.doneCtx, s.doneSet = s.ectx, true
	defer func() { s.doneSet = false }()
	b, err := s.a.Malloc(size, stream, pool)
	if err != nil {
		var oe *allocator.OOMError
		if !errors.As(err, &oe) {
			return 0, err
		}
		return 0, &OOMError{Device: s.cfg.Device, Requested: oe.Requested, DeviceFree: s.DeviceFree(),
			Capacity: s.cfg.Capacity, Reserved: oe.Reserved, Allocated: oe.Allocated, Need: oe.Need}
	}
	return b.Addr(), nil
}

// ErrNotAllocated is returned when freeing an address that holds no allocated block.
var ErrNotAllocated = errors.New("sim: address is not an allocated block")

// RecordStream marks the block at addr as used by stream (Tensor.record_stream): its free
// will stay pending until Complete.
func (s *Sim) RecordStream(addr uint64, stream uint64) error {
	m := s.live[addr]
	if m == nil || m.b.State() != snapshot.StateActiveAllocated {
		return fmt.Errorf("record_stream %#x: %w", addr, ErrNotAllocated)
	}
	s.a.RecordStream(m.b, stream)
	return nil
}

// Free releases the block at addr; st is the stack of the code that dropped the tensor
// (recorded on free events when Context is "all"). If the block was used on other streams it
// becomes active_pending_free until Complete; otherwise it is freed and merged at once.
func (s *Sim) Free(addr uint64, st Stack) error {
	m := s.live[addr]
	if m == nil || m.b.State() != snapshot.StateActiveAllocated {
		return fmt.Errorf("free %#x: %w", addr, ErrNotAllocated)
	}
	ctx := m.allocStack // PyTorch: context ? context : block->context_when_allocated
	if s.recording && s.cfg.Context == "all" {
		ctx = s.intern(st)
	}
	s.freeCtx, s.doneCtx, s.doneSet = ctx, ctx, true
	s.a.Free(m.b)
	s.doneSet = false
	return nil
}

// Complete finishes a pending free (the other streams' events completed): free_completed is
// recorded with the allocation's frames, and the block is merged.
func (s *Sim) Complete(addr uint64) error {
	m := s.live[addr]
	if m == nil || m.b.State() != snapshot.StateActivePendingFree {
		return fmt.Errorf("complete %#x: not a pending free", addr)
	}
	s.a.Complete(m.b)
	return nil
}

// CompleteAll completes every pending free, lowest address first.
func (s *Sim) CompleteAll() {
	var addrs []uint64
	for a, m := range s.live {
		if m.b.State() == snapshot.StateActivePendingFree {
			addrs = append(addrs, a)
		}
	}
	slices.Sort(addrs)
	for _, a := range addrs {
		s.a.Complete(s.live[a].b)
	}
}

// EmptyCache is torch.cuda.empty_cache(): release every fully inactive segment (and unmap
// the free pages of expandable segments), after completing every pending free.
func (s *Sim) EmptyCache() {
	s.doneCtx, s.doneSet = snapshot.NoStack, true
	s.a.EmptyCache()
	s.doneSet = false
}
