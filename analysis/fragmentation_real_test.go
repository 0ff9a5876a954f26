package analysis

import (
	"context"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis/load"
	"github.com/memsnap/memsnap/analysis/snapshot"
	"github.com/memsnap/memsnap/internal/realsnaps/realtest"
)

// realFile loads one real snapshot by name, skipping when the folder or the file is absent.
func realFile(t *testing.T, name string) *snapshot.Snapshot {
	t.Helper()
	path := realtest.Path(t, name)
	snap, err := load.File(context.Background(), path, load.Options{})
	if err != nil {
		t.Fatalf("load %s: %v", name, err)
	}
	return snap
}

// TestRealFragmentation: the fragmentation answer against DIAGNOSIS.md (real files).
func TestRealFragmentation(t *testing.T) {
	tests := []struct {
		diag       string // DIAGNOSIS.md section
		file       string
		verdict    string
		releasable int64 // what empty_cache() returns
		inactive   int64
		fullyFree  int
		want       []string // in advice or summary
		never      []string
	}{
		// #7: both 40 MiB ranges hold a live 8.1 MiB block straddling the 20 MiB page boundary,
		// the 2 MiB small range holds two live blocks: no whole free page, ~0 returned.
		{"#7", "pt2.5plus_tiny_two-devices_expandable_no-trace.pickle", FragSmall, 0, 68898816, 0,
			[]string{"empty_cache() would return 0 B (whole free pages", "drop max_split_size_mb:128: with expandable segments the allocator's should_split ignores it"},
			[]string{"set max_split", "max_split_size_mb (e.g.", "stranded between live blocks even with expandable"}},
		{"#8", "pt2.5plus_empty_4-devices.pickle", FragEmpty, 0, 0, 0,
			[]string{"nothing is reserved", "_record_memory_history()"},
			[]string{"max_split", "no leak", "healthy"}},
		// #14: max_split_size_mb:512 and no block reaches 512 MiB; 3 fully free segments.
		{"#14", "pt2.5-2.8_max-split-512_no-history_triton-unfold.pkl", FragCache, 44 * mib, 44 * mib, 3,
			[]string{"max_split_size_mb:512 has no effect here: no block is 512 MiB or larger (the largest is 22.0 MiB)", "empty_cache() would return 44.0 MiB (3 fully free segments)"},
			[]string{"set max_split", "max_split_size_mb (e.g.", "expandable_segments:True"}},
		// Cache after the peak, not fragmentation.
		{"#6", "pt2.5-2.7_small-full-trace_cs336.pickle", FragCache, 6 * 512 * mib, 3749445120, 6,
			[]string{"cache, not fragmentation", "left after the trace's peak of 3.0 GiB allocated (event 52, requested bytes)", "empty_cache() would return 3.0 GiB (6 fully free segments)"},
			[]string{"expandable_segments:True", "max_split"}},
		{"#9", "pt2.10_user-metadata_windows_cs336.pickle", FragCache, 11773411328, 12803188224, 170,
			[]string{"cache, not fragmentation", "left after the trace's peak of 13.0 GiB allocated (event 1402, requested bytes)", "empty_cache() would return 11.0 GiB (170 fully free segments)"},
			[]string{"expandable_segments:True", "max_split"}},
		{"#10", "pt2.1_hf-qlora-bnb-accelerate-llama-train_ftcourse.pickle", FragCache, 2558525440, 4174528000, 78,
			[]string{"cache, not fragmentation", "another 1.5 GiB is free in segments that still hold live blocks (largest free piece 43.5 MiB)"},
			[]string{"expandable_segments:True", "max_split"}},
		{"#11", "pt2.2_repeated-snapshot-events_cnn-counterfactuals_eornn.pickle", FragCache, 46 * mib, 85456896, 5,
			[]string{"cache, not fragmentation", "peak of 103 MiB allocated (event 759, requested bytes)"},
			[]string{"expandable_segments:True", "max_split"}},
		// #5: 0.8% free in pieces of at most 5 MiB: too little to matter, never "little
		// fragmentation" beside a 96% fragmented group.
		{"#5", "pt2.5-2.7_torch-compile_cpp-frames_cs336-fwd.pickle", FragLittleFree, 0, 140066816, 0,
			[]string{"little free memory: 134 MiB of 16.7 GiB reserved (0.8%) is free, split into pieces of at most 5.0 MiB"},
			[]string{"little fragmentation", "expandable_segments:True", "max_split"}},
		{"#1", "pt2.0_legacy-history_flexgen-opt.pickle", FragLittleFree, 0, 4554752, 0,
			[]string{"(0.04%) is free"}, []string{"max_split", "expandable_segments:True"}},
		{"#13", "pt2.5-2.7_hf-qwen2-inference_segment-free-churn_sqattn.pickle", FragLittleFree, 0, 15581184, 0,
			[]string{"28 explicit torch.cuda.empty_cache() calls from entrance.py:104", "remove the empty_cache() at entrance.py:104"},
			[]string{"max_split", "expandable_segments:True", "leak"}},
		// #2: the device is at its limit (cudaMalloc retries), but what is free is whole cached
		// segments: cache, and expandable segments would not fix cross-stream caching.
		{"#2", "pt2.1_multistream_llama-selectn.pickle", FragCache, 2365587456, 2366985216, 2,
			[]string{"39 times a cudaMalloc failed", "cached blocks are per stream"},
			[]string{"expandable_segments:True", "max_split", "another 1.3 MiB"}},
	}
	for _, tc := range tests {
		t.Run(tc.diag, func(t *testing.T) {
			r, err := Fragmentation(realFile(t, tc.file), FragOptions{Device: AllDevices})
			if err != nil {
				t.Fatal(err)
			}
			if r.Verdict != tc.verdict || r.ReleasableBytes != tc.releasable || r.InactiveBytes != tc.inactive || r.FullyFreeSegments != tc.fullyFree {
				t.Errorf("verdict %s releasable %d inactive %d fully free %d; want %s %d %d %d\n%s",
					r.Verdict, r.ReleasableBytes, r.InactiveBytes, r.FullyFreeSegments, tc.verdict, tc.releasable, tc.inactive, tc.fullyFree, r.Text())
			}
			text := r.Summary + "\n" + strings.Join(r.Advice, "\n")
			for _, w := range tc.want {
				if !strings.Contains(text, w) {
					t.Errorf("answer lacks %q:\n%s", w, text)
				}
			}
			for _, w := range tc.never {
				if strings.Contains(text, w) {
					t.Errorf("answer says %q:\n%s", w, text)
				}
			}
		})
	}
}

// TestRealExpandablePages: #7's expandable ranges are split per 20 MiB (large) / 2 MiB (small)
// page, and every inactive byte shares a page with a live block.
func TestRealExpandablePages(t *testing.T) {
	r, err := Fragmentation(realFile(t, "pt2.5plus_tiny_two-devices_expandable_no-trace.pickle"), FragOptions{Device: AllDevices})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Expandable || len(r.Groups) != 3 {
		t.Fatalf("expandable %v, %d groups", r.Expandable, len(r.Groups))
	}
	for _, g := range r.Groups {
		want := int64(largePageBytes)
		if g.SegmentType == "small" {
			want = smallPageBytes
		}
		if !g.Expandable || g.PageBytes != want || g.ReleasableBytes != 0 || g.StrandedBytes != g.InactiveBytes {
			t.Errorf("group %+v", g)
		}
	}
}

// TestFragmentationExpandableWholePages: empty_cache() unmaps every whole free page of an
// expandable range, in holes too; only page remainders shared with live blocks stay.
func TestFragmentationExpandableWholePages(t *testing.T) {
	b := newTB()
	st := b.stack("/w/train.py", 10, "main")
	// 100 MiB range: live 5 MiB | free 50 MiB (pages 20-40 and 40-55: one whole page [20,40)) |
	// live 5 MiB | free 40 MiB [60,100): two whole pages [60,80), [80,100).
	b.seg(0, 1<<32, 0, blk(5*mib, snapshot.StateActiveAllocated, st), blk(50*mib, snapshot.StateInactive, st),
		blk(5*mib, snapshot.StateActiveAllocated, st), blk(40*mib, snapshot.StateInactive, st))
	snap := b.done()
	snap.Segments[0].IsExpandable = true
	snap.Settings.ExpandableSegments = true
	snap.Settings.MaxSplitSize = 64 * mib
	r, err := Fragmentation(snap, FragOptions{Device: AllDevices})
	if err != nil {
		t.Fatal(err)
	}
	if r.ReleasableBytes != 60*mib || r.StrandedBytes != 30*mib {
		t.Fatalf("releasable %d stranded %d", r.ReleasableBytes, r.StrandedBytes)
	}
	for _, a := range r.Advice {
		if strings.Contains(a, "max_split") && !strings.Contains(a, "drop max_split_size_mb:64") {
			t.Errorf("max_split advice with expandable segments: %s", a)
		}
	}
}

// TestFragmentationAtLimitRecommendsExpandable: reserved near the given device size with the
// free memory in small pieces next to live blocks → expandable segments.
func TestFragmentationAtLimitRecommendsExpandable(t *testing.T) {
	b := newTB()
	st := b.stack("/w/train.py", 10, "main")
	for i := 0; i < 60; i++ {
		b.seg(0, uint64(1+i)<<32, 0, blk(12*mib, snapshot.StateActiveAllocated, st), blk(8*mib, snapshot.StateInactive, st))
	}
	snap := b.done()
	for _, tc := range []struct {
		device int64
		want   bool
	}{{0, false}, {1280 * mib, true}, {80 * gib, false}} {
		r, err := Fragmentation(snap, FragOptions{Device: AllDevices, DeviceTotalBytes: tc.device})
		if err != nil {
			t.Fatal(err)
		}
		if r.Verdict != FragFragmented || r.DeviceAtLimit != tc.want {
			t.Errorf("device %d: verdict %s at limit %v", tc.device, r.Verdict, r.DeviceAtLimit)
		}
		got := false
		for _, a := range r.Advice {
			got = got || strings.Contains(a, "expandable_segments:True so free neighbours merge and free pages")
			if strings.Contains(a, "max_split") {
				t.Errorf("max_split advice with no block >= 128 MiB: %s", a)
			}
		}
		if got != tc.want {
			t.Errorf("device %d: expandable recommended %v:\n%s", tc.device, got, r.Text())
		}
	}
}
