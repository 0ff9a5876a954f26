// Package hugepage asks the kernel to back large arrays with transparent huge pages: filling
// tens or hundreds of megabytes page by page costs a fault per 4 KiB, with huge pages one per
// 2 MiB, and fewer TLB misses on the passes over them afterwards. Everything here is a hint:
// the Go heap owns the memory as usual, errors are ignored, and other systems get plain
// slices.
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
