package analysis

import (
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis/sim"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// TestDiffNoGrowthWording: the no-pattern verdict follows the data: memory that dropped is not
// "steady", and a material growth is never called no_growth.
func TestDiffNoGrowthWording(t *testing.T) {
	ngBefore, ngAfter := sim.NoGrowthPair()
	sizes := map[string]int64{"param": 16 * mib, "cache": 8 * mib, "loss": 512}
	tests := []struct {
		name          string
		before, after *snapshot.Snapshot
		pattern       string
		evidence, fix string
		thirdNote     bool // "take a third to confirm a steady leak" only when memory grew
	}{
		{"dropped (no trace clock: the user's order is kept)",
			diffSnap("b.pickle", map[string]int{"param": 2, "cache": 13}, sizes),
			diffSnap("a.pickle", map[string]int{"param": 2, "cache": 3}, sizes), PatternNoGrowth,
			"no site grew in both bytes and blocks (live memory 136 MiB -> 56.0 MiB, -80.0 MiB); the largest drop: train.py:60 in collect -80.0 MiB in -10 blocks",
			"none: live memory dropped by 80.0 MiB between these snapshots and no site grew", false},
		{"steady", ngBefore, ngAfter, PatternNoGrowth,
			"no site grew in both bytes and blocks (live memory 72.5 MiB -> 72.5 MiB, 0 B)",
			"none: memory is steady between these snapshots", false},
		{"grew a little", diffSnap("b.pickle", map[string]int{"param": 2, "loss": 3}, sizes),
			diffSnap("a.pickle", map[string]int{"param": 2, "loss": 3}, map[string]int64{"param": 16 * mib, "loss": 1024}), PatternNoGrowth,
			"no site grew in both bytes and blocks (live memory 32.0 MiB -> 32.0 MiB, +1.5 KiB); the largest growth: train.py:52 in train +1.5 KiB in +0 blocks",
			"none: live memory grew by only 1.5 KiB and no site grew in both bytes and blocks", true},
		{"grew materially without new blocks", diffSnap("b.pickle", map[string]int{"param": 2, "cache": 3}, sizes),
			diffSnap("a.pickle", map[string]int{"param": 2, "cache": 3}, map[string]int64{"param": 16 * mib, "cache": 10 * mib}), PatternUnexplainedGrowth,
			"live memory grew by 6.0 MiB (56.0 MiB -> 62.0 MiB) and no site pattern explains it: no site gained both bytes and blocks in a user frame; the largest growth: train.py:60 in collect +6.0 MiB in +0 blocks",
			"find what holds the 6.0 MiB: compare the sites above (existing tensors that got larger, growth spread thinly over many sites, or memory without a Python frame), and take a third snapshot to see whether it continues", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Diff(tc.before, tc.after, DiffOptions{Device: AllDevices})
			if err != nil {
				t.Fatal(err)
			}
			if !r.sameRun() || r.Swapped {
				t.Fatalf("same_run %v swapped %v: %s", r.SameRun, r.Swapped, r.SameRunEvidence)
			}
			if len(r.Patterns) != 1 || r.Patterns[0].Name != tc.pattern {
				t.Fatalf("patterns %+v", r.Patterns)
			}
			p := r.Patterns[0]
			if p.Evidence != tc.evidence {
				t.Errorf("evidence\n got %q\nwant %q", p.Evidence, tc.evidence)
			}
			if p.Fix != tc.fix {
				t.Errorf("fix\n got %q\nwant %q", p.Fix, tc.fix)
			}
			if got := strings.Contains(strings.Join(r.Notes, "\n"), "take a third to confirm"); got != tc.thirdNote {
				t.Errorf("third-snapshot note %v, want %v: %q", got, tc.thirdNote, r.Notes)
			}
			if first, _, _ := strings.Cut(r.Text(), "\n"); !strings.Contains(first, formatDelta(r.DeltaBytes)) {
				t.Errorf("headline %q does not carry the total delta %s", first, formatDelta(r.DeltaBytes))
			}
		})
	}
}

// TestDiffSwapsReversedPair: two points of one run passed later-first are put back in time order
// (swapped, said in a note) and give exactly the forward diff's verdict.
func TestDiffSwapsReversedPair(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pair    func() (*snapshot.Snapshot, *snapshot.Snapshot)
		pattern string
		site    string
		delta   int64
	}{
		{"retained graph", sim.RetainedGraphPair, PatternRetainedGraph, "train.py:89", 585*mib + 45*512},
		{"growing container", sim.GrowingContainerPair, PatternGrowingContainer, "train.py:97", 180 * mib},
		{"optimizer first step", sim.OptimizerFirstStepPair, PatternOptimizerFirstStp, "train.py:91", 48*mib + 5*512},
		{"no growth", sim.NoGrowthPair, PatternNoGrowth, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			early, late := tc.pair()
			early.Path, late.Path = "early.pickle", "late.pickle"
			fwd, err := Diff(early, late, DiffOptions{Device: AllDevices})
			if err != nil {
				t.Fatal(err)
			}
			rev, err := Diff(late, early, DiffOptions{Device: AllDevices})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				r       *DiffResult
				swapped bool
			}{{fwd, false}, {rev, true}} {
				r := c.r
				if !r.sameRun() || r.Swapped != c.swapped || r.BeforePath != "early.pickle" || r.AfterPath != "late.pickle" || r.DeltaBytes != tc.delta {
					t.Errorf("swapped=%v: same_run %v swapped %v %s -> %s delta %d (%s)", c.swapped, r.SameRun, r.Swapped, r.BeforePath, r.AfterPath, r.DeltaBytes, r.SameRunEvidence)
				}
				if len(r.Patterns) != 1 || r.Patterns[0].Name != tc.pattern || r.Patterns[0].Site != tc.site {
					t.Errorf("swapped=%v: patterns %+v", c.swapped, r.Patterns)
				}
				swapNote := strings.Contains(strings.Join(r.Notes, "\n"), "reverse time order: swapped, so before is early.pickle (the earlier) and after is late.pickle (the later)")
				if swapNote != c.swapped {
					t.Errorf("swap note %v, want %v: %q", swapNote, c.swapped, r.Notes)
				}
			}
			if rev.Patterns[0].Evidence != fwd.Patterns[0].Evidence {
				t.Errorf("reversed evidence %q\nforward %q", rev.Patterns[0].Evidence, fwd.Patterns[0].Evidence)
			}
		})
	}
}
