package capacity

import (
	"context"
	"fmt"
	"math"
	"strings"
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

func predictionAt(t *testing.T, d DeviceAnswer, k int64) Prediction {
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

// TestOOMFile: a file recorded at a size that failed gives the capacity (reserved +
// device_free at its OOM event); it is matched up to the OOM, and the largest size is within 2
// of the simulated one.
func TestOOMFile(t *testing.T) {
	const c = 500 * sim.MiB
	a, _ := simFile("batch", 8)
	b, _ := simFile("batch", 16)
	run := sim.CapacityTraining(sim.CapacityDimsFor("batch", 40), c)
	if !run.OOM {
		t.Fatal("batch 40 fits 500 MiB")
	}
	run.Snap.Path = "batch40_oom.pickle"
	r, err := Analyze(context.Background(), []File{a, b, {Snap: run.Snap, Size: 40}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	d := r.Devices[0]
	if d.DeviceBytesSource != SourceOOMEvent || d.DeviceBytes != c {
		t.Errorf("device bytes %d from %s, want %d from oom_event", d.DeviceBytes, d.DeviceBytesSource, int64(c))
	}
	if d.ReferenceFile != "batch16.pickle" {
		t.Errorf("reference %s, want the largest complete trace", d.ReferenceFile)
	}
	want := largestSimulated("batch", c, 1)
	if d.MaxSize == nil || *d.MaxSize < want-2 || *d.MaxSize > want+2 {
		t.Fatalf("largest %v, simulated %d", d.MaxSize, want)
	}
	p := predictionAt(t, d, 40)
	if p.Fits == nil || *p.Fits {
		t.Errorf("batch 40 predicted to fit: %+v", p)
	}
	var oomFid *Fidelity
	for i := range d.Fidelity {
		if d.Fidelity[i].RecordedSize == 40 {
			oomFid = &d.Fidelity[i]
		}
	}
	if oomFid == nil || !oomFid.RecordedOOM || oomFid.PredictedPeakBytes < oomFid.RecordedPeakBytes {
		t.Errorf("fidelity of the OOM file: %+v", oomFid)
	}
	found := false
	for _, s := range d.Assumptions {
		found = found || strings.Contains(s, "batch40_oom.pickle ends in an OOM") && strings.Contains(s, "the rest of its step is unrecorded")
	}
	if !found {
		t.Errorf("no assumption says the OOM file's rest is unrecorded: %q", d.Assumptions)
	}
	t.Logf("largest %d (simulated %d): %s", *d.MaxSize, want, d.Headline)
}

// TestRefusals: one line that says what is wrong.
func TestRefusals(t *testing.T) {
	a, _ := simFile("batch", 8)
	noTrace := *a.Snap
	noTrace.DeviceTraces = nil
	noTrace.Path = "state_only.pickle"
	for _, tc := range []struct {
		files []File
		opt   Options
		want  string
	}{
		{[]File{{Snap: &noTrace, Size: 8}}, Options{}, "state_only.pickle: capacity planning needs the trace, and the file has none"},
		{[]File{a, {Snap: a.Snap, Size: 8}}, Options{}, "have the same size 8"},
		{[]File{a}, Options{Dimension: "tokens"}, `dimension "tokens": want batch or seq`},
		{[]File{a}, Options{Capacity: 1 << 30, DeviceMemory: 1 << 30}, "not both"},
		{[]File{{Snap: a.Snap, Size: 0}}, Options{}, "size 0: a batch size must be positive"},
	} {
		_, err := Analyze(context.Background(), tc.files, tc.opt)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want %q", err, tc.want)
		}
	}
}

// TestFitSizes: the kind of fit and its values.
func TestFitSizes(t *testing.T) {
	for _, tc := range []struct {
		xs, ys []float64
		kind   string
		at     float64
		want   int64
	}{
		{[]float64{4, 8}, []float64{1024, 1024}, FitFixed, 64, 1024},
		{[]float64{4, 8}, []float64{4096, 8192}, FitLinear, 64, 65536},
		{[]float64{128, 256, 512}, []float64{128 * 128 * 16, 256 * 256 * 16, 512 * 512 * 16}, FitQuadratic, 1024, 1024 * 1024 * 16},
		{[]float64{128, 256, 512}, []float64{128*4 + 100, 256*4 + 100, 512*4 + 100}, FitLinear, 1024, 1024*4 + 100},
	} {
		f := fitSizes(tc.xs, tc.ys)
		if f.kind != tc.kind || f.sizeAt(tc.at) != tc.want {
			t.Errorf("fit of %v over %v: %s, %d at %g; want %s, %d", tc.ys, tc.xs, f.kind, f.sizeAt(tc.at), tc.at, tc.kind, tc.want)
		}
	}
}

// TestRingBufferTraces: files recorded with a ring buffer (the oldest events dropped, at a
// different point of the first step in each file) are matched step for step: batch 24 from
// batches 8 and 16 is within 5% of the simulated run's peak allocated. The peak reserved is
// low (the cache the lost first step left is unknown), and an assumption says so.
func TestRingBufferTraces(t *testing.T) {
	var in []File
	for _, b := range []int64{8, 16} {
		r := sim.CapacityTrainingWith(sim.CapacityDimsFor("batch", b), sim.Config{MaxEntries: 300})
		r.Snap.Path = fmt.Sprintf("ring%d.pickle", b)
		in = append(in, File{Snap: r.Snap, Size: b})
	}
	_, truth := simFile("batch", 24)
	r, err := Analyze(context.Background(), in, Options{Predict: []int64{24}})
	if err != nil {
		t.Fatal(err)
	}
	d := r.Devices[0]
	p := predictionAt(t, d, 24)
	ea, er := pctOff(p.PeakAllocatedBytes, truth.PeakAllocated), pctOff(p.PeakReservedBytes, truth.PeakReserved)
	t.Logf("batch 24 from ring-buffered 8 and 16: allocated %d vs %d (%.2f%%), reserved %d vs %d (%.2f%%); %q", p.PeakAllocatedBytes, truth.PeakAllocated, ea, p.PeakReservedBytes, truth.PeakReserved, er, d.Assumptions[0])
	if ea > 5 || p.PeakReservedBytes > truth.PeakReserved {
		t.Errorf("off by %.2f%% allocated (over 5%%), reserved %d above the run's", ea, p.PeakReservedBytes)
	}
	if !strings.Contains(strings.Join(d.Assumptions, "\n"), "the peak reserved may be low") {
		t.Errorf("no assumption says the reserved is low: %q", d.Assumptions)
	}
	if !strings.Contains(d.Assumptions[0], "in the same step") {
		t.Errorf("not matched per step: %q", d.Assumptions[0])
	}
}

// TestDeviceByDevice: files recorded on device 1 are answered for device 1; asking for a device
// without a trace in every file is refused.
func TestDeviceByDevice(t *testing.T) {
	var in []File
	for _, b := range []int64{8, 16} {
		r := sim.CapacityTrainingWith(sim.CapacityDimsFor("batch", b), sim.Config{Device: 1, NumDevices: 2})
		r.Snap.Path = fmt.Sprintf("dev1_%d.pickle", b)
		in = append(in, File{Snap: r.Snap, Size: b})
	}
	_, truth := simFile("batch", 24)
	r, err := Analyze(context.Background(), in, Options{Predict: []int64{24}, Capacity: 400 * sim.MiB})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Devices) != 1 || r.Devices[0].Device != 1 {
		t.Fatalf("devices %+v", r.Devices)
	}
	if p := predictionAt(t, r.Devices[0], 24); p.PeakAllocatedBytes != truth.PeakAllocated {
		t.Errorf("batch 24 on device 1: %d, want %d", p.PeakAllocatedBytes, truth.PeakAllocated)
	}
	if r.Devices[0].MaxSize == nil || *r.Devices[0].MaxSize != 23 {
		t.Errorf("largest %v, want 23 (TestLargestSize's simulated run at 400 MiB)", r.Devices[0].MaxSize)
	}
	zero := 0
	if _, err := Analyze(context.Background(), in, Options{Device: &zero}); err == nil || !strings.Contains(err.Error(), "device 0 has no allocation events in every file") {
		t.Errorf("device 0: %v", err)
	}
}
