//go:build amd64 || arm64

// Package prefetch starts cache-line loads ahead of use, for the passes over millions of trace
// events whose per-block records do not stay in the cache: a pass that knows which records the
// events a few steps on will touch asks for them now, and the misses overlap.
package prefetch

import "unsafe"

// Line asks the CPU to start loading the cache line at p and goes on at once (PREFETCHT0,
// PRFM PLDL1KEEP), where a plain load would wait for the memory. A bad address is no fault.
//
//go:noescape
func Line(p unsafe.Pointer)
