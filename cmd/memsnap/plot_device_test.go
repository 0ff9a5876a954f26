package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis"
	"github.com/memsnap/memsnap/analysis/pickle/writer"
	"github.com/memsnap/memsnap/analysis/sim"
)

// TestPlotMultiDeviceOOM: on a three-GPU file whose only OOM is on device 1 (device 0 has the
// most trace events), plot draws device 1 by default, says why and what the others hold, and
// --json reports the envelope (one entry per column, covering every event) and every step start.
func TestPlotMultiDeviceOOM(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "multi.pickle")
	data, err := writer.Encode(sim.MultiDeviceOOM(), writer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(in, data, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "t.png")
	text, err := run(t, "plot", in, "-o", out)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"device 1: it has the OOM (1); other devices: 0 (peak ", "device 1, events 0–76 of 77", "OOM at event 76: 64.0 MiB requested"} {
		if !strings.Contains(text, w) {
			t.Errorf("output lacks %q:\n%s", w, text)
		}
	}
	js, err := run(t, "plot", in, "-o", out, "--force", "--device", "0", "--json", "--width", "800")
	if err != nil {
		t.Fatal(err)
	}
	var got analysis.PictureResult
	if err := json.Unmarshal([]byte(js), &got); err != nil {
		t.Fatal(err)
	}
	r := got.Timeline
	if got.Device != 0 || got.DeviceReason != analysis.DeviceReasonAsked || len(got.Devices) != 3 || r == nil {
		t.Fatalf("device %d (%s), %d devices", got.Device, got.DeviceReason, len(got.Devices))
	}
	if len(r.Envelope) != r.Columns || r.Columns == 0 || r.Envelope[0].StartEvent != 0 || r.Envelope[len(r.Envelope)-1].EndEvent != r.Events-1 {
		t.Fatalf("envelope of %d entries for %d columns over %d events", len(r.Envelope), r.Columns, r.Events)
	}
	for i, c := range r.Envelope {
		if c.MinAllocatedBytes > c.MaxAllocatedBytes || (i > 0 && c.StartEvent != r.Envelope[i-1].EndEvent+1) {
			t.Fatalf("column %d: %+v", i, c)
		}
	}
	if r.Steps.Count < 40 || len(r.Steps.StartEvents) != r.Steps.Count {
		t.Errorf("steps: %d, %d listed", r.Steps.Count, len(r.Steps.StartEvents))
	}
}
