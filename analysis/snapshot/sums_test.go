package snapshot

import "testing"

func TestSegmentSums(t *testing.T) {
	seg := Segment{TotalSize: 20 << 20, Blocks: []Block{
		{Size: 4 << 20, RequestedSize: 4<<20 - 100, State: StateActiveAllocated},
		{Size: 2 << 20, RequestedSize: 2<<20 - 10, State: StateActivePendingFree},
		{Size: 6 << 20, State: StateInactive},
		{Size: 8 << 20, RequestedSize: 8 << 20, State: StateActiveAllocated},
	}}
	got := seg.Sums()
	want := SegmentSums{Allocated: 12 << 20, PendingFree: 2 << 20, Inactive: 6 << 20,
		Requested: 14<<20 - 110, RequestedAllocated: 12<<20 - 100}
	if got != want {
		t.Fatalf("sums %+v, want %+v", got, want)
	}
	if got.Active() != 14<<20 {
		t.Fatalf("active %d", got.Active())
	}
}
