package analysis

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis/load"
	"github.com/memsnap/memsnap/analysis/sim"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

func findDiffSite(r *DiffResult, site string) (DiffSite, bool) {
	for _, d := range r.Sites {
		if d.Site == site {
			return d, true
		}
	}
	return DiffSite{}, false
}

func TestScenarioDiff(t *testing.T) {
	type want struct {
		site                  string
		deltaBytes            int64
		blocksBefore, blocksA int
	}
	tests := []struct {
		name       string
		pair       func() (*snapshot.Snapshot, *snapshot.Snapshot)
		pattern    string
		patSite    string
		totalDelta int64
		sites      []want
	}{
		{"retained graph", sim.RetainedGraphPair, PatternRetainedGraph, "train.py:89", 585*mib + 45*512, []want{
			{"model.py:41", 180 * mib, 10, 100},
			{"model.py:42", 180 * mib, 10, 100},
			{"model.py:44", 45 * mib, 10, 100},
			{"train.py:89", 180*mib + 45*512, 10, 100},
		}},
		{"growing container", sim.GrowingContainerPair, PatternGrowingContainer, "train.py:97", 180 * mib, []want{
			{"train.py:97", 180 * mib, 5, 50},
		}},
		{"optimizer first step", sim.OptimizerFirstStepPair, PatternOptimizerFirstStp, "train.py:91", 48*mib + 5*512, []want{
			{"train.py:91", 48*mib + 5*512, 0, 15},
			{"train.py:112", 0, 5, 5},
		}},
		{"no growth", sim.NoGrowthPair, PatternNoGrowth, "", 0, []want{
			{"train.py:112", 0, 5, 5},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before, after := tc.pair()
			r, err := Diff(before, after, DiffOptions{Device: AllDevices})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Patterns) != 1 || r.Patterns[0].Name != tc.pattern || r.Patterns[0].Site != tc.patSite {
				t.Fatalf("patterns = %+v, want %s at %q", r.Patterns, tc.pattern, tc.patSite)
			}
			if r.DeltaBytes != tc.totalDelta {
				t.Errorf("total delta = %d, want %d", r.DeltaBytes, tc.totalDelta)
			}
			for _, w := range tc.sites {
				d, ok := findDiffSite(r, w.site)
				if !ok {
					t.Errorf("site %s missing", w.site)
					continue
				}
				if d.DeltaBytes != w.deltaBytes || d.BlocksBefore != w.blocksBefore || d.BlocksAfter != w.blocksA || d.DeltaBlocks != w.blocksA-w.blocksBefore {
					t.Errorf("site %s = %+v, want %+v", w.site, d, w)
				}
			}
			// Every site that grew in both bytes and blocks is named by the pattern's evidence or is
			// the pattern's site.
			for _, d := range r.Sites {
				if growing(d) && tc.pattern != PatternNoGrowth && !strings.Contains(r.Patterns[0].Evidence, d.Site) {
					t.Errorf("growing site %s not in evidence %q", d.Site, r.Patterns[0].Evidence)
				}
			}
		})
	}
}

func TestScenarioOOM(t *testing.T) {
	tests := []struct {
		name        string
		scen        func() (*snapshot.Snapshot, sim.OOMTruth)
		verdict     string
		largestSame int64
		dominant    string
		topSite     string
	}{
		{"activation", sim.ActivationOOM, VerdictCapacity, 0, CategoryActivation, "train.py:112"},
		{"fragmentation", sim.FragmentationOOM, VerdictFragmentation, 9*mib + mib/2, CategoryActivation, "model.py:71"},
		{"outside pytorch", sim.OutsidePyTorchOOM, VerdictOutsidePyTorch, 8 * mib, CategoryOptimizerState, "train.py:91"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			snap, truth := tc.scen()
			r, err := OOMReport(context.Background(), snap, OOMOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.OOMs) != 1 {
				t.Fatalf("ooms = %d", len(r.OOMs))
			}
			o := r.OOMs[0]
			gotSite := fmt.Sprintf("%s:%d %s", o.File, o.Line, o.Function)
			checks := []struct {
				what      string
				got, want any
			}{
				{"site", gotSite, truth.Site},
				{"requested", o.RequestedBytes, truth.Requested},
				{"device free", o.DeviceFreeBytes, truth.DeviceFree},
				{"reserved", o.ReservedBytes, truth.Reserved},
				{"allocated", o.AllocatedBytes, truth.Allocated},
				{"inactive", o.InactiveBytes, truth.Inactive},
				{"largest any", o.LargestFreeAnyBytes, truth.LargestFree},
				{"largest same pool", o.LargestFreeBlockBytes, tc.largestSame},
				{"verdict", o.Verdict, tc.verdict},
				{"truth verdict", strings.TrimSuffix(o.Verdict, "_pytorch"), truth.Verdict},
				{"dominant", o.Dominant, tc.dominant},
				{"top live site", o.LiveSites[0].Site, tc.topSite},
				{"state source", o.StateSource, "final_state"},
			}
			for _, c := range checks {
				if c.got != c.want {
					t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
				}
			}
			if len(o.Fixes) == 0 || o.Explanation == "" || !strings.Contains(r.Text(), "verdict: "+tc.verdict) {
				t.Errorf("no fixes or explanation: %s", r.Text())
			}
		})
	}
}

// TestScenarioOOMReplayState: the OOM state comes from the replay when events follow the OOM;
// it must equal the final-state numbers the simulation reports (here: nothing is freed after
// the OOM, so appending a harmless alloc/free pair after it changes nothing at the OOM).
func TestScenarioOOMReplayState(t *testing.T) {
	snap, truth := sim.FragmentationOOM()
	evs := snap.DeviceTraces[0]
	snap.DeviceTraces[0] = append(evs,
		snapshot.Event{Action: snapshot.ActionAlloc, Addr: 1 << 50, Size: 512, Stack: snapshot.EmptyStack},
		snapshot.Event{Action: snapshot.ActionFreeRequested, Addr: 1 << 50, Size: 512, Stack: snapshot.EmptyStack},
		snapshot.Event{Action: snapshot.ActionFreeCompleted, Addr: 1 << 50, Size: 512, Stack: snapshot.EmptyStack})
	r, err := OOMReport(context.Background(), snap, OOMOptions{})
	if err != nil {
		t.Fatal(err)
	}
	o := r.OOMs[0]
	if o.StateSource != "replay" || o.ReservedBytes != truth.Reserved || o.InactiveBytes != truth.Inactive ||
		o.LargestFreeBlockBytes != truth.LargestFree || o.Verdict != VerdictFragmentation || o.LiveSites[0].Blocks != 50 {
		t.Errorf("replayed OOM = %+v, truth %+v", o, truth)
	}
}

func TestScenarioCrossStream(t *testing.T) {
	snap := sim.CrossStreamPendingFrees()
	r, err := Replay(context.Background(), snap, 0)
	if err != nil {
		t.Fatal(err)
	}
	d := r.DelayedFrees
	if d.Count != 4 || d.Bytes != 8*mib || d.PendingAtEnd != 2 || len(d.Sites) != 1 || d.Sites[0].Site != "train.py:64" || d.Sites[0].Blocks != 4 {
		t.Errorf("delayed frees = %+v", d)
	}
	if !r.Consistent {
		t.Errorf("replay inconsistent: %v", r.Notes)
	}
	ts, err := TopStacks(snap, TopStacksOptions{State: "pending", Device: AllDevices})
	if err != nil {
		t.Fatal(err)
	}
	if len(ts.Sites) != 1 || ts.Sites[0].Site != "train.py:64" || ts.Sites[0].Blocks != 2 || ts.Sites[0].Bytes != 4*mib || ts.Sites[0].Percent != 100 {
		t.Errorf("pending sites = %+v", ts.Sites)
	}
}

func TestScenarioBackwardNoPythonFrames(t *testing.T) {
	snap := sim.BackwardNoPythonFrames()
	r, err := TopStacks(snap, TopStacksOptions{Device: AllDevices})
	if err != nil {
		t.Fatal(err)
	}
	var got *TopSite
	for i := range r.Sites {
		if r.Sites[i].Site == SiteNoPython {
			got = &r.Sites[i]
		}
	}
	if got == nil || got.Bytes != 24*mib || got.Blocks != 5 || got.Category != CategoryGradient {
		t.Fatalf("no-python group = %+v in %s", got, r.Text())
	}
	if !strings.Contains(strings.Join(r.Notes, " "), `stacks="python"`) {
		t.Errorf("notes do not explain the empty stacks: %v", r.Notes)
	}
	for _, s := range r.Sites {
		if s.Kind != SiteKindUser && s.Site != SiteNoPython {
			t.Errorf("site %s is not a user frame", s.Site)
		}
	}
}

// TestScenarioFixtures: the committed fixtures (written by the pickle writer) load and give the
// same verdicts as the in-memory scenarios.
func TestScenarioFixtures(t *testing.T) {
	dir := "../testdata/scenarios/"
	ctx := context.Background()
	loadOr := func(name string) *snapshot.Snapshot {
		s, err := load.File(ctx, dir+name, load.Options{})
		if err != nil {
			t.Fatalf("load %s: %v", name, err)
		}
		return s
	}
	for _, tc := range []struct{ file, verdict string }{
		{"activation_oom.pickle", VerdictCapacity},
		{"fragmentation_oom.pickle", VerdictFragmentation},
		{"outside_pytorch_oom.pickle", VerdictOutsidePyTorch},
	} {
		r, err := OOMReport(ctx, loadOr(tc.file), OOMOptions{})
		if err != nil || len(r.OOMs) != 1 || r.OOMs[0].Verdict != tc.verdict {
			t.Errorf("%s: %v %+v", tc.file, err, r)
		}
	}
	for _, tc := range []struct{ before, after, pattern string }{
		{"retained_graph_step5.pickle", "retained_graph_step50.pickle", PatternRetainedGraph},
		{"growing_container_step5.pickle", "growing_container_step50.pickle", PatternGrowingContainer},
		{"optimizer_first_step_before.pickle", "optimizer_step10.pickle", PatternOptimizerFirstStp},
		{"no_growth_step5.pickle", "no_growth_step50.pickle", PatternNoGrowth},
	} {
		r, err := Diff(loadOr(tc.before), loadOr(tc.after), DiffOptions{Device: AllDevices})
		if err != nil || len(r.Patterns) != 1 || r.Patterns[0].Name != tc.pattern {
			t.Errorf("%s: %v %+v", tc.before, err, r.Patterns)
		}
	}
}

func TestFragmentationScenario(t *testing.T) {
	snap, _ := sim.FragmentationOOM()
	r, err := Fragmentation(snap, FragOptions{Device: AllDevices})
	if err != nil {
		t.Fatal(err)
	}
	var large *FragGroup
	for i := range r.Groups {
		if r.Groups[i].SegmentType == "large" {
			large = &r.Groups[i]
		}
	}
	if large == nil {
		t.Fatalf("no large group: %s", r.Text())
	}
	checks := []struct {
		what      string
		got, want int64
	}{
		{"segments", int64(large.Segments), 50},
		{"reserved", large.ReservedBytes, 1000 * mib},
		{"inactive", large.InactiveBytes, 475 * mib},
		{"largest", large.LargestFreeBlockBytes, 9*mib + mib/2},
		{"free blocks", int64(large.FreeBlocks), 50},
		{"releasable", large.ReleasableBytes, 0},
		{"stranded", large.StrandedBytes, 475 * mib},
		{"mostly free", int64(large.MostlyFreeSegments), 0},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.what, c.got, c.want)
		}
	}
	if !strings.Contains(strings.Join(r.Advice, " "), "expandable_segments:True") {
		t.Errorf("advice = %v", r.Advice)
	}
}
