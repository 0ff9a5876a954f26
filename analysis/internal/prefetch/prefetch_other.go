//go:build !amd64 && !arm64

package prefetch

import "unsafe"

// Line does nothing where the package has no assembly for it.
func Line(unsafe.Pointer) {}
