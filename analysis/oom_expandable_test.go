package analysis

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis/allocator"
	"github.com/memsnap/memsnap/analysis/sim"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// expandableOOM: a 200 MiB device with expandable segments. Five pairs of tensors, 25 MiB and
// 15 MiB, fill it (ten 20 MiB pages); the 15 MiB ones are freed: 75 MiB cached in holes, none
// holding a whole page, so releasing the cache unmaps nothing. A 30 MiB request finds no hole,
// cannot map another page, and fails.
func expandableOOM(t *testing.T) *snapshot.Snapshot {
	s := sim.New(sim.Config{Capacity: 200 * sim.MiB, Expandable: true})
	st := sim.Op("empty", sim.Py(sim.TrainPy, 70, "main"))
	var small []uint64
	for i := 0; i < 5; i++ {
		for _, n := range []int64{25, 15} {
			p, err := s.Alloc(n*sim.MiB, 0, st)
			if err != nil {
				t.Fatal(err)
			}
			if n == 15 {
				small = append(small, p)
			}
		}
	}
	for _, p := range small {
		if err := s.Free(p, sim.FreeAt(sim.Py(sim.TrainPy, 71, "main"))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Alloc(30*sim.MiB, 0, sim.Op("empty", sim.Py(sim.TrainPy, 72, "main"))); err == nil {
		t.Fatal("no OOM")
	}
	return s.Snapshot()
}

func TestOOMExpandable(t *testing.T) {
	tests := []struct {
		name      string
		afterOOM  bool // events after the OOM: the state is replayed
		source    string
		unknown   bool
		largest   int64
		tail      int64
		textPart  string
		explained string
	}{
		{"final state", false, "final_state", false, 15 * mib, 15 * mib,
			"the free end of the mapped range (15.0 MiB) could grow by up to the device's free 0 B",
			"only the free end of the mapped range (15.0 MiB) can grow"},
		{"replayed", true, "replay", true, 0, 0,
			"largest free block unknown (expandable segments",
			"the largest hole is unknown"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			snap := expandableOOM(t)
			if tc.afterOOM {
				snap.DeviceTraces[0] = append(snap.DeviceTraces[0],
					snapshot.Event{Action: snapshot.ActionAlloc, Addr: 1 << 50, Size: 512, Stack: snapshot.EmptyStack},
					snapshot.Event{Action: snapshot.ActionFreeRequested, Addr: 1 << 50, Size: 512, Stack: snapshot.EmptyStack},
					snapshot.Event{Action: snapshot.ActionFreeCompleted, Addr: 1 << 50, Size: 512, Stack: snapshot.EmptyStack})
			}
			r, err := OOMReport(context.Background(), snap, OOMOptions{DeviceTotalBytes: 200 * mib})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.OOMs) != 1 {
				t.Fatalf("ooms = %d", len(r.OOMs))
			}
			o := r.OOMs[0]
			if o.StateSource != tc.source || !o.Expandable || o.LargestFreeBlockUnknown != tc.unknown ||
				o.LargestFreeBlockBytes != tc.largest || o.ExpandableTailFreeBytes != tc.tail ||
				o.RequestedBytes != 30*mib || o.DeviceFreeBytes != 0 || o.ReservedBytes != 200*mib ||
				o.InactiveBytes != 75*mib || o.AllocatedBytes != 125*mib || o.Verdict != VerdictFragmentation {
				t.Errorf("oom = %+v", o)
			}
			if !strings.Contains(r.Text(), tc.textPart) || !strings.Contains(o.Explanation, tc.explained) ||
				!strings.Contains(o.Fixes[0], "already on") {
				t.Errorf("text/explanation:\n%s", r.Text())
			}
		})
	}
	// Without expandable segments nothing changes.
	snap, _ := sim.FragmentationOOM()
	r, err := OOMReport(context.Background(), snap, OOMOptions{})
	if err != nil || r.OOMs[0].Expandable || r.OOMs[0].LargestFreeBlockUnknown || strings.Contains(r.Text(), "expandable segments:") {
		t.Errorf("plain OOM: %v %+v", err, r.OOMs)
	}
}

// TestOOMWhatIfCancel: the expandable-segments replays run on goroutines of their own; a
// cancelled context stops them and the report fails with the context's error.
func TestOOMWhatIfCancel(t *testing.T) {
	snap := whatIfFixture(t, "fragmentation_oom.pickle")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := OOMReport(ctx, snap, OOMOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	// Uncancelled, the same file gets its what-if (the replays ran side by side).
	r, err := OOMReport(context.Background(), snap, OOMOptions{})
	if err != nil || len(r.OOMs) != 1 || r.OOMs[0].ExpandableWhatIf == nil {
		t.Fatalf("%v %+v", err, r)
	}
}

// TestOOMWhatIfPanic: a panic of the model on a replay's goroutine becomes an error
// (errModel) instead of ending the process.
func TestOOMWhatIfPanic(t *testing.T) {
	if _, err := runRecovered(context.Background(), nil, allocator.RunOptions{}); !errors.Is(err, errModel) {
		t.Errorf("replay: %v", err)
	}
	if _, err := expandableWhatIf(context.Background(), nil, 0); !errors.Is(err, errModel) {
		t.Errorf("what-if: %v", err)
	}
}
