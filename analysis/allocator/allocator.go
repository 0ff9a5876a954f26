// Package allocator is a model of one device of PyTorch's CUDA caching allocator
// (DeviceCachingAllocator in c10/cuda/CUDACachingAllocator.cpp), faithful to its rules:
// 512-byte rounding and roundup_power2_divisions; the small pool (requests ≤ 1 MiB, 2 MiB
// segments) and the large pool (below 10 MiB a 20 MiB segment, else the request rounded to
// 2 MiB); best fit per pool and stream, ties to the lowest address; the split rules; oversize
// blocks and max_split_size; garbage_collection_threshold; the cudaMalloc-failure path
// (release_available_cached_blocks, then release_cached_blocks with every pending free
// completed, then OOM); expandable segments that map and unmap 2 MiB / 20 MiB pages; private
// pools; frees whose completion waits for other streams.
//
// The device is a capacity: cudaMalloc (or mapping pages) fails when the bytes reserved would
// exceed it. Every decision the allocator would record in a memory-history trace is reported to
// Config.OnEvent in PyTorch's order. The simulator (analysis/sim) builds fixtures on it; the
// what-if analysis replays recorded traces through it under other settings.
package allocator

import (
	"fmt"
	"slices"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// DefaultPool is the default memory pool id (0, 0).
var DefaultPool = snapshot.PoolID{0, 0}

// DefaultBase is the address of the first segment when Config.SegmentAddr is nil.
const DefaultBase uint64 = 0x7f3a00000000

// Event is one entry the allocator would record in its trace (action, address, size, stream).
// Size is the requested size for alloc, free_requested and free_completed (as PyTorch records
// it), the rounded size for oom, the segment or mapped range for segment events.
type Event struct {
	Action snapshot.Action
	Addr   uint64
	Size   int64
	Stream uint64
	// Block is the block of alloc, free_requested and free_completed events (nil otherwise).
	Block *Block
	// DeviceFree is what the device had free at an oom event (capacity − reserved; 0 when
	// unbounded).
	DeviceFree int64
}

// Config configures an Allocator.
type Config struct {
	Settings Settings
	// Capacity is the bytes PyTorch may reserve on the device (its memory less what the CUDA
	// context and other processes hold); 0 = unbounded (cudaMalloc never fails).
	Capacity int64
	// SegmentAddr, when set, chooses the address of each new cudaMalloc'd segment (expandable:
	// the virtual range an expandable segment reserves); nil = one after the other from
	// DefaultBase, each 2 MiB aligned, never reused.
	SegmentAddr func(size int64, stream uint64, expandable bool) uint64
	// AddressSpace is the virtual range an expandable segment reserves (PyTorch: 1⅛ × the
	// device memory); 0 = 1⅛ × Capacity, or 1 TiB when unbounded.
	AddressSpace int64
	// OnEvent, when set, receives every event the allocator would record, in order.
	OnEvent func(Event)
}

// Block is a block of a segment: allocated, awaiting its free_completed (pending), cached
// free, or (expandable segments) an unmapped range.
//
// A replay touches a block or two of a large working set per event, so a block is kept to one
// 64-byte cache line: its pool and stream are its segment's, the streams of RecordStream live
// in the allocator (Allocator.uses), and the pending list is a slice (Allocator.pend).
type Block struct {
	addr      uint64
	size      int64
	prev      *Block
	next      *Block
	seg       *segment
	requested int64
	// gcBase is the pool's getFree when the block was cached (garbage collection only).
	gcBase int64
	// pend is the block's index in Allocator.pend while it is pending.
	pend      int32
	allocated bool
	pending   bool
	mapped    bool
}

// Addr is the block's address.
func (b *Block) Addr() uint64 { return b.addr }

// Size is the block's size (rounded; it may include an unsplit remainder).
func (b *Block) Size() int64 { return b.size }

// Requested is the size last requested for the block (stale on cached blocks, as PyTorch
// keeps it).
func (b *Block) Requested() int64 { return b.requested }

// Stream is the stream the block belongs to.
func (b *Block) Stream() uint64 { return b.seg.stream }

// State is the block's state as a snapshot writes it.
func (b *Block) State() snapshot.BlockState {
	switch {
	case b.allocated:
		return snapshot.StateActiveAllocated
	case b.pending:
		return snapshot.StateActivePendingFree
	}
	return snapshot.StateInactive
}

// Mapped reports whether the block is backed by memory (always, outside expandable segments).
func (b *Block) Mapped() bool { return b.mapped }

// pool is one BlockPool: the small or large pool of the default pool or of a private pool.
type pool struct {
	id       snapshot.PoolID
	small    bool
	free     map[uint64]*blockSet // cached mapped free blocks by stream
	unmapped map[uint64][]*Block  // unmapped ranges of expandable segments by stream, by address
	// getFree counts get_free_block calls (get_free_blocks_call_count: block ages for the
	// garbage collector).
	getFree  int64
	freeable bool
}

type segment struct {
	addr   uint64
	size   int64 // cudaMalloc size, or the reserved virtual range of an expandable segment
	stream uint64
	pool   *pool
	free   *blockSet // pool.free[stream]: where the segment's cached blocks go
	head   *Block
	page   int64 // expandable segments: the page size mapped at once; 0 otherwise
}

// Stats are what the allocator did.
type Stats struct {
	SegmentAllocs int   // cudaMalloc calls that succeeded (segment_alloc)
	SegmentMaps   int   // expandable page ranges mapped (segment_map)
	SegmentFrees  int   // cudaFree calls (segment_free)
	SegmentUnmaps int   // page ranges unmapped (segment_unmap)
	OOMs          int   // requests that failed
	Mallocs       int   // requests served
	PeakReserved  int64 // highest reserved bytes
	PeakAllocated int64 // highest allocated bytes (block sizes)
	// CacheFlushes counts the cudaMalloc failures recovered from by freeing every cached
	// segment and retrying (release_cached_blocks on the malloc path: a device-wide
	// synchronize, a cudaFree per cached segment, the cache rebuilt afterwards).
	CacheFlushes int
}

// Allocator is one device's caching allocator. Not safe for concurrent use.
type Allocator struct {
	cfg       Config
	set       Settings
	pools     map[snapshot.PoolID]*[2]*pool // [0] large, [1] small
	segs      map[uint64]*segment
	reserved  int64
	allocated int64
	active    int64
	nextAddr  uint64
	need      int64 // bytes the last failed cudaMalloc / map asked for
	stats     Stats
	gcOn      bool
	// pend holds the pending frees in the order they were requested, nil where one completed
	// since; npend counts the others.
	pend  []*Block
	npend int
	// uses are the streams recorded with RecordStream, by block (rare: kept off the blocks).
	uses map[*Block][]uint64
	// def is pools[DefaultPool] once made: most requests use it.
	def *[2]*pool
	// onSegment, when set, receives the segment_alloc and segment_map events only (a baseline
	// replay records them; OnEvent would be called for every request as well).
	onSegment func(Event)
	// recycle: blocks that merges leave dead go to spare and make the next new blocks, which
	// then stay in a compact, cache-warm set of memory instead of new heap memory each time.
	// Only for a caller that never uses a block after it became free (Trace.Run); it stops
	// for good when the allocator completes pending frees on its own (syncPending), since the
	// caller may still hold those blocks.
	recycle bool
	spare   []*Block
}

// New returns an empty allocator.
func New(cfg Config) *Allocator {
	a := &Allocator{cfg: cfg, set: cfg.Settings, pools: map[snapshot.PoolID]*[2]*pool{},
		segs: map[uint64]*segment{}, nextAddr: DefaultBase}
	// garbage_collection_threshold acts only under a memory fraction: it is modelled with the
	// fraction at the capacity.
	a.gcOn = a.set.GCThreshold > 0 && cfg.Capacity > 0
	return a
}

// Settings returns the settings the allocator runs with.
func (a *Allocator) Settings() Settings { return a.set }

// Capacity returns the configured capacity (0 = unbounded).
func (a *Allocator) Capacity() int64 { return a.cfg.Capacity }

// Reserved returns the bytes held in segments (mapped bytes of expandable segments).
func (a *Allocator) Reserved() int64 { return a.reserved }

// Allocated returns the bytes of allocated blocks.
func (a *Allocator) Allocated() int64 { return a.allocated }

// Active returns the bytes of allocated and pending-free blocks.
func (a *Allocator) Active() int64 { return a.active }

// Stats returns what the allocator did so far.
func (a *Allocator) Stats() Stats { return a.stats }

// DeviceFree is what cudaMemGetInfo would report free (0 when unbounded).
func (a *Allocator) DeviceFree() int64 {
	if a.cfg.Capacity <= 0 {
		return 0
	}
	return a.cfg.Capacity - a.reserved
}

func (a *Allocator) emit(ev Event) {
	if a.cfg.OnEvent != nil {
		a.cfg.OnEvent(ev)
	}
}

// emitSegment emits a segment_alloc or segment_map event (to onSegment as well).
func (a *Allocator) emitSegment(ev Event) {
	if a.onSegment != nil {
		a.onSegment(ev)
	}
	a.emit(ev)
}

func (a *Allocator) pool(id snapshot.PoolID, small bool) *pool {
	pp := a.def
	if pp == nil || id != DefaultPool {
		pp = a.pools[id]
	}
	if pp == nil {
		pp = &[2]*pool{
			{id: id, free: map[uint64]*blockSet{}, unmapped: map[uint64][]*Block{}},
			{id: id, small: true, free: map[uint64]*blockSet{}, unmapped: map[uint64][]*Block{}},
		}
		a.pools[id] = pp
		if id == DefaultPool {
			a.def = pp
		}
	}
	if small {
		return pp[1]
	}
	return pp[0]
}

// MarkPoolFreeable makes a private pool's cached segments releasable (its CUDA graphs were
// destroyed: graph_pools_freeable).
func (a *Allocator) MarkPoolFreeable(id snapshot.PoolID) {
	if id == DefaultPool {
		return
	}
	a.pool(id, false).freeable = true
	a.pool(id, true).freeable = true
}

// newSegment makes a segment and gives it its pool's free set for the stream (made empty if
// need be: an empty set and none answer alike).
func newSegment(addr uint64, size int64, stream uint64, p *pool, page int64) *segment {
	s := p.free[stream]
	if s == nil {
		s = &blockSet{}
		p.free[stream] = s
	}
	return &segment{addr: addr, size: size, stream: stream, pool: p, free: s, page: page}
}

func (a *Allocator) insertFree(b *Block) {
	if a.gcOn {
		// Only the garbage collector reads it (getFree stays 0 without it).
		b.gcBase = b.seg.pool.getFree
	}
	b.seg.free.insert(b)
}

func (a *Allocator) removeFree(b *Block) bool {
	return b.seg.free.remove(b)
}

func (a *Allocator) insertUnmapped(b *Block) {
	p, st := b.seg.pool, b.seg.stream
	l := p.unmapped[st]
	i, _ := slices.BinarySearchFunc(l, b.addr, func(x *Block, t uint64) int {
		switch {
		case x.addr < t:
			return -1
		case x.addr > t:
			return 1
		}
		return 0
	})
	p.unmapped[st] = slices.Insert(l, i, b)
}

func (a *Allocator) removeUnmapped(b *Block) bool {
	p, st := b.seg.pool, b.seg.stream
	l := p.unmapped[st]
	i := slices.Index(l, b)
	if i < 0 {
		return false
	}
	p.unmapped[st] = slices.Delete(l, i, i+1)
	return true
}

// OOMError is a request the device could not serve even after every cached block was
// released.
type OOMError struct {
	Requested int64 // the rounded request
	// Need is what the last cudaMalloc (or page mapping) asked for: reserved + Need was over
	// the capacity.
	Need      int64
	Reserved  int64 // reserved after releasing the cache
	Allocated int64
	Capacity  int64
}

func (e *OOMError) Error() string {
	return fmt.Sprintf("out of memory: a request of %d bytes needed %d more bytes with %d of %d reserved", e.Requested, e.Need, e.Reserved, e.Capacity)
}

// Malloc serves a request of size bytes on stream from pool (DefaultPool, or a private pool
// such as a CUDA graph's), as DeviceCachingAllocator::malloc does. It returns *OOMError when
// the device cannot serve it (an oom event was reported).
func (a *Allocator) Malloc(size int64, stream uint64, poolID snapshot.PoolID) (*Block, error) {
	if size <= 0 {
		size = 1 // PyTorch allocates nothing for 0 bytes; callers only pass positive sizes
	}
	rs := a.set.RoundSize(size)
	p := a.pool(poolID, rs <= SmallSize)
	allocSize := AllocationSize(rs)
	b, at, exact := a.getFreeBlock(p, stream, rs)
	hint := &at
	if b == nil || !exact {
		hint = nil
	}
	if b == nil {
		if a.gcOn {
			a.garbageCollect()
		}
		b = a.allocBlock(p, stream, rs, allocSize)
		if b == nil && a.releaseAvailable(p, stream, rs) {
			b = a.allocBlock(p, stream, rs, allocSize)
		}
		if b == nil {
			a.releaseCached()
			if b = a.allocBlock(p, stream, rs, allocSize); b != nil {
				a.stats.CacheFlushes++
			}
		}
		if b == nil {
			a.stats.OOMs++
			a.emit(Event{Action: snapshot.ActionOOM, Size: rs, Stream: stream, DeviceFree: a.DeviceFree()})
			return nil, &OOMError{Requested: rs, Need: a.need, Reserved: a.reserved, Allocated: a.allocated, Capacity: a.cfg.Capacity}
		}
	}
	b = a.allocFound(b, size, rs, a.shouldSplit(b, rs), hint)
	return b, nil
}

// shouldSplit is should_split.
func (a *Allocator) shouldSplit(b *Block, size int64) bool {
	rem := b.size - size
	if b.seg.pool.small || a.set.ExpandableSegments {
		return rem >= MinBlockSize
	}
	return (a.set.MaxSplitSize <= 0 || size < a.set.MaxSplitSize) && rem > SmallSize
}

// allocFound is alloc_found_block: split b when asked, hand out the front part. hint, when
// set, is where b was in its free set, found as the first block of size or more: the rest of
// a split at least that large goes back there (every block before it is smaller than size,
// every block after it larger than b), without a search.
func (a *Allocator) allocFound(b *Block, orig, size int64, split bool, hint *pos) *Block {
	if split {
		rem := b
		nb := a.newBlock(rem.addr, size, rem.seg, true)
		nb.prev = rem.prev
		if nb.prev != nil {
			nb.prev.next = nb
		} else {
			rem.seg.head = nb
		}
		nb.next = rem
		rem.prev = nb
		rem.addr += uint64(size)
		rem.size -= size
		if hint != nil && rem.size >= size {
			if a.gcOn {
				rem.gcBase = rem.seg.pool.getFree
			}
			rem.seg.free.insertAt(*hint, rem)
		} else {
			a.insertFree(rem)
		}
		b = nb
	}
	b.allocated = true
	b.requested = orig
	a.allocated += b.size
	a.active += b.size
	a.stats.Mallocs++
	a.stats.PeakAllocated = max(a.stats.PeakAllocated, a.allocated)
	if a.cfg.OnEvent != nil {
		a.emit(Event{Action: snapshot.ActionAlloc, Addr: b.addr, Size: orig, Stream: b.seg.stream, Block: b})
	}
	return b
}

// getFreeBlock is get_free_block: the smallest cached block of the pool and stream that fits,
// lowest address on ties, within the max_split_size rules; removed from the pool. It returns
// the block's place in the set, and whether that was the first block of size or more (the
// search's answer, not a later block).
func (a *Allocator) getFreeBlock(p *pool, stream uint64, size int64) (*Block, pos, bool) {
	if a.gcOn {
		p.getFree++
	}
	s := p.free[stream]
	if s == nil {
		return nil, pos{}, false
	}
	it := s.lowerBound(size, 0)
	b := s.at(it)
	if b == nil {
		return nil, pos{}, false
	}
	first := it
	if b.seg.page > 0 {
		if a.set.ExpandableSegments {
			// The free end of an expandable range counts as large as it could grow (the
			// unmapped range after it): take a larger block that could grow less.
			grow := func(x *Block) int64 {
				if x.next != nil && !x.next.mapped {
					return x.size + x.next.size
				}
				return x.size
			}
			for b.seg.page > 0 {
				// A block that cannot grow is as large as it counts, and every later block at
				// least as large: it stays, without a look at the next one (whose block and
				// neighbour are two more cache misses). Only a block before an unmapped range,
				// one per segment at most, can grow.
				gb := grow(b)
				if gb == b.size {
					break
				}
				nit := s.next(it)
				nb := s.at(nit)
				if nb == nil || grow(nb) >= gb {
					break
				}
				it, b = nit, nb
			}
		} else {
			// Expandable segments were turned off: only blocks of ordinary segments.
			for b != nil && b.seg.page > 0 {
				it = s.next(it)
				b = s.at(it)
			}
			if b == nil {
				return nil, pos{}, false
			}
		}
	}
	if ms := a.set.MaxSplitSize; ms > 0 {
		if size < ms && b.size >= ms {
			return nil, pos{}, false // do not split an oversize block for a smaller request
		}
		if size >= ms && b.size >= size+LargeBuffer {
			return nil, pos{}, false // an oversize request takes only a nearly exact block
		}
	}
	s.removeAt(it)
	return b, it, it == first
}

// allocBlock is alloc_block: a new segment (cudaMalloc), or pages mapped into an expandable
// segment. nil when the device is full.
func (a *Allocator) allocBlock(p *pool, stream uint64, size, allocSize int64) *Block {
	if a.set.ExpandableSegments {
		return a.tryAllocateExpandable(p, stream, size)
	}
	if a.cfg.Capacity > 0 && a.reserved+allocSize > a.cfg.Capacity {
		a.need = allocSize
		return nil
	}
	addr := a.segmentAddr(allocSize, stream, false)
	seg := newSegment(addr, allocSize, stream, p, 0)
	b := a.newBlock(addr, allocSize, seg, true)
	seg.head = b
	a.segs[addr] = seg
	a.reserved += allocSize
	a.stats.SegmentAllocs++
	a.stats.PeakReserved = max(a.stats.PeakReserved, a.reserved)
	a.emitSegment(Event{Action: snapshot.ActionSegmentAlloc, Addr: addr, Size: allocSize, Stream: stream})
	return b
}

func (a *Allocator) segmentAddr(size int64, stream uint64, expandable bool) uint64 {
	if a.cfg.SegmentAddr != nil {
		return a.cfg.SegmentAddr(size, stream, expandable)
	}
	addr := a.nextAddr
	a.nextAddr += uint64((size + RoundLarge - 1) / RoundLarge * RoundLarge)
	return addr
}

// releaseAvailable is release_available_cached_blocks: with max_split_size set, free one
// cached oversize segment large enough for the request, or several, largest first.
func (a *Allocator) releaseAvailable(p *pool, stream uint64, size int64) bool {
	ms := a.set.MaxSplitSize
	if ms <= 0 {
		return false
	}
	s := p.free[stream]
	if s == nil {
		return false
	}
	key := max(size, ms)
	releasable := func(b *Block) bool { return b.seg.page == 0 && b.prev == nil && b.next == nil }
	if b := s.at(s.lowerBound(key, 0)); b != nil {
		if !releasable(b) {
			return false
		}
		a.releaseBlock(b)
		return true
	}
	var total int64
	for total < key {
		it, ok := s.lastPos()
		if !ok {
			break
		}
		b := s.at(it)
		if b.size < ms || !releasable(b) {
			break
		}
		total += b.size
		a.releaseBlock(b)
	}
	return total >= key
}

// releaseBlock is release_block: cudaFree a whole cached segment.
func (a *Allocator) releaseBlock(b *Block) {
	a.removeFree(b)
	seg := b.seg
	a.stats.SegmentFrees++
	a.emit(Event{Action: snapshot.ActionSegmentFree, Addr: seg.addr, Size: seg.size, Stream: seg.stream})
	a.reserved -= seg.size
	delete(a.segs, seg.addr)
}

// EmptyCache is torch.cuda.empty_cache(): release_cached_blocks.
func (a *Allocator) EmptyCache() { a.releaseCached() }

// releaseCached is release_cached_blocks: complete every pending free (synchronize), free every
// cached whole segment and unmap every free page of the default pools and of freeable private
// pools.
func (a *Allocator) releaseCached() {
	a.syncPending()
	ids := make([]snapshot.PoolID, 0, len(a.pools))
	for id := range a.pools {
		if id == DefaultPool || a.pools[id][0].freeable {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(x, y snapshot.PoolID) int {
		if x == DefaultPool {
			return -1
		}
		if y == DefaultPool {
			return 1
		}
		if x[0] != y[0] {
			return cmpInt(x[0], y[0])
		}
		return cmpInt(x[1], y[1])
	})
	for _, id := range ids {
		pp := a.pools[id]
		a.releaseBlocks(pp[0])
		a.releaseBlocks(pp[1])
	}
}

func cmpInt(x, y int64) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// releaseBlocks is release_blocks: every unsplit cached segment of the pool is freed, every
// cached block of an expandable segment has its whole pages unmapped (and a segment left
// with nothing mapped is released).
func (a *Allocator) releaseBlocks(p *pool) {
	var unmap []*Block
	for _, st := range sortedKeys(p.free) {
		for _, b := range p.free[st].all() {
			if b.seg.page > 0 {
				unmap = append(unmap, b)
			} else if b.prev == nil && b.next == nil {
				a.releaseBlock(b)
			}
		}
	}
	for _, b := range unmap {
		a.unmapBlock(b)
		if !b.mapped && b.prev == nil && b.next == nil {
			a.removeUnmapped(b)
			delete(a.segs, b.seg.addr)
		}
	}
}

// syncPending completes every pending free (synchronize_and_free_events).
func (a *Allocator) syncPending() {
	if a.npend > 0 {
		a.recycle, a.spare = false, nil
	}
	// Complete never reorders pend (it empties it after the last one).
	for i := 0; i < len(a.pend); i++ {
		if b := a.pend[i]; b != nil {
			a.Complete(b)
		}
	}
}

// addPending puts b last in the pending list.
func (a *Allocator) addPending(b *Block) {
	if n := len(a.pend); n >= 64 && n >= 2*a.npend {
		// Mostly completed ones: close the gaps, keeping the order.
		k := 0
		for _, p := range a.pend {
			if p != nil {
				p.pend = int32(k)
				a.pend[k] = p
				k++
			}
		}
		clear(a.pend[k:])
		a.pend = a.pend[:k]
	}
	b.pending = true
	b.pend = int32(len(a.pend))
	a.pend = append(a.pend, b)
	a.npend++
}

// garbageCollect is garbage_collect_cached_blocks: above garbage_collection_threshold of the
// capacity, free unsplit cached large segments of the default pool, oldest first (those
// unused for at least the average number of get_free_block calls), until reserved is back
// under the threshold.
func (a *Allocator) garbageCollect() {
	threshold := int64(a.set.GCThreshold * float64(a.cfg.Capacity))
	if a.reserved <= threshold {
		return
	}
	target := a.reserved - threshold
	p := a.pool(DefaultPool, false)
	order := func() []*Block {
		var out []*Block
		for _, st := range sortedKeys(p.free) {
			out = append(out, p.free[st].all()...)
		}
		return out
	}
	freeable := func(b *Block) bool { return b.prev == nil && b.next == nil && b.seg.page == 0 }
	var totalAge, count int64
	for _, b := range order() {
		if freeable(b) {
			totalAge += p.getFree - b.gcBase
			count++
		}
	}
	if count == 0 {
		return
	}
	var reclaimed int64
	freed := true
	for reclaimed < target && freed && count > 0 {
		ageThreshold := float64(totalAge) / float64(count)
		freed = false
		for _, b := range order() {
			age := p.getFree - b.gcBase
			if freeable(b) && float64(age) >= ageThreshold {
				freed = true
				reclaimed += b.size
				totalAge -= age
				count--
				a.releaseBlock(b)
			}
		}
	}
}

// RecordStream marks b as used on another stream (Tensor.record_stream): its free will wait
// for that stream (pending until Complete).
func (a *Allocator) RecordStream(b *Block, stream uint64) {
	if stream != b.seg.stream && !slices.Contains(a.uses[b], stream) {
		if a.uses == nil {
			a.uses = map[*Block][]uint64{}
		}
		a.uses[b] = append(a.uses[b], stream)
	}
}

// Free is the allocator's free(): free_requested, then the block returns to the cache at once
// unless another stream used it (then it stays pending until Complete).
func (a *Allocator) Free(b *Block) {
	if !b.allocated {
		return
	}
	if len(a.uses) > 0 && len(a.uses[b]) > 0 {
		a.FreeRequested(b)
		return
	}
	a.request(b)
	a.freeBlock(b)
}

// FreeRequested records the program's free of b and keeps the block pending until Complete:
// the replay of a trace whose free_completed comes later.
func (a *Allocator) FreeRequested(b *Block) {
	if !b.allocated {
		return
	}
	a.request(b)
	a.addPending(b)
}

// release is FreeRequested then Complete (a replay's free_completed): a block still
// allocated returns to the cache at once, without a stay in the pending list.
func (a *Allocator) release(b *Block) {
	if !b.allocated {
		a.Complete(b)
		return
	}
	a.request(b)
	a.freeBlock(b)
}

func (a *Allocator) request(b *Block) {
	b.allocated = false
	a.allocated -= b.size
	if a.cfg.OnEvent != nil {
		a.emit(Event{Action: snapshot.ActionFreeRequested, Addr: b.addr, Size: b.requested, Stream: b.seg.stream, Block: b})
	}
}

// Complete finishes a pending free (free_completed): the block returns to the cache. A block
// that is not pending is left alone.
func (a *Allocator) Complete(b *Block) {
	if !b.pending {
		return
	}
	b.pending = false
	a.pend[b.pend] = nil
	if a.npend--; a.npend == 0 {
		a.pend = a.pend[:0]
	}
	a.freeBlock(b)
}

// freeBlock is free_block: record free_completed, merge with free neighbours of the same
// segment, return to the pool.
func (a *Allocator) freeBlock(b *Block) {
	if a.cfg.OnEvent != nil {
		a.emit(Event{Action: snapshot.ActionFreeCompleted, Addr: b.addr, Size: b.requested, Stream: b.seg.stream, Block: b})
	}
	if len(a.uses) > 0 {
		delete(a.uses, b)
	}
	a.active -= b.size
	a.tryMerge(b, b.prev)
	a.tryMerge(b, b.next)
	a.insertFree(b)
}

// tryMerge is try_merge_blocks: absorb src (a neighbour of dst) when it is cached free and
// mapped alike. dst is not in any set.
func (a *Allocator) tryMerge(dst, src *Block) int64 {
	if src == nil || src.allocated || src.pending || src.mapped != dst.mapped {
		return 0
	}
	if dst.prev == src {
		dst.addr = src.addr
		dst.prev = src.prev
		if dst.prev != nil {
			dst.prev.next = dst
		} else {
			dst.seg.head = dst
		}
	} else {
		dst.next = src.next
		if dst.next != nil {
			dst.next.prev = dst
		}
	}
	if src.mapped {
		a.removeFree(src)
	} else {
		a.removeUnmapped(src)
	}
	dst.size += src.size
	if a.recycle {
		a.spare = append(a.spare, src)
	}
	return src.size
}

// newBlock makes a block (from spare when recycling).
func (a *Allocator) newBlock(addr uint64, size int64, seg *segment, mapped bool) *Block {
	if n := len(a.spare); n > 0 {
		b := a.spare[n-1]
		a.spare[n-1] = nil
		a.spare = a.spare[:n-1]
		*b = Block{addr: addr, size: size, seg: seg, mapped: mapped}
		return b
	}
	return &Block{addr: addr, size: size, seg: seg, mapped: mapped}
}
