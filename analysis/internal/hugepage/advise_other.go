//go:build !linux

package hugepage

import "unsafe"

// Advise does nothing where the system has no transparent huge pages to ask for.
func Advise(unsafe.Pointer, uintptr) {}

// Populate does nothing where the system cannot populate pages ahead of use.
func Populate(unsafe.Pointer, uintptr) {}
