package analysis

import (
	"context"
	"strings"
	"testing"
)

// TestCheckPeakRequestedSizes: the compiled forward's trace records requested sizes and ends
// at its peak, so the trace's peak (17,602,723,840 B requested) sits below the blocks
// allocated at the end (17,738,153,984 B): --max-peak is gated on the larger, and the
// message tells the two numbers apart.
func TestCheckPeakRequestedSizes(t *testing.T) {
	s := realSnap(t, "pt2.5-2.7_torch-compile_cpp-frames_cs336-fwd.pickle")
	limit := int64(1646) * gib / 100
	r, err := Check(context.Background(), s, CheckOptions{MaxPeakBytes: limit, Device: AllDevices, MaxGrowthPercent: -1})
	if err != nil {
		t.Fatal(err)
	}
	if r.Pass || len(r.Budgets) != 1 || r.Budgets[0].ValueBytes != 17738153984 || r.Budgets[0].Measure != "peak_allocated" ||
		!strings.HasPrefix(r.Budgets[0].Message, "peak allocated 16.52 GiB exceeds --max-peak 16.46 GiB by 61.4 MiB; top site in the final state:") {
		t.Errorf("pass %v budgets %+v", r.Pass, r.Budgets)
	}
	want := "device 0's trace records requested sizes: its peak sums requested bytes (16.4 GiB), below the 16.5 GiB of blocks allocated at the end"
	if len(r.Notes) != 1 || !strings.HasPrefix(r.Notes[0], want) {
		t.Errorf("notes %q", r.Notes)
	}
}

// TestCheckPeakRequestedMargin: where the trace's requested-bytes peak is above the final state,
// the gate still says its peak is in requested bytes, below the blocks held.
func TestCheckPeakRequestedMargin(t *testing.T) {
	r, err := Check(context.Background(), realSnap(t, "pt2.5-2.7_small-full-trace_cs336.pickle"), CheckOptions{MaxPeakBytes: 4 * gib, Device: AllDevices, MaxGrowthPercent: -1})
	if err != nil {
		t.Fatal(err)
	}
	want := "device 0's trace records requested sizes: its peak (3.0 GiB) sums requested bytes, a little below the rounded blocks the device held then; leave that margin in --max-peak"
	if !r.Pass || len(r.Notes) != 1 || r.Notes[0] != want || !strings.Contains(r.Budgets[0].Message, "top site at the peak (event 52)") {
		t.Errorf("pass %v notes %q budgets %+v", r.Pass, r.Notes, r.Budgets)
	}
}
