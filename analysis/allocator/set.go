package allocator

// blockSet is an ordered set of free blocks of one pool and stream, sorted like PyTorch's
// BlockComparatorSize within a stream: by size, then address. It is a list of sorted buckets
// (square-root decomposition): insert, remove and lower_bound stay cheap with hundreds of
// thousands of cached blocks, and iteration in order is a walk over the buckets. Entries keep
// their keys inline so that searches do not chase block pointers.
type blockSet struct {
	buckets [][]entry
	n       int
}

// entry is one block with its key (the block's size and address when it was inserted; a
// block's key does not change while it is in the set).
type entry struct {
	size int64
	addr uint64
	b    *Block
}

const bucketMax = 512

// lessKey orders (size, address) keys.
func lessKey(as int64, aa uint64, bs int64, ba uint64) bool {
	if as != bs {
		return as < bs
	}
	return aa < ba
}

// less orders blocks by (size, address).
func less(a, b *Block) bool { return lessKey(a.size, a.addr, b.size, b.addr) }

// pos is a position in a blockSet: bucket and index inside it.
type pos struct{ b, i int }

// lowerBound returns the position of the first block with (size, addr) >= (size, addr).
func (s *blockSet) lowerBound(size int64, addr uint64) pos {
	lo, hi := 0, len(s.buckets)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		bk := s.buckets[m]
		if e := &bk[len(bk)-1]; lessKey(e.size, e.addr, size, addr) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == len(s.buckets) {
		return pos{lo, 0}
	}
	bk := s.buckets[lo]
	i, j := 0, len(bk)
	for i < j {
		m := int(uint(i+j) >> 1)
		if e := &bk[m]; lessKey(e.size, e.addr, size, addr) {
			i = m + 1
		} else {
			j = m
		}
	}
	return pos{lo, i}
}

// at returns the block at p, or nil past the end.
func (s *blockSet) at(p pos) *Block {
	if p.b >= len(s.buckets) {
		return nil
	}
	return s.buckets[p.b][p.i].b
}

// next returns the position after p.
func (s *blockSet) next(p pos) pos {
	p.i++
	if p.i >= len(s.buckets[p.b]) {
		return pos{p.b + 1, 0}
	}
	return p
}

// last returns the position of the largest block and whether the set is non-empty.
func (s *blockSet) last() (pos, bool) {
	if len(s.buckets) == 0 {
		return pos{}, false
	}
	return pos{len(s.buckets) - 1, len(s.buckets[len(s.buckets)-1]) - 1}, true
}

// insert adds b (not already present).
func (s *blockSet) insert(b *Block) {
	s.n++
	e := entry{b.size, b.addr, b}
	if len(s.buckets) == 0 {
		s.buckets = append(s.buckets, append(make([]entry, 0, 16), e))
		return
	}
	p := s.lowerBound(b.size, b.addr)
	if p.b == len(s.buckets) {
		p = pos{p.b - 1, len(s.buckets[p.b-1])}
	}
	bk := append(s.buckets[p.b], entry{})
	copy(bk[p.i+1:], bk[p.i:])
	bk[p.i] = e
	if len(bk) > bucketMax {
		half := len(bk) / 2
		right := make([]entry, len(bk)-half, bucketMax+1)
		copy(right, bk[half:])
		clear(bk[half:])
		bk = bk[:half]
		s.buckets = append(s.buckets, nil)
		copy(s.buckets[p.b+2:], s.buckets[p.b+1:])
		s.buckets[p.b+1] = right
	}
	s.buckets[p.b] = bk
}

// remove deletes b and reports whether it was present.
func (s *blockSet) remove(b *Block) bool {
	p := s.lowerBound(b.size, b.addr)
	if s.at(p) != b {
		return false
	}
	s.removeAt(p)
	return true
}

func (s *blockSet) removeAt(p pos) {
	s.n--
	bk := s.buckets[p.b]
	copy(bk[p.i:], bk[p.i+1:])
	bk[len(bk)-1] = entry{}
	bk = bk[:len(bk)-1]
	if len(bk) == 0 {
		copy(s.buckets[p.b:], s.buckets[p.b+1:])
		s.buckets[len(s.buckets)-1] = nil
		s.buckets = s.buckets[:len(s.buckets)-1]
		return
	}
	s.buckets[p.b] = bk
}

// all returns the blocks in order (a copy: callers may change the set while walking it).
func (s *blockSet) all() []*Block {
	out := make([]*Block, 0, s.n)
	for _, bk := range s.buckets {
		for _, e := range bk {
			out = append(out, e.b)
		}
	}
	return out
}
