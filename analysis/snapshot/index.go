package snapshot

import (
	"math/bits"
	"sync"
	"unsafe"

	"github.com/memsnap/memsnap/analysis/internal/hugepage"
	"github.com/memsnap/memsnap/analysis/internal/prefetch"
)

// TraceIndex numbers the addresses of one device trace densely, so that a pass over the trace
// keeps its per-block and per-segment state in slices indexed by id instead of maps keyed by
// address. Blocks (the addresses of alloc, free_requested and free_completed events) and
// segments (those of segment_alloc, segment_free, segment_map and segment_unmap) are numbered
// apart, each in order of first appearance.
type TraceIndex struct {
	// Slot[i] is the id of event i's address among blocks or segments (by its action), -1 for
	// events of any other action.
	Slot []int32
	// Blocks and Segments give each id's address; BlockFirst and SegmentFirst the index of
	// the id's first event (ids are numbered as they first appear: these are increasing).
	Blocks       []uint64
	Segments     []uint64
	BlockFirst   []int32
	SegmentFirst []int32
	// Tally is what a pass over the trace in order finds (see TraceTally).
	Tally   TraceTally
	blockID addrTable
	segID   addrTable
	// The trace it indexes: its first event and length.
	first *Event
	n     int
}

// Block returns the id of a block address, if the trace has an event at it.
func (x *TraceIndex) Block(addr uint64) (int32, bool) { return x.blockID.get(addr) }

// Segment returns the id of a segment address, if the trace has a segment event at it.
func (x *TraceIndex) Segment(addr uint64) (int32, bool) { return x.segID.get(addr) }

// First returns the first event of the trace x indexes (nil when it is empty): a key to
// find the index of a trace among many without comparing each (65,536 devices).
func (x *TraceIndex) First() *Event { return x.first }

// Indexes reports whether x indexes exactly evs (the same events, not a copy or a part).
func (x *TraceIndex) Indexes(evs []Event) bool {
	if len(evs) == 0 {
		return x.n == 0
	}
	return x.n == len(evs) && x.first == &evs[0]
}

// IsHistory reports whether a trace records history over time: two events or more besides
// snapshot ones (one event, the max_entries=1 "state only" pattern, is not).
func IsHistory(evs []Event) bool {
	n := 0
	for i := range evs {
		if evs[i].Action != ActionSnapshot {
			if n++; n >= 2 {
				return true
			}
		}
	}
	return false
}

// BlockEvent reports whether an action's address is a block's (alloc and frees).
func BlockEvent(a Action) bool {
	return a == ActionAlloc || a == ActionFreeRequested || a == ActionFreeCompleted
}

// SegmentEvent reports whether an action's address is a segment's.
func SegmentEvent(a Action) bool {
	return a == ActionSegmentAlloc || a == ActionSegmentFree || a == ActionSegmentMap || a == ActionSegmentUnmap
}

// TraceIndexer builds a TraceIndex from a trace given in consecutive parts (the loader feeds
// it while it decodes).
type TraceIndexer struct{ x TraceIndex }

// NewTraceIndexer starts an index; hint is the expected number of events (0 if unknown).
func NewTraceIndexer(hint int) *TraceIndexer {
	slot := hugepage.Make[int32](0, hint)
	return &TraceIndexer{x: TraceIndex{Slot: slot}}
}

// Reserve makes room for n events in all (the trace list's new capacity), so that the index
// grows in the list's steps, to its estimate of the final length, not by doubling.
func (b *TraceIndexer) Reserve(n int) {
	if n > cap(b.x.Slot) {
		slot := hugepage.Make[int32](len(b.x.Slot), n)
		copy(slot, b.x.Slot)
		b.x.Slot = slot
	}
}

// Len is how many events have been added.
func (b *TraceIndexer) Len() int { return len(b.x.Slot) }

// Add indexes the next events of the trace.
func (b *TraceIndexer) Add(evs []Event) {
	x := &b.x
	for i := range evs {
		// Fetch ahead what the coming lookups read: the slot of the event 2×touchAhead on,
		// and the address and tally record of the one touchAhead on (its slot has come in by
		// then). The tables of a long trace (1.8 MB for 100 k blocks) do not stay in the cache
		// while the decoder streams through it on the other core, and a lookup's two reads
		// depend on each other: fetched ahead, the misses overlap instead of waiting in turn.
		if j := i + 2*touchAhead; j < len(evs) {
			x.blockID.prefetch(evs[j].Addr)
		}
		if j := i + touchAhead; j < len(evs) {
			if s := x.blockID.touch(evs[j].Addr); s > 0 && int(s) <= len(x.Blocks) {
				prefetch.Line(unsafe.Pointer(&x.Blocks[s-1]))
				if int(s) <= len(x.Tally.blocks) {
					prefetch.Line(unsafe.Pointer(&x.Tally.blocks[s-1]))
				}
			}
		}
		e := &evs[i]
		id := int32(-1)
		switch e.Action {
		case ActionAlloc, ActionFreeRequested, ActionFreeCompleted:
			id = x.blockID.add(e.Addr, &x.Blocks, &x.BlockFirst, len(x.Slot))
		case ActionSegmentAlloc, ActionSegmentFree, ActionSegmentMap, ActionSegmentUnmap:
			id = x.segID.add(e.Addr, &x.Segments, &x.SegmentFirst, len(x.Slot))
		}
		x.Slot = append(x.Slot, id)
		x.Tally.add(e, len(x.Slot)-1, id)
	}
}

// touchAhead is how many events ahead Add starts fetching what their lookups read.
const touchAhead = 16

// Finish returns the index of evs, which must be the events added, in order (nil when their
// number differs).
func (b *TraceIndexer) Finish(evs []Event) *TraceIndex {
	if len(evs) != len(b.x.Slot) {
		return nil
	}
	x := b.x
	x.n = len(evs)
	if len(evs) > 0 {
		x.first = &evs[0]
	}
	return &x
}

// NewTraceIndex indexes a whole trace.
func NewTraceIndex(evs []Event) *TraceIndex {
	b := NewTraceIndexer(len(evs))
	b.Add(evs)
	return b.Finish(evs)
}

// traceIndexes keeps a snapshot's trace indexes. It belongs to one Snapshot value (owner): a
// copy of the snapshot, whose traces may be changed, does not share it.
type traceIndexes struct {
	owner *Snapshot
	mu    sync.Mutex
	byDev map[int]*TraceIndex
	// segsByDev lists the segments of each device (SegmentsOn), built at the first call.
	segsByDev map[int][]int
	segsOf    *Segment // the Segments array segsByDev was built from
	segsN     int
}

// SegmentsOn returns the indexes in s.Segments of device dev's segments, in order. A
// snapshot made by the loader builds the lists once for all devices (a file of 65,536 devices
// then costs no pass over every segment per device); any other snapshot scans at each call.
func (s *Snapshot) SegmentsOn(dev int) []int {
	c := s.indexes
	if c == nil || c.owner != s {
		var out []int
		for i := range s.Segments {
			if s.Segments[i].Device == dev {
				out = append(out, i)
			}
		}
		return out
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var first *Segment
	if len(s.Segments) > 0 {
		first = &s.Segments[0]
	}
	if c.segsByDev == nil || c.segsOf != first || c.segsN != len(s.Segments) {
		c.segsByDev = map[int][]int{}
		for i := range s.Segments {
			d := s.Segments[i].Device
			c.segsByDev[d] = append(c.segsByDev[d], i)
		}
		c.segsOf, c.segsN = first, len(s.Segments)
	}
	return c.segsByDev[dev]
}

// TraceIndex returns the address index of device dev's trace (empty for a device without
// one). A snapshot made by the loader builds each index once and keeps it (safe for concurrent
// use); any other snapshot builds it at each call.
func (s *Snapshot) TraceIndex(dev int) *TraceIndex {
	var evs []Event
	if dev >= 0 && dev < len(s.DeviceTraces) {
		evs = s.DeviceTraces[dev]
	}
	c := s.indexes
	if c == nil || c.owner != s {
		return NewTraceIndex(evs)
	}
	c.mu.Lock()
	x := c.byDev[dev]
	c.mu.Unlock()
	if x != nil && x.Indexes(evs) {
		return x
	}
	x = NewTraceIndex(evs)
	c.mu.Lock()
	c.byDev[dev] = x
	c.mu.Unlock()
	return x
}

// KeepTraceIndexes makes the snapshot keep the trace indexes it builds, starting with the
// given ones (by device; those that do not index their device's trace as it is are dropped).
// The loader calls it on the snapshots it makes.
func (s *Snapshot) KeepTraceIndexes(byDev map[int]*TraceIndex) {
	c := &traceIndexes{owner: s, byDev: map[int]*TraceIndex{}}
	for d, x := range byDev {
		if x != nil && d >= 0 && d < len(s.DeviceTraces) && x.Indexes(s.DeviceTraces[d]) {
			c.byDev[d] = x
		}
	}
	s.indexes = c
}

// addrTable maps addresses to dense ids: open addressing with linear probing, at most half
// full. slots hold id+1 (0: empty); the addresses are the ids' list (addrs).
type addrTable struct {
	slots []int32
	addrs []uint64 // id -> address, shared with the index's Blocks or Segments
	shift uint
}

func addrHash(addr uint64, shift uint) uint64 {
	return (addr * 0x9e3779b97f4a7c15) >> shift
}

// get returns the id of addr.
func (t *addrTable) get(addr uint64) (int32, bool) {
	if len(t.slots) == 0 {
		return 0, false
	}
	mask := uint64(len(t.slots) - 1)
	for i := addrHash(addr, t.shift); ; i = (i + 1) & mask {
		s := t.slots[i]
		if s == 0 {
			return 0, false
		}
		if t.addrs[s-1] == addr {
			return s - 1, true
		}
	}
}

// add returns the id of addr, giving it the next one if it has none: addr is appended to
// *addrs, and event (the index of the event that named it first) to *firsts.
func (t *addrTable) add(addr uint64, addrs *[]uint64, firsts *[]int32, event int) int32 {
	if 2*(len(*addrs)+1) > len(t.slots) {
		t.grow(*addrs)
	}
	t.addrs = *addrs
	mask := uint64(len(t.slots) - 1)
	i := addrHash(addr, t.shift)
	for ; ; i = (i + 1) & mask {
		s := t.slots[i]
		if s == 0 {
			break
		}
		if t.addrs[s-1] == addr {
			return s - 1
		}
	}
	id := int32(len(*addrs))
	*addrs = append(*addrs, addr)
	*firsts = append(*firsts, int32(event))
	t.addrs = *addrs
	t.slots[i] = id + 1
	return id
}

// touch reads the slot where a lookup of addr starts (its id+1, or 0), for reading ahead.
func (t *addrTable) touch(addr uint64) int32 {
	if len(t.slots) == 0 {
		return 0
	}
	return t.slots[addrHash(addr, t.shift)&uint64(len(t.slots)-1)]
}

// prefetch asks for the slot where a lookup of addr starts.
func (t *addrTable) prefetch(addr uint64) {
	if len(t.slots) > 0 {
		prefetch.Line(unsafe.Pointer(&t.slots[addrHash(addr, t.shift)&uint64(len(t.slots)-1)]))
	}
}

func (t *addrTable) grow(addrs []uint64) {
	n := max(2*len(t.slots), 64)
	t.slots = make([]int32, n)
	t.shift = uint(64 - bits.Len(uint(n-1)))
	mask := uint64(n - 1)
	for id, addr := range addrs {
		i := addrHash(addr, t.shift)
		for t.slots[i] != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = int32(id) + 1
	}
	t.addrs = addrs
}
