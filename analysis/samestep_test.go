package analysis

import (
	"context"
	"strings"
	"testing"
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
			"its events from 4000 of 8227 come after it) and all of them are one forward phase, in a trace with a single forward pass and no step boundary (a guess: the file records no steps)"},
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
			// The later moment against itself cut at its last events: nothing placed after it.
			r, err = Diff(full, full, DiffOptions{Device: AllDevices})
			if err != nil || r.SameStep {
				t.Errorf("a file against itself: same_step %v, %v", r.SameStep, err)
			}
		})
	}
}
