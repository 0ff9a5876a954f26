package hugepage

import (
	"syscall"
	"unsafe"
)

// Advise asks for huge pages on the 2 MiB-aligned part of [p, p+size) (MADV_HUGEPAGE): pages
// written after the call are backed by huge pages where the kernel has them.
func Advise(p unsafe.Pointer, size uintptr) { advise(p, size, 2<<20, 14) } // MADV_HUGEPAGE

// Populate asks the kernel to back the 4 KiB pages of [p, p+size) with memory now
// (MADV_POPULATE_WRITE, Linux 5.14 and later): a helper goroutine calls it ahead of the one
// that will write there, which then finds its pages ready instead of stopping at each one to
// have it zeroed. The contents are not touched. Errors (an older kernel) are ignored.
func Populate(p unsafe.Pointer, size uintptr) { advise(p, size, 4<<10, 23) } // MADV_POPULATE_WRITE

// advise applies advice to the align-aligned part of [p, p+size), if any.
func advise(p unsafe.Pointer, size, align uintptr, advice int) {
	if off, n := aligned(uintptr(p), size, align); n > 0 {
		_ = syscall.Madvise(unsafe.Slice((*byte)(unsafe.Add(p, off)), n), advice)
	}
}
