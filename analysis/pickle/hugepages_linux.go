package pickle

import "syscall"

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
