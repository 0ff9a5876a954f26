package analysis

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// SegmentMapOptions chooses the device and the moment of a segment map.
type SegmentMapOptions struct {
	Device int `json:"device"`
	// At is the trace event after which the segments are rebuilt by replay; -1 means the file's
	// final state (the segments as written).
	At          int                `json:"at"`
	Attribution AttributionOptions `json:"attribution"`
}

// SegmentMapResult is a device's segments at one moment, as numbers; Map and Sites hold what
// a picture draws (not serialised).
type SegmentMapResult struct {
	Path   string `json:"path"`
	Device int    `json:"device"`
	// At: the trace event after which the segments are shown; -1 for the file's final state.
	At     int    `json:"at"`
	Source string `json:"source"`
	// Segments and blocks drawn.
	Segments            int         `json:"segments"`
	Blocks              int         `json:"blocks"`
	ReservedBytes       int64       `json:"reserved_bytes"`
	AllocatedBytes      int64       `json:"allocated_bytes"`
	PendingFreeBytes    int64       `json:"pending_free_bytes"`
	InactiveBytes       int64       `json:"inactive_bytes"`
	LargestSegmentBytes int64       `json:"largest_segment_bytes"`
	LargestFreeBytes    int64       `json:"largest_free_bytes"`
	Roles               []RoleBytes `json:"roles"`
	Notes               []string    `json:"notes"`
	// Map: the segments drawn, by address; Sites: the sites their blocks point to.
	Map   []MapSegment `json:"-"`
	Sites []MapSite    `json:"-"`
}

// MapSegment is one segment of a segment map.
type MapSegment struct {
	Address    uint64
	Size       int64
	Stream     uint64
	Pool       snapshot.PoolID
	Type       string
	Expandable bool
	Blocks     []MapBlock
}

// MapBlock is one block of a MapSegment.
type MapBlock struct {
	Offset, Size  int64
	RequestedSize int64
	State         snapshot.BlockState
	// Site indexes SegmentMapResult.Sites (-1 for inactive blocks).
	Site int32
}

// MapSite is the site and role of blocks of a segment map.
type MapSite struct {
	SiteIdentity
	Category string
	Evidence string
	Stack    []string
	StackID  int
}

// rebuilt is the segments of a device rebuilt from a replay engine's state.
type rebuilt struct {
	segs []snapshot.Segment
	blks [][]*liveBlk // per segment, per block: the live block (nil for inactive)
	// outside: live blocks in no segment (their segment was never seen).
	outside      int
	outsideBytes int64
	expandable   bool
}

// roundBlock is the allocator's block size for a request (a multiple of 512 B).
func roundBlock(n int64) int64 { return (n + 511) / 512 * 512 }

// rebuildSegments lays the engine's live blocks into its segments: the segments it tracks (by
// address, with pool, type and expandability from the file's final segments when they are the
// same), each gap an inactive block. Expandable segments are not rebuilt (segment_map ranges
// are not tracked): the final segments' ranges stand in for them.
func rebuildSegments(e *engine, snap *snapshot.Snapshot, dev int) rebuilt {
	final := map[uint64]*snapshot.Segment{}
	var r rebuilt
	for _, si := range snap.SegmentsOn(dev) {
		s := &snap.Segments[si]
		if s.Device == dev {
			final[s.Address] = s
			r.expandable = r.expandable || s.IsExpandable
		}
	}
	type span struct {
		addr   uint64
		size   int64
		stream uint64
	}
	var spans []span
	if r.expandable {
		for _, s := range final {
			spans = append(spans, span{s.Address, s.TotalSize, s.Stream})
		}
	} else {
		for addr, s := range e.segs {
			spans = append(spans, span{addr, s.size, s.stream})
		}
	}
	slices.SortFunc(spans, func(a, b span) int { return cmpUint(a.addr, b.addr) })
	addrs := make([]uint64, 0, len(e.live))
	for a := range e.live {
		addrs = append(addrs, a)
	}
	slices.Sort(addrs)
	k := 0
	for _, sp := range spans {
		seg := snapshot.Segment{Device: dev, Address: sp.addr, TotalSize: sp.size, Stream: sp.stream, Stack: snapshot.NoStack}
		if f := final[sp.addr]; f != nil && f.TotalSize == sp.size {
			seg.SegmentType, seg.PoolID, seg.IsExpandable, seg.Stack = f.SegmentType, f.PoolID, f.IsExpandable, f.Stack
		} else if sp.size == 2<<20 {
			seg.SegmentType = "small"
		} else {
			seg.SegmentType = "large"
		}
		end := sp.addr + uint64(sp.size)
		for k < len(addrs) && addrs[k] < sp.addr { // blocks below this segment: in none
			r.outside++
			r.outsideBytes += e.live[addrs[k]].size
			k++
		}
		var blks []*liveBlk
		at := sp.addr
		for k < len(addrs) && addrs[k] < end {
			a := addrs[k]
			b := e.live[a]
			k++
			if a > at {
				seg.Blocks = append(seg.Blocks, snapshot.Block{Address: at, Size: int64(a - at), State: snapshot.StateInactive, Stack: snapshot.NoStack})
				blks = append(blks, nil)
			}
			size := b.size
			if e.requested {
				size = roundBlock(size)
			}
			next := end
			if k < len(addrs) && addrs[k] < end {
				next = addrs[k]
			}
			size = min(size, int64(next-a))
			req := min(b.size, size)
			blk := snapshot.Block{Address: a, Size: size, RequestedSize: req, State: snapshot.StateActiveAllocated, Stack: b.stack}
			if b.pending {
				blk.State = snapshot.StateActivePendingFree
			}
			seg.Blocks = append(seg.Blocks, blk)
			blks = append(blks, b)
			at = a + uint64(size)
		}
		if at < end {
			seg.Blocks = append(seg.Blocks, snapshot.Block{Address: at, Size: int64(end - at), State: snapshot.StateInactive, Stack: snapshot.NoStack})
			blks = append(blks, nil)
		}
		for _, b := range seg.Blocks {
			switch b.State {
			case snapshot.StateActiveAllocated:
				seg.AllocatedSize += b.Size
				seg.ActiveSize += b.Size
				seg.RequestedSize += b.RequestedSize
			case snapshot.StateActivePendingFree:
				seg.ActiveSize += b.Size
			}
		}
		r.segs = append(r.segs, seg)
		r.blks = append(r.blks, blks)
	}
	for ; k < len(addrs); k++ {
		r.outside++
		r.outsideBytes += e.live[addrs[k]].size
	}
	return r
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// engineAt replays device dev's trace up to and including event at.
func engineAt(ctx context.Context, snap *snapshot.Snapshot, dev, at int) (*engine, error) {
	e := newEngine(snap, dev)
	if at < 0 || at >= len(e.evs) {
		return nil, fmt.Errorf("%s: event %d is outside device %d's trace (events 0:%d)", snap.Path, at, dev, len(e.evs))
	}
	if err := e.run(ctx, at+1); err != nil {
		return nil, err
	}
	return e, nil
}

// SegmentMap lays out device opt.Device's segments, at the end of the file or (opt.At >= 0)
// rebuilt by replay after trace event opt.At, with every block's state and role.
func SegmentMap(ctx context.Context, snap *snapshot.Snapshot, opt SegmentMapOptions) (*SegmentMapResult, error) {
	if snap == nil {
		return nil, fmt.Errorf("segment map: no snapshot")
	}
	roles, err := NewRoles(snap, opt.Attribution)
	if err != nil {
		return nil, err
	}
	dev := opt.Device
	r := &SegmentMapResult{Path: snap.Path, Device: dev, At: -1, Source: "final_state", Roles: []RoleBytes{}, Notes: []string{}, Map: []MapSegment{}, Sites: []MapSite{}}
	siteIdx := map[string]int32{}
	site := func(at Attribution, stack snapshot.StackID) int32 {
		k := at.key() + "\x00" + at.Category
		if i, ok := siteIdx[k]; ok {
			return i
		}
		i := int32(len(r.Sites))
		siteIdx[k] = i
		r.Sites = append(r.Sites, MapSite{SiteIdentity: at.SiteIdentity, Category: at.Category, Evidence: at.Evidence, Stack: emptyIfNil(at.Stack), StackID: int(stack)})
		return i
	}
	var segs []snapshot.Segment
	var attr func(si, bi int) (Attribution, snapshot.StackID)
	if opt.At >= 0 {
		if !roles.device(dev).hasTrace {
			return nil, fmt.Errorf("%s: device %d has no trace: only its final state can be drawn (leave out --at)", snap.Path, dev)
		}
		e, err := engineAt(ctx, snap, dev, opt.At)
		if err != nil {
			return nil, err
		}
		rb := rebuildSegments(e, snap, dev)
		segs = rb.segs
		r.At, r.Source = opt.At, "replay"
		now := opt.At
		attr = func(si, bi int) (Attribution, snapshot.StackID) {
			b := rb.blks[si][bi]
			addr := segs[si].Blocks[bi].Address
			return roles.Live(dev, b.stack, addr, b.size, int(b.allocIdx), now), b.stack
		}
		if rb.outside > 0 {
			r.Notes = append(r.Notes, fmt.Sprintf("%d live blocks (%s) lie in no segment the trace shows (their segment_alloc came before the trace) and are not drawn", rb.outside, FormatBytes(rb.outsideBytes)))
		}
		if rb.expandable {
			r.Notes = append(r.Notes, "expandable segments: the ranges mapped at the event are not rebuilt; the final segments' ranges are drawn")
		}
		if e.requested {
			r.Notes = append(r.Notes, "the trace records requested sizes: block sizes at the event are rounded up to 512 B")
		}
	} else {
		for si := range snap.Segments {
			if snap.Segments[si].Device == dev {
				segs = append(segs, snap.Segments[si])
			}
		}
		slices.SortStableFunc(segs, func(a, b snapshot.Segment) int { return cmpUint(a.Address, b.Address) })
		attr = func(si, bi int) (Attribution, snapshot.StackID) {
			b := segs[si].Blocks[bi]
			at, _ := roles.BlockInfo(dev, b)
			return at, b.Stack
		}
	}
	roleBytes := map[string]*RoleBytes{}
	for si, s := range segs {
		if si&0xff == 0 {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("segment map: %w", err)
			}
		}
		ms := MapSegment{Address: s.Address, Size: s.TotalSize, Stream: s.Stream, Pool: s.PoolID, Type: s.SegmentType, Expandable: s.IsExpandable, Blocks: make([]MapBlock, 0, len(s.Blocks))}
		r.ReservedBytes += s.TotalSize
		r.LargestSegmentBytes = max(r.LargestSegmentBytes, s.TotalSize)
		var off int64
		for bi, b := range s.Blocks {
			mb := MapBlock{Offset: off, Size: b.Size, RequestedSize: b.RequestedSize, State: b.State, Site: -1}
			if b.Address >= s.Address {
				mb.Offset = int64(b.Address - s.Address)
			}
			off = mb.Offset + b.Size
			switch b.State {
			case snapshot.StateActiveAllocated, snapshot.StateActivePendingFree:
				at, stack := attr(si, bi)
				mb.Site = site(at, stack)
				if b.State == snapshot.StateActiveAllocated {
					r.AllocatedBytes += b.Size
					rb := roleBytes[at.Category]
					if rb == nil {
						rb = &RoleBytes{Category: at.Category}
						roleBytes[at.Category] = rb
					}
					rb.Bytes += b.Size
					rb.Blocks++
				} else {
					r.PendingFreeBytes += b.Size
				}
			default:
				r.InactiveBytes += b.Size
				r.LargestFreeBytes = max(r.LargestFreeBytes, b.Size)
			}
			ms.Blocks = append(ms.Blocks, mb)
		}
		r.Blocks += len(ms.Blocks)
		r.Map = append(r.Map, ms)
	}
	r.Segments = len(r.Map)
	for _, rb := range roleBytes {
		r.Roles = append(r.Roles, *rb)
	}
	slices.SortFunc(r.Roles, func(a, b RoleBytes) int { return largestFirst(a.Bytes, b.Bytes, a.Category, b.Category) })
	if r.Segments == 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("device %d has no segments at this moment", dev))
	}
	return r, nil
}

// Text renders a segment map's numbers.
func (r *SegmentMapResult) Text() string {
	var b strings.Builder
	when := "final state"
	if r.At >= 0 {
		when = fmt.Sprintf("after event %d (replayed)", r.At)
	}
	fmt.Fprintf(&b, "device %d, %s: %s in %s (%d blocks); allocated %s, pending free %s, inactive %s; largest segment %s, largest free block %s\n",
		r.Device, when, FormatBytes(r.ReservedBytes), count(r.Segments, "segment"), r.Blocks,
		FormatBytes(r.AllocatedBytes), FormatBytes(r.PendingFreeBytes), FormatBytes(r.InactiveBytes),
		FormatBytes(r.LargestSegmentBytes), FormatBytes(r.LargestFreeBytes))
	for _, rb := range r.Roles {
		fmt.Fprintf(&b, "  %9s %5.1f%%  %s (%d blocks)\n", FormatBytes(rb.Bytes), pct(rb.Bytes, r.AllocatedBytes), rb.Category, rb.Blocks)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	return b.String()
}
