package analysis

import (
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis/sim"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// TestDiffNoGrowthWording: the no_growth pattern's evidence and fix follow the data: memory that
// dropped (the growing-container pair passed after->before) is not "steady".
func TestDiffNoGrowthWording(t *testing.T) {
	gcBefore, gcAfter := sim.GrowingContainerPair()
	ngBefore, ngAfter := sim.NoGrowthPair()
	sizes := map[string]int64{"param": 16 * mib, "cache": 8 * mib}
	tests := []struct {
		name          string
		before, after *snapshot.Snapshot
		evidence, fix string
		thirdNote     bool // "take a third to confirm a steady leak" only when memory grew
	}{
		{"dropped (reversed growing container)", gcAfter, gcBefore,
			"no site grew in both bytes and blocks (live memory 273 MiB -> 92.5 MiB, -180 MiB); the largest drop: train.py:97 (train_step) -180 MiB in -45 blocks",
			"none: live memory dropped by 180 MiB between these snapshots and no site grew (if you meant the other order, pass the earlier snapshot as before)", false},
		{"steady", ngBefore, ngAfter,
			"no site grew in both bytes and blocks (live memory 72.5 MiB -> 72.5 MiB, 0 B)",
			"none: memory is steady between these snapshots", false},
		{"grew without new blocks", diffSnap("b.pickle", map[string]int{"param": 2, "cache": 3}, sizes),
			diffSnap("a.pickle", map[string]int{"param": 2, "cache": 3}, map[string]int64{"param": 16 * mib, "cache": 10 * mib}),
			"no site grew in both bytes and blocks (live memory 56.0 MiB -> 62.0 MiB, +6.0 MiB); the largest growth: train.py:60 (collect) +6.0 MiB in +0 blocks",
			"none recognised: live memory grew by 6.0 MiB but no site grew in both bytes and blocks (existing tensors got larger, or the growth is spread thinly); compare the sites above and take a third snapshot to see whether it continues", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Diff(tc.before, tc.after, DiffOptions{Device: AllDevices})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Patterns) != 1 || r.Patterns[0].Name != PatternNoGrowth {
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
		})
	}
}
