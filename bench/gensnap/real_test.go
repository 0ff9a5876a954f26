package main

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/memsnap/memsnap/analysis/pickle/writer"
	"github.com/memsnap/memsnap/bench/internal/pyval"
)

const realDir = "../../../shared/snapshots/real"

// TestRealShape: -shape real writes what a real dump of the same PyTorch version holds per
// trace dict: strings, memo puts and memo gets, each within 25% of the shared real file's
// (not strings where both make fewer than 0.15 per dict: frames first met
// in a short real trace, which a long trace stops meeting). Skipped without the shared files.
func TestRealShape(t *testing.T) {
	for _, tc := range []struct {
		file, version, frames string
		depth                 int
	}{
		{"pt2.10_user-metadata_windows_cs336.pickle", "2.10", "python", 40},
		{"pt2.9plus_cs336-compile_optimizer-annotation_no-segment-events.pickle", "2.9", "mixed", 46},
		{"pt2.5-2.7_torch-compile_cpp-frames_cs336-fwd.pickle", "2.5", "mixed", 120},
		{"pt2.2_repeated-snapshot-events_cnn-counterfactuals_eornn.pickle", "2.2", "mixed", 40},
		{"pt2.1_hf-qlora-bnb-accelerate-llama-train_ftcourse.pickle", "2.1", "mixed", 100},
	} {
		t.Run(tc.version, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(realDir, tc.file))
			if err != nil {
				t.Skipf("no shared real file (%v)", err)
			}
			want, err := pyval.Mix(data)
			if err != nil {
				t.Fatal(err)
			}
			p := params{events: 20000, segments: 100, blocks: 3000, stacks: 300, depth: tc.depth, seed: 1}
			v, err := parseVersion(tc.version)
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if err := newRealWriter(writer.NewWriter(&buf, writer.Config{Protocol: 4}), generate(p), v, tc.frames == "python").write(); err != nil {
				t.Fatal(err)
			}
			got, err := pyval.Mix(buf.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				name       string
				got, want  float64
				smallFloor float64
			}{
				{"strings", got.PerDict(got.Strings), want.PerDict(want.Strings), 0.15},
				{"memo puts", got.PerDict(got.Puts), want.PerDict(want.Puts), 0},
				{"memo gets", got.PerDict(got.Gets), want.PerDict(want.Gets), 0},
			} {
				if c.want < c.smallFloor && c.got < c.smallFloor {
					continue
				}
				if math.Abs(c.got-c.want) > 0.25*c.want {
					t.Errorf("%s per trace dict: %.2f, the real file %.2f", c.name, c.got, c.want)
				}
			}
			t.Logf("per trace dict: strings %.2f (real %.2f), puts %.2f (%.2f), gets %.2f (%.2f)",
				got.PerDict(got.Strings), want.PerDict(want.Strings), got.PerDict(got.Puts), want.PerDict(want.Puts),
				got.PerDict(got.Gets), want.PerDict(want.Gets))
		})
	}
}
