package load

import "syscall"

func adviseSequential(data []byte) { _ = syscall.Madvise(data, syscall.MADV_SEQUENTIAL) }

// dropPages tells the kernel the mapped pages of b will not be read again, so that they stop
// counting toward the process's resident memory (the page cache keeps the file).
func dropPages(b []byte) { _ = syscall.Madvise(b, syscall.MADV_DONTNEED) }

// prefetchPages has the kernel map the pages of b now (MADV_POPULATE_READ, Linux 5.14 and
// later; a hint before), so that reading them later costs no page faults.
func prefetchPages(b []byte) {
	if err := syscall.Madvise(b, 22); err != nil { // MADV_POPULATE_READ
		_ = syscall.Madvise(b, syscall.MADV_WILLNEED)
	}
}
