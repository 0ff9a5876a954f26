package allocator

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// BlockSpec is one block of a segment given to AddSegment.
type BlockSpec struct {
	Addr      uint64
	Size      int64
	Requested int64
	// State: allocated, pending free or inactive (cached free).
	State snapshot.BlockState
	// Unmapped marks a range of an expandable segment with no memory behind it (page-aligned).
	Unmapped bool
}

// SegmentSpec is a segment that exists before the first request (a reconstructed start).
type SegmentSpec struct {
	Addr   uint64
	Size   int64 // cudaMalloc size, or the whole reserved range of an expandable segment
	Stream uint64
	Pool   snapshot.PoolID
	Small  bool
	// Expandable: a range of an expandable segment; its blocks cover [Addr, Addr+Size) and
	// the unmapped ones are page-aligned.
	Expandable bool
	Blocks     []BlockSpec // address order, contiguous from Addr, covering Size
}

// AddSegment installs a segment with its blocks, as if it had been built by earlier requests.
// It returns the blocks in the order given (allocated and pending ones are live handles;
// pending ones complete with Complete). Adjacent cached blocks are merged.
func (a *Allocator) AddSegment(spec SegmentSpec) ([]*Block, error) {
	if spec.Size <= 0 {
		return nil, fmt.Errorf("segment %#x: size %d", spec.Addr, spec.Size)
	}
	if _, dup := a.segs[spec.Addr]; dup {
		return nil, fmt.Errorf("segment %#x: already present", spec.Addr)
	}
	p := a.pool(spec.Pool, spec.Small)
	var page int64
	if spec.Expandable {
		page = pageSize(spec.Small)
	}
	seg := newSegment(spec.Addr, spec.Size, spec.Stream, p, page)
	at := spec.Addr
	out := make([]*Block, len(spec.Blocks))
	var prev *Block
	for i, bs := range spec.Blocks {
		if bs.Addr != at || bs.Size <= 0 {
			return nil, fmt.Errorf("segment %#x: block %d at %#x (size %d), want %#x", spec.Addr, i, bs.Addr, bs.Size, at)
		}
		if bs.Unmapped && (!spec.Expandable || int64(bs.Addr-spec.Addr)%seg.page != 0 || bs.Size%seg.page != 0) {
			return nil, fmt.Errorf("segment %#x: unmapped block %d at %#x is not page-aligned in an expandable segment", spec.Addr, i, bs.Addr)
		}
		at += uint64(bs.Size)
		b := &Block{addr: bs.Addr, size: bs.Size, requested: bs.Requested, seg: seg, mapped: !bs.Unmapped}
		switch {
		case bs.Unmapped:
		case bs.State == snapshot.StateActiveAllocated:
			b.allocated = true
		case bs.State == snapshot.StateActivePendingFree:
			b.pending = true // put in the pending list below, once the segment is known good
		}
		b.prev = prev
		if prev != nil {
			prev.next = b
		} else {
			seg.head = b
		}
		prev = b
		out[i] = b
	}
	if at != spec.Addr+uint64(spec.Size) {
		return nil, fmt.Errorf("segment %#x: blocks cover %d bytes of %d", spec.Addr, int64(at-spec.Addr), spec.Size)
	}
	a.segs[spec.Addr] = seg
	for _, b := range out {
		switch {
		case !b.mapped:
		case b.allocated:
			a.allocated += b.size
			a.active += b.size
			a.reserved += b.size
		case b.pending:
			a.active += b.size
			a.reserved += b.size
			a.addPending(b)
		default:
			a.reserved += b.size
		}
	}
	// Cache the free ranges, merged as the allocator keeps them.
	for b := seg.head; b != nil; b = b.next {
		if b.allocated || b.pending {
			continue
		}
		for n := b.next; n != nil && !n.allocated && !n.pending && n.mapped == b.mapped; n = b.next {
			b.size += n.size
			b.next = n.next
			if n.next != nil {
				n.next.prev = b
			}
		}
		if b.mapped {
			a.insertFree(b)
		} else {
			a.insertUnmapped(b)
		}
	}
	a.stats.PeakReserved = max(a.stats.PeakReserved, a.reserved)
	a.stats.PeakAllocated = max(a.stats.PeakAllocated, a.allocated)
	return out, nil
}

// SegmentView is one segment as torch.cuda.memory._snapshot() reports it: a cudaMalloc'd
// segment, or one contiguous mapped range of an expandable segment.
type SegmentView struct {
	Addr       uint64
	Size       int64
	Stream     uint64
	Pool       snapshot.PoolID
	Small      bool
	Expandable bool
	Blocks     []*Block
}

// Segments returns the segments by address.
func (a *Allocator) Segments() []SegmentView {
	var out []SegmentView
	for _, seg := range a.segs {
		view := func(b *Block) SegmentView {
			return SegmentView{Addr: b.addr, Stream: seg.stream, Pool: seg.pool.id, Small: seg.pool.small, Expandable: seg.page > 0}
		}
		var cur *SegmentView
		for b := seg.head; b != nil; b = b.next {
			if !b.mapped {
				if cur != nil {
					out = append(out, *cur)
					cur = nil
				}
				continue
			}
			if cur == nil {
				v := view(b)
				cur = &v
			}
			cur.Size += b.size
			cur.Blocks = append(cur.Blocks, b)
		}
		if cur != nil {
			out = append(out, *cur)
		}
	}
	slices.SortFunc(out, func(x, y SegmentView) int { return cmp.Compare(x.Addr, y.Addr) })
	return out
}

// Check verifies the allocator's invariants: every segment's blocks are contiguous and cover
// it; allocated ≤ active ≤ reserved and each equals the sum over blocks; every cached free
// block is in its pool's set and every other block is not; no two cached free blocks (or two
// unmapped ranges) are adjacent; unmapped ranges are page-aligned.
func (a *Allocator) Check() error {
	var reserved, allocated, active int64
	inFree := map[*Block]bool{}
	inUnmapped := map[*Block]bool{}
	for _, pp := range a.pools {
		for _, p := range pp {
			for st, s := range p.free {
				n := 0
				var prev *Block
				if len(s.last) != len(s.buckets) {
					return fmt.Errorf("pool %v small=%v stream %#x: %d buckets, %d last keys", p.id, p.small, st, len(s.buckets), len(s.last))
				}
				for i, bk := range s.buckets {
					if len(bk) == 0 || bk[len(bk)-1].key != s.last[i] {
						return fmt.Errorf("pool %v small=%v stream %#x: bucket %d empty or its last key stale", p.id, p.small, st, i)
					}
					for _, e := range bk {
						b := e.b
						if e.size != b.size || e.addr != b.addr {
							return fmt.Errorf("pool %v small=%v stream %#x: block %#x changed while cached", p.id, p.small, st, b.addr)
						}
						if prev != nil && !less(prev, b) {
							return fmt.Errorf("pool %v small=%v stream %#x: free set out of order at %#x", p.id, p.small, st, b.addr)
						}
						prev = b
						inFree[b] = true
						n++
					}
				}
				if n != s.n {
					return fmt.Errorf("pool %v: free set counts %d blocks, holds %d", p.id, s.n, n)
				}
			}
			for _, l := range p.unmapped {
				for _, b := range l {
					inUnmapped[b] = true
				}
			}
		}
	}
	for addr, seg := range a.segs {
		if seg.head == nil || seg.head.prev != nil || seg.head.addr != addr {
			return fmt.Errorf("segment %#x: bad head", addr)
		}
		at := addr
		for b := seg.head; b != nil; b = b.next {
			if b.addr != at || b.size <= 0 || b.seg != seg {
				return fmt.Errorf("segment %#x: block at %#x (size %d), want %#x", addr, b.addr, b.size, at)
			}
			if b.next != nil && b.next.prev != b {
				return fmt.Errorf("segment %#x: broken links at %#x", addr, b.addr)
			}
			at += uint64(b.size)
			free := !b.allocated && !b.pending
			switch {
			case !b.mapped:
				if seg.page == 0 || int64(b.addr-addr)%seg.page != 0 || b.size%seg.page != 0 {
					return fmt.Errorf("segment %#x: unmapped block %#x not page-aligned", addr, b.addr)
				}
				if !inUnmapped[b] || inFree[b] {
					return fmt.Errorf("segment %#x: unmapped block %#x not in the unmapped set", addr, b.addr)
				}
			case free:
				reserved += b.size
				if !inFree[b] || inUnmapped[b] {
					return fmt.Errorf("segment %#x: cached block %#x not in its pool", addr, b.addr)
				}
			default:
				reserved += b.size
				active += b.size
				if b.allocated {
					allocated += b.size
				}
				if inFree[b] || inUnmapped[b] {
					return fmt.Errorf("segment %#x: live block %#x in a free set", addr, b.addr)
				}
			}
			if b.next != nil && free && !b.next.allocated && !b.next.pending && b.next.mapped == b.mapped {
				return fmt.Errorf("segment %#x: adjacent free blocks at %#x not merged", addr, b.addr)
			}
		}
		if at != addr+uint64(seg.size) {
			return fmt.Errorf("segment %#x: blocks cover %d of %d bytes", addr, int64(at-addr), seg.size)
		}
	}
	switch {
	case reserved != a.reserved:
		return fmt.Errorf("reserved %d, blocks sum to %d", a.reserved, reserved)
	case allocated != a.allocated:
		return fmt.Errorf("allocated %d, blocks sum to %d", a.allocated, allocated)
	case active != a.active:
		return fmt.Errorf("active %d, blocks sum to %d", a.active, active)
	case a.allocated > a.active || a.active > a.reserved:
		return fmt.Errorf("allocated %d, active %d, reserved %d out of order", a.allocated, a.active, a.reserved)
	case a.cfg.Capacity > 0 && a.reserved > a.cfg.Capacity:
		return fmt.Errorf("reserved %d over the capacity %d", a.reserved, a.cfg.Capacity)
	}
	return nil
}

// Overlaps reports whether [addr, addr+size) overlaps a segment (an expandable segment's
// whole reserved range counts).
func (a *Allocator) Overlaps(addr uint64, size int64) bool {
	end := addr + uint64(size)
	for _, seg := range a.segs {
		if seg.addr < end && addr < seg.addr+uint64(seg.size) {
			return true
		}
	}
	return false
}
