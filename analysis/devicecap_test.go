package analysis

import (
	"context"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// manyDevices builds a snapshot of n devices with one segment and block each (device d holds
// (1+d%7) * 2 MiB) and a trace of two events each; every 50th device also has an OOM.
func manyDevices(n int) *snapshot.Snapshot {
	in := snapshot.NewInterner()
	f := in.Frame(snapshot.Frame{Filename: "/home/u/train.py", Line: 41, Name: "step"})
	st := in.Stack([]snapshot.FrameID{f})
	var segs []snapshot.Segment
	traces := make([][]snapshot.Event, n)
	for d := range n {
		addr := uint64(0x7f0000000000)
		size := int64(2<<20) * int64(1+d%7)
		segs = append(segs, snapshot.Segment{Device: d, Address: addr, TotalSize: size, AllocatedSize: size, ActiveSize: size, RequestedSize: size,
			SegmentType: "large", Stack: st, Blocks: []snapshot.Block{{Address: addr, Size: size, RequestedSize: size, State: snapshot.StateActiveAllocated, Stack: st}}})
		traces[d] = []snapshot.Event{{Action: snapshot.ActionSegmentAlloc, Addr: addr, Size: size, Stack: st}, {Action: snapshot.ActionAlloc, Addr: addr, Size: size, Stack: st}}
		if d%50 == 49 {
			traces[d] = append(traces[d], snapshot.Event{Action: snapshot.ActionOOM, Size: 1 << 30, Stack: st}.WithDeviceFree(1<<20))
		}
	}
	s := &snapshot.Snapshot{Path: "many.pickle", Frames: in.Frames, Stacks: in.Stacks, Segments: segs, DeviceTraces: traces, EventExtras: []snapshot.EventExtra{{}}}
	s.Caps.HasTrace = true
	return s
}

// TestManyDevicesListed (F2): summarize, replay and check list at most MaxListedDevices of 300
// devices, every device with an OOM (or a failing budget) first, then the largest; the rest
// are counted and said.
func TestManyDevicesListed(t *testing.T) {
	const n = 300
	snap := manyDevices(n)
	ctx := context.Background()
	wantListed := func(what string, devs []int, omitted int, notes []string) {
		t.Helper()
		if len(devs) != MaxListedDevices || omitted != n-MaxListedDevices {
			t.Fatalf("%s: listed %d, omitted %d", what, len(devs), omitted)
		}
		size := func(d int) int64 { return int64(2<<20) * int64(1+d%7) }
		listed := map[int]bool{}
		ooms := 0
		minListed := int64(1 << 62)
		for _, d := range devs {
			listed[d] = true
			if d%50 == 49 {
				ooms++
			} else {
				minListed = min(minListed, size(d))
			}
		}
		if ooms != n/50 {
			t.Errorf("%s: %d of the %d devices with an OOM listed", what, ooms, n/50)
		}
		for d := range n {
			if !listed[d] && size(d) > minListed {
				t.Errorf("%s: device %d (%d bytes) left out while one of %d bytes is listed", what, d, size(d), minListed)
				break
			}
		}
		if !strings.Contains(strings.Join(notes, "\n"), "236 of the file's 300 devices are not listed") {
			t.Errorf("%s: notes %q", what, notes)
		}
	}
	s, err := Summarize(ctx, snap, SummaryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var devs []int
	for _, d := range s.Devices {
		devs = append(devs, d.Device)
	}
	wantListed("summarize", devs, s.DevicesOmitted, s.Notes)
	if s.OOMs != n/50 || s.Totals.ReservedBytes == 0 {
		t.Errorf("summarize totals: ooms %d", s.OOMs)
	}
	r, err := ReplaySnapshot(ctx, snap, nil, ReplayOptions{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	devs = nil
	for _, d := range r.Devices {
		devs = append(devs, d.Device)
	}
	wantListed("replay", devs, r.DevicesOmitted, r.Notes)
	c, err := Check(ctx, snap, CheckOptions{Device: AllDevices, MaxPeakBytes: 5 << 20})
	if err != nil {
		t.Fatal(err)
	}
	devs = nil
	for _, b := range c.Budgets {
		devs = append(devs, b.Device)
	}
	if c.Pass || len(devs) != MaxListedDevices || c.DevicesOmitted != n-MaxListedDevices {
		t.Fatalf("check: pass %v listed %d omitted %d", c.Pass, len(devs), c.DevicesOmitted)
	}
	for _, d := range devs {
		if size := int64(2<<20) * int64(1+d%7); size <= 5<<20 {
			t.Errorf("check lists device %d (%d bytes, within the budget) while devices over it are left out", d, size)
			break
		}
	}
}
