//go:build !linux

package pickle

import "unsafe"

// adviseHuge is a no-op where transparent huge pages do not exist.
func adviseHuge(unsafe.Pointer, uintptr) {}
