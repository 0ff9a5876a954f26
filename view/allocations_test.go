package view

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"testing"

	"github.com/memsnap/memsnap/analysis"
	"github.com/memsnap/memsnap/analysis/load"
	"github.com/memsnap/memsnap/analysis/sim"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// TestAllocationsAPI: the per-allocation view of the activation OOM lists every allocation of
// the window with its events, site, role and stack, and its columns add up: listed allocations
// alive after a column's event plus the aggregated bytes are the allocated total there.
func TestAllocationsAPI(t *testing.T) {
	snap, err := load.File(context.Background(), "../testdata/scenarios/activation_oom.pickle", load.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := New(snap, Options{}).Handler()
	var a Allocations
	if get(t, h, "/api/allocations?device=0&start=0&end=77&cols=77", &a) != 200 {
		t.Fatal("allocations")
	}
	if len(a.First) != 77 || a.PeakBytes != 939556864 || len(a.Allocations) == 0 {
		t.Fatalf("%d columns, peak %d, %d allocations", len(a.First), a.PeakBytes, len(a.Allocations))
	}
	var fc1 *AllocationJSON
	for i, x := range a.Allocations {
		if x.AllocEvent != nil && x.FreeEvent != nil && *x.FreeEvent <= *x.AllocEvent {
			t.Errorf("allocation %s freed at %d before its alloc %d", x.Addr, *x.FreeEvent, *x.AllocEvent)
		}
		if x.Site == "model.py:41 forward" && x.Size == 64<<20 && fc1 == nil {
			fc1 = &a.Allocations[i]
		}
	}
	if fc1 == nil || fc1.Role != "activation" || fc1.FreeEvent != nil || fc1.StackID < 0 {
		t.Fatalf("fc1 allocation: %+v", fc1)
	}
	for k := range a.First {
		var sum int64
		for _, x := range a.Allocations {
			alloc := -1
			if x.AllocEvent != nil {
				alloc = *x.AllocEvent
			}
			if alloc <= a.MaxEvent[k] && (x.FreeEvent == nil || *x.FreeEvent > a.MaxEvent[k]) {
				sum += x.Size
			}
		}
		if sum+a.AggregatedBytes[k] != a.AllocMax[k] {
			t.Fatalf("column %d: %d listed + %d aggregated != %d allocated", k, sum, a.AggregatedBytes[k], a.AllocMax[k])
		}
	}
	var st StackJSON
	if get(t, h, "/api/stack?id="+itoa(fc1.StackID), &st) != 200 || st.Site != "model.py:41" || st.Function != "forward" || len(st.Frames) == 0 || len(st.Stack) == 0 {
		t.Errorf("stack %d: %+v", fc1.StackID, st)
	}
	for _, bad := range []string{"/api/stack?id=-1", "/api/stack?id=99999", "/api/allocations?cols=0", "/api/allocations?start=70&end=700"} {
		if code := get(t, h, bad, nil); code != http.StatusBadRequest {
			t.Errorf("%s: %d", bad, code)
		}
	}
}

// TestOOMAPIMultiDevice: on three GPUs with the only OOM on device 1 the page opens device 1,
// says what the others hold, and /api/oom explains the OOM (request, free memory, stack,
// verdict, live sites); device 0 has none.
func TestOOMAPIMultiDevice(t *testing.T) {
	snap := sim.MultiDeviceOOM()
	snap.Path = "multi.pickle"
	h := New(snap, Options{}).Handler()
	var m Meta
	if get(t, h, "/api/meta", &m) != 200 || m.DefaultDevice != 1 || m.DeviceReason != analysis.DeviceReasonOOM || len(m.Devices) != 3 || m.Devices[1].OOMs != 1 {
		t.Fatalf("meta %+v", m)
	}
	var o OOMs
	if get(t, h, "/api/oom?device=1", &o) != 200 || len(o.OOMs) != 1 {
		t.Fatalf("ooms %+v", o)
	}
	e := o.OOMs[0]
	if e.RequestedBytes != sim.MultiDeviceOOMRequest || e.DeviceFreeBytes != 58<<20 || e.Verdict != analysis.VerdictCapacity || len(e.Stack) == 0 || len(e.LiveSites) == 0 {
		t.Errorf("oom %d requested, %d free, %s, %d frames, %d sites", e.RequestedBytes, e.DeviceFreeBytes, e.Verdict, len(e.Stack), len(e.LiveSites))
	}
	if get(t, h, "/api/oom?device=0", &o) != 200 || len(o.OOMs) != 0 || o.OOMs == nil {
		t.Errorf("device 0 ooms %+v", o)
	}
}

// BenchmarkAllocationsAPI times /api/allocations over the whole trace and a 2% window of a
// generated snapshot: MEMSNAP_BENCH_SNAPSHOT names one (bench/gensnap writes a 300 MB file),
// else a million-event synthetic trace. It reports the answer's size.
func BenchmarkAllocationsAPI(b *testing.B) {
	var snap *snapshot.Snapshot
	if p := os.Getenv("MEMSNAP_BENCH_SNAPSHOT"); p != "" {
		var err error
		if snap, err = load.File(context.Background(), p, load.Options{}); err != nil {
			b.Fatal(err)
		}
	} else {
		snap = synthSnapshot(1_000_000)
	}
	srv := New(snap, Options{})
	dev := srv.defaultDevice()
	if err := srv.Prepare(context.Background(), dev); err != nil {
		b.Fatal(err)
	}
	h := srv.Handler()
	n := len(snap.DeviceTraces[dev])
	for _, w := range []struct {
		name       string
		start, end int
	}{{"whole", 0, n}, {"window2pct", n / 2, n/2 + n/50}} {
		b.Run(w.name, func(b *testing.B) {
			url := "/api/allocations?device=" + itoa(dev) + "&start=" + itoa(w.start) + "&end=" + itoa(w.end) + "&cols=1200"
			size := 0
			for b.Loop() {
				req := httptest.NewRequest(http.MethodGet, url, nil)
				req.Host = "localhost"
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != 200 {
					b.Fatalf("%s: %d %s", url, rec.Code, rec.Body.String())
				}
				size = rec.Body.Len()
			}
			b.ReportMetric(float64(size), "answer-bytes")
			if size >= 2<<20 {
				b.Errorf("answer of %d bytes: over 2 MB", size)
			}
		})
	}
}

// TestZoomWindowBands: bands=window chooses the bands over the window: on the activation OOM's
// first 20 events (parameters only) the named bands are the parameters' site, coloured as the
// whole trace colours it.
func TestZoomWindowBands(t *testing.T) {
	snap, err := load.File(context.Background(), "../testdata/scenarios/activation_oom.pickle", load.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := New(snap, Options{})
	h := srv.Handler()
	var whole TimelineMeta
	if get(t, h, "/api/timeline/meta?device=0", &whole) != 200 {
		t.Fatal("meta")
	}
	var c Columns
	if get(t, h, "/api/timeline?device=0&start=0&end=20&cols=20&bands=window", &c) != 200 {
		t.Fatal("timeline")
	}
	if len(c.BandsMeta) == 0 || len(c.BandsMeta) != len(c.Bands) || len(c.Colors) != len(c.BandsMeta) {
		t.Fatalf("%d bands, %d metas, %d colours", len(c.Bands), len(c.BandsMeta), len(c.Colors))
	}
	for i, b := range c.BandsMeta {
		if b.Other {
			continue
		}
		if b.Site != "train.py:112" || b.Category != "parameter" {
			t.Errorf("window band %d: %s %s", i, b.Site, b.Category)
		}
		for k, wb := range whole.Timeline.Bands {
			if wb.Site == b.Site && whole.Colors[k] != c.Colors[i] {
				t.Errorf("%s is %s in the window, %s over the trace", b.Site, c.Colors[i], whole.Colors[k])
			}
		}
	}
	var plain Columns
	if get(t, h, "/api/timeline?device=0&start=0&end=20&cols=20", &plain) != 200 || plain.BandsMeta != nil || len(plain.Bands) != len(whole.Timeline.Bands) {
		t.Errorf("plain zoom: %d bands, metas %v", len(plain.Bands), plain.BandsMeta != nil)
	}
}

// TestColumnPhases: each column takes the phase with the most events in it; an OOM's unwinding
// wins its columns.
func TestColumnPhases(t *testing.T) {
	runs := []analysis.TimelinePhase{{Name: "setup", StartEvent: 0, EndEvent: 2}, {Name: "forward", StartEvent: 3, EndEvent: 12},
		{Name: "backward", StartEvent: 13, EndEvent: 19}, {Name: analysis.PhaseOOMUnwinding, StartEvent: 18, EndEvent: 19}}
	got := columnPhases(runs, []int{0, 5, 10, 15}, []int{4, 9, 14, 19})
	want := []string{"setup", "forward", "forward", analysis.PhaseOOMUnwinding}
	if !slices.Equal(got, want) {
		t.Errorf("phases %v, want %v", got, want)
	}
}
