package capacity

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/memsnap/memsnap/analysis"
	"github.com/memsnap/memsnap/analysis/load"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// BenchmarkCapacityVsReplay times capacity against replay on the same files (already loaded)
// and reports the ratio (goal: at most 2, since the search replays only the peak steps): the
// two-file simulated workload, and one-file estimates on the real snapshots with a trace.
func BenchmarkCapacityVsReplay(b *testing.B) {
	ctx := context.Background()
	type set struct {
		name  string
		files []File
	}
	var sets []set
	var sim []File
	for _, n := range []struct {
		name string
		size int64
	}{{"batch8.pickle", 8}, {"batch16.pickle", 16}} {
		s, err := load.File(ctx, filepath.Join(fixtureDir, n.name), load.Options{})
		if err != nil {
			b.Fatal(err)
		}
		sim = append(sim, File{Snap: s, Size: n.size})
	}
	sets = append(sets, set{"sim-two-points", sim})
	realDir := filepath.Join("..", "..", "..", "shared", "snapshots", "real")
	for _, n := range []string{"pt2.1_hf-qlora-bnb-accelerate-llama-train_ftcourse.pickle", "pt2.5-2.7_torch-compile_cpp-frames_cs336-fwd.pickle",
		"pt2.9plus_cs336-compile_optimizer-annotation_no-segment-events.pickle"} {
		s, err := load.File(ctx, filepath.Join(realDir, n), load.Options{})
		if err != nil {
			b.Logf("real snapshot absent (%v): skipped", err)
			continue
		}
		sets = append(sets, set{n, []File{{Snap: s, Size: 8}}})
	}
	for _, st := range sets {
		b.Run(st.name, func(b *testing.B) {
			var capT, repT time.Duration
			for b.Loop() {
				// Fresh copies: roles and trace indexes are cached per snapshot.
				files := make([]File, len(st.files))
				snaps := make([]*snapshot.Snapshot, len(st.files))
				for i, f := range st.files {
					c := *f.Snap
					files[i] = File{Snap: &c, Size: f.Size}
					d := *f.Snap
					snaps[i] = &d
				}
				t0 := time.Now()
				if _, err := Analyze(ctx, files, Options{Capacity: 20 << 30}); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				for _, s := range snaps {
					if _, err := analysis.Replay(ctx, s, 0); err != nil {
						b.Fatal(err)
					}
				}
				capT += t1.Sub(t0)
				repT += time.Since(t1)
			}
			b.ReportMetric(float64(capT)/float64(repT), "x-replay")
		})
	}
}
