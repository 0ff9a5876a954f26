package analysis

import (
	"context"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis/sim"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// expandableOOM: a 200 MiB device with expandable segments. Six 30 MiB tensors are mapped
// (180 MiB); #0 and #2 are freed (30 MiB holes) and so is #5 (the end of the range).
// A 60 MiB request finds no hole; the allocator unmaps the whole 20 MiB page inside the free
// end (10 MiB stays free at the end), cannot map 60 MiB more with 40 MiB free, and fails.
func expandableOOM(t *testing.T) *snapshot.Snapshot {
	s := sim.New(sim.Config{Capacity: 200 * sim.MiB, Expandable: true})
	st := sim.Op("empty", sim.Py(sim.TrainPy, 70, "main"))
	var a []uint64
	for i := 0; i < 6; i++ {
		p, err := s.Alloc(30*sim.MiB, 0, st)
		if err != nil {
			t.Fatal(err)
		}
		a = append(a, p)
	}
	for _, i := range []int{0, 2, 5} {
		if err := s.Free(a[i], sim.FreeAt(sim.Py(sim.TrainPy, 71, "main"))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Alloc(60*sim.MiB, 0, sim.Op("empty", sim.Py(sim.TrainPy, 72, "main"))); err == nil {
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
		{"final state", false, "final_state", false, 30 * mib, 10 * mib,
			"the free end of the mapped range (10.0 MiB) could grow by up to the device's free 40.0 MiB",
			"only the free end of the mapped range (10.0 MiB) can grow"},
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
				o.RequestedBytes != 60*mib || o.DeviceFreeBytes != 40*mib || o.ReservedBytes != 160*mib ||
				o.InactiveBytes != 70*mib || o.AllocatedBytes != 90*mib || o.Verdict != VerdictFragmentation {
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
