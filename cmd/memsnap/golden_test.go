package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/evals/golden"
)

// TestRenderedGolden pins the text every command prints for a person or an agent, on the
// committed fixtures. After an intended change: go test ./cmd/memsnap -run Golden -update,
// then read the diff.
func TestRenderedGolden(t *testing.T) {
	sc := func(name string) string { return filepath.Join(scenarios, name) }
	for _, c := range []struct {
		golden string
		args   []string
	}{
		{"summarize_basic.txt", []string{"summarize", sc("summarize_basic.pickle")}},
		{"summarize_multirank.txt", []string{"summarize", sc("multirank")}},
		{"summarize_pending.txt", []string{"summarize", sc("cross_stream_pending.pickle")}},
		{"top_stacks_basic.txt", []string{"top-stacks", sc("summarize_basic.pickle")}},
		{"top_stacks_backward.txt", []string{"top-stacks", sc("backward_no_python_frames.pickle")}},
		{"diff_retained_graph.txt", []string{"diff", sc("retained_graph_step5.pickle"), sc("retained_graph_step50.pickle")}},
		{"diff_growing_container.txt", []string{"diff", sc("growing_container_step5.pickle"), sc("growing_container_step50.pickle")}},
		{"diff_optimizer.txt", []string{"diff", sc("optimizer_first_step_before.pickle"), sc("optimizer_step10.pickle")}},
		{"diff_no_growth.txt", []string{"diff", sc("no_growth_step5.pickle"), sc("no_growth_step50.pickle")}},
		{"oom_activation.txt", []string{"oom", sc("activation_oom.pickle")}},
		{"oom_fragmentation.txt", []string{"oom", sc("fragmentation_oom.pickle")}},
		{"oom_outside.txt", []string{"oom", sc("outside_pytorch_oom.pickle"), "--device-memory", "16GiB"}},
		{"fragmentation_basic.txt", []string{"fragmentation", sc("summarize_basic.pickle")}},
		{"replay_basic.txt", []string{"replay", sc("summarize_basic.pickle")}},
		{"whatif_expandable.txt", []string{"whatif", sc("whatif_expandable_avoids.pickle"), "--set", "expandable_segments=True"}},
		{"whatif_capacity.txt", []string{"whatif", sc("whatif_capacity_oom.pickle"), "--set", "expandable_segments=True"}},
		{"whatif_recommend.txt", []string{"whatif", sc("fragmentation_oom.pickle"), "--recommend"}},
	} {
		t.Run(c.golden, func(t *testing.T) {
			out, err := run(t, c.args...)
			if err != nil {
				t.Fatal(err)
			}
			// Paths differ between checkouts only in the fixture directory's prefix.
			out = strings.ReplaceAll(out, scenarios, "testdata/scenarios")
			golden.Check(t, filepath.Join("testdata", "golden", c.golden), []byte(out),
				"memsnap "+strings.Join(c.args, " "), "go test ./cmd/memsnap -run Golden -update")
		})
	}
}
