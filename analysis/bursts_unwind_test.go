package analysis

import (
	"context"
	"testing"

	"github.com/memsnap/memsnap/analysis/sim"
)

// TestBurstsSkipUnwind: Lightning's teardown after an OOM calls torch.cuda.empty_cache
// (_clear_cuda_memory); those releases are the unwind span's, named there, and never a burst
// the advice reads. Without the OOM the same run has no unwind span.
func TestBurstsSkipUnwind(t *testing.T) {
	snap, _ := sim.LightningOOMTeardown(true)
	rep, err := ReplaySnapshot(context.Background(), snap, nil, ReplayOptions{Device: AllDevices})
	if err != nil {
		t.Fatal(err)
	}
	var spans, bursts int
	var teardown []string
	for _, r := range rep.Devices {
		for _, sp := range r.Unwind {
			spans++
			teardown = append(teardown, sp.Teardown...)
			for _, b := range r.SegmentBursts {
				if b.FirstEvent >= sp.StartEvent && b.FirstEvent <= sp.EndEvent {
					t.Errorf("device %d: burst %+v inside the unwind span %d..%d", r.Device, b, sp.StartEvent, sp.EndEvent)
				}
			}
		}
		bursts += len(r.SegmentBursts)
		for _, it := range r.Advice {
			if it.Rule == "bursts.empty-cache.churn" || it.Rule == "bursts.empty-cache.partial" || it.Rule == "bursts.empty-cache.kept-free" {
				t.Errorf("device %d: empty_cache advice from teardown: %s", r.Device, it.Text)
			}
		}
	}
	if spans == 0 || len(teardown) == 0 {
		t.Fatalf("scenario: %d unwind spans, teardown %v", spans, teardown)
	}
}
