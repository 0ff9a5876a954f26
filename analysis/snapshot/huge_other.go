//go:build !linux

package snapshot

import "unsafe"

func adviseHuge(unsafe.Pointer, uintptr) {}
