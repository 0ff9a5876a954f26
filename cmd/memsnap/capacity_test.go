package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

const capacityFixtures = "../../testdata/capacity"

// TestCapacityCommand checks the JSON contract on the capacity fixtures (truth in
// testdata/capacity/README.md), the text's first line, and the errors (one line, exit 2).
func TestCapacityCommand(t *testing.T) {
	f := func(name string) string { return filepath.Join(capacityFixtures, name) }
	out, err := run(t, "capacity", f("batch8.pickle"), f("batch16.pickle"), f("batch40_oom.pickle"), "--sizes", "8,16,40", "--predict", "24", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Devices []struct {
			Device            int    `json:"device"`
			Method            string `json:"method"`
			Dimension         string `json:"dimension"`
			FixedBytes        *int64 `json:"fixed_bytes"`
			PerUnitBytes      *int64 `json:"per_unit_bytes"`
			MaxSize           *int64 `json:"max_size"`
			DeviceBytes       int64  `json:"device_bytes"`
			DeviceBytesSource string `json:"device_bytes_source"`
			Predictions       []struct {
				Size               int64  `json:"size"`
				PeakAllocatedBytes int64  `json:"peak_allocated_bytes"`
				PeakReservedBytes  int64  `json:"peak_reserved_bytes"`
				Fits               *bool  `json:"fits"`
				FirstOOMSite       string `json:"first_oom_site"`
			} `json:"predictions"`
			Fidelity []struct {
				File               string `json:"file"`
				RecordedSize       int64  `json:"recorded_size"`
				RecordedPeakBytes  int64  `json:"recorded_peak_bytes"`
				PredictedPeakBytes int64  `json:"predicted_peak_bytes"`
			} `json:"fidelity"`
			Unmatched   []map[string]any `json:"unmatched"`
			Assumptions []string         `json:"assumptions"`
		} `json:"devices"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Devices) != 1 {
		t.Fatalf("devices: %s", out)
	}
	d := v.Devices[0]
	if d.Device != 0 || d.Method != "two_points" || d.Dimension != "batch" || d.FixedBytes == nil || d.PerUnitBytes == nil ||
		d.DeviceBytes != 500<<20 || d.DeviceBytesSource != "oom_event" || d.MaxSize == nil || *d.MaxSize != 31 {
		t.Errorf("device %+v", d)
	}
	sizes := map[int64]bool{}
	for _, p := range d.Predictions {
		sizes[p.Size] = true
		switch p.Size {
		case 24: // the simulated run: 369123840 B allocated, 446693376 B reserved
			if p.PeakAllocatedBytes != 369123840 || p.PeakReservedBytes != 446693376 || p.Fits == nil || !*p.Fits {
				t.Errorf("batch 24: %+v", p)
			}
		case 32:
			if p.Fits == nil || *p.Fits || p.FirstOOMSite == "" {
				t.Errorf("batch 32: %+v", p)
			}
		}
	}
	for _, k := range []int64{8, 16, 24, 31, 32, 40} {
		if !sizes[k] {
			t.Errorf("no prediction at %d: %v", k, sizes)
		}
	}
	if len(d.Fidelity) != 3 || d.Fidelity[0].RecordedSize != 8 || d.Fidelity[0].RecordedPeakBytes != 166732288 || d.Fidelity[0].PredictedPeakBytes != 166732288 {
		t.Errorf("fidelity %+v", d.Fidelity)
	}
	if len(d.Unmatched) != 1 || d.Unmatched[0]["count"] != float64(6) || len(d.Assumptions) == 0 {
		t.Errorf("unmatched %v, assumptions %q", d.Unmatched, d.Assumptions)
	}

	text, err := run(t, "capacity", f("batch8.pickle"), f("batch16.pickle"), "--sizes", "8", "--sizes", "16", "--capacity", "500MiB")
	if err != nil {
		t.Fatal(err)
	}
	if first, _, _ := strings.Cut(text, "\n"); !strings.HasPrefix(first, "batch 31 is the largest that fits 500 MiB (peak reserved 500 MiB); batch 32 fails at ") {
		t.Errorf("first line %q", first)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{f("batch8.pickle"), f("batch16.pickle"), "--sizes", "8"}, "--sizes gives 1 sizes for 2 files"},
		{[]string{f("batch8.pickle"), "--sizes", "eight"}, "--sizes eight: want positive whole numbers"},
		{[]string{f("batch8.pickle"), "--sizes", "8", "--capacity", "lots"}, "--capacity lots: want a size"},
		{[]string{f("batch8.pickle"), "--sizes", "8", "--capacity", "1GiB", "--device-memory", "2GiB"}, "not both"},
		{[]string{f("batch8.pickle"), "--sizes", "8", "--dimension", "tokens"}, `dimension "tokens": want batch or seq`},
		{[]string{f("batch8.pickle"), "--sizes", "8", "--predict", "0"}, "--predict 0: want positive whole numbers"},
		{[]string{f("batch8.pickle"), f("batch16.pickle"), "--sizes", "8,8"}, "have the same size 8"},
		{[]string{filepath.Join(scenarios, "summarize_basic_segment_list.pickle"), "--sizes", "8"}, "capacity planning needs the trace"},
	} {
		_, err := run(t, append([]string{"capacity"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(oneLine(err), "\n") || exitCode(err) != 2 {
			t.Errorf("%v: %v (exit %d), want %q", tc.args, err, exitCode(err), tc.want)
		}
	}
}
