package analysis

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis/allocator"
	"github.com/memsnap/memsnap/analysis/load"
	"github.com/memsnap/memsnap/analysis/sim"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

func whatIfFixture(t *testing.T, name string) *snapshot.Snapshot {
	t.Helper()
	snap, err := load.File(context.Background(), filepath.Join("..", "testdata", "scenarios", name), load.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

var expandableOn = []WhatIfSetting{{"expandable_segments", "True"}}

// TestWhatIfFixtures: the scenario fixtures replayed with expandable segments, exact values.
// The growing-batch pair are checked against running the same program with expandable
// segments in the simulator (their README ground truth).
func TestWhatIfFixtures(t *testing.T) {
	avoid, avoidTruth := sim.GrowingBatchOOM()
	capa, capaTruth := sim.GrowingBatchCapacityOOM()
	tests := []struct {
		name      string
		snap      *snapshot.Snapshot
		capacity  int64
		recorded  int
		event     int
		requested int64
		base      WhatIfRun
		what      WhatIfRun
		fits      bool
		headroom  int64
		baseHead  int64
		recAlloc  int64 // the trace's own peak allocated
		recReq    bool  // the trace records requested sizes
	}{
		{"fragmentation_oom.pickle", whatIfFixture(t, "fragmentation_oom.pickle"), 1024 * mib, 50, 250, 32 * mib,
			WhatIfRun{1000 * mib, 1000 * mib, 50, 1, 0, 0}, WhatIfRun{1000 * mib, 950 * mib, 49, 0, 0, 0}, true, 24 * mib, -8 * mib, 996147200, true},
		{"activation_oom.pickle", whatIfFixture(t, "activation_oom.pickle"), 940 * mib, 32, 76, 64 * mib,
			WhatIfRun{898 * mib, 939556864, 32, 1, 0, 1}, WhatIfRun{902 * mib, 939556864, 29, 1, 0, 0}, false, -22 * mib, -6 * mib, 939556864, false},
		{"whatif_expandable_avoids.pickle", whatIfFixture(t, "whatif_expandable_avoids.pickle"), avoidTruth.Capacity, avoidTruth.SegmentAllocs, avoidTruth.OOMEvent, avoidTruth.OOM.Requested,
			WhatIfRun{avoidTruth.PeakReserved, 1680 * mib, 50, 1, 1, 14}, WhatIfRun{avoidTruth.ExpandablePeakReserved, 1798 * mib, avoidTruth.ExpandableSegmentMaps, 0, 1, 3},
			avoidTruth.ExpandableFits, avoidTruth.ExpandableHeadroom, -2 * mib, 1680 * mib, false},
		{"whatif_capacity_oom.pickle", whatIfFixture(t, "whatif_capacity_oom.pickle"), capaTruth.Capacity, capaTruth.SegmentAllocs, capaTruth.OOMEvent, capaTruth.OOM.Requested,
			WhatIfRun{capaTruth.PeakReserved, 1680 * mib, 50, 1, 1, 14}, WhatIfRun{capaTruth.ExpandablePeakReserved, 1680 * mib, capaTruth.ExpandableSegmentMaps, 1, 0, 3},
			capaTruth.ExpandableFits, capaTruth.ExpandableHeadroom, -82 * mib, 1680 * mib, false},
	}
	// The fixtures are what the scenarios write.
	if len(avoid.DeviceTraces[0]) != len(tests[2].snap.DeviceTraces[0]) || len(capa.DeviceTraces[0]) != len(tests[3].snap.DeviceTraces[0]) {
		t.Fatal("the what-if fixtures are stale: go run ./analysis/sim/genfixtures")
	}
	if !avoidTruth.ExpandableFits || capaTruth.ExpandableFits {
		t.Fatalf("scenario truth: avoids %v, capacity %v", avoidTruth.ExpandableFits, capaTruth.ExpandableFits)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := WhatIf(context.Background(), tc.snap, nil, WhatIfOptions{Settings: expandableOn})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Devices) != 1 || !r.Settings.ExpandableSegments || r.Settings.AllocConf != "expandable_segments:True" || r.BaselineSettings.AllocConf != "" {
				t.Fatalf("result %+v", r)
			}
			d := r.Devices[0]
			wantF := WhatIfFidelity{RecordedSegmentAllocs: tc.recorded, ReproducedSegmentAllocs: tc.recorded, RecordedOOMs: 1, ReproducedOOMs: 1,
				ModelSegmentAllocs: tc.recorded, RecordedPeakReservedBytes: tc.base.PeakReservedBytes,
				RecordedPeakAllocatedBytes: tc.recAlloc, SizesAreRequested: tc.recReq, RecordedPeakAllocatedBasis: sizeBasis(tc.recReq), Exact: true, Checked: true, FirstMismatchEvent: -1}
			if d.CapacityBytes != tc.capacity || d.CapacitySource != "oom_event" || d.Start != "empty" || d.Fidelity != wantF {
				t.Errorf("capacity %d %s start %s fidelity %+v", d.CapacityBytes, d.CapacitySource, d.Start, d.Fidelity)
			}
			if d.Baseline != tc.base || d.WhatIf != tc.what {
				t.Errorf("baseline %+v what-if %+v, want %+v %+v", d.Baseline, d.WhatIf, tc.base, tc.what)
			}
			want := WhatIfOOM{EventIndex: tc.event, RequestedBytes: tc.requested, BaselineFits: false, WhatIfFits: tc.fits, HeadroomBytes: tc.headroom, BaselineHeadroomBytes: tc.baseHead}
			if len(d.OOMs) != 1 || d.OOMs[0] != want {
				t.Errorf("ooms %+v, want %+v", d.OOMs, want)
			}
			if !strings.Contains(r.Text(), "OOM at event") || !strings.Contains(r.Text(), "exact") {
				t.Errorf("text:\n%s", r.Text())
			}
		})
	}
}

// TestWhatIfOOMReport: oom-report replays expandable segments at every OOM and its
// fragmentation verdict cites the replay.
func TestWhatIfOOMReport(t *testing.T) {
	tests := []struct {
		file     string
		verdict  string
		avoided  bool
		headroom int64
		fix      string
	}{
		{"fragmentation_oom.pickle", VerdictFragmentation, true, 24 * mib, "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True so free memory in a pool stays contiguous: replaying the trace with expandable_segments:True, this request fits with 24.0 MiB to spare"},
		{"whatif_expandable_avoids.pickle", VerdictFragmentation, true, 48 * mib, "fits with 48.0 MiB to spare"},
		{"whatif_capacity_oom.pickle", VerdictFragmentation, false, -32 * mib, "expandable_segments:True is not enough here: replaying the trace with expandable_segments:True, this request still fails (32.0 MiB short)"},
		{"activation_oom.pickle", VerdictCapacity, false, -22 * mib, ""},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			r, err := OOMReport(context.Background(), whatIfFixture(t, tc.file), OOMOptions{})
			if err != nil {
				t.Fatal(err)
			}
			o := r.OOMs[0]
			w := o.ExpandableWhatIf
			if o.Verdict != tc.verdict || w == nil || w.Avoided != tc.avoided || w.HeadroomBytes != tc.headroom || !w.BaselineReproduced || !w.Exact || w.Start != "empty" {
				t.Fatalf("verdict %s what-if %+v", o.Verdict, w)
			}
			if tc.fix != "" && !strings.Contains(o.Fixes[0], tc.fix) {
				t.Errorf("fix %q lacks %q", o.Fixes[0], tc.fix)
			}
			if cites := strings.Contains(o.Explanation, "replaying the trace with expandable_segments:True"); cites != (tc.verdict == VerdictFragmentation) {
				t.Errorf("explanation %q", o.Explanation)
			}
		})
	}
	// A file already on expandable segments gets no what-if.
	s := sim.New(sim.Config{Capacity: 100 * sim.MiB, Expandable: true})
	st := sim.Op("empty", sim.Py(sim.TrainPy, 70, "main"))
	if _, err := s.Alloc(60*sim.MiB, 0, st); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Alloc(60*sim.MiB, 0, st); err == nil {
		t.Fatal("no OOM")
	}
	r, err := OOMReport(context.Background(), s.Snapshot(), OOMOptions{})
	if err != nil || len(r.OOMs) != 1 || r.OOMs[0].ExpandableWhatIf != nil {
		t.Errorf("expandable file: %v %+v", err, r.OOMs)
	}
}

func TestWhatIfErrors(t *testing.T) {
	frag := whatIfFixture(t, "fragmentation_oom.pickle")
	zero := 0
	three := 3
	noTrace := whatIfFixture(t, "summarize_basic_segment_list.pickle")
	tests := []struct {
		name   string
		snap   *snapshot.Snapshot
		device *int
		opt    WhatIfOptions
		want   string
		is     error
	}{
		{"unknown key", frag, nil, WhatIfOptions{Settings: []WhatIfSetting{{"expandable", "True"}}}, `unknown allocator setting "expandable": the accepted keys are expandable_segments, max_split_size_mb, roundup_power2_divisions, garbage_collection_threshold`, nil},
		{"bad value", frag, nil, WhatIfOptions{Settings: []WhatIfSetting{{"max_split_size_mb", "8"}}}, "max_split_size_mb must be more than 20", nil},
		{"nothing to do", frag, nil, WhatIfOptions{}, "give at least one setting to change", nil},
		{"no trace", noTrace, nil, WhatIfOptions{Settings: expandableOn}, "a what-if needs the trace", allocator.ErrNoTrace},
		{"absent device", frag, &three, WhatIfOptions{Settings: expandableOn}, "device 3 has no allocation events (devices with a trace: [0])", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := WhatIf(context.Background(), tc.snap, tc.device, tc.opt)
			if err == nil || !strings.Contains(err.Error(), tc.want) || (tc.is != nil && !errors.Is(err, tc.is)) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := WhatIf(context.Background(), frag, &zero, WhatIfOptions{Settings: expandableOn}); err != nil {
		t.Errorf("device 0: %v", err)
	}
	for _, c := range []struct{ in, key, value string }{
		{"expandable_segments=True", "expandable_segments", "True"},
		{"max_split_size_mb:128", "max_split_size_mb", "128"},
		{" garbage_collection_threshold = 0.6 ", "garbage_collection_threshold", "0.6"},
	} {
		kv, err := ParseWhatIfSetting(c.in)
		if err != nil || kv.Key != c.key || kv.Value != c.value {
			t.Errorf("ParseWhatIfSetting(%q) = %+v, %v", c.in, kv, err)
		}
	}
	if _, err := ParseWhatIfSetting("expandable"); err == nil || !strings.Contains(err.Error(), "KEY one of expandable_segments") {
		t.Errorf("no value: %v", err)
	}
}

// TestWhatIfRecommend ranks the grid on the fixture expandable segments rescue: settings that
// avoid the OOM come first, then the lowest peak reserved.
func TestWhatIfRecommend(t *testing.T) {
	r, err := WhatIf(context.Background(), whatIfFixture(t, "whatif_expandable_avoids.pickle"), nil, WhatIfOptions{Recommend: true})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Recommend || len(r.Recommendations) != 9 {
		t.Fatalf("recommendations %+v", r.Recommendations)
	}
	var confs []string
	for i, c := range r.Recommendations {
		if c.Rank != i+1 {
			t.Errorf("rank %d at %d", c.Rank, i)
		}
		if i > 0 {
			p := r.Recommendations[i-1]
			if p.OOMCount > c.OOMCount || (p.OOMCount == c.OOMCount && p.PeakReservedBytes > c.PeakReservedBytes) {
				t.Errorf("%s ranked before %s", p.Settings.AllocConf, c.Settings.AllocConf)
			}
		}
		confs = append(confs, c.Settings.AllocConf)
	}
	best := r.Recommendations[0]
	if best.OOMCount != 0 || best.OOMsAvoided != 1 || r.Settings != best.Settings || r.Devices[0].WhatIf.OOMCount != 0 {
		t.Errorf("best %+v, settings %+v", best, r.Settings)
	}
	if !strings.Contains(strings.Join(confs, " "), "expandable_segments:True") {
		t.Errorf("grid %v", confs)
	}
	own := 0
	for _, c := range r.Recommendations {
		if c.Baseline {
			own++
			if c.Settings.AllocConf != "" || c.OOMCount != 1 {
				t.Errorf("the file's own settings: %+v", c)
			}
		}
	}
	if own != 1 {
		t.Errorf("%d candidates are the file's own settings", own)
	}
	if !strings.Contains(r.Text(), "settings tried, best first") {
		t.Errorf("text:\n%s", r.Text())
	}
}

// TestWhatIfReal: the real traces' fidelity through the analysis (capacity choice, start,
// unchecked fidelity explained).
func TestWhatIfReal(t *testing.T) {
	files := realFiles(t)
	_ = files
	tests := []struct {
		file, source, start string
		recorded            int
		checked             bool
	}{
		{"pt2.5-2.7_small-full-trace_cs336.pickle", "unbounded", "empty", 9, true},
		{"pt2.1_multistream_llama-selectn.pickle", "malloc_retry", "reconstructed", 584, true},
		{"pt2.5-2.7_hf-qwen2-inference_segment-free-churn_sqattn.pickle", "unbounded", "reconstructed", 420, true},
		{"pt2.9plus_cs336-compile_optimizer-annotation_no-segment-events.pickle", "unbounded", "reconstructed", 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			snap, err := load.File(context.Background(), filepath.Join(realDir, tc.file), load.Options{})
			if err != nil {
				t.Fatal(err)
			}
			r, err := WhatIf(context.Background(), snap, nil, WhatIfOptions{Settings: expandableOn})
			if err != nil {
				t.Fatal(err)
			}
			d := r.Devices[0]
			f := d.Fidelity
			if d.CapacitySource != tc.source || d.Start != tc.start || f.RecordedSegmentAllocs != tc.recorded || f.ReproducedSegmentAllocs != tc.recorded ||
				f.ModelSegmentAllocs != tc.recorded || f.Checked != tc.checked || f.Exact != tc.checked || (tc.checked && f.Reason != "") || (!tc.checked && !strings.Contains(f.Reason, "already warm")) {
				t.Errorf("capacity %s start %s fidelity %+v", d.CapacitySource, d.Start, f)
			}
		})
	}
	// Without an OOM or cudaMalloc failures a device size gives OOM verdicts.
	snap, err := load.File(context.Background(), filepath.Join(realDir, "pt2.5-2.7_small-full-trace_cs336.pickle"), load.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := WhatIf(context.Background(), snap, nil, WhatIfOptions{Settings: expandableOn, DeviceMemory: 3 * gib})
	if err != nil {
		t.Fatal(err)
	}
	d := r.Devices[0]
	if d.CapacitySource != "given" || d.CapacityBytes != 3*gib || d.Baseline.OOMCount == 0 || d.Fidelity.Exact || !strings.Contains(strings.Join(d.Notes, " "), "more than the device memory given") {
		t.Errorf("given capacity: %+v", d)
	}
}

// BenchmarkWhatIfVsReplay compares the what-if (the baseline and one what-if replay) with the
// replay on a large snapshot loaded once: set MEMSNAP_BENCH_FILE (bench/gensnap writes a 300 MB
// file). The issue asks for the what-if within 2× the replay.
func BenchmarkWhatIfVsReplay(b *testing.B) {
	f := os.Getenv("MEMSNAP_BENCH_FILE")
	if f == "" {
		b.Skip("set MEMSNAP_BENCH_FILE to a large snapshot (e.g. one written by bench/gensnap)")
	}
	snap, err := load.File(context.Background(), f, load.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("replay", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := ReplaySnapshot(context.Background(), snap, nil, ReplayOptions{Limit: 10}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("whatif", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := WhatIf(context.Background(), snap, nil, WhatIfOptions{Settings: expandableOn}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestWhatIfChangeNeeded: a what-if on a file with no OOM says that no setting needs changing
// and what the best still gives back; with an OOM recorded, or met by the file's own settings
// at a given device size, a change is needed and the note is absent.
func TestWhatIfChangeNeeded(t *testing.T) {
	files := realFiles(t)
	_ = files
	snap, err := load.File(context.Background(), filepath.Join(realDir, "pt2.2_repeated-snapshot-events_cnn-counterfactuals_eornn.pickle"), load.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := WhatIf(context.Background(), snap, nil, WhatIfOptions{Recommend: true})
	if err != nil {
		t.Fatal(err)
	}
	want := "no change needed: the trace records no OOM and the file's own settings meet none in the replay; expandable_segments:True lowers the peak reserved by 20.0 MiB (16%), memory the cache keeps for reuse, not memory lost: change it only to give that memory to something else (another process, a larger batch)"
	if r.ChangeNeeded || !slices.Contains(r.Notes, want) {
		t.Errorf("change needed %v, notes %q", r.ChangeNeeded, r.Notes)
	}
	if !strings.HasPrefix(r.Text(), "what-if on "+snap.Path+": no OOM to avoid, so no setting needs changing; the lowest peak reserved of 7 settings tried: expandable_segments:True (recorded with the defaults)\n") {
		t.Errorf("text:\n%s", r.Text())
	}
	// The file's own settings and nothing better: no saving to name.
	small, err := load.File(context.Background(), filepath.Join(realDir, "pt2.5-2.7_small-full-trace_cs336.pickle"), load.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err = WhatIf(context.Background(), small, nil, WhatIfOptions{Settings: []WhatIfSetting{{Key: "roundup_power2_divisions", Value: "4"}}})
	if err != nil {
		t.Fatal(err)
	}
	if r.ChangeNeeded || !slices.Contains(r.Notes, "no change needed: the trace records no OOM and the file's own settings meet none in the replay") {
		t.Errorf("change needed %v, notes %q", r.ChangeNeeded, r.Notes)
	}
	// A device too small for the file's own settings: a change is needed.
	r, err = WhatIf(context.Background(), small, nil, WhatIfOptions{Settings: expandableOn, DeviceMemory: 3 * gib})
	if err != nil {
		t.Fatal(err)
	}
	if !r.ChangeNeeded || strings.Contains(strings.Join(r.Notes, " "), "no change needed") {
		t.Errorf("3 GiB: change needed %v, notes %q", r.ChangeNeeded, r.Notes)
	}
	// An OOM recorded.
	r, err = WhatIf(context.Background(), whatIfFixture(t, "whatif_expandable_avoids.pickle"), nil, WhatIfOptions{Recommend: true})
	if err != nil {
		t.Fatal(err)
	}
	if !r.ChangeNeeded || strings.Contains(strings.Join(r.Notes, " "), "no change needed") || !strings.Contains(r.Text(), ": best of 9 settings tried: ") {
		t.Errorf("recorded OOM: change needed %v, notes %q", r.ChangeNeeded, r.Notes)
	}
}

// TestWhatIfRequestedSizes: the eornn CNN trace records requested sizes; the what-if's
// fidelity carries the trace's own peak allocated, the same as replay's, and a note says why
// the baseline's (rounded, unsplit blocks) is higher, instead of two peaks of one run that
// disagree without a reason.
func TestWhatIfRequestedSizes(t *testing.T) {
	snap := realFile(t, "pt2.2_repeated-snapshot-events_cnn-counterfactuals_eornn.pickle")
	r, err := WhatIf(context.Background(), snap, nil, WhatIfOptions{Settings: expandableOn})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := ReplayDevice(context.Background(), snap, ReplayOptions{Device: 0})
	if err != nil {
		t.Fatal(err)
	}
	d := r.Devices[0]
	if f := d.Fidelity; f.RecordedPeakAllocatedBytes != 108258676 || rep.PeakAllocatedBytes != 108258676 || !f.SizesAreRequested || d.Baseline.PeakAllocatedBytes != 110110720 {
		t.Fatalf("recorded %d (replay %d), requested %v, baseline %d", f.RecordedPeakAllocatedBytes, rep.PeakAllocatedBytes, f.SizesAreRequested, d.Baseline.PeakAllocatedBytes)
	}
	note := "the trace records requested sizes: its own peak allocated (replay, summarize) is 103 MiB in requested bytes; the replays count whole blocks as the allocator hands them out (rounded up, and not split when the rest is too small to split), as PyTorch's allocated_bytes does, so the baseline's peak allocated is 105 MiB, and a setting that splits differently changes it"
	if !slices.Contains(d.Notes, note) {
		t.Errorf("notes %q", d.Notes)
	}
	if !strings.Contains(r.Text(), "(recorded peak reserved 128 MiB, peak allocated 103 MiB in requested bytes)\n") {
		t.Errorf("text:\n%s", r.Text())
	}
}

// TestWhatIfCacheFlushes: the llama file's device is at its limit: the trace records 39 bursts
// of segment_free before a segment_alloc (cudaMalloc failed, the cache was freed, the request
// retried; answer key #2), and the baseline replay meets exactly 39 such flushes. No OOM, yet
// the recommendation ranks by them and says so; the gc threshold that needs none is tagged
// with the memory fraction it depends on.
func TestWhatIfCacheFlushes(t *testing.T) {
	snap := realSnap(t, "pt2.1_multistream_llama-selectn.pickle")
	r, err := WhatIf(context.Background(), snap, nil, WhatIfOptions{Recommend: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.ChangeNeeded || r.Devices[0].Baseline.CacheFlushes != 39 || r.Devices[0].WhatIf.CacheFlushes != 0 {
		t.Errorf("change needed %v baseline %+v what-if %+v", r.ChangeNeeded, r.Devices[0].Baseline, r.Devices[0].WhatIf)
	}
	got := []string{}
	for _, c := range r.Recommendations {
		got = append(got, fmt.Sprintf("%s:%d", confName(c.Settings), c.CacheFlushes))
	}
	want := "garbage_collection_threshold:0.6:0 garbage_collection_threshold:0.8:0 expandable_segments:True:13 expandable_segments:True,roundup_power2_divisions:4:20 max_split_size_mb:128:25 max_split_size_mb:256:25 the defaults:39 roundup_power2_divisions:4:45 max_split_size_mb:512:48"
	if strings.Join(got, " ") != want {
		t.Errorf("ranking %s\nwant    %s", strings.Join(got, " "), want)
	}
	text := r.Text()
	for _, s := range []string{
		"no OOM to avoid, but the file's own settings flush the whole cache 39 times; the best of 9 settings tried: garbage_collection_threshold:0.6",
		"  cache flushes                39            0\n",
		"note: with the file's own settings the replay meets 39 cache flushes: cudaMalloc failed, and the allocator freed every cached segment and retried; no OOM, but each is a device-wide synchronize",
		"garbage_collection_threshold:0.6 meets 0 (only with torch.cuda.set_per_process_memory_fraction set: the threshold is a fraction of it), yet frees segments about as often (584 cudaFree calls, 579 with the file's own): the churn moves, it does not go",
		"  cudaFree calls              579          584\n",
		"so the device could not hold 21.01 GiB: its capacity lies between 20.97 GiB and that (22519218176 and 22556966911 bytes)",
	} {
		if !strings.Contains(text, s) {
			t.Errorf("text lacks %q:\n%s", s, text)
		}
	}
	if strings.Contains(text, "no change needed") {
		t.Errorf("'no change needed' beside 39 cache flushes:\n%s", text)
	}
}
