package analysis

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// TestDiffWithinOneStep: an earlier moment of a real file (its trace cut at an event, the
// state rebuilt there) against the whole file is one run inside one step: no leak pattern.
// The optimizer file (answer key #15) replaces AdamW's m and v out of place during its one
// step; the compiled forward (#5) saves activations for a backward that never comes.
func TestDiffWithinOneStep(t *testing.T) {
	tests := []struct {
		file     string
		end      int
		delta    int64
		evidence string
	}{
		{"pt2.9plus_cs336-compile_optimizer-annotation_no-segment-events.pickle", 1900, -9132544,
			"its events from 1901 of 6486 come after it) and no step starts after it (the trace's 1 step, found from phases)"},
		{"pt2.5-2.7_torch-compile_cpp-frames_cs336-fwd.pickle", 4000, 3732535296,
			"its events from 4000 of 8227 come after it) and all of them are one grad-enabled forward pass with no backward in the trace (a guess: the file records no steps, and a forward called in a loop reads the same)"},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			full := realSnap(t, tc.file)
			early, _, err := Trim(context.Background(), full, TrimOptions{Device: AllDevices, Window: true, Start: 0, End: tc.end})
			if err != nil {
				t.Fatal(err)
			}
			early.Path = "early.pickle"
			r, err := Diff(early, full, DiffOptions{Device: AllDevices})
			if err != nil {
				t.Fatal(err)
			}
			if !r.sameRun() || !r.SameStep || r.DeltaBytes != tc.delta || len(r.Patterns) != 1 || r.Patterns[0].Name != PatternWithinOneStep ||
				!strings.Contains(r.Patterns[0].Evidence, tc.evidence) || !strings.HasPrefix(r.Patterns[0].Fix, "none for a leak") {
				t.Errorf("same_run %v same_step %v delta %d patterns %+v", r.SameRun, r.SameStep, r.DeltaBytes, r.Patterns)
			}
			if strings.Contains(r.Text(), "take a third to confirm") {
				t.Errorf("the third-snapshot note inside one step:\n%s", r.Text())
			}
			// Given later first, the pair is swapped into time order and read the same.
			r, err = Diff(full, early, DiffOptions{Device: AllDevices})
			if err != nil || !r.Swapped || !r.SameStep || r.DeltaBytes != tc.delta {
				t.Errorf("reversed: swapped %v same_step %v delta %d (%v)", r.Swapped, r.SameStep, r.DeltaBytes, err)
			}
		})
	}
}

// TestDiffNotWithinOneStep: windows that a step boundary separates (eornn's 10 steps), and an
// inference pass without recorded steps (qwen2's 28 layers under no_grad: phases alone cannot
// tell one call from many), are not read as one step.
func TestDiffNotWithinOneStep(t *testing.T) {
	window := func(s *snapshot.Snapshot, end int, name string) *snapshot.Snapshot {
		w, _, err := Trim(context.Background(), s, TrimOptions{Device: AllDevices, Window: true, Start: 0, End: end})
		if err != nil {
			t.Fatal(err)
		}
		w.Path = name
		return w
	}
	eornn := realSnap(t, "pt2.2_repeated-snapshot-events_cnn-counterfactuals_eornn.pickle")
	qwen := realSnap(t, "pt2.5-2.7_hf-qwen2-inference_segment-free-churn_sqattn.pickle")
	for name, pair := range map[string][2]*snapshot.Snapshot{
		"eornn steps apart": {window(eornn, 2000, "a.pickle"), window(eornn, 4000, "b.pickle")},
		"qwen2 inference":   {window(qwen, 4788, "a.pickle"), qwen},
	} {
		r, err := Diff(pair[0], pair[1], DiffOptions{Device: AllDevices})
		if err != nil {
			t.Fatal(err)
		}
		if !r.sameRun() || r.SameStep || slices.ContainsFunc(r.Patterns, func(p DiffPattern) bool { return p.Name == PatternWithinOneStep }) {
			t.Errorf("%s: same_run %v same_step %v patterns %+v", name, r.SameRun, r.SameStep, r.Patterns)
		}
	}
}
