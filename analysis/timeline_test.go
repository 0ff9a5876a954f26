package analysis

import (
	"context"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis/load"
	"github.com/memsnap/memsnap/analysis/sim"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

const scenarioDir = "../testdata/scenarios/"

func loadScenario(t *testing.T, name string) *snapshot.Snapshot {
	t.Helper()
	snap, err := load.File(context.Background(), scenarioDir+name, load.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// naiveAllocated is allocated bytes after every event of a complete trace, counted the plain
// way: an alloc adds its size, the first free event of that block takes it away.
func naiveAllocated(evs []snapshot.Event) []int64 {
	out := make([]int64, len(evs))
	live := map[uint64]int64{}
	var cur int64
	for i, ev := range evs {
		switch ev.Action {
		case snapshot.ActionAlloc:
			live[ev.Addr] = ev.Size
			cur += ev.Size
		case snapshot.ActionFreeRequested, snapshot.ActionFreeCompleted:
			if sz, ok := live[ev.Addr]; ok {
				cur -= sz
				delete(live, ev.Addr)
			}
		}
		out[i] = cur
	}
	return out
}

// TestTimelineActivationOOM pins every number of one timeline (ground truth in
// testdata/scenarios/README.md and the oracle's sites).
func TestTimelineActivationOOM(t *testing.T) {
	snap := loadScenario(t, "activation_oom.pickle")
	r, err := Timeline(context.Background(), snap, TimelineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Events != 77 || r.Start != 0 || r.End != 77 || r.Columns != 77 || r.X != TimelineXEvent {
		t.Errorf("window %d:%d of %d, %d columns, x %s", r.Start, r.End, r.Events, r.Columns, r.X)
	}
	if r.PeakAllocatedBytes != 939556864 || r.PeakEvent != 72 || r.PeakReservedBytes != 941621248 || !r.Reserved {
		t.Errorf("peak %d@%d, reserved %d (%v)", r.PeakAllocatedBytes, r.PeakEvent, r.PeakReservedBytes, r.Reserved)
	}
	if r.EndAllocated != 922779648 || r.EndReserved != 924844032 {
		t.Errorf("end %d / %d, want the final state 922779648 / 924844032", r.EndAllocated, r.EndReserved)
	}
	type bandWant struct {
		site, cat string
		bytes     int64
	}
	want := []bandWant{
		{"train.py:112", CategoryParameter, 288 << 20},
		{"model.py:41", CategoryActivation, 256 << 20},
		{"model.py:42", CategoryActivation, 256 << 20},
		{"model.py:44", CategoryActivation, 64 << 20},
		{"model.py:43", CategoryTemporary, 16 << 20},
		{"train.py:115", CategoryOther, 16 << 20},
		// train.py:116 holds 32 KiB, under 0.5% of the peak: it joins the other band.
		{"other sites", CategoryOther, 32 << 10},
	}
	var got []bandWant
	var sum int64
	for i, b := range r.Bands {
		if b.Band != i || b.Other != (i == len(r.Bands)-1) {
			t.Errorf("band %d: index %d, other %v", i, b.Band, b.Other)
		}
		got = append(got, bandWant{b.Site, b.Category, b.BytesAtPeak})
		sum += b.BytesAtPeak
	}
	if o := r.Bands[len(r.Bands)-1]; o.Sites != 1 || len(o.Roles) != 1 || o.Roles[0].Bytes != 32<<10 {
		t.Errorf("other band %+v", o)
	}
	if !slices.Equal(got, want) {
		t.Errorf("bands\n got %v\nwant %v", got, want)
	}
	if sum != r.PeakAllocatedBytes {
		t.Errorf("bands add up to %d at the peak, want %d", sum, r.PeakAllocatedBytes)
	}
	if b := r.Bands[1]; b.Function != "forward" || b.File != "/workspace/proj/model.py" || len(b.Stack) == 0 || b.StackID < 0 || b.BlocksAtPeak != 4 {
		t.Errorf("model.py:41 band: %+v", b)
	}
	if len(r.OOMs) != 1 {
		t.Fatalf("ooms %+v", r.OOMs)
	}
	if o := r.OOMs[0]; o.Event != 76 || o.RequestedBytes != 67108864 || o.DeviceFree != 60817408 || o.AllocatedBytes != 922779648 || o.ReservedBytes != 924844032 {
		t.Errorf("oom %+v", o)
	}
	if len(r.SegmentBursts) != 1 || r.SegmentBursts[0].Kind != BurstMallocRetry || r.SegmentBursts[0].LastEvent != 75 {
		t.Errorf("bursts %+v", r.SegmentBursts)
	}
	if r.Steps.Source != IterationsNone || r.Steps.Count != 0 || len(r.Steps.StartEvents) != 0 {
		t.Errorf("steps %+v", r.Steps)
	}
}

// TestTimelineKeepsPeaks: at any resolution and window, the columns' maxima include the exact
// peak, every column's bands add up to its maximum, and the numbers agree with the replay and
// with a plain count of the trace.
func TestTimelineKeepsPeaks(t *testing.T) {
	for _, name := range []string{"activation_oom.pickle", "summarize_basic.pickle", "growing_container_step50.pickle", "cross_stream_pending.pickle", "fw_hf_trainer_accelerate.pickle"} {
		t.Run(name, func(t *testing.T) {
			snap := loadScenario(t, name)
			rep, err := Replay(context.Background(), snap, 0)
			if err != nil {
				t.Fatal(err)
			}
			n := len(snap.DeviceTraces[0])
			naive := naiveAllocated(snap.DeviceTraces[0])
			for _, w := range [][2]int{{0, 0}, {n / 3, 2 * n / 3}, {n - 5, n}, {1, 2}} {
				for _, cols := range []int{1, 7, 100, 1200} {
					r, err := Timeline(context.Background(), snap, TimelineOptions{Start: w[0], End: w[1], Columns: cols})
					if err != nil {
						t.Fatal(err)
					}
					end := w[1]
					if end == 0 {
						end = n
					}
					// The window's peak, counted plainly (these fixtures' traces are complete).
					var peak int64 = -1
					at := -1
					for i := w[0]; i < end; i++ {
						if naive[i] > peak {
							peak, at = naive[i], i
						}
					}
					if r.PeakAllocatedBytes != peak || r.PeakEvent != at {
						t.Errorf("window %v, %d columns: peak %d@%d, want %d@%d", w, cols, r.PeakAllocatedBytes, r.PeakEvent, peak, at)
					}
					if w == [2]int{0, 0} && (r.PeakAllocatedBytes != rep.PeakAllocatedBytes || r.PeakEvent != rep.PeakAllocatedEvent || r.PeakReservedBytes != rep.PeakReservedBytes) {
						t.Errorf("whole trace: peak %d@%d reserved %d; replay %d@%d reserved %d", r.PeakAllocatedBytes, r.PeakEvent, r.PeakReservedBytes,
							rep.PeakAllocatedBytes, rep.PeakAllocatedEvent, rep.PeakReservedBytes)
					}
					var colMax int64
					for c, col := range r.Series.Columns {
						colMax = max(colMax, col.MaxAllocated)
						var s int64
						for _, v := range col.Bands {
							s += v
						}
						if s != col.MaxAllocated || naive[col.MaxEvent] != col.MaxAllocated {
							t.Fatalf("window %v, %d columns, column %d: bands add up to %d, max %d, plain count %d", w, cols, c, s, col.MaxAllocated, naive[col.MaxEvent])
						}
						for i := col.First; i <= col.Last; i++ {
							if naive[i] > col.MaxAllocated || naive[i] < col.MinAllocated {
								t.Fatalf("column %d [%d,%d]: event %d has %d outside %d..%d", c, col.First, col.Last, i, naive[i], col.MinAllocated, col.MaxAllocated)
							}
						}
					}
					if colMax != r.PeakAllocatedBytes {
						t.Errorf("window %v, %d columns: the columns' highest is %d, the peak %d", w, cols, colMax, r.PeakAllocatedBytes)
					}
					if len(r.Series.Columns) != min(cols, end-w[0]) || r.Series.Columns[0].First != w[0] || r.Series.Columns[len(r.Series.Columns)-1].Last != end-1 {
						t.Errorf("window %v, %d columns: %d columns from %d to %d", w, cols, len(r.Series.Columns), r.Series.Columns[0].First, r.Series.Columns[len(r.Series.Columns)-1].Last)
					}
				}
			}
		})
	}
}

// TestTimelineTimeAxis: columns cut by time keep the same peak; empty columns carry the level.
func TestTimelineTimeAxis(t *testing.T) {
	snap := loadScenario(t, "growing_container_step50.pickle")
	ev, err := Timeline(context.Background(), snap, TimelineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tm, err := Timeline(context.Background(), snap, TimelineOptions{X: TimelineXTime, Columns: 5000})
	if err != nil {
		t.Fatal(err)
	}
	if tm.X != TimelineXTime || tm.PeakAllocatedBytes != ev.PeakAllocatedBytes {
		t.Errorf("time axis: x %s, peak %d; event axis peak %d", tm.X, tm.PeakAllocatedBytes, ev.PeakAllocatedBytes)
	}
	var colMax int64
	empty := 0
	for _, c := range tm.Series.Columns {
		colMax = max(colMax, c.MaxAllocated)
		if c.Last < c.First {
			empty++
		}
	}
	if colMax != ev.PeakAllocatedBytes || empty == 0 {
		t.Errorf("time columns: highest %d (want %d), %d empty", colMax, ev.PeakAllocatedBytes, empty)
	}
}

// TestTimelineTopAndOther: with fewer named bands the rest share the other band, and the bands
// still add up at the peak.
func TestTimelineTopAndOther(t *testing.T) {
	snap := loadScenario(t, "activation_oom.pickle")
	r, err := Timeline(context.Background(), snap, TimelineOptions{Top: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Bands) != 3 || !r.Bands[2].Other || r.Bands[2].Sites != 5 {
		t.Fatalf("bands %+v", r.Bands)
	}
	if r.Bands[0].Site != "train.py:112" || r.Bands[1].Site != "model.py:41" {
		t.Errorf("named bands %s, %s", r.Bands[0].Site, r.Bands[1].Site)
	}
	if got := r.Bands[2].BytesAtPeak; got != 939556864-(288<<20)-(256<<20) {
		t.Errorf("other band %d at the peak", got)
	}
}

// TestTimelineErrors: no trace, a window outside the trace, a time axis without times.
func TestTimelineErrors(t *testing.T) {
	snap := loadScenario(t, "activation_oom.pickle")
	if _, err := Timeline(context.Background(), snap, TimelineOptions{Start: 70, End: 90}); err == nil {
		t.Error("window past the end: no error")
	}
	if _, err := Timeline(context.Background(), snap, TimelineOptions{Device: 3}); err == nil {
		t.Error("device without trace: no error")
	}
	real := filepath.Join(realDir, "pt2.2_state-only_windows_ddpm-unet.pickle")
	if st, err := load.File(context.Background(), real, load.Options{}); err == nil {
		_, err := Picture(context.Background(), st, PictureOptions{})
		var nt *NoTraceError
		if !errors.As(err, &nt) || nt.Device != 0 {
			t.Errorf("state-only timeline: %v", err)
		}
		p, err := Picture(context.Background(), st, PictureOptions{Kind: PictureSegments, At: -1})
		if err != nil || p.Segments == nil || p.Segments.Segments == 0 {
			t.Errorf("state-only segments: %v", err)
		}
	}
}

// TestPictureDevice: the device with the most trace events is the default; absent devices are
// named.
func TestPictureDevice(t *testing.T) {
	snap := loadScenario(t, "multirank/rank2.pickle")
	if d, err := PictureDevice(snap, nil); err != nil || d != 2 {
		t.Errorf("default device %d, %v", d, err)
	}
	five := 5
	if _, err := PictureDevice(snap, &five); err == nil {
		t.Error("device 5: no error")
	}
}

// TestSegmentMapTotals: the map of the final state has the file's totals; the map rebuilt
// after the last event of a consistent trace has the same segments and totals.
func TestSegmentMapTotals(t *testing.T) {
	snap := loadScenario(t, "activation_oom.pickle")
	final, err := SegmentMap(context.Background(), snap, SegmentMapOptions{At: -1})
	if err != nil {
		t.Fatal(err)
	}
	if final.Segments != 31 || final.Blocks != 32 || final.ReservedBytes != 924844032 || final.AllocatedBytes != 922779648 ||
		final.InactiveBytes != 2064384 || final.LargestFreeBytes != 2064384 || final.PendingFreeBytes != 0 || final.Source != "final_state" {
		t.Errorf("final map %s", final.Text())
	}
	var roleSum int64
	for _, rb := range final.Roles {
		roleSum += rb.Bytes
	}
	if roleSum != final.AllocatedBytes {
		t.Errorf("roles add up to %d, allocated %d", roleSum, final.AllocatedBytes)
	}
	last := len(snap.DeviceTraces[0]) - 1
	at, err := SegmentMap(context.Background(), snap, SegmentMapOptions{At: last})
	if err != nil {
		t.Fatal(err)
	}
	if at.Segments != final.Segments || at.ReservedBytes != final.ReservedBytes || at.AllocatedBytes != final.AllocatedBytes || at.InactiveBytes != final.InactiveBytes || at.Source != "replay" {
		t.Errorf("map after the last event:\n%s\nfinal:\n%s", at.Text(), final.Text())
	}
	// At the peak (event 72) the replayed map holds the peak's allocated bytes.
	pk, err := SegmentMap(context.Background(), snap, SegmentMapOptions{At: 72})
	if err != nil {
		t.Fatal(err)
	}
	if pk.AllocatedBytes != 939556864 || pk.ReservedBytes != 941621248 {
		t.Errorf("map at the peak: allocated %d reserved %d", pk.AllocatedBytes, pk.ReservedBytes)
	}
	if _, err := SegmentMap(context.Background(), snap, SegmentMapOptions{At: 1000}); err == nil {
		t.Error("event past the trace: no error")
	}
}

// TestSegmentMapRealFiles: for every real snapshot the final map's totals are the summary's.
func TestSegmentMapRealFiles(t *testing.T) {
	for _, path := range realFiles(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			snap, err := load.File(context.Background(), path, load.Options{})
			if err != nil {
				t.Fatal(err)
			}
			sum, err := Summarize(context.Background(), snap, SummaryOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range sum.Devices {
				m, err := SegmentMap(context.Background(), snap, SegmentMapOptions{Device: d.Device, At: -1})
				if err != nil {
					t.Fatal(err)
				}
				if m.ReservedBytes != d.ReservedBytes || m.AllocatedBytes != d.AllocatedBytes || m.InactiveBytes != d.InactiveBytes || m.PendingFreeBytes != d.PendingFreeBytes {
					t.Errorf("device %d: map %d/%d/%d/%d, summary %d/%d/%d/%d", d.Device, m.ReservedBytes, m.AllocatedBytes, m.InactiveBytes, m.PendingFreeBytes,
						d.ReservedBytes, d.AllocatedBytes, d.InactiveBytes, d.PendingFreeBytes)
				}
			}
			// Timelines of traced devices keep the replay's peak.
			for _, d := range snap.Devices() {
				rep, err := Replay(context.Background(), snap, d)
				if err != nil || !rep.HasTrace {
					continue
				}
				r, err := Timeline(context.Background(), snap, TimelineOptions{Device: d})
				if err != nil {
					t.Fatalf("device %d: %v", d, err)
				}
				if r.PeakAllocatedBytes != rep.PeakAllocatedBytes || r.PeakEvent != rep.PeakAllocatedEvent {
					t.Errorf("device %d: timeline peak %d@%d, replay %d@%d", d, r.PeakAllocatedBytes, r.PeakEvent, rep.PeakAllocatedBytes, rep.PeakAllocatedEvent)
				}
				var sum int64
				for _, b := range r.Bands {
					sum += b.BytesAtPeak
				}
				if sum != r.PeakAllocatedBytes {
					t.Errorf("device %d: bands add up to %d at the peak %d", d, sum, r.PeakAllocatedBytes)
				}
			}
		})
	}
}

// TestTrim: the newest events keep the final segments; a window that ends early gets the
// segments rebuilt there, and its trace replays exactly onto them.
func TestTrim(t *testing.T) {
	snap := loadScenario(t, "growing_container_step50.pickle")
	n := len(snap.DeviceTraces[0])
	out, rep, err := Trim(context.Background(), snap, TrimOptions{Device: -1, LastEvents: 500})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.DeviceTraces[0]) != 500 || out.DeviceTraces[0][0] != snap.DeviceTraces[0][n-500] || len(out.Segments) != len(snap.Segments) {
		t.Errorf("last 500: %d events, %d segments", len(out.DeviceTraces[0]), len(out.Segments))
	}
	if len(rep.Devices) != 1 || rep.Devices[0].Start != n-500 || rep.Devices[0].End != n || rep.Devices[0].StateAt != -1 {
		t.Errorf("report %+v", rep.Devices)
	}
	r, err := Replay(context.Background(), out, 0)
	if err != nil || !r.Consistent {
		t.Errorf("trimmed replay: consistent %v, %v", r.Consistent, err)
	}
	if len(snap.DeviceTraces[0]) != n {
		t.Error("Trim changed its input")
	}
	// A window ending at event 2000: the state after event 1999.
	win, rep, err := Trim(context.Background(), snap, TrimOptions{Device: -1, Window: true, Start: 1000, End: 2000})
	if err != nil {
		t.Fatal(err)
	}
	want, err := SegmentMap(context.Background(), snap, SegmentMapOptions{At: 1999})
	if err != nil {
		t.Fatal(err)
	}
	if len(win.DeviceTraces[0]) != 1000 || rep.Devices[0].StateAt != 1999 || rep.Devices[0].Reserved != want.ReservedBytes || rep.Devices[0].Allocated != want.AllocatedBytes {
		t.Errorf("window: %d events, report %+v, want reserved %d allocated %d", len(win.DeviceTraces[0]), rep.Devices[0], want.ReservedBytes, want.AllocatedBytes)
	}
	wr, err := Replay(context.Background(), win, 0)
	if err != nil || !wr.Consistent {
		t.Errorf("window replay: consistent %v, %v, notes %v", wr.Consistent, err, wr.Notes)
	}
	for _, s := range win.Segments {
		var sum int64
		for _, b := range s.Blocks {
			sum += b.Size
		}
		if sum != s.TotalSize || s.Sums().Allocated != s.AllocatedSize {
			t.Fatalf("segment 0x%x: blocks add up to %d of %d, allocated %d vs %d", s.Address, sum, s.TotalSize, s.Sums().Allocated, s.AllocatedSize)
		}
	}
	if _, _, err := Trim(context.Background(), snap, TrimOptions{Device: -1, Window: true, Start: 10, End: 99999}); err == nil {
		t.Error("window past the end: no error")
	}
	if _, _, err := Trim(context.Background(), snap, TrimOptions{Device: 4}); err == nil {
		t.Error("absent device: no error")
	}
}

// TestTimelineSweepSplit checks the band sweep that sums a long trace in two parts against one
// pass in order: every checkpoint and the band maxima of windows before, across and after the
// split, on a trace of random allocations and frees (some events changing two bands).
func TestTimelineSweepSplit(t *testing.T) {
	const n = 3*sweepSplit + 777
	rng := rand.New(rand.NewPCG(1, 2))
	x := &TimelineIndex{evs: make([]snapshot.Event, n), alloc: make([]int64, n), site: make([]int32, n),
		extra: map[int][2]siteDelta{}, startAlloc: 5000}
	const sites = 7
	level := x.startAlloc
	for i := range n {
		switch r := rng.IntN(10); {
		case r < 2: // no band changes
			x.site[i] = -1
		case r < 3: // an allocation over a block still live: two bands change
			x.site[i] = -2
			old := rng.Int64N(1000)
			x.extra[i] = [2]siteDelta{{int32(rng.IntN(sites)), -old}, {int32(rng.IntN(sites)), old + 10}}
			level += 10
		default:
			x.site[i] = int32(rng.IntN(sites))
			level += rng.Int64N(2001) - 1000
		}
		x.alloc[i] = level
	}
	tb := &TimelineBands{x: x, bandOf: []int16{0, 1, 2, 0, 1, 3, 3}, start: []int64{100, 200, 300, 4400}}
	// The sums in order, as one pass makes them.
	wantCps := [][]int64{}
	cur := slices.Clone(tb.start)
	var after [][]int64 // totals after each event
	for i := range n {
		if i%timelineCheckpoint == 0 {
			wantCps = append(wantCps, slices.Clone(cur))
		}
		tb.apply(cur, i)
		after = append(after, slices.Clone(cur))
	}
	mid := (n + timelineCheckpoint - 1) / timelineCheckpoint / 2 * timelineCheckpoint
	for _, w := range [][2]int{{0, n}, {0, 10}, {mid - 5, mid + 5}, {mid, mid + 1}, {mid - 1, mid}, {mid + 100, n}, {n - 1, n}, {17, mid}} {
		want := slices.Clone(after[w[0]])
		for i := w[0]; i < w[1]; i++ {
			for b, v := range after[i] {
				want[b] = max(want[b], v)
			}
		}
		got, err := tb.sweep(context.Background(), w[0], w[1])
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("window %v: band maxima %v, want %v", w, got, want)
		}
		if len(tb.cps) != len(wantCps) {
			t.Fatalf("window %v: %d checkpoints, want %d", w, len(tb.cps), len(wantCps))
		}
		for k := range wantCps {
			if !slices.Equal(tb.cps[k], wantCps[k]) {
				t.Fatalf("window %v: checkpoint %d = %v, want %v", w, k, tb.cps[k], wantCps[k])
			}
		}
	}
}

// TestChooseDeviceOOM: on a three-GPU file whose only OOM is on device 1 (device 0 has the most
// trace events), the picture draws device 1 and says what devices 0 and 2 hold.
func TestChooseDeviceOOM(t *testing.T) {
	snap := sim.MultiDeviceOOM()
	snap.Path = "multi.pickle"
	devs := PictureDevices(snap)
	if len(devs) != 3 || devs[0].TraceEvents <= devs[1].TraceEvents || devs[1].OOMs != 1 || devs[0].OOMs != 0 || devs[2].OOMs != 0 {
		t.Fatalf("devices %+v", devs)
	}
	ch, err := ChooseDevice(snap, nil)
	if err != nil || ch.Device != sim.MultiDeviceOOMDevice || ch.Reason != DeviceReasonOOM {
		t.Fatalf("chose %+v, %v", ch, err)
	}
	for _, w := range []string{"device 1: it has the OOM (1)", "other devices: 0 (peak ", ", 2 (peak "} {
		if !strings.Contains(ch.Text, w) {
			t.Errorf("note %q lacks %q", ch.Text, w)
		}
	}
	// The allocated peak counted from the events is the replay's.
	for _, d := range devs {
		r, err := Timeline(context.Background(), snap, TimelineOptions{Device: d.Device})
		if err != nil {
			t.Fatal(err)
		}
		if r.PeakAllocatedBytes != d.PeakAllocatedBytes {
			t.Errorf("device %d: peak %d counted, %d replayed", d.Device, d.PeakAllocatedBytes, r.PeakAllocatedBytes)
		}
	}
	pic, err := Picture(context.Background(), snap, PictureOptions{})
	if err != nil || pic.Device != 1 || pic.Timeline.Device != 1 || len(pic.Timeline.OOMs) != 1 || pic.Timeline.OOMs[0].RequestedBytes != sim.MultiDeviceOOMRequest {
		t.Fatalf("picture of device %d: %v", pic.Device, err)
	}
	// Without the OOM device's trace the highest peak wins.
	snap.DeviceTraces[1] = nil
	ch, _ = ChooseDevice(snap, nil)
	if ch.Reason != DeviceReasonPeak || ch.Device != 1 && devs[0].PeakAllocatedBytes > devs[2].PeakAllocatedBytes && ch.Device != 0 {
		t.Errorf("without the OOM trace: %+v", ch)
	}
}

// TestTimelineSawtooth: a 3,000-step loop keeps every step start, and its columns' minima sit
// well below their maxima (the saw shows); bands are chosen by each site's highest level.
func TestTimelineSawtooth(t *testing.T) {
	snap := sim.TrainingLoop(3000, false)
	r, err := Timeline(context.Background(), snap, TimelineOptions{Columns: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if r.Steps.Count != 3000 || len(r.Steps.StartEvents) != 3000 || r.Steps.FirstStep != 0 {
		t.Errorf("steps: %d, %d listed (%s)", r.Steps.Count, len(r.Steps.StartEvents), r.Steps.Source)
	}
	if len(r.Envelope) != 1000 {
		t.Fatalf("envelope of %d columns", len(r.Envelope))
	}
	low := 0
	for _, c := range r.Envelope {
		if c.MinAllocatedBytes*10 < c.MaxAllocatedBytes*8 {
			low++
		}
	}
	if low < 990 {
		t.Errorf("only %d of 1000 columns dip 20%% below their maximum", low)
	}
	x, err := NewTimelineIndex(context.Background(), snap, TimelineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]int{}
	for _, p := range x.Phases(0, x.Events()) {
		names[p.Name]++
	}
	if names["forward"] != 3000 || names["backward"] != 3000 || names["optimizer"] < 1 || names[PhaseSetup] != 1 {
		t.Errorf("phases %v", names)
	}
	// 9,000 runs in 1,000 columns of three steps each: as drawn, every column is mostly backward.
	if len(r.Phases) != 1 || r.Phases[0] != (TimelinePhase{Name: "backward", StartEvent: 0, EndEvent: r.End - 1}) || !slices.ContainsFunc(r.Notes, func(n string) bool { return strings.Contains(n, "phases lists them as drawn") }) {
		t.Errorf("phases as drawn %v, notes %v", r.Phases, r.Notes)
	}
	// The bounded answer (MCP): 200 merged columns with the same extremes, 20 step starts.
	bd := r.Bounded(200, 20, 60)
	var lo, hi, blo, bhi int64 = 1 << 62, 0, 1 << 62, 0
	for _, c := range r.Envelope {
		lo, hi = min(lo, c.MinAllocatedBytes), max(hi, c.MaxAllocatedBytes)
	}
	for _, c := range bd.Envelope {
		blo, bhi = min(blo, c.MinAllocatedBytes), max(bhi, c.MaxAllocatedBytes)
	}
	if len(bd.Envelope) != 200 || lo != blo || hi != bhi || bd.Envelope[0].StartEvent != 0 || bd.Envelope[199].EndEvent != r.End-1 {
		t.Errorf("bounded envelope: %d columns, %d..%d (want %d..%d)", len(bd.Envelope), blo, bhi, lo, hi)
	}
	if s := bd.Steps.Summary; s == nil || len(bd.Steps.StartEvents) != 20 || s.Listed != 20 || bd.Steps.Count != 3000 ||
		s.FirstStartEvent != r.Steps.StartEvents[0] || s.LastStartEvent != r.Steps.StartEvents[2999] || bd.Steps.StartEvents[19] != s.LastStartEvent || len(bd.Phases) > 60 {
		t.Errorf("bounded steps %+v, %d phases", bd.Steps.Summary, len(bd.Phases))
	}
	if len(r.Steps.StartEvents) != 3000 || len(r.Envelope) != 1000 {
		t.Error("Bounded changed the result it copies")
	}
	// A window of the late steps lists their step numbers from the start of the run.
	w, err := Timeline(context.Background(), snap, TimelineOptions{Start: r.Steps.StartEvents[2500], End: r.Steps.StartEvents[2504]})
	if err != nil {
		t.Fatal(err)
	}
	if w.Steps.FirstStep != 2500 || w.Steps.Count != 4 {
		t.Errorf("window steps: first %d, %d", w.Steps.FirstStep, w.Steps.Count)
	}
}
