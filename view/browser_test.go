package view

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"

	"github.com/memsnap/memsnap/analysis/load"
	"github.com/memsnap/memsnap/analysis/sim"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// browserEnv turns the browser tests on; CI (.ci/run) sets it after installing chromium.
const browserEnv = "MEMSNAP_BROWSER_TEST"

// chromiumPath finds a Chromium or Chrome binary (the real binary, not Debian's wrapper script).
func chromiumPath() string {
	for _, p := range []string{"/usr/lib/chromium/chromium", "chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if lp, err := exec.LookPath(p); err == nil {
			return lp
		}
	}
	return ""
}

// browser starts a headless Chromium for one test, or skips it when the browser tests are off.
func browser(t *testing.T) context.Context {
	t.Helper()
	if os.Getenv(browserEnv) == "" {
		t.Skipf("browser tests are off: set %s=1 (needs chromium; .ci/run installs it)", browserEnv)
	}
	path := chromiumPath()
	if path == "" {
		t.Fatalf("%s is set but no chromium binary was found (apt-get install chromium)", browserEnv)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1500, 1100))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancel2 := chromedp.NewContext(actx)
	t.Cleanup(cancel2)
	ctx, cancel3 := context.WithTimeout(ctx, 120*time.Second)
	t.Cleanup(cancel3)
	return ctx
}

// screenshot saves a full-page screenshot when MEMSNAP_SCREENSHOT_DIR is set.
func screenshot(t *testing.T, ctx context.Context, name string) {
	dir := os.Getenv("MEMSNAP_SCREENSHOT_DIR")
	if dir == "" {
		return
	}
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Errorf("screenshot: %v", err)
		return
	}
	if err := os.WriteFile(filepath.Join(dir, name), buf, 0o644); err != nil {
		t.Error(err)
	}
}

// eval runs a JavaScript expression in the page and decodes its value.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// checkPage loads the viewer of snap in Chromium: the page reports ready, both charts are drawn
// (not blank), clicking the largest named band shows its site and stack, and a zoom request
// redraws the window asked for.
func checkPage(t *testing.T, snap *snapshot.Snapshot, shot string) {
	ctx := browser(t)
	srv := New(snap, Options{})
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	if err := chromedp.Do(ctx,
		chromedp.Navigate(ts.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`body[data-ready="1"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#timeline[data-drawn]`)),
		chromedp.WaitVisible(chromedp.CSS(`#segments[data-drawn]`)),
	); err != nil {
		t.Fatalf("page did not load: %v", err)
	}
	inked := eval[int](t, ctx, `memsnapView.inkedPixels("timeline")`)
	total := eval[int](t, ctx, `document.getElementById("timeline").width * document.getElementById("timeline").height`)
	segInked := eval[int](t, ctx, `memsnapView.inkedPixels("segments")`)
	if inked < total/10 {
		t.Errorf("timeline is nearly blank: %d of %d pixels drawn", inked, total)
	}
	if segInked < 1000 {
		t.Errorf("segment map is nearly blank: %d pixels drawn", segInked)
	}
	// The largest named band, and where it is drawn.
	type band struct {
		Band  int    `json:"band"`
		Site  string `json:"site"`
		Other bool   `json:"other"`
		Bytes int64  `json:"bytes_at_peak"`
	}
	bands := eval[[]band](t, ctx, `memsnapView.state.tm.timeline.bands`)
	best := -1
	for i, b := range bands {
		if !b.Other && (best < 0 || b.Bytes > bands[best].Bytes) {
			best = i
		}
	}
	if best < 0 {
		t.Fatal("no named band")
	}
	pt := eval[struct{ X, Y float64 }](t, ctx, fmt.Sprintf(`memsnapView.pointForBand(%d)`, best))
	if err := chromedp.Do(ctx,
		chromedp.MouseClickXY(pt.X, pt.Y),
		chromedp.WaitVisible(chromedp.CSS(`#details .stack`)),
	); err != nil {
		t.Fatalf("click on band %d at (%.0f, %.0f): %v", best, pt.X, pt.Y, err)
	}
	details, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#details`)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(details, bands[best].Site) || !strings.Contains(details, "stack (innermost first)") {
		t.Errorf("details after clicking %s: %q", bands[best].Site, details)
	}
	screenshot(t, ctx, shot)
	// Zoom into the middle of the trace: the answer covers exactly that window.
	n := len(snap.DeviceTraces[0])
	a, b := n/3, min(n/3+max(n/20, 60), n)
	got := eval[struct {
		Start int `json:"start"`
		End   int `json:"end"`
	}](t, ctx, fmt.Sprintf(`memsnapView.zoom(%d, %d).then(() => ({start: memsnapView.state.data.start, end: memsnapView.state.data.end}))`, a, b))
	if got.Start != a || got.End != b {
		t.Errorf("zoom to %d:%d answered %d:%d", a, b, got.Start, got.End)
	}
	screenshot(t, ctx, "zoomed-"+shot)
}

func TestBrowserFixture(t *testing.T) {
	snap, err := load.File(context.Background(), "../testdata/scenarios/activation_oom.pickle", load.Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkPage(t, snap, "view-activation_oom.png")
}

func TestBrowserLargeSnapshot(t *testing.T) {
	if os.Getenv(browserEnv) == "" {
		t.Skipf("browser tests are off: set %s=1", browserEnv)
	}
	checkPage(t, synthSnapshot(1_000_000), "view-synthetic.png")
}

// TestBrowserAllocationsAndOOM: on three GPUs with the only OOM on device 1 the page opens
// device 1; in the per-allocation view, pointing at the largest allocation shows its stack, and
// clicking the OOM button shows the failed request's size and the verdict.
func TestBrowserAllocationsAndOOM(t *testing.T) {
	ctx := browser(t)
	snap := sim.MultiDeviceOOM()
	snap.Path = "multi-device-oom.pickle"
	ts := httptest.NewServer(New(snap, Options{}).Handler())
	defer ts.Close()
	if err := chromedp.Do(ctx,
		chromedp.Navigate(ts.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`body[data-ready="1"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#timeline[data-drawn]`)),
	); err != nil {
		t.Fatalf("page did not load: %v", err)
	}
	if dev := eval[int](t, ctx, `memsnapView.state.dev`); dev != sim.MultiDeviceOOMDevice {
		t.Fatalf("the page opened device %d", dev)
	}
	if note := eval[string](t, ctx, `document.getElementById("device-note").textContent`); !strings.Contains(note, "it has the OOM") || !strings.Contains(note, "other devices: 0") {
		t.Errorf("device note %q", note)
	}
	n := eval[int](t, ctx, `memsnapView.allocations()`)
	if n == 0 {
		t.Fatal("no allocation drawn")
	}
	type alloc struct {
		Site string `json:"site"`
		Size int64  `json:"size"`
	}
	allocs := eval[[]alloc](t, ctx, `memsnapView.state.allocs.allocations`)
	best := 0
	for i, a := range allocs {
		if a.Size > allocs[best].Size {
			best = i
		}
	}
	pt := eval[struct{ X, Y float64 }](t, ctx, fmt.Sprintf(`memsnapView.pointForAllocation(%d)`, best))
	if err := chromedp.Do(ctx,
		chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, pt.X, pt.Y),
		chromedp.WaitVisible(chromedp.CSS(`#details .stack`)),
	); err != nil {
		t.Fatalf("hover on allocation %d at (%.0f, %.0f): %v", best, pt.X, pt.Y, err)
	}
	details, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#details`)))
	if err != nil {
		t.Fatal(err)
	}
	stack, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#details .stack`)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(details, allocs[best].Site) || !strings.Contains(stack, ".py:") {
		t.Errorf("details after pointing at %s: %q", allocs[best].Site, details)
	}
	screenshot(t, ctx, "view-allocations.png")
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`#ooms button`)),
		chromedp.WaitVisible(chromedp.CSS(`#details[data-oom]`)),
		chromedp.WaitVisible(chromedp.CSS(`#details .stack`)),
	); err != nil {
		t.Fatalf("OOM button: %v", err)
	}
	if details, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#details`))); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"requested", "64.0 MiB (67,108,864 B)", "device free", "verdict", "capacity"} {
		if !strings.Contains(details, w) {
			t.Errorf("OOM details lack %q: %q", w, details)
		}
	}
	screenshot(t, ctx, "view-oom.png")
}
