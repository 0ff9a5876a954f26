package analysis

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis/load"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

func TestRankFromName(t *testing.T) {
	for name, want := range map[string]int{
		"rank0.pickle": 0, "snapshot_rank_12.pkl": 12, "oom-rank-3.pickle.gz": 3, "RANK7.json": 7,
		"job-r3-oom.pickle": 3, "snap_r5.pkl": 5, "r2.pickle": 2,
		"a.pickle": -1, "resnet50.pickle": -1, "step5.pickle": -1, "worker3.pickle": -1, "gpu1.pickle": -1,
	} {
		if got := RankFromName(name); got != want {
			t.Errorf("RankFromName(%q) = %d, want %d", name, got, want)
		}
	}
}

// timed builds a snapshot with one segment on each device and trace events at the given times
// (epoch µs) on the first device.
func timed(path string, devices []int, times ...int64) *snapshot.Snapshot {
	s := &snapshot.Snapshot{Path: path, Format: snapshot.Format{Encoding: "pickle", Protocol: 4}}
	for _, d := range devices {
		s.Segments = append(s.Segments, snapshot.Segment{Device: d, TotalSize: 2 << 20, SegmentType: "small"})
	}
	s.DeviceTraces = make([][]snapshot.Event, devices[0]+1)
	for _, tm := range times {
		s.DeviceTraces[devices[0]] = append(s.DeviceTraces[devices[0]], snapshot.Event{Action: snapshot.ActionAlloc, TimeUS: tm, Size: 512})
	}
	return s
}

func TestClassifyRanks(t *testing.T) {
	rank := func(name string, s *snapshot.Snapshot) snapshot.Rank {
		return snapshot.Rank{File: "/d/" + name, Snap: s}
	}
	const t0 = int64(1_717_000_000_000_000)
	for _, tc := range []struct {
		name   string
		ranks  []snapshot.Rank
		job    bool
		byName bool
		why    string
	}{
		{"named", []snapshot.Rank{rank("rank0.pickle", timed("a", []int{0}, t0)), rank("rank1.pickle", timed("b", []int{0}, t0+1e12))},
			true, true, "every file name carries its rank (rank0.pickle, rank1.pickle)"},
		{"named -rN-", []snapshot.Rank{rank("job-r0-x.pickle", nil), rank("job-r1-x.pickle", nil)}, true, true, "every file name carries its rank"},
		{"one file", []snapshot.Rank{rank("a.pickle", nil)}, true, false, "a single file"},
		{"same rank twice", []snapshot.Rank{rank("rank0_step1.pickle", timed("a", []int{0}, t0)), rank("rank0_step2.pickle", timed("b", []int{0}, t0))},
			false, false, "both hold device 0"},
		{"one job by evidence", []snapshot.Rank{rank("a.pickle", timed("a", []int{0}, t0, t0+5e6)), rank("b.pickle", timed("b", []int{1}, t0+1e6, t0+9e6))},
			true, false, "their traces overlap in time, they share the format and allocator settings, and each holds its own devices"},
		{"same device", []snapshot.Rank{rank("a.pickle", timed("a", []int{0}, t0, t0+5e6)), rank("b.pickle", timed("b", []int{0}, t0+1e6, t0+9e6))},
			false, false, "a.pickle and b.pickle both hold device 0"},
		{"apart in time", []snapshot.Rank{rank("a.pickle", timed("a", []int{0}, t0, t0+5e6)), rank("b.pickle", timed("b", []int{1}, t0+3600e6))},
			false, false, "their traces do not overlap in time (one ends 59m55s before another starts)"},
		{"no trace", []snapshot.Rank{rank("a.pickle", timed("a", []int{0}, t0)), rank("b.pickle", timed("b", []int{1}))},
			false, false, "b.pickle has no timed trace"},
	} {
		got := ClassifyRanks(tc.ranks)
		if got.Job != tc.job || got.ByName != tc.byName || !strings.Contains(got.Evidence, tc.why) {
			t.Errorf("%s: %+v, want job %v byName %v evidence containing %q", tc.name, got, tc.job, tc.byName, tc.why)
		}
	}
}

// TestSummarizeDirUnrelated: two unrelated fixtures in one directory are each summarized on
// their own, with no rank comparison, and the summary says so; the multirank fixture stays a
// job of four ranks.
func TestSummarizeDirUnrelated(t *testing.T) {
	dir := t.TempDir()
	for name, src := range map[string]string{"a.pickle": "activation_oom.pickle", "b.pickle": "fragmentation_oom.pickle"} {
		b, err := os.ReadFile(filepath.Join("..", "testdata", "scenarios", src))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	ranks, err := load.Dir(ctx, dir, load.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := SummarizeDir(ctx, dir, ranks, SummaryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := "the 2 files are not taken as the ranks of one job: their names carry no rank each (a.pickle, b.pickle) and a.pickle and b.pickle both hold device 0"
	if len(s.Notes) != 1 || !strings.HasPrefix(s.Notes[0], want) || !strings.Contains(s.Notes[0], "Each file is summarized on its own") {
		t.Errorf("notes %q", s.Notes)
	}
	if len(s.Ranks) != 2 || filepath.Base(s.Ranks[0].File) != "a.pickle" || s.Ranks[0].Totals.ReservedBytes != 924844032 {
		t.Errorf("per-file entries %+v", s.Ranks)
	}
	if !s.SeparateFiles || !strings.Contains(s.Text(), "\nfile 0 (a.pickle): reserved 882 MiB") || strings.Contains(s.Text(), "rank 0") {
		t.Errorf("separate files shown as ranks:\n%s", s.Text())
	}

	multi := filepath.Join("..", "testdata", "scenarios", "multirank")
	ranks, err = load.Dir(ctx, multi, load.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err = SummarizeDir(ctx, multi, ranks, SummaryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Ranks) != 4 || len(s.Notes) == 0 || !strings.Contains(s.Notes[0], "rank 1 is an outlier") {
		t.Errorf("multirank: ranks %d notes %q", len(s.Ranks), s.Notes)
	}
}
