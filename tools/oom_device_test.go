package tools

import (
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis"
)

// TestOOMDeviceMemory: device_memory_bytes reaches the analysis; the outside_pytorch fixture is
// a 16 GiB device with all but 128 MiB held by another process (testdata/scenarios/README.md).
func TestOOMDeviceMemory(t *testing.T) {
	c := newClient(t, Config{})
	for _, tc := range []struct {
		name       string
		args       map[string]any
		total      int64
		source     string
		outside    int64
		lowerBound bool
		mention    string
	}{
		{"16 GiB", map[string]any{"device_memory_bytes": 16 << 30}, 16 << 30, "option", 16<<30 - 128<<20, false,
			"15.9 GiB is held outside PyTorch's allocator"},
		{"unknown", map[string]any{}, 1 << 30, "estimate", 1<<30 - 128<<20, true, "at least 896 MiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.args["path"] = fx(t, "outside_pytorch_oom.pickle")
			res := call(t, c, "oom-report", tc.args)
			var r analysis.OOMResult
			structured(t, res, &r)
			if len(r.OOMs) != 1 {
				t.Fatalf("%d ooms", len(r.OOMs))
			}
			o := r.OOMs[0]
			if o.Verdict != analysis.VerdictOutsidePyTorch || o.DeviceTotalBytes != tc.total || o.DeviceTotalSource != tc.source ||
				o.OutsidePyTorchBytes != tc.outside || o.OutsidePyTorchLowerBound != tc.lowerBound {
				t.Errorf("verdict %s total %d source %s outside %d lower %v", o.Verdict, o.DeviceTotalBytes, o.DeviceTotalSource, o.OutsidePyTorchBytes, o.OutsidePyTorchLowerBound)
			}
			if !strings.Contains(textOf(res), tc.mention) {
				t.Errorf("text lacks %q:\n%s", tc.mention, textOf(res))
			}
		})
	}
}
