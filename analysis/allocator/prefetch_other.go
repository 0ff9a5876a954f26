//go:build !amd64 && !arm64

package allocator

import "unsafe"

// prefetch does nothing where the package has no assembly for it.
func prefetch(unsafe.Pointer) {}
