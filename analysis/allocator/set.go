package allocator

import "math/bits"

// blockSet is an ordered set of free blocks of one pool and stream, sorted like PyTorch's
// BlockComparatorSize within a stream: by size, then address. It is a list of sorted buckets
// (a two-level B-tree): insert, remove and lower_bound stay cheap with hundreds of thousands
// of cached blocks, and iteration in order is a walk over the buckets. Entries keep their keys
// inline so that searches do not chase block pointers, and the last key of every bucket is
// kept apart (last) so that finding the bucket reads one small array instead of one cache line
// per bucket probed. A replay does a set operation or two per event on a working set larger
// than the caches: small buckets keep the entries an insert or a remove shifts to a few cache
// lines.
type blockSet struct {
	buckets [][]entry
	last    []key // last[i] is the key of buckets[i]'s last entry
	n       int
}

// key is a block's position in the order: its size and address.
type key struct {
	size int64
	addr uint64
}

// entry is one block with its key (the block's size and address when it was inserted; a
// block's key does not change while it is in the set).
type entry struct {
	key
	b *Block
}

// bucketMax is the most entries a bucket holds before it splits in two.
const bucketMax = 32

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
	b := searchKeys(s.last, size, addr)
	if b == len(s.buckets) {
		return pos{b, 0}
	}
	// In the bucket, count the keys below: a scan of a few cache lines in a row, which the CPU
	// loads together, where a binary search would wait for each line in turn.
	i := 0
	for k := range s.buckets[b] {
		i += keyBelow(&s.buckets[b][k].key, size, addr)
	}
	return pos{b, i}
}

// searchKeys returns the index of the first of the sorted keys that is >= (size, addr).
// Binary searches mispredict half their branches: this one has none (Khuong and Morin's
// branch-free form), and it narrows by quarters: the three keys it compares in a step are
// loaded together, so that a search waits for half as many loads in a row as a binary one.
func searchKeys(ks []key, size int64, addr uint64) int {
	n := len(ks)
	// The answer is in [base, base+n]: every key before base is below, and the key at base+n
	// (if any) is not.
	base := 0
	for n > 8 {
		q := n >> 2
		c1 := keyBelow(&ks[base+q], size, addr)
		c2 := keyBelow(&ks[base+2*q], size, addr)
		c3 := keyBelow(&ks[base+3*q], size, addr)
		// The keys are sorted, so c1 >= c2 >= c3: base moves a quarter for each key below, and
		// the range left is a quarter, or the last part when all three are.
		base += q&-c1 + q&-c2 + q&-c3
		n = q + (n-4*q)&-c3
	}
	// The last few keys are counted, each compared on its own: none waits for another.
	c := 0
	for _, k := range ks[base : base+n] {
		c += keyBelow(&k, size, addr)
	}
	return base + c
}

// keyBelow is 1 when k < (size, addr), else 0, without a branch: the keys compared as 128-bit
// numbers, size high and address low (sizes are never negative).
func keyBelow(k *key, size int64, addr uint64) int {
	_, borrow := bits.Sub64(k.addr, addr, 0)
	_, borrow = bits.Sub64(uint64(k.size), uint64(size), borrow)
	return int(borrow)
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

// lastPos returns the position of the largest block and whether the set is non-empty.
func (s *blockSet) lastPos() (pos, bool) {
	if len(s.buckets) == 0 {
		return pos{}, false
	}
	return pos{len(s.buckets) - 1, len(s.buckets[len(s.buckets)-1]) - 1}, true
}

// insert adds b (not already present).
func (s *blockSet) insert(b *Block) {
	s.insertAt(s.lowerBound(b.size, b.addr), b)
}

// insertAt adds b (not already present) at p, which must be its place in the order: its
// lowerBound, or a position known to be it.
func (s *blockSet) insertAt(p pos, b *Block) {
	s.n++
	e := entry{key{b.size, b.addr}, b}
	if len(s.buckets) == 0 {
		s.buckets = append(s.buckets, append(make([]entry, 0, bucketMax+1), e))
		s.last = append(s.last, e.key)
		return
	}
	if p.b == len(s.buckets) {
		p = pos{p.b - 1, len(s.buckets[p.b-1])}
	}
	bk := append(s.buckets[p.b], entry{})
	copy(bk[p.i+1:], bk[p.i:])
	bk[p.i] = e
	if p.i == len(bk)-1 {
		s.last[p.b] = e.key
	}
	if len(bk) > bucketMax {
		half := len(bk) / 2
		right := make([]entry, len(bk)-half, bucketMax+1)
		copy(right, bk[half:])
		clear(bk[half:])
		bk = bk[:half]
		s.buckets = append(s.buckets, nil)
		copy(s.buckets[p.b+2:], s.buckets[p.b+1:])
		s.buckets[p.b+1] = right
		s.last = append(s.last, key{})
		copy(s.last[p.b+2:], s.last[p.b+1:])
		s.last[p.b+1] = s.last[p.b]
		s.last[p.b] = bk[half-1].key
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
		copy(s.last[p.b:], s.last[p.b+1:])
		s.last = s.last[:len(s.last)-1]
		return
	}
	if p.i == len(bk) {
		s.last[p.b] = bk[p.i-1].key
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
