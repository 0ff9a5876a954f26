//go:build unix

package load

import (
	"os"
	"syscall"
)

// mapFile maps size bytes of f read-only (a pickle is then decoded in place: no copy through a
// buffer, no read system calls). ok is false when the file cannot be mapped; the caller reads
// it instead.
func mapFile(f *os.File, size int64) (data []byte, ok bool) {
	if size <= 0 || int64(int(size)) != size {
		return nil, false
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, false
	}
	_ = syscall.Madvise(data, syscall.MADV_SEQUENTIAL)
	return data, true
}

func unmapFile(data []byte) { _ = syscall.Munmap(data) }

// dropPages tells the kernel the mapped pages of b will not be read again, so that they stop
// counting toward the process's resident memory (the page cache keeps the file).
func dropPages(b []byte) { _ = syscall.Madvise(b, syscall.MADV_DONTNEED) }

// prefetchPages has the kernel map the pages of b now (MADV_POPULATE_READ, Linux 5.14 and
// later; a hint elsewhere), so that reading them later costs no page faults.
func prefetchPages(b []byte) {
	if err := syscall.Madvise(b, 22); err != nil { // MADV_POPULATE_READ
		_ = syscall.Madvise(b, syscall.MADV_WILLNEED)
	}
}
