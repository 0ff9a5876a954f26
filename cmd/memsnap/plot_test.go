package main

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/memsnap/memsnap/analysis"
	"github.com/memsnap/memsnap/analysis/load"

	"github.com/memsnap/memsnap/internal/realsnaps/realtest"
)

const scenarioDir = "../../testdata/scenarios/"

func TestPlotCommand(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "t.png")
	text, err := run(t, "plot", scenarioDir+"activation_oom.pickle", "-o", out)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"wrote " + out, "allocated peak 896 MiB after event 72", "OOM at event 76: 64.0 MiB requested", "model.py:41 in forward [activation]"} {
		if !strings.Contains(text, w) {
			t.Errorf("output lacks %q:\n%s", w, text)
		}
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() < 1200 || b.Dy() < 600 {
		t.Errorf("default PNG is %dx%d, want at least 1200x600", b.Dx(), b.Dy())
	}
	// SVG, segments, --json: the numbers are analysis.Picture's.
	svg := filepath.Join(dir, "s.svg")
	js, err := run(t, "plot", scenarioDir+"fragmentation_oom.pickle", "-o", svg, "--kind", "segments", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var got analysis.PictureResult
	if err := json.Unmarshal([]byte(js), &got); err != nil {
		t.Fatalf("--json: %v\n%s", err, js)
	}
	if got.Kind != "segments" || got.Segments == nil || got.Segments.ReservedBytes != 1048576000 || got.Segments.AllocatedBytes != 550502400 || got.Segments.LargestFreeBytes != 9961472 {
		t.Errorf("segments JSON: %s", js)
	}
	if data, err := os.ReadFile(svg); err != nil || !bytes.Contains(data, []byte("<svg")) {
		t.Errorf("SVG: %v", err)
	}
	// A window and --top.
	js, err = run(t, "plot", scenarioDir+"growing_container_step50.pickle", "-o", out, "--force", "--window", "1000:2000", "--top", "3", "--json")
	if err != nil {
		t.Fatal(err)
	}
	got = analysis.PictureResult{}
	if err := json.Unmarshal([]byte(js), &got); err != nil {
		t.Fatal(err)
	}
	if tl := got.Timeline; tl == nil || tl.Start != 1000 || tl.End != 2000 || len(tl.Bands) != 4 || !tl.Bands[3].Other {
		t.Errorf("window JSON: %s", js)
	}
	// Without --force an existing picture is kept, as convert and trim keep theirs.
	before, _ := os.ReadFile(out)
	if _, err := run(t, "plot", scenarioDir+"activation_oom.pickle", "-o", out); err == nil || oneLine(err) != out+" exists; pass --force to replace it" || exitCode(err) != 2 {
		t.Errorf("plot over an existing file: %v", err)
	}
	if after, _ := os.ReadFile(out); !bytes.Equal(before, after) || len(after) == 0 {
		t.Error("plot without --force changed the existing file")
	}
}

func TestPlotErrors(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "t.png")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"plot", scenarioDir + "activation_oom.pickle"}, "-o FILE.svg"},
		{[]string{"plot", scenarioDir + "activation_oom.pickle", "-o", filepath.Join(dir, "t.jpg")}, "must end in .svg or .png"},
		{[]string{"plot", scenarioDir + "activation_oom.pickle", "-o", out, "--kind", "flame"}, `--kind "flame"`},
		{[]string{"plot", scenarioDir + "activation_oom.pickle", "-o", out, "--window", "9"}, "--window"},
		{[]string{"plot", scenarioDir + "activation_oom.pickle", "-o", out, "--window", "50:10"}, "B must be an event index above A"},
		{[]string{"plot", scenarioDir + "activation_oom.pickle", "-o", out, "--window", "70:900"}, "outside device 0's trace"},
		{[]string{"plot", scenarioDir + "activation_oom.pickle", "-o", out, "--at", "5"}, "--at applies to --kind segments"},
		{[]string{"plot", scenarioDir + "activation_oom.pickle", "-o", out, "--device", "2"}, "no device 2"},
		{[]string{"plot", scenarioDir + "activation_oom.pickle", "-o", out, "--top", "0"}, "--top 0"},
	} {
		_, err := run(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args[2:], err, tc.want)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a failed plot wrote its picture")
	}
	// The picture never replaces the snapshot.
	in := filepath.Join(dir, "snap.png")
	data, _ := os.ReadFile(scenarioDir + "activation_oom.pickle")
	os.WriteFile(in, data, 0o644)
	if _, err := run(t, "plot", in, "-o", in); err == nil || !strings.Contains(err.Error(), "overwrite the input") {
		t.Errorf("plot over its input: %v", err)
	}
}

// TestPlotNoTrace: a timeline of a state-only file is a one-line error with exit status 2 that
// suggests the segments.
func TestPlotNoTrace(t *testing.T) {
	real := realtest.Path(t, "pt2.2_state-only_windows_ddpm-unet.pickle")
	if _, err := os.Stat(real); err != nil {
		t.Skipf("real snapshots absent: %v", err)
	}
	out := filepath.Join(t.TempDir(), "t.png")
	_, err := run(t, "plot", real, "-o", out)
	if err == nil || !strings.Contains(err.Error(), "has no trace") || !strings.Contains(err.Error(), "--kind segments") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("no-trace timeline: %v", err)
	}
	if exitCode(err) != 2 {
		t.Errorf("exit status %d", exitCode(err))
	}
	if _, err := run(t, "plot", real, "-o", out, "--kind", "segments"); err != nil {
		t.Errorf("segments of a state-only file: %v", err)
	}
}

// totalsOf is the summary's totals of a snapshot file.
func totalsOf(t *testing.T, path string) []totals {
	t.Helper()
	out, err := run(t, "summarize", path, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var s summaryJSON
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatal(err)
	}
	return s.Devices
}

func TestConvertCommand(t *testing.T) {
	dir := t.TempDir()
	for _, in := range []string{"summarize_basic.json.gz", "summarize_basic_p2_typetag.pickle", "summarize_basic_segment_list.pickle", "cross_stream_pending.pickle"} {
		want := totalsOf(t, scenarioDir+in)
		for _, name := range []string{"out.pickle", "out.json", "out.pickle.gz"} {
			out := filepath.Join(dir, strings.ReplaceAll(in, ".", "_")+"_"+name)
			text, err := run(t, "convert", scenarioDir+in, "-o", out)
			if err != nil {
				t.Fatalf("%s -> %s: %v", in, name, err)
			}
			if !strings.Contains(text, "wrote "+out) {
				t.Errorf("output: %s", text)
			}
			if got := totalsOf(t, out); len(got) != len(want) || got[0] != want[0] {
				t.Errorf("%s -> %s: totals %+v, want %+v", in, name, got, want)
			}
			snap, err := load.File(context.Background(), out, load.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if name == "out.pickle" && (snap.Format.Encoding != "pickle" || snap.Format.Protocol != 4 || snap.Format.Gzip) {
				t.Errorf("%s: format %+v", out, snap.Format)
			}
		}
	}
	// Never over an existing file without --force; never over the input.
	out := filepath.Join(dir, "x.pickle")
	if _, err := run(t, "convert", scenarioDir+"summarize_basic.pickle", "-o", out); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, "convert", scenarioDir+"cross_stream_pending.pickle", "-o", out); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Errorf("over an existing file: %v", err)
	}
	if _, err := run(t, "convert", scenarioDir+"cross_stream_pending.pickle", "-o", out, "--force"); err != nil {
		t.Errorf("--force: %v", err)
	}
	if got := totalsOf(t, out); got[0] != totalsOf(t, scenarioDir+"cross_stream_pending.pickle")[0] {
		t.Error("--force did not replace the file")
	}
	if _, err := run(t, "convert", out, "-o", out, "--force"); err == nil || !strings.Contains(err.Error(), "input") {
		t.Errorf("over the input: %v", err)
	}
	if _, err := run(t, "convert", out, "-o", filepath.Join(dir, "x.txt")); err == nil || !strings.Contains(err.Error(), ".pickle, .pkl or .json") {
		t.Errorf("bad name: %v", err)
	}
	if _, err := run(t, "convert", out, "-o", filepath.Join(dir, "y.pickle"), "--protocol", "7"); err == nil {
		t.Error("protocol 7: no error")
	}
}

func TestTrimCommand(t *testing.T) {
	dir := t.TempDir()
	in := scenarioDir + "growing_container_step50.pickle"
	out := filepath.Join(dir, "last.pickle")
	text, err := run(t, "trim", in, "-o", out, "--last-events", "500")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, "kept events 2441:2941 of 2941; final segments kept") {
		t.Errorf("output: %s", text)
	}
	if got, want := totalsOf(t, out), totalsOf(t, in); got[0] != want[0] {
		t.Errorf("trimmed totals %+v, want %+v", got[0], want[0])
	}
	snap, err := load.File(context.Background(), out, load.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.DeviceTraces[0]) != 500 {
		t.Errorf("%d events kept", len(snap.DeviceTraces[0]))
	}
	// A window ending early: the state at its end, a trace that replays onto it.
	win := filepath.Join(dir, "win.pickle")
	js, err := run(t, "trim", in, "-o", win, "--window", "1000:2000", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var rep analysis.TrimReport
	if err := json.Unmarshal([]byte(js), &rep); err != nil || len(rep.Devices) != 1 || rep.Devices[0].StateAt != 1999 {
		t.Fatalf("report %s (%v)", js, err)
	}
	r, err := run(t, "replay", win, "--json")
	if err != nil || !strings.Contains(r, `"consistent": true`) || !strings.Contains(r, `"events": 1000`) {
		t.Errorf("replay of the window: %v", err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"trim", in, "-o", filepath.Join(dir, "a.pickle")}, "say what to keep"},
		{[]string{"trim", in, "-o", out, "--last-events", "10"}, "--force"},
		{[]string{"trim", in, "-o", filepath.Join(dir, "b.pickle"), "--last-events", "-1"}, "negative"},
		{[]string{"trim", in, "-o", filepath.Join(dir, "c.pickle"), "--window", "10:99999"}, "outside device 0's trace"},
	} {
		if _, err := run(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args[3:], err, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "c.pickle")); err == nil {
		t.Error("a failed trim wrote its output")
	}
}

// BenchmarkPlotVsSummarize times the memsnap binary's plot and summarize on the snapshot in
// MEMSNAP_BENCH_FILE (bench/gensnap writes a ~300 MB one), alternating runs; the issue asks
// for plot within 3x summarize.
func BenchmarkPlotVsSummarize(b *testing.B) {
	file := os.Getenv("MEMSNAP_BENCH_FILE")
	if file == "" {
		b.Skip("set MEMSNAP_BENCH_FILE to a large snapshot (go run ./bench/gensnap -o /tmp/bench.pickle)")
	}
	bin := filepath.Join(b.TempDir(), "memsnap")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		b.Fatalf("build: %v\n%s", err, out)
	}
	png := filepath.Join(b.TempDir(), "t.png")
	var plot, sum time.Duration
	for range b.N {
		t0 := time.Now()
		if out, err := exec.Command(bin, "summarize", file, "--json").CombinedOutput(); err != nil {
			b.Fatalf("summarize: %v\n%s", err, out[:min(len(out), 500)])
		}
		t1 := time.Now()
		if out, err := exec.Command(bin, "plot", file, "-o", png).CombinedOutput(); err != nil {
			b.Fatalf("plot: %v\n%s", err, out)
		}
		sum += t1.Sub(t0)
		plot += time.Since(t1)
	}
	b.ReportMetric(sum.Seconds()/float64(b.N), "summarize-s")
	b.ReportMetric(plot.Seconds()/float64(b.N), "plot-s")
	b.ReportMetric(plot.Seconds()/sum.Seconds(), "plot/summarize")
}
