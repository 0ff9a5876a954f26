package analysis

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis/load"
	"github.com/memsnap/memsnap/analysis/sim"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// TestSameRunScenarioFixtures: the committed pairs are two points of one run (the later trace
// holds the earlier one's events; segments and their blocks stay put), keep their patterns, and
// compare roles and peaks exactly.
func TestSameRunScenarioFixtures(t *testing.T) {
	dir := "../testdata/scenarios/"
	type roles = []DiffRole
	tests := []struct {
		before, after       string
		pattern, site       string
		evidence            string // exact same_run_evidence
		peakBefore, peakAft int64
		peakSiteB, peakSite string // the largest site live at each peak
		roles               roles
	}{
		{"retained_graph_step5.pickle", "retained_graph_step50.pickle", PatternRetainedGraph, "train.py:89",
			"one run: the traces overlap in time and 240 of the 240 events of retained_graph_step5.pickle in the overlap are also in retained_graph_step50.pickle (same time, action, address and size); segments at the same (address, size) in both: 13 (of 13 and 62), 11 of them holding a block of the same site at the same address (e.g. train.py:112); same allocator settings (PYTORCH_CUDA_ALLOC_CONF unset); same device 0; both training",
			175638568, 789055708, "train.py:91", "train.py:89", roles{
				{CategoryActivation, 68160000, 681600000, 613440000},
				{CategoryOptimizerState, 50334208, 50334208, 0},
				{CategoryParameter, 25165824, 25165824, 0},
				{CategoryOther, 526336, 526336, 0}}},
		{"growing_container_step5.pickle", "growing_container_step50.pickle", PatternGrowingContainer, "train.py:97",
			"one run: the traces overlap in time and 321 of the 321 events of growing_container_step5.pickle in the overlap are also in growing_container_step50.pickle (same time, action, address and size); segments at the same (address, size) in both: 9 (of 9 and 18), 6 of them holding a block of the same site at the same address (e.g. train.py:112); same allocator settings (PYTORCH_CUDA_ALLOC_CONF unset); same device 0; both training",
			128452632, 317196312, "train.py:91", "train.py:97", roles{
				{CategoryUserContainer, 20971520, 209715200, 188743680},
				{CategoryOptimizerState, 50334208, 50334208, 0},
				{CategoryParameter, 25165824, 25165824, 0},
				{CategoryOther, 526336, 526336, 0}}},
		{"optimizer_first_step_before.pickle", "optimizer_step10.pickle", PatternOptimizerFirstStp, "train.py:91",
			"one run: the traces overlap in time and 55 of the 55 events of optimizer_first_step_before.pickle in the overlap are also in optimizer_step10.pickle (same time, action, address and size); segments at the same (address, size) in both: 5 (of 5 and 8), 3 of them holding a block of the same site at the same address (e.g. train.py:112); same allocator settings (PYTORCH_CUDA_ALLOC_CONF unset); same device 0; both training",
			61343748, 111675416, "<no Python frame> MmBackward0", "train.py:91", roles{
				{CategoryOptimizerState, 0, 50334208, 50334208},
				{CategoryParameter, 25165824, 25165824, 0},
				{CategoryGradient, 25165824, 25165824, 0},
				{CategoryUserContainer, 4194816, 4194816, 0},
				{CategoryOther, 526336, 526336, 0}}},
		{"no_growth_step5.pickle", "no_growth_step50.pickle", PatternNoGrowth, "",
			"one run: the traces overlap in time and 315 of the 315 events of no_growth_step5.pickle in the overlap are also in no_growth_step50.pickle (same time, action, address and size); segments at the same (address, size) in both: 8 (of 8 and 8), 5 of them holding a block of the same site at the same address (e.g. train.py:112); same allocator settings (PYTORCH_CUDA_ALLOC_CONF unset); same device 0; both training",
			111675416, 111675416, "train.py:91", "train.py:91", roles{
				{CategoryOptimizerState, 50334208, 50334208, 0},
				{CategoryParameter, 25165824, 25165824, 0},
				{CategoryOther, 526336, 526336, 0}}},
	}
	ctx := context.Background()
	for _, tc := range tests {
		t.Run(tc.before, func(t *testing.T) {
			b, err := load.File(ctx, dir+tc.before, load.Options{})
			if err != nil {
				t.Fatal(err)
			}
			a, err := load.File(ctx, dir+tc.after, load.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for _, order := range []struct {
				name string
				x, y *snapshot.Snapshot
			}{{"in order", b, a}, {"reversed", a, b}} {
				r, err := Diff(order.x, order.y, DiffOptions{Device: AllDevices})
				if err != nil {
					t.Fatal(err)
				}
				if !r.sameRun() || r.Swapped != (order.name == "reversed") || r.SameRunEvidence != tc.evidence {
					t.Errorf("%s: same_run %v swapped %v evidence\n got %q\nwant %q", order.name, r.SameRun, r.Swapped, r.SameRunEvidence, tc.evidence)
				}
				if filepath.Base(r.BeforePath) != tc.before || filepath.Base(r.AfterPath) != tc.after {
					t.Errorf("%s: %s -> %s", order.name, r.BeforePath, r.AfterPath)
				}
				if len(r.Patterns) != 1 || r.Patterns[0].Name != tc.pattern || r.Patterns[0].Site != tc.site || r.Patterns[0].UserSite != tc.site {
					t.Errorf("%s: patterns %+v", order.name, r.Patterns)
				}
				if r.PeakBeforeBytes == nil || r.PeakAfterBytes == nil || *r.PeakBeforeBytes != tc.peakBefore || *r.PeakAfterBytes != tc.peakAft {
					t.Errorf("%s: peaks %v %v", order.name, r.PeakBeforeBytes, r.PeakAfterBytes)
				} else if len(r.PeakSitesBefore) == 0 || len(r.PeakSitesAfter) == 0 || len(r.PeakSitesAfter) > peakSitesLimit ||
					r.PeakSitesBefore[0].Site != tc.peakSiteB || r.PeakSitesAfter[0].Site != tc.peakSite {
					t.Errorf("%s: peak sites %+v / %+v", order.name, r.PeakSitesBefore, r.PeakSitesAfter)
				}
				if !equalRoles(r.Roles, tc.roles) {
					t.Errorf("%s: roles %+v", order.name, r.Roles)
				}
			}
		})
	}
}

func equalRoles(a, b []DiffRole) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// shiftClock moves every trace event of s by us microseconds.
func shiftClock(s *snapshot.Snapshot, us int64) {
	for d := range s.DeviceTraces {
		for i := range s.DeviceTraces[d] {
			s.DeviceTraces[d][i].TimeUS += us
		}
	}
}

// TestSameRunFacts: each fact alone decides the verdict, and the evidence names it.
func TestSameRunFacts(t *testing.T) {
	const day = 24 * 3600 * 1_000_000
	sizes := map[string]int64{"param": 16 * mib, "cache": 8 * mib, "fc1": 4 * mib}
	pair := func(edit func(b, a *snapshot.Snapshot)) func() (*snapshot.Snapshot, *snapshot.Snapshot) {
		return func() (*snapshot.Snapshot, *snapshot.Snapshot) {
			b, a := sim.NoGrowthPair()
			b.Path, a.Path = "b.pickle", "a.pickle"
			edit(b, a)
			return b, a
		}
	}
	yes, no := true, false
	tests := []struct {
		name     string
		pair     func() (*snapshot.Snapshot, *snapshot.Snapshot)
		same     *bool
		evidence string // a fact the evidence must name
	}{
		{"one run", pair(func(b, a *snapshot.Snapshot) {}), &yes,
			"one run: the traces overlap in time and 315 of the 315 events of b.pickle in the overlap are also in a.pickle"},
		{"settings differ", pair(func(b, a *snapshot.Snapshot) { a.Settings.AllocConf = "expandable_segments:True" }), &no,
			"not one run: allocator settings differ (b.pickle: PYTORCH_CUDA_ALLOC_CONF unset; a.pickle: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) (although the traces overlap"},
		{"devices differ", pair(func(b, a *snapshot.Snapshot) {
			for i := range a.Segments {
				a.Segments[i].Device = 1
			}
			a.DeviceTraces = append([][]snapshot.Event{nil}, a.DeviceTraces...)
		}), &no, "not one run: segments on different devices (b.pickle: device 0; a.pickle: device 1)"},
		{"traces months apart", pair(func(b, a *snapshot.Snapshot) { shiftClock(a, 61*day) }), &no,
			"not one run: the traces are 60 days apart (b.pickle ends "},
		{"traces overlap without common events", pair(func(b, a *snapshot.Snapshot) { shiftClock(a, 1) }), &no,
			"a.pickle holds none of the 314 events b.pickle recorded then: two processes recording at once"},
		{"same program, two processes: the traces share only the setup", func() (*snapshot.Snapshot, *snapshot.Snapshot) {
			b, _ := sim.NoGrowthPair()
			a, _ := sim.GrowingContainerPair()
			b.Path, a.Path = "b.pickle", "a.pickle"
			return b, a
		}, &no, "holds only "},
		{"no shared segment among several", func() (*snapshot.Snapshot, *snapshot.Snapshot) {
			b, a := diffSnap("b.pickle", map[string]int{"param": 1, "cache": 1, "fc1": 1}, sizes), diffSnap("a.pickle", map[string]int{"param": 1, "cache": 1, "fc1": 1}, sizes)
			for i := range a.Segments {
				a.Segments[i].Address += 1 << 40
			}
			return b, a
		}, &no, "not one run: none of the 3 and 3 segments share an (address, size): every cudaMalloc is elsewhere"},
		{"not enough to tell", func() (*snapshot.Snapshot, *snapshot.Snapshot) {
			return diffSnap("b.pickle", map[string]int{"cache": 3}, sizes), diffSnap("a.pickle", map[string]int{"param": 2}, sizes)
		}, nil, "cannot tell whether these are one run: same allocator settings (no allocator_settings (PyTorch before 2.3)); same device 0; neither file has a trace clock (time_us); no segment at the same (address, size) among 1 and 1 segments; nothing ties them to one process: no segment at the same address holding a block of the same site, no trace events in common"},
		{"no clock, same-site segment", func() (*snapshot.Snapshot, *snapshot.Snapshot) {
			return diffSnap("b.pickle", map[string]int{"param": 2, "cache": 3}, sizes), diffSnap("a.pickle", map[string]int{"param": 2, "cache": 9}, sizes)
		}, &yes, "one run: segments at the same (address, size) in both: 1 (of 2 and 2), 1 of them holding a block of the same site at the same address (e.g. train.py:10); same allocator settings (no allocator_settings (PyTorch before 2.3)); same device 0; neither file has a trace clock (time_us)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, a := tc.pair()
			r, err := Diff(b, a, DiffOptions{Device: AllDevices})
			if err != nil {
				t.Fatal(err)
			}
			if (r.SameRun == nil) != (tc.same == nil) || (r.SameRun != nil && *r.SameRun != *tc.same) {
				t.Errorf("same_run %v, want %v: %s", r.SameRun, tc.same, r.SameRunEvidence)
			}
			if !strings.Contains(r.SameRunEvidence, tc.evidence) {
				t.Errorf("evidence\n got %q\nwant it to contain %q", r.SameRunEvidence, tc.evidence)
			}
			if r.Swapped || r.BeforePath != "b.pickle" {
				t.Errorf("swapped %v, before %s", r.Swapped, r.BeforePath)
			}
			notComparable := len(r.Patterns) == 1 && r.Patterns[0].Name == PatternNotComparable && r.Patterns[0].Site == ""
			if notComparable == r.sameRun() {
				t.Errorf("patterns %+v for same_run %v", r.Patterns, r.SameRun)
			}
			twoSnaps := 0
			for _, n := range r.Notes {
				twoSnaps += strings.Count(n, "take two snapshots of the same process at different steps")
			}
			if notComparable && (r.Patterns[0].FixRule != "diff.compare-runs" || !strings.Contains(r.Patterns[0].Fix, "none for a leak: these are two runs") ||
				strings.Contains(r.Patterns[0].Fix, "take two snapshots") || twoSnaps != 1 ||
				!strings.Contains(r.Patterns[0].Evidence, map[bool]string{true: "may be between two processes: it cannot be read as growth: no leak pattern applies",
					false: "is between two processes, not growth: no leak pattern applies"}[r.SameRun == nil])) {
				t.Errorf("not_comparable %+v", r.Patterns[0])
			}
		})
	}
}

func TestSameRunWorkload(t *testing.T) {
	f := func(w string) runFile {
		return runFile{snap: &snapshot.Snapshot{Path: "/x/" + w + ".pickle"}, workload: w, workloadEv: "because"}
	}
	for _, tc := range []struct{ b, a, against, neutral string }{
		{WorkloadTraining, WorkloadInference, "different workloads (training.pickle: training, because; inference.pickle: inference, because)", ""},
		{WorkloadTraining, WorkloadTraining, "", "both training"},
		{WorkloadTraining, WorkloadUnknown, "", ""},
	} {
		against, neutral := runWorkload(f(tc.b), f(tc.a))
		if against != tc.against || neutral != tc.neutral {
			t.Errorf("%s/%s: %q %q", tc.b, tc.a, against, neutral)
		}
	}
}

// realSnaps caches the loaded real files for the whole test binary (tests that read it run
// sequentially; parallel subtests only read what was loaded before they started).
var realSnaps = map[string]*snapshot.Snapshot{}

// realSnap loads one file of the real folder (once per test binary); skips when it is absent.
func realSnap(t *testing.T, name string) *snapshot.Snapshot {
	t.Helper()
	realFiles(t) // skips with a message when the folder is absent
	if s := realSnaps[name]; s != nil {
		return s
	}
	s, err := load.File(context.Background(), filepath.Join(realDir, name), load.Options{})
	if err != nil {
		t.Fatalf("load %s: %v", name, err)
	}
	realSnaps[name] = s
	return s
}

// TestDiffRealCrossFile: files of different processes (DIAGNOSIS.md, "Cross-file pairs") are
// never one run: no leak pattern, roles compared like for like, no pattern at a frameless site,
// and the user's order is kept.
func TestDiffRealCrossFile(t *testing.T) {
	const (
		small   = "pt2.5-2.7_small-full-trace_cs336.pickle"
		fwd     = "pt2.5-2.7_torch-compile_cpp-frames_cs336-fwd.pickle"
		win     = "pt2.10_user-metadata_windows_cs336.pickle"
		opt     = "pt2.9plus_cs336-compile_optimizer-annotation_no-segment-events.pickle"
		diff1   = "pt2.2_state-only_device1_diffusion.pickle"
		ddpm    = "pt2.2_state-only_windows_ddpm-unet.pickle"
		llama   = "pt2.1_multistream_llama-selectn.pickle"
		flexgen = "pt2.0_legacy-history_flexgen-opt.pickle"
	)
	tests := []struct {
		before, after string
		evidence      []string // facts the same-run evidence must name
		delta         int64
	}{
		{small, fwd, []string{"the traces are 281 days apart (pt2.5-2.7_torch-compile_cpp-frames_cs336-fwd.pickle ends 2025-05-27 07:02:19 UTC, pt2.5-2.7_small-full-trace_cs336.pickle starts 2026-03-05 05:31:32 UTC)", "segments share an (address, size)"}, 17706434048},
		{small, win, []string{"only pt2.10_user-metadata_windows_cs336.pickle records graph_capture_record_stream_reuse", "the traces are 43 days apart", "segments share an (address, size)"}, 1346033664},
		{small, opt, []string{"only pt2.9plus_cs336-compile_optimizer-annotation_no-segment-events.pickle records graph_capture_record_stream_reuse", "segments share an (address, size)"}, 3041151488},
		{fwd, win, []string{"the traces are 325 days apart", "segments share an (address, size)"}, -16360400384},
		{fwd, opt, []string{"the traces are 288 days apart", "segments share an (address, size)"}, -14665282560},
		{win, opt, []string{"the traces are 37 days apart", "segments share an (address, size)"}, 1695117824},
		{diff1, ddpm, []string{"segments on different devices", "pt2.2_state-only_device1_diffusion.pickle: device 1", "pt2.2_state-only_windows_ddpm-unet.pickle: device 0", "segments share an (address, size)"}, -10701278720},
		{llama, flexgen, []string{"pt2.0_legacy-history_flexgen-opt.pickle is PyTorch 2.0's format", "segments share an (address, size)"}, -4358941696},
	}
	for _, tc := range tests {
		for _, rev := range []bool{false, true} {
			before, after := tc.before, tc.after
			delta := tc.delta
			if rev {
				before, after, delta = after, before, -delta
			}
			t.Run(before+"_vs_"+after, func(t *testing.T) {
				r, err := Diff(realSnap(t, before), realSnap(t, after), DiffOptions{Device: AllDevices})
				if err != nil {
					t.Fatal(err)
				}
				if r.SameRun == nil || *r.SameRun || r.Swapped || filepath.Base(r.BeforePath) != before {
					t.Fatalf("same_run %v swapped %v before %s: %s", r.SameRun, r.Swapped, r.BeforePath, r.SameRunEvidence)
				}
				for _, e := range tc.evidence {
					if !strings.Contains(r.SameRunEvidence, e) {
						t.Errorf("evidence %q does not name %q", r.SameRunEvidence, e)
					}
				}
				if r.DeltaBytes != delta {
					t.Errorf("delta %d, want %d", r.DeltaBytes, delta)
				}
				if len(r.Patterns) != 1 || r.Patterns[0].Name != PatternNotComparable || r.Patterns[0].Site != "" {
					t.Errorf("patterns %+v", r.Patterns)
				}
				var sb, sa int64
				for _, x := range r.Roles {
					sb, sa = sb+x.BytesBefore, sa+x.BytesAfter
					if x.DeltaBytes != x.BytesAfter-x.BytesBefore {
						t.Errorf("role %+v", x)
					}
				}
				if len(r.Roles) == 0 || sb != r.BytesBefore || sa != r.BytesAfter {
					t.Errorf("roles %+v do not add up to %d / %d", r.Roles, r.BytesBefore, r.BytesAfter)
				}
				text := r.Text()
				// Two runs are compared at their peaks first, then the final states.
				first, rest, _ := strings.Cut(text, "\n")
				second := first
				if r.PeakBeforeBytes != nil && r.PeakAfterBytes != nil {
					second, _, _ = strings.Cut(rest, "\n")
				}
				if r.PeakBeforeBytes != nil && r.PeakAfterBytes != nil &&
					!strings.HasPrefix(first, fmt.Sprintf("peak %s -> %s (%s)", FormatBytes(*r.PeakBeforeBytes), FormatBytes(*r.PeakAfterBytes), formatDelta(*r.PeakAfterBytes-*r.PeakBeforeBytes))) {
					t.Errorf("headline %q does not lead with the peaks", first)
				}
				if !strings.Contains(second, formatDelta(r.DeltaBytes)+")") || !strings.Contains(second, "two different runs: the difference is not growth") {
					t.Errorf("second line %q", second)
				}
				for _, bad := range []string{PatternNoGrowth, PatternGrowingContainer, PatternRetainedGraph, PatternOptimizerFirstStp, PatternUnexplainedGrowth} {
					if strings.Contains(text, bad) {
						t.Errorf("text names %s:\n%s", bad, text)
					}
				}
				js, _ := json.Marshal(r)
				for _, key := range []string{`"same_run":false`, `"peak_before_bytes":`, `"peak_sites_after":[`, `"roles":[{"category":`} {
					if !strings.Contains(string(js), key) {
						t.Errorf("JSON lacks %s", key)
					}
				}
				for _, s := range r.Sites {
					b, _ := json.Marshal(s)
					if !strings.Contains(string(b), `"user_site":`) {
						t.Errorf("site without user_site: %s", b)
					}
				}
			})
		}
	}
}

// TestDiffRealSelf: a file against itself is one run with no growth.
func TestDiffRealSelf(t *testing.T) {
	for _, name := range []string{"pt2.10_user-metadata_windows_cs336.pickle", "pt2.2_state-only_windows_ddpm-unet.pickle", "pt2.5-2.8_max-split-512_no-history_triton-unfold.pkl"} {
		t.Run(name, func(t *testing.T) {
			s := realSnap(t, name)
			r, err := Diff(s, s, DiffOptions{Device: AllDevices})
			if err != nil {
				t.Fatal(err)
			}
			if !r.sameRun() || r.Swapped || r.DeltaBytes != 0 || len(r.Patterns) != 1 || r.Patterns[0].Name != PatternNoGrowth ||
				r.Patterns[0].Fix != "none: both are the same file, so nothing can differ; diff two snapshots of one run taken at different steps" {
				t.Errorf("same_run %v (%s) swapped %v delta %d patterns %+v", r.SameRun, r.SameRunEvidence, r.Swapped, r.DeltaBytes, r.Patterns)
			}
		})
	}
}

// TestDiffRealPairsInvariants: across every pair of distinct real files (no two share a process):
// never one run, never a leak pattern, never a pattern at a site without a user frame.
func TestDiffRealPairsInvariants(t *testing.T) {
	files := realFiles(t)
	snaps := make([]*snapshot.Snapshot, len(files))
	for i, f := range files {
		snaps[i] = realSnap(t, filepath.Base(f))
	}
	for i := range files {
		for j := i + 1; j < len(files); j++ {
			x, y := filepath.Base(files[i]), filepath.Base(files[j])
			t.Run(x+"_vs_"+y, func(t *testing.T) {
				t.Parallel()
				r, err := Diff(snaps[i], snaps[j], DiffOptions{Device: AllDevices})
				if err != nil {
					t.Fatal(err)
				}
				if r.sameRun() {
					t.Errorf("same_run true: %s", r.SameRunEvidence)
				}
				for _, p := range r.Patterns {
					if p.Name != PatternNotComparable || p.Site != "" || p.UserSite != "" {
						t.Errorf("pattern %+v", p)
					}
				}
			})
		}
	}
}
