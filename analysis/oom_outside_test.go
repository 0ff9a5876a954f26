package analysis

import (
	"context"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis/load"
)

// TestOOMOutsideAmount: the outside_pytorch fixture is a 16 GiB device with all but 128 MiB
// held by another process. Without the device size the report must not state an invented
// amount as known (only a lower bound); with it, the amount is exact.
func TestOOMOutsideAmount(t *testing.T) {
	snap, err := load.File(context.Background(), "../testdata/scenarios/outside_pytorch_oom.pickle", load.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		total       int64
		source      string
		outside     int64
		lowerBound  bool
		mentions    []string
		notMentions []string
	}{
		{"size unknown", 0, "estimate", gib - 128*mib, true,
			[]string{"at least 896 MiB", "device size − 128 MiB", "device_memory_bytes", "--device-memory"},
			[]string{"about 896 MiB", "assumed"}},
		{"16 GiB given", 16 * gib, "option", 16*gib - 128*mib, false,
			[]string{"15.9 GiB is held outside PyTorch's allocator", "of the 16.0 GiB device"},
			[]string{"at least", "assumed", "estimate"}},
		{"impossible size given", 1, "estimate", gib - 128*mib, true,
			[]string{"at least 896 MiB", "the device memory given, 1 B, is less than reserved + free, 128 MiB: it was ignored and the size estimated"},
			[]string{"capacity"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := OOMReport(context.Background(), snap, OOMOptions{DeviceTotalBytes: tc.total})
			if err != nil {
				t.Fatal(err)
			}
			o := r.OOMs[0]
			if o.Verdict != VerdictOutsidePyTorch || o.DeviceTotalSource != tc.source ||
				o.OutsidePyTorchBytes != tc.outside || o.OutsidePyTorchLowerBound != tc.lowerBound {
				t.Errorf("verdict %s source %s outside %d lower bound %v, want %s %s %d %v",
					o.Verdict, o.DeviceTotalSource, o.OutsidePyTorchBytes, o.OutsidePyTorchLowerBound,
					VerdictOutsidePyTorch, tc.source, tc.outside, tc.lowerBound)
			}
			for _, m := range tc.mentions {
				if !strings.Contains(o.Explanation, m) {
					t.Errorf("explanation lacks %q: %s", m, o.Explanation)
				}
			}
			for _, m := range tc.notMentions {
				if strings.Contains(o.Explanation, m) {
					t.Errorf("explanation has %q: %s", m, o.Explanation)
				}
			}
		})
	}
}
