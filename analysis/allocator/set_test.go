package allocator

import (
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"
)

// checkSet verifies a set's structure: entries in order, keys matching their blocks, each
// bucket's last key up to date, the count right.
func checkSet(t *testing.T, s *blockSet) {
	t.Helper()
	if len(s.last) != len(s.buckets) {
		t.Fatalf("%d buckets, %d last keys", len(s.buckets), len(s.last))
	}
	n := 0
	var prev *Block
	for i, bk := range s.buckets {
		if len(bk) == 0 || len(bk) > bucketMax || bk[len(bk)-1].key != s.last[i] {
			t.Fatalf("bucket %d: %d entries, last key %v", i, len(bk), s.last[i])
		}
		for _, e := range bk {
			if e.size != e.b.size || e.addr != e.b.addr || (prev != nil && !less(prev, e.b)) {
				t.Fatalf("bucket %d: entry %v out of place", i, e.key)
			}
			prev = e.b
			n++
		}
	}
	if n != s.n {
		t.Fatalf("%d entries, count %d", n, s.n)
	}
}

// TestBlockSetAgainstSorted drives a set through random inserts, removes and removals at a
// lower bound, with few distinct sizes (long runs of equal sizes across buckets)
// and with many, and checks every lower bound against a sorted slice of the same blocks, and
// the structure after every change.
func TestBlockSetAgainstSorted(t *testing.T) {
	for _, sizes := range []int{3, 40, 5000} {
		r := rand.New(rand.NewPCG(uint64(sizes), 9))
		var s blockSet
		var ref []*Block // in (size, address) order
		cmp := func(a, b *Block) int {
			if less(a, b) {
				return -1
			}
			if less(b, a) {
				return 1
			}
			return 0
		}
		lower := func(size int64, addr uint64) *Block {
			i, _ := slices.BinarySearchFunc(ref, &Block{size: size, addr: addr}, cmp)
			if i == len(ref) {
				return nil
			}
			return ref[i]
		}
		used := map[uint64]bool{}
		for step := range 40000 {
			grow := len(ref) < 6000 || r.IntN(3) == 0
			switch op := r.IntN(4); {
			case grow && op < 3 || len(ref) == 0:
				addr := uint64(r.IntN(1<<30)) * 512
				if used[addr] {
					continue
				}
				used[addr] = true
				b := &Block{size: int64(1+r.IntN(sizes)) * 512, addr: addr}
				s.insert(b)
				i, _ := slices.BinarySearchFunc(ref, b, cmp)
				ref = slices.Insert(ref, i, b)
			case op == 0:
				// getFreeBlock's removal: the first block of a size or more.
				size := int64(1+r.IntN(sizes+1)) * 512
				p := s.lowerBound(size, 0)
				want := lower(size, 0)
				if got := s.at(p); got != want {
					t.Fatalf("sizes %d step %d: lowerBound(%d, 0) = %v, want %v", sizes, step, size, got, want)
				}
				if want != nil {
					s.removeAt(p)
					i, _ := slices.BinarySearchFunc(ref, want, cmp)
					ref = slices.Delete(ref, i, i+1)
					delete(used, want.addr)
				}
			default:
				b := ref[r.IntN(len(ref))]
				if !s.remove(b) {
					t.Fatalf("sizes %d step %d: block %#x not found", sizes, step, b.addr)
				}
				i, _ := slices.BinarySearchFunc(ref, b, cmp)
				ref = slices.Delete(ref, i, i+1)
				delete(used, b.addr)
				if s.remove(b) {
					t.Fatalf("sizes %d step %d: block %#x removed twice", sizes, step, b.addr)
				}
			}
			if step%97 == 0 || len(ref) < 50 {
				checkSet(t, &s)
			}
			// A lower bound by size and address, exact or between blocks.
			if len(ref) > 0 {
				b := ref[r.IntN(len(ref))]
				addr := b.addr - uint64(r.IntN(2))
				if got, want := s.at(s.lowerBound(b.size, addr)), lower(b.size, addr); got != want {
					t.Fatalf("sizes %d step %d: lowerBound(%d, %#x) = %v, want %v", sizes, step, b.size, addr, got, want)
				}
			}
		}
		checkSet(t, &s)
		if got := s.all(); !slices.Equal(got, ref) {
			t.Fatalf("sizes %d: all() differs from the sorted blocks", sizes)
		}
		// Emptied, the set is as new.
		for len(ref) > 0 {
			b := ref[len(ref)-1]
			ref = ref[:len(ref)-1]
			if !s.remove(b) {
				t.Fatalf("sizes %d: block %#x not found while emptying", sizes, b.addr)
			}
		}
		checkSet(t, &s)
		if len(s.buckets) != 0 || len(s.last) != 0 {
			t.Fatalf("sizes %d: emptied set keeps %d buckets, %d last keys", sizes, len(s.buckets), len(s.last))
		}
	}
}

// TestBlockIsOneCacheLine: a replay touches a block or two per event of a working set larger
// than the caches; a field more must not make a block take two lines.
func TestBlockIsOneCacheLine(t *testing.T) {
	if n := unsafe.Sizeof(Block{}); n != 64 {
		t.Fatalf("Block is %d bytes, want 64", n)
	}
}

// TestSearchKeys checks the search by quarters against a linear scan, for every length up to
// 300 (each way the quarters and the count after them end) and targets below, between,
// on and above the keys, with runs of equal sizes.
func TestSearchKeys(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for n := 0; n <= 300; n++ {
		ks := make([]key, n)
		for i := range ks {
			ks[i] = key{size: rng.Int64N(40) * 512, addr: rng.Uint64N(1 << 20)}
		}
		slices.SortFunc(ks, func(a, b key) int {
			if lessKey(a.size, a.addr, b.size, b.addr) {
				return -1
			}
			if a == b {
				return 0
			}
			return 1
		})
		targets := []key{{0, 0}, {1 << 40, 0}} // sizes are never negative (keyBelow)
		for _, k := range ks {
			targets = append(targets, k, key{k.size, k.addr + 1}, key{k.size, 0}, key{k.size + 1, 0})
		}
		for _, k := range targets {
			want := 0
			for want < n && lessKey(ks[want].size, ks[want].addr, k.size, k.addr) {
				want++
			}
			if got := searchKeys(ks, k.size, k.addr); got != want {
				t.Fatalf("%d keys, target %v: %d, want %d", n, k, got, want)
			}
		}
	}
}
