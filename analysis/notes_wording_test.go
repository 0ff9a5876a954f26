package analysis

import (
	"context"
	"slices"
	"testing"

	"github.com/memsnap/memsnap/analysis/sim"
)

// TestNotesNameCLIAndMCP: notes that point to another report name both the CLI command and the
// MCP tool, since the same answers are served over MCP.
func TestNotesNameCLIAndMCP(t *testing.T) {
	snap, _ := sim.FragmentationOOM()
	fr, err := Fragmentation(snap, FragOptions{Device: AllDevices})
	if err != nil {
		t.Fatal(err)
	}
	want := "this is the cache when the file was written; fragmentation at an earlier peak or OOM needs the trace: run the OOM report (`memsnap oom` / MCP `oom-report`)"
	if !slices.Contains(fr.Notes, want) {
		t.Errorf("fragmentation notes %q lack %q", fr.Notes, want)
	}
	noTrace := sim.SummarizeBasic()
	noTrace.DeviceTraces = nil
	noTrace.Caps.HasTrace = false
	or, err := OOMReport(context.Background(), noTrace, OOMOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want = "the file has no trace: OOM events are only recorded in the trace, so no OOM can be explained; the final state is what the fragmentation and top-stacks reports show (`memsnap fragmentation` / MCP `fragmentation`, `memsnap top-stacks` / MCP `top-stacks`)"
	if !slices.Contains(or.Notes, want) {
		t.Errorf("oom notes %q lack %q", or.Notes, want)
	}
}
