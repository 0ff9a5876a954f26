package view

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/memsnap/memsnap/analysis"
	"github.com/memsnap/memsnap/analysis/load"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// TestSynthConsistent: the synthetic snapshot replays exactly onto its final state.
func TestSynthConsistent(t *testing.T) {
	snap := synthSnapshot(50_000)
	r, err := analysis.Replay(context.Background(), snap, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Consistent || r.OOMEvents != 1 || r.Iterations < 2 {
		t.Fatalf("synthetic replay: consistent %v, %d OOM, %d steps, notes %v", r.Consistent, r.OOMEvents, r.Iterations, r.Notes)
	}
}

func get(t *testing.T, h http.Handler, url string, v any) int {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, url, nil)
	req.Host = "127.0.0.1:8770"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if v != nil && w.Code == http.StatusOK {
		if err := json.Unmarshal(w.Body.Bytes(), v); err != nil {
			t.Fatalf("%s: %v: %s", url, err, w.Body.String())
		}
	}
	return w.Code
}

// TestAPI: the page, its assets and every API answer; zoom answers equal analysis's series.
func TestAPI(t *testing.T) {
	snap, err := load.File(context.Background(), "../testdata/scenarios/activation_oom.pickle", load.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := New(snap, Options{})
	h := srv.Handler()
	for _, p := range []string{"/", "/assets/app.js", "/assets/app.css"} {
		req := httptest.NewRequest(http.MethodGet, p, nil)
		req.Host = "localhost:1"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK || w.Body.Len() < 500 {
			t.Errorf("%s: %d, %d bytes", p, w.Code, w.Body.Len())
		}
		if strings.Contains(w.Body.String(), "http://") || strings.Contains(w.Body.String(), "https://") {
			t.Errorf("%s refers to another site", p)
		}
	}
	var m Meta
	if get(t, h, "/api/meta", &m) != 200 || m.Name != "activation_oom.pickle" || len(m.Devices) != 1 || m.Devices[0].Events != 77 || m.RoleColors["activation"] == "" {
		t.Errorf("meta %+v", m)
	}
	var tm TimelineMeta
	if get(t, h, "/api/timeline/meta?device=0", &tm) != 200 || !tm.HasTrace || tm.Timeline.PeakAllocatedBytes != 939556864 || len(tm.Colors) != len(tm.Timeline.Bands) {
		t.Errorf("timeline meta %+v", tm)
	}
	var cols Columns
	if get(t, h, "/api/timeline?device=0&start=10&end=60&cols=20", &cols) != 200 {
		t.Fatal("timeline")
	}
	want, err := analysis.Timeline(context.Background(), snap, analysis.TimelineOptions{Start: 10, End: 60, Columns: 20, Top: 12})
	if err != nil {
		t.Fatal(err)
	}
	if cols.Start != 10 || cols.End != 60 || len(cols.First) != 20 || cols.PeakBytes != want.PeakAllocatedBytes || cols.PeakEvent != want.PeakEvent {
		t.Errorf("columns %d:%d, %d, peak %d@%d; want peak %d@%d", cols.Start, cols.End, len(cols.First), cols.PeakBytes, cols.PeakEvent, want.PeakAllocatedBytes, want.PeakEvent)
	}
	for i, c := range want.Series.Columns {
		if cols.First[i] != c.First || cols.AllocMax[i] != c.MaxAllocated || cols.ResMax[i] != c.MaxReserved || cols.AllocMin[i] != c.MinAllocated {
			t.Fatalf("column %d differs", i)
		}
	}
	var seg Segments
	if get(t, h, "/api/segments?device=0&at=72&width=800", &seg) != 200 || seg.AllocatedBytes != 939556864 || len(seg.List) != seg.Segments || len(seg.Place) != len(seg.List) {
		t.Errorf("segments at 72: allocated %d, %d listed of %d", seg.AllocatedBytes, len(seg.List), seg.Segments)
	}
	for _, bad := range []string{"/api/timeline?cols=x", "/api/timeline?start=70&end=700", "/api/timeline?cols=0", "/api/segments?at=9999", "/api/timeline?device=3"} {
		if code := get(t, h, bad, nil); code != http.StatusBadRequest {
			t.Errorf("%s: %d", bad, code)
		}
	}
	// Only loopback names are answered (DNS rebinding).
	req := httptest.NewRequest(http.MethodGet, "/api/meta", nil)
	req.Host = "evil.example:8770"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != http.StatusForbidden {
		t.Errorf("foreign Host: %d", w.Code)
	}
}

// TestStateOnly: a device without a trace answers its segments and says why there is no
// timeline.
func TestStateOnly(t *testing.T) {
	snap := synthSnapshot(1000)
	snap.DeviceTraces = [][]snapshot.Event{{}}
	h := New(snap, Options{}).Handler()
	var tm TimelineMeta
	if get(t, h, "/api/timeline/meta?device=0", &tm) != 200 || tm.HasTrace || !strings.Contains(tm.Reason, "no trace") {
		t.Errorf("timeline meta %+v", tm)
	}
	var seg Segments
	if get(t, h, "/api/segments?device=0", &seg) != 200 || seg.Segments == 0 {
		t.Errorf("segments %+v", seg.SegmentMapResult)
	}
}

// TestZoomLatency: on a million-event trace a zoom answer takes well under a second (the
// benchmark below measures it; the issue asks for under 100 ms).
func TestZoomLatency(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	srv := New(synthSnapshot(1_000_000), Options{})
	if err := srv.Prepare(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	best := time.Hour
	for k := range 5 {
		t0 := time.Now()
		resp, err := http.Get(ts.URL + "/api/timeline?device=0&start=" + itoa(k*1000) + "&end=" + itoa(900_000+k) + "&cols=1600")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		best = min(best, time.Since(t0))
	}
	if best > time.Second {
		t.Errorf("zoom answer took %v", best)
	}
	t.Logf("zoom over 900k events into 1600 columns: %v (best of 5)", best)
}

func itoa(n int) string { return strconv.Itoa(n) }

// BenchmarkZoom measures one zoom answer (JSON included) over the whole trace and over a
// window, on MEMSNAP_BENCH_FILE when set (bench/gensnap's ~300 MB snapshot), else on a
// synthetic million-event trace.
func BenchmarkZoom(b *testing.B) {
	var snap *snapshot.Snapshot
	if f := os.Getenv("MEMSNAP_BENCH_FILE"); f != "" {
		var err error
		if snap, err = load.File(context.Background(), f, load.Options{}); err != nil {
			b.Fatal(err)
		}
	} else {
		snap = synthSnapshot(1_000_000)
	}
	srv := New(snap, Options{})
	dev, _ := analysis.PictureDevice(snap, nil)
	if err := srv.Prepare(context.Background(), dev); err != nil {
		b.Fatal(err)
	}
	h := srv.Handler()
	n := len(snap.DeviceTraces[dev])
	urls := []string{
		"/api/timeline?device=" + itoa(dev) + "&start=0&end=0&cols=1600",
		"/api/timeline?device=" + itoa(dev) + "&start=" + itoa(n/3) + "&end=" + itoa(n/3+n/50) + "&cols=1600",
	}
	b.ResetTimer()
	for i := range b.N {
		req := httptest.NewRequest(http.MethodGet, urls[i%2], nil)
		req.Host = "127.0.0.1"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != 200 {
			b.Fatal(w.Body.String())
		}
	}
}

// TestFirstRequestCancelled: the device's timeline is built once for every request, so a first
// request cancelled mid-build (a closed tab) must not leave the device broken; a device the
// file lacks is an error that leaves nothing behind.
func TestFirstRequestCancelled(t *testing.T) {
	snap, err := load.File(context.Background(), "../testdata/scenarios/activation_oom.pickle", load.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := New(snap, Options{})
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	srv.Zoom(cancelled, 0, 0, 0, 100) // may fail: the request is gone
	if _, err := srv.Zoom(context.Background(), 0, 0, 0, 100); err != nil {
		t.Fatalf("after a cancelled first request: %v", err)
	}
	if _, err := srv.Zoom(context.Background(), 7, 0, 0, 100); err == nil || !strings.Contains(err.Error(), "no device 7 (the file has devices [0])") {
		t.Fatalf("device 7: %v", err)
	}
	if len(srv.devs) != 1 {
		t.Fatalf("devices kept: %d", len(srv.devs))
	}
}
