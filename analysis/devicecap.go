package analysis

import (
	"cmp"
	"fmt"
	"slices"
)

// MaxListedDevices bounds the devices one answer lists (summarize, replay, check): a file may
// name 65,536 devices, and an answer that lists each is megabytes long. The rest are counted
// in DevicesOmitted and said in a note.
const MaxListedDevices = 64

// deviceRank is what picks the devices an answer lists.
type deviceRank struct {
	oom  bool  // the device has an OOM (or fails a budget): always listed first
	peak int64 // then the largest by peak
}

// listedDevices returns the positions (of n devices ranked by rank) an answer lists, in their
// original order: every device with an OOM first, then the largest by peak, at most max.
func listedDevices(n int, rank func(i int) deviceRank, max int) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	if n <= max {
		return idx
	}
	ranks := make([]deviceRank, n)
	for i := range ranks {
		ranks[i] = rank(i)
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		ra, rb := ranks[a], ranks[b]
		if ra.oom != rb.oom {
			if ra.oom {
				return -1
			}
			return 1
		}
		return cmp.Compare(rb.peak, ra.peak)
	})
	idx = idx[:max]
	slices.Sort(idx)
	return idx
}

// keepListed returns the elements of list at the positions keep names (sorted).
func keepListed[T any](list []T, keep []int) []T {
	if len(keep) == len(list) {
		return list
	}
	out := make([]T, 0, len(keep))
	for _, i := range keep {
		out = append(out, list[i])
	}
	return out
}

// devicesOmittedNote says how many devices an answer leaves out and which it lists.
func devicesOmittedNote(omitted, total int, what string) string {
	return fmt.Sprintf("%d of the file's %d devices are not listed: an answer lists at most %d (every device with %s first, then the largest by peak); pass device to read one",
		omitted, total, MaxListedDevices, what)
}
