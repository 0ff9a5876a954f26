//go:build !linux

package load

// The page hints are Linux's (the syscall package has no madvise on macOS or Windows):
// elsewhere the mapping is read as it is, and its pages count toward RSS until it is unmapped.

func adviseSequential([]byte) {}

func dropPages([]byte) {}

func prefetchPages([]byte) {}
