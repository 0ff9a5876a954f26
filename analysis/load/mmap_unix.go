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
	adviseSequential(data)
	return data, true
}

func unmapFile(data []byte) { _ = syscall.Munmap(data) }
