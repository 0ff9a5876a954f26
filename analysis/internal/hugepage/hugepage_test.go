package hugepage

import (
	"testing"
	"unsafe"
)

func TestMake(t *testing.T) {
	type rec struct {
		a, b int64
		c    int32
	}
	for _, tc := range []struct{ n, c int }{
		{0, 0}, {3, 10}, {0, 1000},
		{MinBytes/24 - 1, MinBytes/24 - 1}, // just below MinBytes (rec is 24 bytes): not advised
		{10, MinBytes / 16},                // advised, mostly capacity
		{MinBytes / 8, MinBytes / 8},       // advised, all of it in use
	} {
		s := Make[rec](tc.n, tc.c)
		if len(s) != tc.n || cap(s) != tc.c {
			t.Errorf("Make(%d, %d): len %d cap %d", tc.n, tc.c, len(s), cap(s))
			continue
		}
		s = s[:cap(s)]
		for i := range s {
			if s[i] != (rec{}) {
				t.Fatalf("Make(%d, %d): element %d not zero", tc.n, tc.c, i)
			}
			s[i] = rec{int64(i), -int64(i), int32(i)}
		}
		for i := range s {
			if s[i].a != int64(i) || s[i].b != -int64(i) || s[i].c != int32(i) {
				t.Fatalf("Make(%d, %d): element %d reads back %+v", tc.n, tc.c, i, s[i])
			}
		}
	}
	if unsafe.Sizeof(rec{}) != 24 {
		t.Fatalf("rec is %d bytes: the cases above assume 24", unsafe.Sizeof(rec{}))
	}
}

func TestAligned(t *testing.T) {
	const huge, page = 2 << 20, 4 << 10
	for _, tc := range []struct {
		p, size, align uintptr
		off, n         uintptr
	}{
		{0, 0, huge, 0, 0},
		{huge, huge, huge, 0, huge},                    // exactly one huge page
		{huge + 1, 2*huge - 2, huge, 0, 0},             // ends one byte short of a whole page
		{huge + 1, 3 * huge, huge, huge - 1, 2 * huge}, // two whole pages inside, after huge-1 bytes
		{huge - page, 4*huge + page, huge, page, 4 * huge},
		{1, 100, page, 0, 0},
		{4095, 1 << 20, page, 1, 1<<20 - page},
		{0, 3*page - 1, page, 0, 2 * page},
	} {
		if off, n := aligned(tc.p, tc.size, tc.align); off != tc.off || n != tc.n {
			t.Errorf("aligned(%#x, %#x, %#x) = %#x, %#x; want %#x, %#x", tc.p, tc.size, tc.align, off, n, tc.off, tc.n)
		}
	}
}

func TestAdviseOddRanges(t *testing.T) {
	// Ranges too small to hold an aligned page, or not aligned at all, are advised without a
	// fault, and the memory stays usable.
	b := make([]byte, 3<<20)
	for _, r := range [][2]int{{0, 0}, {1, 100}, {4095, 1 << 20}, {1, 3<<20 - 1}} {
		Advise(unsafe.Pointer(&b[r[0]]), uintptr(r[1]))
		Populate(unsafe.Pointer(&b[r[0]]), uintptr(r[1]))
	}
	for i := range b {
		b[i] = byte(i)
	}
	for i := range b {
		if b[i] != byte(i) {
			t.Fatalf("byte %d reads %d after the advice", i, b[i])
		}
	}
}
