package sim

import "testing"

// TestGrowingBatchTruth pins the what-if scenarios' ground truth (testdata/scenarios/README.md):
// the same OOM with the defaults on both devices; expandable segments serve it on 2128 MiB and
// fall 32 MiB short on 2 GiB.
func TestGrowingBatchTruth(t *testing.T) {
	for _, tc := range []struct {
		name string
		fn   func() (int64, WhatIfTruth)
		want WhatIfTruth
	}{
		{"avoids", func() (int64, WhatIfTruth) { _, tr := GrowingBatchOOM(); return 2128 * MiB, tr }, WhatIfTruth{
			OOM: OOMTruth{Site: "/workspace/proj/model.py:41 forward", Requested: 152 * MiB, DeviceFree: 150 * MiB, Reserved: 1978 * MiB,
				Allocated: 1646 * MiB, Inactive: 332 * MiB, LargestFree: 36 * MiB, Verdict: "fragmentation"},
			Capacity: 2128 * MiB, OOMEvent: 641, ExpandableFits: true, ExpandableHeadroom: 48 * MiB,
			PeakReserved: 2082 * MiB, ExpandablePeakReserved: 2080 * MiB, SegmentAllocs: 50, ExpandableSegmentMaps: 37}},
		{"capacity", func() (int64, WhatIfTruth) { _, tr := GrowingBatchCapacityOOM(); return 2048 * MiB, tr }, WhatIfTruth{
			OOM: OOMTruth{Site: "/workspace/proj/model.py:41 forward", Requested: 152 * MiB, DeviceFree: 70 * MiB, Reserved: 1978 * MiB,
				Allocated: 1646 * MiB, Inactive: 332 * MiB, LargestFree: 36 * MiB, Verdict: "fragmentation"},
			Capacity: 2048 * MiB, OOMEvent: 641, ExpandableFits: false, ExpandableHeadroom: -32 * MiB,
			PeakReserved: 2046 * MiB, ExpandablePeakReserved: 1980 * MiB, SegmentAllocs: 50, ExpandableSegmentMaps: 36}},
	} {
		capacity, got := tc.fn()
		if got != tc.want || got.Capacity != capacity {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, got, tc.want)
		}
	}
}
