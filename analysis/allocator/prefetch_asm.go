//go:build amd64 || arm64

package allocator

import "unsafe"

// prefetch asks the CPU to start loading the cache line at p and goes on at once (PREFETCHT0,
// PRFM PLDL1KEEP): a replay knows which blocks the next events free, and a plain load would
// wait for the memory instead.
//
//go:noescape
func prefetch(p unsafe.Pointer)
