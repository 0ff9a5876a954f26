package allocator

import "github.com/memsnap/memsnap/analysis/snapshot"

// Expandable segments (Note [Expandable Segments] in CUDACachingAllocator.cpp): each one
// reserves a virtual range and maps 2 MiB (small pool) or 20 MiB (large pool) pages into it as
// needed. Its blocks cover the whole range: mapped blocks (allocated, pending or cached free)
// and unmapped ranges, which are page-aligned at both ends.

func pageSize(small bool) int64 {
	if small {
		return SmallBuffer
	}
	return LargeBuffer
}

func (a *Allocator) addressSpace(page int64) int64 {
	n := a.cfg.AddressSpace
	if n <= 0 {
		n = 1 << 40
		if a.cfg.Capacity > 0 {
			n = a.cfg.Capacity + a.cfg.Capacity/8
		}
	}
	return (n + page - 1) / page * page
}

// splice links b between before and after (Block::splice), keeping the segment's head.
func splice(b, before, after *Block) {
	if before != nil {
		before.next = b
	} else if after != nil && after.seg.head == after {
		after.seg.head = b
	}
	b.prev = before
	if after != nil {
		after.prev = b
	}
	b.next = after
}

// tryAllocateExpandable is try_allocate_expandable_block: find the lowest place in an
// expandable segment of the pool and stream where size bytes fit by mapping pages, map them,
// and return the (mapped, free) block, removed from the pool. nil when mapping failed.
func (a *Allocator) tryAllocateExpandable(p *pool, stream uint64, size int64) *Block {
	c := a.findExpandableBlock(p, stream, size)
	if !c.mapped {
		if !a.mapBlock(c, min(c.size, size)) {
			return nil
		}
	}
	for c.size < size {
		next := c.next
		if !a.mapBlock(next, min(size-c.size, next.size)) {
			return nil
		}
		c = next
	}
	a.removeFree(c)
	return c
}

// findExpandableBlock is find_expandable_block: the lowest-addressed unmapped range of the
// pool and stream (with the free mapped block just before it) that, with the free ranges
// after it, holds size bytes; else a new expandable segment.
func (a *Allocator) findExpandableBlock(p *pool, stream uint64, size int64) *Block {
	allocatable := func(b *Block) bool { return b != nil && !b.allocated && !b.pending }
	room := func(b *Block) bool {
		var n int64
		for n < size && allocatable(b) {
			n += b.size
			b = b.next
		}
		return n >= size
	}
	for _, c := range p.unmapped[stream] {
		if allocatable(c.prev) {
			c = c.prev
		}
		if room(c) {
			return c
		}
	}
	page := pageSize(p.small)
	n := a.addressSpace(page)
	addr := a.segmentAddr(n, stream, true)
	seg := newSegment(addr, n, stream, p, page)
	c := a.newBlock(addr, n, seg, false)
	seg.head = c
	a.segs[addr] = seg
	a.insertUnmapped(c)
	return c
}

// mapBlock is map_block: map the pages covering the first size bytes of the unmapped block
// (all or nothing), merge them with free mapped neighbours and cache the result.
func (a *Allocator) mapBlock(b *Block, size int64) bool {
	seg := b.seg
	off := int64(b.addr - seg.addr)
	end := (off + size + seg.page - 1) / seg.page * seg.page
	n := end - off
	if n <= 0 {
		return false
	}
	if a.cfg.Capacity > 0 && a.reserved+n > a.cfg.Capacity {
		a.need = n
		return false
	}
	a.removeUnmapped(b)
	at := b.addr
	b.mapped = true
	if n < b.size {
		rest := a.newBlock(b.addr+uint64(n), b.size-n, seg, false)
		splice(rest, b, b.next)
		a.insertUnmapped(rest)
		b.size = n
	}
	a.tryMerge(b, b.prev)
	a.tryMerge(b, b.next)
	a.insertFree(b)
	a.reserved += n
	a.stats.SegmentMaps++
	a.stats.PeakReserved = max(a.stats.PeakReserved, a.reserved)
	a.emitSegment(Event{Action: snapshot.ActionSegmentMap, Addr: at, Size: n, Stream: seg.stream})
	return true
}

// unmapBlock is unmap_block: unmap the whole pages inside a cached free block of an
// expandable segment; the parts of pages at either end stay mapped and cached.
func (a *Allocator) unmapBlock(b *Block) {
	seg := b.seg
	off := int64(b.addr - seg.addr)
	end := off + b.size
	first := (off + seg.page - 1) / seg.page * seg.page
	last := end / seg.page * seg.page
	if first >= last {
		return
	}
	a.removeFree(b)
	if before := first - off; before > 0 {
		bf := a.newBlock(b.addr, before, seg, true)
		splice(bf, b.prev, b)
		a.insertFree(bf)
	}
	if after := end - last; after > 0 {
		af := a.newBlock(seg.addr+uint64(last), after, seg, true)
		splice(af, b, b.next)
		a.insertFree(af)
	}
	b.addr = seg.addr + uint64(first)
	b.size = last - first
	b.mapped = false
	at, n := b.addr, b.size
	a.tryMerge(b, b.prev)
	a.tryMerge(b, b.next)
	a.insertUnmapped(b)
	a.reserved -= n
	a.stats.SegmentUnmaps++
	a.emit(Event{Action: snapshot.ActionSegmentUnmap, Addr: at, Size: n, Stream: seg.stream})
}
