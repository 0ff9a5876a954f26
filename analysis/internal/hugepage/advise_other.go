//go:build !linux

package hugepage

import "unsafe"

// Advise does nothing where the system has no transparent huge pages to ask for.
func Advise(unsafe.Pointer, uintptr) {}
