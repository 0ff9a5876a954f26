package analysis

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/memsnap/memsnap/analysis/load"
	"github.com/memsnap/memsnap/analysis/pickle/writer"
	"github.com/memsnap/memsnap/analysis/sim"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// adviceScenarioDir holds the snapshots the eval cases of the advice rules read
// (evals/eval.yaml, advice-*); go test ./analysis -run TestAdviceScenarios -update writes them.
const adviceScenarioDir = "../testdata/advice"

// singleRelease: a 512 KiB tensor made and freed, then one segment (2 MiB, small pool) released
// with no empty_cache frame on its free and no allocation after it. gc is the file's
// garbage_collection_threshold.
func singleRelease(gc float64) *snapshot.Snapshot {
	s := sim.New(sim.Config{Capacity: 4 * sim.GiB, GCThreshold: gc})
	st := sim.Op("empty", sim.Py(sim.ModelPy, 12, "forward"))
	keep, _ := s.Alloc(64*sim.MiB, 0, st)
	p, _ := s.Alloc(512*1024, 0, st)
	_ = s.Free(p, sim.FreeAt(sim.Py(sim.ModelPy, 13, "forward")))
	s.EmptyCache()
	_ = keep
	return s.Snapshot()
}

// smallModelOOM: 16 MiB of weights moved to a 1 GiB device, then 96 MiB forward outputs kept
// until a request fails: a capacity OOM where the model's state is under 2% of live memory.
func smallModelOOM() *snapshot.Snapshot {
	s := sim.New(sim.Config{Capacity: sim.GiB})
	weights := sim.Op("to", sim.Py(sim.TorchDir+"/nn/modules/module.py", 1150, "convert"), sim.Py(sim.TorchDir+"/nn/modules/module.py", 900, "_apply"), sim.Py(sim.ProjDir+"/run.py", 20, "main"))
	_, _ = s.Alloc(16*sim.MiB, 0, weights)
	out := sim.Op("linear", sim.Chain([]snapshot.Frame{sim.Py(sim.ModelPy, 41, "forward")}, sim.ModuleCall(), []snapshot.Frame{sim.Py(sim.ProjDir+"/run.py", 30, "main")})...)
	for range 64 {
		if _, err := s.Alloc(96*sim.MiB, 0, out); err != nil {
			break
		}
	}
	return s.Snapshot()
}

var adviceScenarios = map[string]func() *snapshot.Snapshot{
	"single_release.pickle":              func() *snapshot.Snapshot { return singleRelease(0) },
	"single_release_gc_threshold.pickle": func() *snapshot.Snapshot { return singleRelease(0.8) },
	"small_model_capacity_oom.pickle":    smallModelOOM,
	"dataparallel_uneven.pickle":         func() *snapshot.Snapshot { s, _ := sim.DataParallelUneven(false); return s },
	"dataparallel_even.pickle":           func() *snapshot.Snapshot { s, _ := sim.DataParallelUneven(true); return s },
	"lightning_oom_teardown.pickle":      func() *snapshot.Snapshot { s, _ := sim.LightningOOMTeardown(true); return s },
}

// TestAdviceScenarios: the files on disk are what the scenarios build, and each shows the rule
// it is for (and not its neighbour).
func TestAdviceScenarios(t *testing.T) {
	for name, build := range adviceScenarios {
		t.Run(name, func(t *testing.T) {
			data, err := writer.Encode(build(), writer.Options{})
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(adviceScenarioDir, name)
			if *updateAdviceDoc {
				if err := os.WriteFile(path, data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			disk, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./analysis -run TestAdviceScenarios -update)", err)
			}
			if !bytes.Equal(disk, data) {
				t.Fatalf("%s is stale: run go test ./analysis -run TestAdviceScenarios -update", path)
			}
		})
	}
	ctx := context.Background()
	get := func(name string) *snapshot.Snapshot {
		s, err := load.File(ctx, filepath.Join(adviceScenarioDir, name), load.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, tc := range []struct{ file, want, not string }{
		{"single_release.pickle", "bursts.release.unmarked", "bursts.release.gc-threshold"},
		{"single_release_gc_threshold.pickle", "bursts.release.gc-threshold", "bursts.release.unmarked"},
	} {
		fr, err := Fragmentation(get(tc.file), FragOptions{Device: AllDevices})
		if err != nil {
			t.Fatal(err)
		}
		if len(fr.SegmentBursts) != 1 || fr.SegmentBursts[0].Events != 1 || fr.SegmentBursts[0].AdviceRule != tc.want {
			t.Errorf("%s: bursts %+v, want one event under %s", tc.file, fr.SegmentBursts, tc.want)
		}
	}
	o, err := OOMReport(ctx, get("small_model_capacity_oom.pickle"), OOMOptions{})
	if err != nil || len(o.OOMs) != 1 {
		t.Fatalf("oom %v %+v", err, o)
	}
	rules := []string{}
	for _, it := range o.OOMs[0].Advice {
		rules = append(rules, it.Rule)
	}
	if o.OOMs[0].Verdict != VerdictCapacity || !slices.Contains(rules, "oom.cap.bigger-gpu") || slices.Contains(rules, "oom.cap.shard-model") {
		t.Errorf("verdict %s rules %v: want capacity with oom.cap.bigger-gpu and no oom.cap.shard-model", o.OOMs[0].Verdict, rules)
	}
}
