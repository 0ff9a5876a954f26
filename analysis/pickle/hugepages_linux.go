package pickle

import (
	"syscall"
	"unsafe"
)

// mapScratch returns size zeroed bytes outside the Go heap, advised for huge pages, for
// pointer-free scratch memory that lives only while one file decodes (the memo); release it
// with unmapScratch. It falls back to the heap when the mapping fails.
func mapScratch(size int) (b []byte, mapped bool) {
	b, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return make([]byte, size), false
	}
	_ = syscall.Madvise(b, 14) // MADV_HUGEPAGE
	return b, true
}

// unmapScratch releases what mapScratch mapped (heap fallbacks are left to the GC).
func unmapScratch(b []byte, mapped bool) {
	if mapped {
		_ = syscall.Munmap(b)
	}
}

// populate asks the kernel to back [p, p+size) with memory now (MADV_POPULATE_WRITE, Linux
// 5.14 and later): a helper goroutine calls it ahead of the goroutine that will write there,
// which then finds its pages ready instead of stopping at each one to have it zeroed. The
// contents are not touched. Only a hint: errors (an older kernel) are ignored.
func populate(p unsafe.Pointer, size uintptr) {
	const page = 4 << 10
	start := (uintptr(p) + page - 1) &^ (page - 1)
	end := (uintptr(p) + size) &^ (page - 1)
	if end <= start {
		return
	}
	mem := unsafe.Slice((*byte)(unsafe.Add(p, start-uintptr(p))), end-start)
	_ = syscall.Madvise(mem, 23) // MADV_POPULATE_WRITE
}
