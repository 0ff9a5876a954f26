package hugepage

import (
	"syscall"
	"unsafe"
)

// Advise asks for huge pages on the 2 MiB-aligned part of [p, p+size) (MADV_HUGEPAGE): pages
// written after the call are backed by huge pages where the kernel has them.
func Advise(p unsafe.Pointer, size uintptr) {
	const huge = 2 << 20
	start := (uintptr(p) + huge - 1) &^ (huge - 1)
	end := (uintptr(p) + size) &^ (huge - 1)
	if end <= start {
		return
	}
	mem := unsafe.Slice((*byte)(unsafe.Add(p, start-uintptr(p))), end-start)
	_ = syscall.Madvise(mem, 14) // MADV_HUGEPAGE
}
