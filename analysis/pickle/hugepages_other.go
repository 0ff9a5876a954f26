//go:build !linux

package pickle

// mapScratch allocates scratch memory on the heap where anonymous mappings are not used.
func mapScratch(size int) ([]byte, bool) { return make([]byte, size), false }

func unmapScratch([]byte, bool) {}
