package capacity

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/memsnap/memsnap/analysis/sim"
)

// simFile runs the capacity workload at one size (unbounded) as a File.
func simFile(dim string, size int64) (File, sim.CapacityRun) {
	r := sim.CapacityTraining(sim.CapacityDimsFor(dim, size), 0)
	r.Snap.Path = fmt.Sprintf("%s%d.pickle", dim, size)
	return File{Snap: r.Snap, Size: size}, r
}

func pctOff(got, want int64) float64 { return 100 * math.Abs(float64(got-want)) / float64(want) }

func predictionAt(t *testing.T, d Device, k int64) Prediction {
	t.Helper()
	for _, p := range d.Predictions {
		if p.Size == k {
			return p
		}
	}
	t.Fatalf("no prediction at %d: %+v", k, d.Predictions)
	return Prediction{}
}

// TestHeldOutSizes: each size predicted from the other files (the allocator's rounding, a
// workspace at the larger sizes only, and for seq attention's T×T scores) is within 5% of the
// simulated run at that size, for peak allocated and peak reserved.
func TestHeldOutSizes(t *testing.T) {
	for _, tc := range []struct {
		dim   string
		sizes []int64
	}{
		{"batch", []int64{4, 8, 16, 24}},
		{"seq", []int64{128, 256, 512, 640}},
	} {
		files := map[int64]File{}
		truth := map[int64]sim.CapacityRun{}
		for _, s := range tc.sizes {
			files[s], truth[s] = simFile(tc.dim, s)
		}
		for _, held := range tc.sizes {
			var in []File
			for _, s := range tc.sizes {
				if s != held {
					in = append(in, files[s])
				}
			}
			r, err := Analyze(context.Background(), in, Options{Dimension: tc.dim, Predict: []int64{held}})
			if err != nil {
				t.Fatal(err)
			}
			d := r.Devices[0]
			if d.Method != MethodTwoPoints {
				t.Errorf("method %s", d.Method)
			}
			p := predictionAt(t, d, held)
			ea, er := pctOff(p.PeakAllocatedBytes, truth[held].PeakAllocated), pctOff(p.PeakReservedBytes, truth[held].PeakReserved)
			t.Logf("%s %d from the others: allocated %d vs %d (%.2f%%), reserved %d vs %d (%.2f%%)", tc.dim, held,
				p.PeakAllocatedBytes, truth[held].PeakAllocated, ea, p.PeakReservedBytes, truth[held].PeakReserved, er)
			if ea > 5 || er > 5 {
				t.Errorf("%s %d: off by %.2f%% allocated, %.2f%% reserved (over 5%%)", tc.dim, held, ea, er)
			}
		}
	}
}

// largestSimulated runs the workload at capacity c for sizes from step upwards: the largest
// that completes.
func largestSimulated(dim string, c, step int64) int64 {
	best := int64(0)
	for s := step; ; s += step {
		if sim.CapacityTraining(sim.CapacityDimsFor(dim, s), c).OOM {
			return best
		}
		best = s
	}
}

// TestLargestSize: on a device between two recorded sizes' needs, the largest size found by
// the search is within 2 of the largest a simulated run completes.
func TestLargestSize(t *testing.T) {
	for _, tc := range []struct {
		dim   string
		sizes []int64
		cap   int64
	}{
		{"batch", []int64{4, 8, 16}, 400 * sim.MiB},
		{"batch", []int64{4, 8, 16}, 1000 * sim.MiB},
		{"seq", []int64{128, 256, 512}, 600 * sim.MiB},
	} {
		var in []File
		for _, s := range tc.sizes {
			f, _ := simFile(tc.dim, s)
			in = append(in, f)
		}
		r, err := Analyze(context.Background(), in, Options{Dimension: tc.dim, Capacity: tc.cap})
		if err != nil {
			t.Fatal(err)
		}
		d := r.Devices[0]
		want := largestSimulated(tc.dim, tc.cap, 1)
		if d.MaxSize == nil {
			t.Fatalf("max_size null: %s", d.MaxSizeNote)
		}
		t.Logf("%s at %d MiB: predicted %d, simulated %d; %s", tc.dim, tc.cap>>20, *d.MaxSize, want, d.Headline)
		if *d.MaxSize < want-2 || *d.MaxSize > want+2 {
			t.Errorf("%s at %d MiB: largest %d, simulated %d", tc.dim, tc.cap>>20, *d.MaxSize, want)
		}
		if d.DeviceBytes != tc.cap || d.DeviceBytesSource != SourceCapacity {
			t.Errorf("device bytes %d %s", d.DeviceBytes, d.DeviceBytesSource)
		}
	}
}

// TestOneSnapshotEstimate: from one snapshot at batch 8, batch 16 within 15% of the run.
func TestOneSnapshotEstimate(t *testing.T) {
	f, _ := simFile("batch", 8)
	_, truth := simFile("batch", 16)
	r, err := Analyze(context.Background(), []File{f}, Options{Predict: []int64{16}})
	if err != nil {
		t.Fatal(err)
	}
	d := r.Devices[0]
	if d.Method != MethodRoles {
		t.Errorf("method %s", d.Method)
	}
	p := predictionAt(t, d, 16)
	ea, er := pctOff(p.PeakAllocatedBytes, truth.PeakAllocated), pctOff(p.PeakReservedBytes, truth.PeakReserved)
	t.Logf("batch 16 from batch 8: allocated %d vs %d (%.2f%%), reserved %d vs %d (%.2f%%)", p.PeakAllocatedBytes, truth.PeakAllocated, ea, p.PeakReservedBytes, truth.PeakReserved, er)
	if ea > 15 || er > 15 {
		t.Errorf("off by %.2f%% allocated, %.2f%% reserved (over 15%%)", ea, er)
	}
	t.Log(r.Text())
}
