package capacity

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis/pickle/writer"
	"github.com/memsnap/memsnap/analysis/sim"
)

var updateFixtures = flag.Bool("update-fixtures", false, "rewrite testdata/capacity from the simulation")

// fixtureDir holds the capacity fixtures the CLI tests and the MCP evals read.
const fixtureDir = "../../testdata/capacity"

// fixtureCapacity is what PyTorch may reserve in the run that fails (batch 40).
const fixtureCapacity = 500 * sim.MiB

// capacityFixtures are the files of testdata/capacity and the README stating their truth.
func capacityFixtures(t *testing.T) (map[string][]byte, string) {
	t.Helper()
	files := map[string][]byte{}
	var readme strings.Builder
	readme.WriteString("# Capacity fixtures (generated)\n\n" +
		"Written by `go test ./analysis/capacity -run TestCapacityFixtures -update-fixtures` from the capacity workload of " +
		"`analysis/sim` (workloads_capacity.go): a 3-block transformer (H 256, 4 heads, vocabulary 4096, fp32, sequence 128) trained for two steps, " +
		"weights loaded before recording began. Do not edit: regenerate. Peaks are the simulated run's own, in the allocator's rounded bytes " +
		"(torch.cuda.max_memory_allocated / max_memory_reserved).\n\n| file | batch | peak allocated | peak reserved | OOM |\n|---|---|---|---|---|\n")
	add := func(name string, b int64, c int64) {
		r := sim.CapacityTraining(sim.CapacityDimsFor("batch", b), c)
		data, err := writer.Encode(r.Snap, writer.Options{})
		if err != nil {
			t.Fatal(err)
		}
		files[name] = data
		fmt.Fprintf(&readme, "| `%s` | %d | %d | %d | %v |\n", name, b, r.PeakAllocated, r.PeakReserved, r.OOM)
	}
	add("batch8.pickle", 8, 0)
	add("batch16.pickle", 16, 0)
	add("batch40_oom.pickle", 40, fixtureCapacity)
	fmt.Fprintf(&readme, "\n`batch40_oom.pickle` ran where PyTorch may reserve %d B (500 MiB): reserved + device_free at its OOM event. "+
		"The largest batch whose run completes there is %d (batch %d fails). Runs of the same program at other batches (unbounded):\n\n| batch | peak allocated | peak reserved |\n|---|---|---|\n",
		int64(fixtureCapacity), largestSimulated("batch", fixtureCapacity, 1), largestSimulated("batch", fixtureCapacity, 1)+1)
	for _, b := range []int64{4, 24, 32} {
		r := sim.CapacityTraining(sim.CapacityDimsFor("batch", b), 0)
		fmt.Fprintf(&readme, "| %d | %d | %d |\n", b, r.PeakAllocated, r.PeakReserved)
	}
	return files, readme.String()
}

// TestCapacityFixtures: the committed fixtures are what the simulation writes.
func TestCapacityFixtures(t *testing.T) {
	files, readme := capacityFixtures(t)
	files["README.md"] = []byte(readme)
	if *updateFixtures {
		if err := os.MkdirAll(fixtureDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, data := range files {
			if err := os.WriteFile(filepath.Join(fixtureDir, name), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for name, data := range files {
		got, err := os.ReadFile(filepath.Join(fixtureDir, name))
		if err != nil {
			t.Fatalf("%v (regenerate with -update-fixtures)", err)
		}
		if !bytes.Equal(got, data) {
			t.Errorf("%s differs from what the simulation writes (regenerate with -update-fixtures)", name)
		}
	}
}
