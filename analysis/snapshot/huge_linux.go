package snapshot

import (
	"syscall"
	"unsafe"
)

// adviseHuge asks the kernel to back a large, freshly allocated slice with transparent huge
// pages (one page fault per 2 MiB instead of per 4 KiB while it is filled). Only a hint.
func adviseHuge(p unsafe.Pointer, size uintptr) {
	const huge = 2 << 20
	start := (uintptr(p) + huge - 1) &^ (huge - 1)
	end := (uintptr(p) + size) &^ (huge - 1)
	if end <= start {
		return
	}
	_ = syscall.Madvise(unsafe.Slice((*byte)(unsafe.Add(p, start-uintptr(p))), end-start), 14) // MADV_HUGEPAGE
}
