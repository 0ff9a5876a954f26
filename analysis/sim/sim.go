// Package sim simulates PyTorch's CUDA caching allocator (SNAPSHOT_FORMAT.md §7) and records
// what PyTorch's memory history records: segments and blocks with their stacks, the device
// trace (segment_alloc, alloc, free_requested, free_completed, segment_free, segment_map,
// segment_unmap, oom, snapshot), external annotations and allocator settings. Snapshot returns
// a *snapshot.Snapshot, so tests and fixtures can be built with exactly known ground truth.
// Named scenarios (scenarios.go) build realistic training-loop snapshots on top of it.
//
// Simplifications, all documented where they apply: cudaMalloc never fails except for
// capacity; segment addresses are never reused; release_available_cached_blocks (the
// max_split_size-only first retry) is folded into the "free every cached segment" retry;
// expandable segments grow and shrink only at their end; garbage_collection_threshold and
// roundup_power2_divisions are not simulated.
package sim

import (
	"errors"
	"fmt"
	"slices"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// Allocator constants (c10/cuda/CUDACachingAllocator.cpp).
const (
	MinBlockSize  = 512      // kMinBlockSize: every size rounds up to a multiple of this
	SmallSize     = 1 << 20  // kSmallSize: requests up to this use the small pool
	SmallBuffer   = 2 << 20  // kSmallBuffer: small-pool segment size
	LargeBuffer   = 20 << 20 // kLargeBuffer: large-pool segment size for requests < MinLargeAlloc
	MinLargeAlloc = 10 << 20 // kMinLargeAlloc
	RoundLarge    = 2 << 20  // kRoundLarge: larger segments round up to this
	MiB           = 1 << 20  // convenience
	GiB           = 1 << 30  // convenience
	DefaultBase   = 0x7f3a00000000
)

// DefaultPool is the default memory pool id (0, 0).
var DefaultPool = snapshot.PoolID{0, 0}

// Config configures a simulation. Zero values give PyTorch's defaults where one exists.
type Config struct {
	Device       int   // device index of every segment and event
	NumDevices   int   // number of device_traces lists (at least Device+1)
	Capacity     int64 // total device memory; cudaMalloc fails beyond it (default 16 GiB)
	OutsideBytes int64 // device memory used outside PyTorch (other processes, CUDA context)
	Expandable   bool  // expandable_segments:True
	MaxSplitSize int64 // max_split_size in bytes; 0 = unset (written as -1)
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
	cfg        Config
	in         *snapshot.Interner
	segs       []*segment
	live       map[uint64]*block // allocated and pending-free blocks by address
	nextAddr   uint64
	reserved   int64
	now        int64
	recording  bool
	lateStart  bool // recording was turned on while blocks were alive
	events     []snapshot.Event
	dropped    int64
	annots     []snapshot.Annotation
	expandable map[poolKey]*segment
}

type poolKey struct {
	pool   snapshot.PoolID
	small  bool
	stream uint64
}

type segment struct {
	addr       uint64
	size       int64
	key        poolKey
	expandable bool
	stack      snapshot.StackID
	blocks     []*block // address order, contiguous from addr
}

type block struct {
	seg        *segment
	addr       uint64
	size       int64
	requested  int64
	state      snapshot.BlockState
	stack      snapshot.StackID // context_when_allocated (EmptyStack when none)
	allocStack snapshot.StackID // the alloc event's frames (for delayed free_completed)
	streamUses []uint64
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
	return &Sim{cfg: cfg, in: snapshot.NewInterner(), live: map[uint64]*block{},
		nextAddr: cfg.BaseAddr, now: cfg.StartUS, recording: true, expandable: map[poolKey]*segment{}}
}

// Config returns the effective configuration (defaults filled in).
func (s *Sim) Config() Config { return s.cfg }

// RoundSize is the allocator's round_size: at least 512 B, a multiple of 512 B.
func RoundSize(n int64) int64 {
	if n < MinBlockSize {
		return MinBlockSize
	}
	return (n + MinBlockSize - 1) / MinBlockSize * MinBlockSize
}

// AllocationSize is get_allocation_size: the segment size cudaMalloc'd for a rounded request.
func AllocationSize(rounded int64) int64 {
	switch {
	case rounded <= SmallSize:
		return SmallBuffer
	case rounded < MinLargeAlloc:
		return LargeBuffer
	}
	return (rounded + RoundLarge - 1) / RoundLarge * RoundLarge
}

// Reserved returns the bytes held in segments (mapped bytes for expandable segments).
func (s *Sim) Reserved() int64 { return s.reserved }

// Allocated returns the bytes in allocated (not pending, not inactive) blocks.
func (s *Sim) Allocated() int64 {
	var n int64
	for _, b := range s.live {
		if b.state == snapshot.StateActiveAllocated {
			n += b.size
		}
	}
	return n
}

// DeviceFree returns what cudaMemGetInfo would report as free now.
func (s *Sim) DeviceFree() int64 { return s.cfg.Capacity - s.cfg.OutsideBytes - s.reserved }

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
		ev.Extra = 1 // Snapshot.EventExtras[1] = {CompileContext}
	}
	s.events = append(s.events, ev)
	if s.cfg.MaxEntries > 0 && len(s.events) > s.cfg.MaxEntries {
		n := len(s.events) - s.cfg.MaxEntries
		s.events = append(s.events[:0], s.events[n:]...)
		s.dropped += int64(n)
	}
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
	rs := RoundSize(size)
	key := poolKey{pool: pool, small: rs <= SmallSize, stream: stream}
	bctx, ectx := s.contexts(st)
	b := s.findFree(key, rs)
	if b == nil {
		b = s.newMemory(key, rs, bctx, ectx)
		if b == nil {
			s.releaseCached()
			b = s.newMemory(key, rs, bctx, ectx)
		}
		if b == nil {
			e := &OOMError{Device: s.cfg.Device, Requested: rs, DeviceFree: s.DeviceFree(),
				Capacity: s.cfg.Capacity, Reserved: s.reserved, Allocated: s.Allocated()}
			s.record(snapshot.Event{Action: snapshot.ActionOOM, Size: rs, Stream: stream,
				DeviceFree: e.DeviceFree, Stack: ectx})
			return 0, e
		}
	}
	b = s.split(b, rs)
	b.state = snapshot.StateActiveAllocated
	b.requested = size
	b.stack = bctx
	b.allocStack = ectx
	s.live[b.addr] = b
	s.record(snapshot.Event{Action: snapshot.ActionAlloc, Addr: b.addr, Size: size, Stream: stream, Stack: ectx})
	return b.addr, nil
}

// findFree is get_free_block: the smallest inactive block of the same pool and stream that
// fits, lowest address on ties, honouring max_split_size.
func (s *Sim) findFree(key poolKey, rs int64) *block {
	var best *block
	ms := s.cfg.MaxSplitSize
	for _, seg := range s.segs {
		if seg.key != key {
			continue
		}
		for _, b := range seg.blocks {
			if b.state != snapshot.StateInactive || b.size < rs {
				continue
			}
			if ms > 0 {
				if rs < ms && b.size >= ms {
					continue // do not split oversize blocks for small requests
				}
				if rs >= ms && b.size >= rs+LargeBuffer {
					continue // oversize request: only nearly exact blocks
				}
			}
			if best == nil || b.size < best.size || (b.size == best.size && b.addr < best.addr) {
				best = b
			}
		}
	}
	return best
}

// newMemory gets fresh device memory for a request: a new segment (cudaMalloc), or more pages
// mapped at the end of the pool's expandable segment. It returns nil when the device is full.
func (s *Sim) newMemory(key poolKey, rs int64, bctx, ectx snapshot.StackID) *block {
	if s.cfg.Expandable {
		return s.grow(key, rs, bctx, ectx)
	}
	size := AllocationSize(rs)
	if s.reserved+s.cfg.OutsideBytes+size > s.cfg.Capacity {
		return nil
	}
	seg := &segment{addr: s.nextAddr, size: size, key: key, stack: bctx}
	s.nextAddr += uint64((size + RoundLarge - 1) / RoundLarge * RoundLarge)
	b := &block{seg: seg, addr: seg.addr, size: size, state: snapshot.StateInactive, stack: snapshot.EmptyStack}
	seg.blocks = []*block{b}
	s.segs = append(s.segs, seg)
	s.reserved += size
	s.record(snapshot.Event{Action: snapshot.ActionSegmentAlloc, Addr: seg.addr, Size: size, Stream: key.stream, Stack: ectx})
	return b
}

// grow maps pages at the end of the expandable segment of key so that its last free block
// holds rs bytes.
func (s *Sim) grow(key poolKey, rs int64, bctx, ectx snapshot.StackID) *block {
	page := int64(LargeBuffer)
	if key.small {
		page = SmallBuffer
	}
	seg := s.expandable[key]
	var tail *block
	if seg != nil && len(seg.blocks) > 0 {
		if last := seg.blocks[len(seg.blocks)-1]; last.state == snapshot.StateInactive {
			tail = last
		}
	}
	need := rs
	if tail != nil {
		need -= tail.size
	}
	add := (need + page - 1) / page * page
	if s.reserved+s.cfg.OutsideBytes+add > s.cfg.Capacity {
		return nil
	}
	if seg == nil {
		// Reserve a virtual range as large as the device for this pool and stream.
		seg = &segment{addr: s.nextAddr, key: key, expandable: true, stack: bctx}
		s.nextAddr += uint64((s.cfg.Capacity + RoundLarge - 1) / RoundLarge * RoundLarge)
		s.expandable[key] = seg
		s.segs = append(s.segs, seg)
	}
	if seg.size == 0 {
		seg.stack = bctx
	}
	at := seg.addr + uint64(seg.size)
	if tail == nil {
		tail = &block{seg: seg, addr: at, state: snapshot.StateInactive, stack: snapshot.EmptyStack}
		seg.blocks = append(seg.blocks, tail)
	}
	tail.size += add
	seg.size += add
	s.reserved += add
	s.record(snapshot.Event{Action: snapshot.ActionSegmentMap, Addr: at, Size: add, Stream: key.stream, Stack: ectx})
	return tail
}

// split carves rs bytes from the front of free block b when the remainder is worth keeping
// (small pool: ≥ 512 B; large pool: > 1 MiB and request below max_split_size). The remainder
// keeps b's stale requested_size. Returns the block to hand out.
func (s *Sim) split(b *block, rs int64) *block {
	rem := b.size - rs
	var ok bool
	if b.seg.key.small {
		ok = rem >= MinBlockSize
	} else {
		ok = rem > SmallSize && (s.cfg.MaxSplitSize <= 0 || rs < s.cfg.MaxSplitSize)
	}
	if !ok {
		return b
	}
	nb := &block{seg: b.seg, addr: b.addr, size: rs, state: snapshot.StateInactive, stack: snapshot.EmptyStack}
	b.addr += uint64(rs)
	b.size = rem
	i := slices.Index(b.seg.blocks, b)
	b.seg.blocks = slices.Insert(b.seg.blocks, i, nb)
	return nb
}

// ErrNotAllocated is returned when freeing an address that holds no allocated block.
var ErrNotAllocated = errors.New("sim: address is not an allocated block")

// RecordStream marks the block at addr as used by stream (Tensor.record_stream): its free
// will stay pending until Complete.
func (s *Sim) RecordStream(addr uint64, stream uint64) error {
	b := s.live[addr]
	if b == nil || b.state != snapshot.StateActiveAllocated {
		return fmt.Errorf("record_stream %#x: %w", addr, ErrNotAllocated)
	}
	if stream != b.seg.key.stream && !slices.Contains(b.streamUses, stream) {
		b.streamUses = append(b.streamUses, stream)
	}
	return nil
}

// Free releases the block at addr; st is the stack of the code that dropped the tensor
// (recorded on free events when Context is "all"). If the block was used on other streams it
// becomes active_pending_free until Complete; otherwise it is freed and merged at once.
func (s *Sim) Free(addr uint64, st Stack) error {
	b := s.live[addr]
	if b == nil || b.state != snapshot.StateActiveAllocated {
		return fmt.Errorf("free %#x: %w", addr, ErrNotAllocated)
	}
	ctx := b.allocStack // PyTorch: context ? context : block->context_when_allocated
	if s.recording && s.cfg.Context == "all" {
		ctx = s.intern(st)
	}
	s.record(snapshot.Event{Action: snapshot.ActionFreeRequested, Addr: b.addr, Size: b.requested, Stream: b.seg.key.stream, Stack: ctx})
	if len(b.streamUses) > 0 {
		b.state = snapshot.StateActivePendingFree
		return nil
	}
	s.freeBlock(b, ctx)
	return nil
}

// Complete finishes a pending free (the other streams' events completed): free_completed is
// recorded with the allocation's frames, and the block is merged.
func (s *Sim) Complete(addr uint64) error {
	b := s.live[addr]
	if b == nil || b.state != snapshot.StateActivePendingFree {
		return fmt.Errorf("complete %#x: not a pending free", addr)
	}
	s.freeBlock(b, b.allocStack)
	return nil
}

// CompleteAll completes every pending free, lowest address first.
func (s *Sim) CompleteAll() {
	var addrs []uint64
	for a, b := range s.live {
		if b.state == snapshot.StateActivePendingFree {
			addrs = append(addrs, a)
		}
	}
	slices.Sort(addrs)
	for _, a := range addrs {
		s.freeBlock(s.live[a], s.live[a].allocStack)
	}
}

// freeBlock is free_block: record free_completed, mark inactive, merge with inactive
// neighbours of the same segment (the merged block keeps b's requested_size).
func (s *Sim) freeBlock(b *block, ctx snapshot.StackID) {
	s.record(snapshot.Event{Action: snapshot.ActionFreeCompleted, Addr: b.addr, Size: b.requested, Stream: b.seg.key.stream, Stack: ctx})
	delete(s.live, b.addr)
	b.state = snapshot.StateInactive
	b.stack = snapshot.EmptyStack
	b.allocStack = snapshot.NoStack
	b.streamUses = nil
	seg := b.seg
	i := slices.Index(seg.blocks, b)
	if i+1 < len(seg.blocks) && seg.blocks[i+1].state == snapshot.StateInactive {
		b.size += seg.blocks[i+1].size
		seg.blocks = slices.Delete(seg.blocks, i+1, i+2)
	}
	if i > 0 && seg.blocks[i-1].state == snapshot.StateInactive {
		p := seg.blocks[i-1]
		b.addr = p.addr
		b.size += p.size
		seg.blocks = slices.Delete(seg.blocks, i-1, i)
	}
}

// EmptyCache is torch.cuda.empty_cache(): release every fully inactive segment (and unmap
// free pages at the end of expandable segments).
func (s *Sim) EmptyCache() { s.releaseCached() }

// releaseCached is release_cached_blocks.
func (s *Sim) releaseCached() {
	kept := s.segs[:0]
	for _, seg := range s.segs {
		if seg.expandable {
			s.unmapTail(seg)
			kept = append(kept, seg)
			continue
		}
		if len(seg.blocks) == 1 && seg.blocks[0].state == snapshot.StateInactive {
			s.reserved -= seg.size
			s.record(snapshot.Event{Action: snapshot.ActionSegmentFree, Addr: seg.addr, Size: seg.size, Stream: seg.key.stream, Stack: snapshot.NoStack})
			continue
		}
		kept = append(kept, seg)
	}
	clear(s.segs[len(kept):])
	s.segs = kept
}

func (s *Sim) unmapTail(seg *segment) {
	if len(seg.blocks) == 0 {
		return
	}
	last := seg.blocks[len(seg.blocks)-1]
	if last.state != snapshot.StateInactive {
		return
	}
	page := int64(LargeBuffer)
	if seg.key.small {
		page = SmallBuffer
	}
	// Only whole pages entirely inside the free tail can be unmapped.
	off := int64(last.addr - seg.addr)
	firstPage := (off + page - 1) / page * page
	n := seg.size - firstPage
	if n <= 0 {
		return
	}
	if firstPage == off {
		seg.blocks = seg.blocks[:len(seg.blocks)-1]
	} else {
		last.size -= n
	}
	seg.size -= n
	s.reserved -= n
	s.record(snapshot.Event{Action: snapshot.ActionSegmentUnmap, Addr: seg.addr + uint64(firstPage), Size: n, Stream: seg.key.stream, Stack: snapshot.NoStack})
}
