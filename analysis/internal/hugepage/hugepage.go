// Package hugepage asks the kernel for memory ahead of its use: transparent huge pages for
// large arrays (filling tens or hundreds of megabytes page by page costs a fault per 4 KiB, with
// huge pages one per 2 MiB, and fewer TLB misses on the passes over them afterwards), and pages
// populated by a helper ahead of the goroutine that will write them. Everything here is a hint:
// the Go heap owns the memory as usual, errors are ignored, and other systems get plain slices.
package hugepage

import "unsafe"

// MinBytes is the smallest slice Make advises: below two huge pages, the aligned part that a
// huge page can back is too small to matter.
const MinBytes = 4 << 20

// Make is make([]T, n, c), advised for huge pages when it takes MinBytes or more. Only for
// slices about to be filled: the advice takes effect at each page's first write.
func Make[T any](n, c int) []T {
	s := make([]T, n, c)
	var zero T
	if size := uintptr(c) * unsafe.Sizeof(zero); size >= MinBytes {
		Advise(unsafe.Pointer(unsafe.SliceData(s)), size)
	}
	return s
}

// aligned returns the whole align-sized (a power of two) pages inside [p, p+size): their
// offset from p and their length, 0 when there are none.
func aligned(p, size, align uintptr) (off, n uintptr) {
	start := (p + align - 1) &^ (align - 1)
	end := (p + size) &^ (align - 1)
	if end <= start {
		return 0, 0
	}
	return start - p, end - start
}
