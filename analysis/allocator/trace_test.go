package allocator_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis/allocator"
	"github.com/memsnap/memsnap/analysis/load"
	"github.com/memsnap/memsnap/analysis/sim"
	"github.com/memsnap/memsnap/analysis/snapshot"

	"github.com/memsnap/memsnap/internal/realsnaps"
	"github.com/memsnap/memsnap/internal/realsnaps/realtest"
)

// realDir is the folder of real snapshots (package realsnaps), present or not.
var realDir = realsnaps.Where()

func TestMain(m *testing.M) { realtest.Main(m) }

// reproduced is how many of the recorded segment events the run reproduced in order.
func reproduced(rec, got []allocator.Recorded) int {
	n := 0
	for n < len(rec) && n < len(got) && rec[n].Size == got[n].Size {
		n++
	}
	return n
}

// baseline replays a device with the file's own settings: the capacity of its first OOM,
// else its recorded peak when the trace shows recovered cudaMalloc failures, else unbounded
// (as the what-if analysis chooses it without a given device size).
func baseline(t *testing.T, snap *snapshot.Snapshot, dev int) (*allocator.Trace, *allocator.RunResult) {
	t.Helper()
	set := allocator.FromSnapshot(snap.Settings)
	tr, err := allocator.NewTrace(snap, dev, set)
	if err != nil {
		t.Fatal(err)
	}
	var capacity int64
	switch {
	case len(tr.OOMs) > 0:
		capacity = tr.ReservedAtOOM[0] + tr.Events[tr.OOMs[0]].DeviceFree()
	case tr.MallocFailures > 0:
		capacity = tr.PeakReserved
	}
	r, err := tr.Run(context.Background(), allocator.RunOptions{Settings: set, Capacity: capacity, Baseline: true})
	if err != nil {
		t.Fatal(err)
	}
	return tr, r
}

// TestRealTraceFidelity replays every real trace with its own settings and compares the
// model's cudaMalloc sequence with the recorded segment_alloc sequence (sizes, in order).
// Only pt2.5-2.7_small-full-trace_cs336 covers the allocator from its start; the others start
// late and are replayed from the state rebuilt at their first event.
func TestRealTraceFidelity(t *testing.T) {
	realtest.Require(t)
	tests := []struct {
		file                  string
		start                 string
		recorded, emptyCaches int
		mallocFailures        int
		peakReserved          int64
	}{
		{"pt2.5-2.7_small-full-trace_cs336.pickle", "empty", 9, 0, 0, 3781165056},
		{"pt2.1_hf-qlora-bnb-accelerate-llama-train_ftcourse.pickle", "reconstructed", 152, 0, 0, 6471811072},
		{"pt2.1_multistream_llama-selectn.pickle", "reconstructed", 584, 0, 39, 22519218176},
		{"pt2.2_repeated-snapshot-events_cnn-counterfactuals_eornn.pickle", "reconstructed", 7, 0, 0, 134217728},
		{"pt2.3-2.4_json-form_resnet-tomi.json", "reconstructed", 1, 0, 0, 23068672},
		{"pt2.5-2.7_hf-qwen2-inference_segment-free-churn_sqattn.pickle", "reconstructed", 420, 28, 0, 5802819584},
		{"pt2.5-2.7_torch-compile_cpp-frames_cs336-fwd.pickle", "reconstructed", 178, 0, 0, 17878220800},
		{"pt2.10_user-metadata_windows_cs336.pickle", "reconstructed", 0, 0, 0, 14180941824},
		{"pt2.9plus_cs336-compile_optimizer-annotation_no-segment-events.pickle", "reconstructed", 0, 0, 0, 4238344192},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			snap, err := load.File(context.Background(), filepath.Join(realDir, tc.file), load.Options{})
			if err != nil {
				t.Fatal(err)
			}
			tr, r := baseline(t, snap, 0)
			got := reproduced(tr.SegmentAllocs, r.SegmentAllocs)
			if tr.Start != tc.start || len(tr.SegmentAllocs) != tc.recorded || got != tc.recorded || len(r.SegmentAllocs) != tc.recorded ||
				tr.EmptyCacheCalls != tc.emptyCaches || tr.MallocFailures != tc.mallocFailures || tr.PeakReserved != tc.peakReserved ||
				r.Stats.PeakReserved != tc.peakReserved || r.NewOOMs != 0 || r.UnknownFrees != 0 {
				t.Errorf("start %s, recorded %d, reproduced %d of %d model cudaMallocs, empty_cache %d, failures %d, peak reserved recorded %d model %d, new OOMs %d, unknown frees %d",
					tr.Start, len(tr.SegmentAllocs), got, len(r.SegmentAllocs), tr.EmptyCacheCalls, tr.MallocFailures, tr.PeakReserved, r.Stats.PeakReserved, r.NewOOMs, r.UnknownFrees)
			}
		})
	}
	// Files without allocation events cannot be replayed.
	snap, err := load.File(context.Background(), filepath.Join(realDir, "pt2.5plus_tiny_two-devices_expandable_no-trace.pickle"), load.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := allocator.NewTrace(snap, 0, allocator.Settings{}); !errors.Is(err, allocator.ErrNoTrace) {
		t.Errorf("no trace: %v", err)
	}
}

// TestFixturesReplayExactly: every committed scenario fixture's trace, replayed with its own
// settings, reproduces its segment events and OOMs exactly.
func TestFixturesReplayExactly(t *testing.T) {
	dir := "../../testdata/scenarios"
	var files []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.HasSuffix(p, ".md") {
			files = append(files, p)
		}
		return nil
	})
	if len(files) < 30 {
		t.Fatalf("%d fixtures under %s", len(files), dir)
	}
	replayed := 0
	for _, p := range files {
		snap, err := load.File(context.Background(), p, load.Options{})
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		for d := range snap.DeviceTraces {
			set := allocator.FromSnapshot(snap.Settings)
			if _, err := allocator.NewTrace(snap, d, set); err != nil {
				continue
			}
			tr, r := baseline(t, snap, d)
			replayed++
			fails := 0
			for _, o := range r.OOMs {
				if !o.Fits {
					fails++
				}
			}
			if reproduced(tr.SegmentAllocs, r.SegmentAllocs) != len(tr.SegmentAllocs) || len(r.SegmentAllocs) != len(tr.SegmentAllocs) ||
				reproduced(tr.SegmentMaps, r.SegmentMaps) != len(tr.SegmentMaps) || fails != len(tr.OOMs) || r.NewOOMs != 0 ||
				r.Stats.PeakReserved != tr.PeakReserved {
				t.Errorf("%s device %d (start %s): segment_allocs %d/%d of %d, maps %d/%d, OOMs %d/%d, new OOMs %d, peak reserved %d/%d",
					p, d, tr.Start, reproduced(tr.SegmentAllocs, r.SegmentAllocs), len(tr.SegmentAllocs), len(r.SegmentAllocs),
					reproduced(tr.SegmentMaps, r.SegmentMaps), len(tr.SegmentMaps), fails, len(tr.OOMs), r.NewOOMs, r.Stats.PeakReserved, tr.PeakReserved)
			}
		}
	}
	if replayed < 25 {
		t.Errorf("only %d device traces replayed", replayed)
	}
}

// program is a random sequence of requests and frees, run through the simulator.
type program struct {
	sizes []int64 // request sizes (0 = free the slot instead)
	slots []int
}

func randomProgram(seed uint64, n int) program {
	rng := rand.New(rand.NewPCG(seed, 11))
	var p program
	live := 0
	for i := 0; i < n; i++ {
		if live > 0 && rng.IntN(100) < 45 {
			p.sizes = append(p.sizes, 0)
			p.slots = append(p.slots, rng.IntN(live))
			live--
			continue
		}
		var s int64
		switch rng.IntN(6) {
		case 0, 1:
			s = 1 + rng.Int64N(sim.MiB)
		case 2, 3:
			s = sim.MiB + rng.Int64N(9*sim.MiB)
		case 4:
			s = 10*sim.MiB + rng.Int64N(50*sim.MiB)
		default:
			s = 60*sim.MiB + rng.Int64N(100*sim.MiB)
		}
		p.sizes = append(p.sizes, s)
		p.slots = append(p.slots, 0)
		live++
	}
	return p
}

// run runs the program on a simulator; recording starts after the first `late` steps. It
// stops at the first OOM.
func (p program) run(cfg sim.Config, late int) *snapshot.Snapshot {
	s := sim.New(cfg)
	st := sim.Op("empty", sim.Py(sim.TrainPy, 10, "main"))
	if late > 0 {
		s.SetRecording(false)
	}
	var live []uint64
	for i, n := range p.sizes {
		if i == late && late > 0 {
			s.SetRecording(true)
		}
		if n == 0 {
			k := p.slots[i]
			if err := s.Free(live[k], sim.FreeAt(sim.Py(sim.TrainPy, 11, "main"))); err != nil {
				panic(err)
			}
			live = append(live[:k], live[k+1:]...)
			continue
		}
		a, err := s.Alloc(n, 0, st)
		if err != nil {
			break
		}
		live = append(live, a)
	}
	return s.Snapshot()
}

type counts struct {
	allocs, maps, ooms int
	peak               int64
}

func recorded(sn *snapshot.Snapshot) counts {
	var c counts
	var res int64
	for _, ev := range sn.DeviceTraces[0] {
		switch ev.Action {
		case snapshot.ActionSegmentAlloc:
			c.allocs++
			res += ev.Size
		case snapshot.ActionSegmentMap:
			c.maps++
			res += ev.Size
		case snapshot.ActionSegmentFree, snapshot.ActionSegmentUnmap:
			res -= ev.Size
		case snapshot.ActionOOM:
			c.ooms++
		}
		c.peak = max(c.peak, res)
	}
	return c
}

// TestReplayEqualsRunning: a program recorded with the default settings and replayed with
// other settings does exactly what the same program does when run with those settings (its
// requests do not depend on the allocator): the same cudaMalloc calls and page mappings, the
// same peak reserved. With a late start the replay begins from the rebuilt state and still
// reproduces the recorded part exactly.
func TestReplayEqualsRunning(t *testing.T) {
	others := []sim.Config{
		{Expandable: true},
		{MaxSplitSize: 64 * sim.MiB},
		{RoundupPower2Divisions: [allocator.NumIntervals]int{4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4}},
	}
	for seed := uint64(1); seed <= 6; seed++ {
		p := randomProgram(seed, 400)
		rec := p.run(sim.Config{Capacity: 64 * sim.GiB}, 0)
		tr, err := allocator.NewTrace(rec, 0, allocator.Settings{})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range others {
			o.Capacity = 64 * sim.GiB
			direct := recorded(p.run(o, 0))
			set := allocator.Settings{ExpandableSegments: o.Expandable, MaxSplitSize: o.MaxSplitSize, RoundupPower2Divisions: o.RoundupPower2Divisions}
			r, err := tr.Run(context.Background(), allocator.RunOptions{Settings: set})
			if err != nil {
				t.Fatal(err)
			}
			got := counts{r.Stats.SegmentAllocs, r.Stats.SegmentMaps, r.Stats.OOMs, r.Stats.PeakReserved}
			if testing.Verbose() {
				t.Logf("seed %d, %s: %+v (recorded with the defaults: %+v)", seed, set.AllocConf(), got, recorded(rec))
			}
			if got != direct {
				t.Errorf("seed %d, %s: replay %+v, running %+v", seed, set.AllocConf(), got, direct)
			}
		}
		// A late start: recording begins after 120 steps.
		late := p.run(sim.Config{Capacity: 64 * sim.GiB}, 120)
		lt, err := allocator.NewTrace(late, 0, allocator.Settings{})
		if err != nil {
			t.Fatal(err)
		}
		r, err := lt.Run(context.Background(), allocator.RunOptions{Baseline: true})
		if err != nil {
			t.Fatal(err)
		}
		if lt.Start != "reconstructed" || reproduced(lt.SegmentAllocs, r.SegmentAllocs) != len(lt.SegmentAllocs) || len(r.SegmentAllocs) != len(lt.SegmentAllocs) ||
			r.Stats.PeakReserved != lt.PeakReserved || r.UnknownFrees != 0 {
			t.Errorf("seed %d late start (%s): reproduced %d of %d (model %d), peak %d/%d, unknown frees %d, notes %v", seed, lt.Start,
				reproduced(lt.SegmentAllocs, r.SegmentAllocs), len(lt.SegmentAllocs), len(r.SegmentAllocs), r.Stats.PeakReserved, lt.PeakReserved, r.UnknownFrees, lt.Notes)
		}
	}
}
