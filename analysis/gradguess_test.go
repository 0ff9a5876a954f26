package analysis

import (
	"context"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis/load"
	"github.com/memsnap/memsnap/analysis/sim"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// pythonOnlyParams: a stacks="python" snapshot with two parameters (4 MiB and 1 MiB, created by
// module.to at train.py:12) and three frameless live blocks: 4 MiB and 1 MiB (the size of a
// parameter: a gradient) and 3 MiB (no parameter has it: a backward temporary).
func pythonOnlyParams() *snapshot.Snapshot {
	t := newTB()
	param := t.stack("/venv/lib/python3.11/site-packages/torch/nn/modules/module.py", 1343, "to", "/proj/train.py", 12, "main")
	t.seg(0, 1<<30, 0,
		blk(4*mib, snapshot.StateActiveAllocated, param),
		blk(mib, snapshot.StateActiveAllocated, param),
		blk(4*mib, snapshot.StateActiveAllocated, snapshot.EmptyStack),
		blk(mib, snapshot.StateActiveAllocated, snapshot.EmptyStack),
		blk(3*mib, snapshot.StateActiveAllocated, snapshot.EmptyStack),
		blk(3*mib, snapshot.StateInactive, snapshot.EmptyStack))
	t.snap.Caps = snapshot.Capabilities{FramesOnBlocks: true, PythonOnly: true}
	return t.done()
}

type catGroup struct {
	site, category string
	bytes          int64
	blocks         int
}

func TestGradientGuessTopStacks(t *testing.T) {
	fixture, err := load.File(context.Background(), "../testdata/scenarios/backward_no_python_frames.pickle", load.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		snap *snapshot.Snapshot
		want []catGroup // every <no Python frame> group
	}{
		{"sim", sim.BackwardNoPythonFrames(), []catGroup{{SiteNoPython, CategoryGradient, 24 * mib, 5}}},
		{"fixture", fixture, []catGroup{{SiteNoPython, CategoryGradient, 24 * mib, 5}}},
		{"hand", pythonOnlyParams(), []catGroup{
			{SiteNoPython, CategoryGradient, 5 * mib, 2},
			{SiteNoPython, CategoryBackwardTemporary, 3 * mib, 1},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := TopStacks(tc.snap, TopStacksOptions{Device: AllDevices})
			if err != nil {
				t.Fatal(err)
			}
			var got []catGroup
			for _, s := range r.Sites {
				if s.Kind != SiteKindNone {
					continue
				}
				got = append(got, catGroup{s.Site, s.Category, s.Bytes, s.Blocks})
				if !strings.Contains(s.Evidence, "guess") || !strings.Contains(s.Evidence, `stacks="python"`) {
					t.Errorf("%s evidence does not say it is a guess from stacks=\"python\": %q", s.Category, s.Evidence)
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("groups %+v, want %+v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("group %d = %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

// TestGradientGuessOtherViews: diff, oom live sites and replication see the same categories.
func TestGradientGuessOtherViews(t *testing.T) {
	snap := pythonOnlyParams()
	empty := newTB()
	empty.snap.Caps = snapshot.Capabilities{FramesOnBlocks: true, PythonOnly: true}
	d, err := Diff(empty.done(), snap, DiffOptions{Device: AllDevices})
	if err != nil {
		t.Fatal(err)
	}
	var got []catGroup
	for _, s := range d.Sites {
		if s.Site == SiteNoPython {
			got = append(got, catGroup{s.Site, s.Category, s.BytesAfter, s.BlocksAfter})
		}
	}
	want := []catGroup{{SiteNoPython, CategoryGradient, 5 * mib, 2}, {SiteNoPython, CategoryBackwardTemporary, 3 * mib, 1}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("diff groups %+v, want %+v", got, want)
	}
	fs := finalFreeState(snap, DefaultAttributor(), 0, false, 0, 10)
	got = nil
	for _, s := range fs.sites {
		if s.Site == SiteNoPython {
			got = append(got, catGroup{s.Site, s.Category, s.Bytes, s.Blocks})
		}
	}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("oom groups %+v, want %+v", got, want)
	}
}
