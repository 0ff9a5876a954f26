package analysis

import (
	"slices"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

const sp = "/venv/lib/python3.11/site-packages/"

// diffSnap builds a snapshot with n blocks of size per stack.
func diffSnap(path string, counts map[string]int, sizes map[string]int64) *snapshot.Snapshot {
	t := newTB()
	t.snap.Path = path
	stacks := map[string]snapshot.StackID{
		"fc1": t.stack(sp+"torch/nn/functional.py", 10, "linear", sp+"torch/nn/modules/module.py", 1747, "_call_impl", "/w/model.py", 20, "forward", "/w/train.py", 50, "train"),
		"fc2": t.stack(sp+"torch/nn/functional.py", 10, "linear", sp+"torch/nn/modules/module.py", 1747, "_call_impl", "/w/model.py", 21, "forward", "/w/train.py", 50, "train"),
		"loss": t.stack(sp+"torch/nn/functional.py", 3000, "cross_entropy", sp+"torch/nn/modules/loss.py", 1200, "forward",
			sp+"torch/nn/modules/module.py", 1747, "_call_impl", "/w/train.py", 52, "train"),
		"cache": t.stack(sp+"torch/_tensor.py", 40, "clone", "/w/train.py", 60, "collect"),
		"adam":  t.stack(sp+"torch/optim/adam.py", 150, "_init_group", sp+"torch/optim/adam.py", 220, "step", "/w/train.py", 55, "train"),
		"param": t.stack(sp+"torch/nn/modules/module.py", 1300, "convert", "/w/train.py", 10, "main"),
	}
	// One segment per stack at a fixed address, as one process keeps them: the param segment is
	// shared by every pair below (one run, no trace clock).
	for i, k := range []string{"fc1", "fc2", "loss", "cache", "adam", "param"} {
		n := counts[k]
		if n == 0 {
			continue
		}
		blocks := []snapshot.Block{}
		for i := 0; i < n; i++ {
			blocks = append(blocks, blk(sizes[k], snapshot.StateActiveAllocated, stacks[k]))
		}
		t.seg(0, uint64(i+1)<<28, 0, blocks...)
	}
	s := t.done()
	s.Caps.FramesOnBlocks = true
	return s
}

func TestDiffPatterns(t *testing.T) {
	sizes := map[string]int64{"fc1": 4 * mib, "fc2": 2 * mib, "loss": 512, "cache": 8 * mib, "adam": 16 * mib, "param": 16 * mib}
	tests := []struct {
		name          string
		before, after map[string]int
		patterns      []string
		site          string
		top           string
		topDelta      int64
		topBlocks     int
	}{
		{"retained graph", map[string]int{"param": 2, "fc1": 1, "fc2": 1, "loss": 1},
			map[string]int{"param": 2, "fc1": 11, "fc2": 11, "loss": 11},
			[]string{PatternRetainedGraph}, "train.py:52", "model.py:20", 40 * mib, 10},
		// The tensor that keeps the graph is the growing site with the smallest block (the 4-byte
		// loss in a 512 B block), not the site with the most new blocks.
		{"retained graph beside a growing list", map[string]int{"param": 2, "fc1": 1, "fc2": 1, "loss": 1, "cache": 3},
			map[string]int{"param": 2, "fc1": 11, "fc2": 11, "loss": 11, "cache": 23},
			[]string{PatternRetainedGraph}, "train.py:52", "train.py:60", 160 * mib, 20},
		{"growing container", map[string]int{"param": 2, "cache": 3},
			map[string]int{"param": 2, "cache": 13},
			[]string{PatternGrowingContainer}, "train.py:60", "train.py:60", 80 * mib, 10},
		{"optimizer first step", map[string]int{"param": 2},
			map[string]int{"param": 2, "adam": 4},
			[]string{PatternOptimizerFirstStp}, "train.py:55", "train.py:55", 64 * mib, 4},
		// A site gains blocks while another loses as many bytes in blocks of other sizes: the
		// pattern stands (with a caveat, TestDiffMovedNotGrown).
		{"grown at net zero", map[string]int{"param": 2, "fc1": 4},
			map[string]int{"param": 2, "cache": 2},
			[]string{PatternGrowingContainer}, "train.py:60", "train.py:60", 16 * mib, 2},
		{"no growth", map[string]int{"param": 2, "adam": 4, "fc1": 3},
			map[string]int{"param": 2, "adam": 4, "fc1": 3},
			[]string{PatternNoGrowth}, "", "model.py:20", 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := diffSnap("before.pickle", tc.before, sizes)
			a := diffSnap("after.pickle", tc.after, sizes)
			r, err := Diff(b, a, DiffOptions{Device: AllDevices})
			if err != nil {
				t.Fatal(err)
			}
			if !r.sameRun() || r.Swapped {
				t.Errorf("same_run %v swapped %v: %s", r.SameRun, r.Swapped, r.SameRunEvidence)
			}
			if len(r.Patterns) != len(tc.patterns) {
				t.Fatalf("patterns = %+v", r.Patterns)
			}
			for i, p := range tc.patterns {
				if r.Patterns[i].Name != p || r.Patterns[i].Site != tc.site || r.Patterns[i].UserSite != tc.site || r.Patterns[i].Fix == "" || r.Patterns[i].Evidence == "" {
					t.Errorf("pattern %d = %+v, want %s at %q", i, r.Patterns[i], p, tc.site)
				}
			}
			top := r.Sites[0]
			if top.Site != tc.top || top.DeltaBytes != tc.topDelta || top.DeltaBlocks != tc.topBlocks {
				t.Errorf("top site = %+v", top)
			}
			if r.Text() == "" {
				t.Error("empty text")
			}
		})
	}
}

// TestDiffMovedNotGrown: a site gains blocks of the sizes another site loses, at no net growth:
// the same tensors made again elsewhere (moved), no leak fix. Of other sizes, the pattern stands
// with the caveat that the snapshots may be at different points of a step.
func TestDiffMovedNotGrown(t *testing.T) {
	sizes := map[string]int64{"fc1": 8 * mib, "cache": 8 * mib, "param": 16 * mib}
	r, err := Diff(diffSnap("before.pickle", map[string]int{"param": 2, "fc1": 2}, sizes),
		diffSnap("after.pickle", map[string]int{"param": 2, "cache": 2}, sizes), DiffOptions{Device: AllDevices})
	if err != nil {
		t.Fatal(err)
	}
	want := "train.py:60 in collect went from 0 to 2 blocks (+16.0 MiB) and sites grew by 16.0 MiB in all, but others shrank by 16.0 MiB (live memory 48.0 MiB -> 48.0 MiB, 0 B): memory moved between sites"
	if len(r.Patterns) != 1 || r.Patterns[0].Name != PatternNoGrowth || !strings.HasPrefix(r.Patterns[0].Evidence, want) || !strings.HasPrefix(r.Patterns[0].Fix, "none for a leak: live memory did not grow") {
		t.Errorf("patterns %+v\nwant evidence starting %q", r.Patterns, want)
	}
	sizes["fc1"] = 4 * mib
	r, err = Diff(diffSnap("before.pickle", map[string]int{"param": 2, "fc1": 4}, sizes),
		diffSnap("after.pickle", map[string]int{"param": 2, "cache": 2}, sizes), DiffOptions{Device: AllDevices})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Patterns) != 1 || r.Patterns[0].Name != PatternGrowingContainer ||
		!strings.HasSuffix(r.Patterns[0].Evidence, "; but live memory did not grow in all: if the snapshots were taken at different points of a step, other memory freed in between can hide the growth, or the growth be memory moving between sites; dump both at the same point of the loop to tell") {
		t.Errorf("sizes unmatched: patterns %+v", r.Patterns)
	}
}

// TestDiffOrderUnknownNote: without trace times nothing orders the files: the note says the
// order given is taken.
func TestDiffOrderUnknownNote(t *testing.T) {
	sizes := map[string]int64{"param": 16 * mib, "cache": 8 * mib}
	r, err := Diff(diffSnap("before.pickle", map[string]int{"param": 2}, sizes), diffSnap("after.pickle", map[string]int{"param": 2, "cache": 3}, sizes), DiffOptions{Device: AllDevices})
	if err != nil {
		t.Fatal(err)
	}
	want := "neither file records trace times, so their order is the one given: before.pickle before after.pickle; if after.pickle was written first, give them the other way round (growth reads as shrinking)"
	if !slices.Contains(r.Notes, want) {
		t.Errorf("notes %q", r.Notes)
	}
}
