package render

import (
	"bytes"
	"context"
	"encoding/xml"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis"
	"github.com/memsnap/memsnap/analysis/load"
	"github.com/memsnap/memsnap/analysis/sim"
)

func picture(t *testing.T, file string, opt analysis.PictureOptions) *analysis.PictureResult {
	t.Helper()
	snap, err := load.File(context.Background(), "../testdata/scenarios/"+file, load.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := analysis.Picture(context.Background(), snap, opt)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// inked is the share of pixels that are not white.
func inked(t *testing.T, data []byte, w, h int) float64 {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != w || b.Dy() != h {
		t.Fatalf("PNG is %dx%d, want %dx%d", b.Dx(), b.Dy(), w, h)
	}
	n := 0
	for y := range h {
		for x := range w {
			r, g, b, _ := img.At(x, y).RGBA()
			if r < 0xf000 || g < 0xf000 || b < 0xf000 {
				n++
			}
		}
	}
	return float64(n) / float64(w*h)
}

func TestTimelinePNGAndSVG(t *testing.T) {
	p := picture(t, "growing_container_step50.pickle", analysis.PictureOptions{At: -1})
	var buf bytes.Buffer
	if err := Picture(&buf, p, Options{Format: PNG}); err != nil {
		t.Fatal(err)
	}
	if f := inked(t, buf.Bytes(), DefaultWidth, DefaultHeight); f < 0.25 || f > 0.9 {
		t.Errorf("timeline PNG: %.2f of the pixels drawn", f)
	}
	buf.Reset()
	if err := Picture(&buf, p, Options{Format: SVG, Width: 1200, Height: 600}); err != nil {
		t.Fatal(err)
	}
	svg := buf.String()
	for _, w := range []string{"<svg", "train.py:97 in train_step", "user_container", "peak 303 MiB", "trace event", "memory (MiB)"} {
		if !strings.Contains(svg, w) {
			t.Errorf("SVG lacks %q", w)
		}
	}
	dec := xml.NewDecoder(strings.NewReader(svg))
	for {
		if _, err := dec.Token(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
	}
}

func TestSegmentsPNG(t *testing.T) {
	p := picture(t, "fragmentation_oom.pickle", analysis.PictureOptions{Kind: analysis.PictureSegments, At: -1})
	var buf bytes.Buffer
	if err := Picture(&buf, p, Options{Format: PNG, Width: 1200, Height: 600}); err != nil {
		t.Fatal(err)
	}
	if f := inked(t, buf.Bytes(), 1200, 600); f < 0.2 {
		t.Errorf("segments PNG: %.2f of the pixels drawn", f)
	}
}

// TestLayoutSegments: segments never overlap, rows hold at most their capacity, every segment
// is placed once and the rows stay within the bound.
func TestLayoutSegments(t *testing.T) {
	p := picture(t, "fragmentation_oom.pickle", analysis.PictureOptions{Kind: analysis.PictureSegments, At: -1})
	m := p.Segments
	l := LayoutSegments(m, 1000, 12)
	if len(l.Placed) != len(m.Map) || l.Rows < 1 || l.Rows > 12 {
		t.Fatalf("%d placed of %d, %d rows", len(l.Placed), len(m.Map), l.Rows)
	}
	seen := map[int]bool{}
	ends := map[int]int64{}
	for _, pl := range l.Placed {
		if seen[pl.Segment] {
			t.Fatalf("segment %d placed twice", pl.Segment)
		}
		seen[pl.Segment] = true
		if pl.Offset < ends[pl.Row] {
			t.Fatalf("segment %d overlaps in row %d", pl.Segment, pl.Row)
		}
		end := pl.Offset + m.Map[pl.Segment].Size
		if end > l.Capacity {
			t.Fatalf("segment %d ends at %d past the row capacity %d", pl.Segment, end, l.Capacity)
		}
		ends[pl.Row] = end
	}
}

func TestFormatOf(t *testing.T) {
	for in, want := range map[string]string{"a.svg": SVG, "B.PNG": PNG, "x/y.png": PNG} {
		if got, err := FormatOf(in); err != nil || got != want {
			t.Errorf("%s: %s, %v", in, got, err)
		}
	}
	if _, err := FormatOf("a.jpg"); err == nil {
		t.Error("a.jpg: no error")
	}
	if err := Picture(io.Discard, &analysis.PictureResult{}, Options{Format: PNG}); err == nil {
		t.Error("empty picture: no error")
	}
}

// sawtoothPNG draws the timeline of a 3,000-step training loop (memory saws up in each
// forward pass and down in its backward pass) at the default size.
func sawtoothPNG(t *testing.T) (*analysis.PictureResult, image.Image) {
	t.Helper()
	snap := sim.TrainingLoop(3000, false)
	snap.Path = "sawtooth.pickle"
	opt := Options{Format: PNG}
	p, err := analysis.Picture(context.Background(), snap, analysis.PictureOptions{Columns: TimelineColumns(opt)})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := Picture(&buf, p, opt); err != nil {
		t.Fatal(err)
	}
	if dir := os.Getenv("MEMSNAP_PICTURE_DIR"); dir != "" {
		os.WriteFile(filepath.Join(dir, "sawtooth.png"), buf.Bytes(), 0o644)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	return p, img
}

// TestSawtoothPixels: on a 3,000-step sawtooth the pale wash above each column's minimum shows
// across the whole run, and step marks reach its last tenth.
func TestSawtoothPixels(t *testing.T) {
	p, img := sawtoothPNG(t)
	r := p.Timeline
	if r.Columns != TimelineColumns(Options{}) || r.Steps.Count != 3000 {
		t.Fatalf("%d columns, %d steps", r.Columns, r.Steps.Count)
	}
	// The plot's pixel rows and columns: find the y axis (the gray line at the left) and the
	// reserved line's extent from the picture itself.
	b := img.Bounds()
	isWash := func(c color.Color) bool { // a band colour mixed with white: light, not white
		r, g, bl, _ := c.RGBA()
		lo := min(r, g, bl) >> 8
		return lo >= 0x90 && lo < 0xf0 && (r>>8 < 0xfa || g>>8 < 0xfa || bl>>8 < 0xfa)
	}
	isSolid := func(c color.Color) bool {
		r, g, bl, _ := c.RGBA()
		return min(r, g, bl)>>8 < 0x90
	}
	// In each tenth of the plot's width, some column shows solid band below pale wash.
	plotL, plotR := 60, b.Dx()-int(math.Min(math.Max(0.27*float64(b.Dx()), 300), 460))-10
	for tenth := range 10 {
		found := false
		for x := plotL + (plotR-plotL)*tenth/10; x < plotL+(plotR-plotL)*(tenth+1)/10 && !found; x++ {
			wash, solidBelow := -1, false
			for y := 80; y < b.Dy()-60; y++ {
				c := img.At(x, y)
				if wash < 0 && isWash(c) {
					wash = y
				}
				if wash >= 0 && y > wash+3 && isSolid(c) {
					solidBelow = true
					break
				}
			}
			found = wash >= 0 && solidBelow
		}
		if !found {
			t.Errorf("tenth %d of the plot: no pale wash above a solid band (the minimum does not show)", tenth)
		}
	}
	// Step marks: the step-count axis labels steps up to the end of the run.
	var svg bytes.Buffer
	if err := Picture(&svg, p, Options{Format: SVG}); err != nil {
		t.Fatal(err)
	}
	last := -1
	for _, m := range regexp.MustCompile(`>step (\d+)<`).FindAllStringSubmatch(svg.String(), -1) {
		n, _ := strconv.Atoi(m[1])
		last = max(last, n)
	}
	if last < 2700 {
		t.Errorf("the last step labelled is %d of 3000", last)
	}
}

// TestCountTickLabel: neighbouring event ticks never read the same, near a million as near zero.
func TestCountTickLabel(t *testing.T) {
	for _, c := range []struct {
		lo, hi float64
		want   []string
	}{
		{1_000_000, 1_000_900, []string{"1,000,000", "1,000,200", "1,000,400"}},
		{0, 1_672_696, []string{"0", "0.25M", "0.50M"}},
		{999_000, 1_001_000, []string{"999,000", "999,250", "999,500"}},
		{0, 80_000, []string{"0", "10k", "20k"}},
		{40_000, 40_100, []string{"40,000", "40,020", "40,040"}},
		{0, 900, []string{"0", "200", "400"}},
	} {
		step := niceStep(c.hi-c.lo, 8)
		tk := ticks(c.lo, c.hi, 8, CountTickLabel(step, math.Max(math.Abs(c.lo), math.Abs(c.hi))))
		seen := map[string]bool{}
		for _, k := range tk {
			if seen[k.Label] {
				t.Errorf("%v..%v: label %q twice in %v", c.lo, c.hi, k.Label, tk)
			}
			seen[k.Label] = true
		}
		for i, w := range c.want {
			if i >= len(tk) || tk[i].Label != w {
				t.Errorf("%v..%v: ticks %v, want %v first", c.lo, c.hi, tk, c.want)
				break
			}
		}
	}
}

// TestBandColorsDistinct: ten activation sites get ten different shades of the activation hue;
// a site keeps its shade in another picture whose other bands differ.
func TestBandColorsDistinct(t *testing.T) {
	var bands []analysis.TimelineBand
	for i := range 10 {
		bands = append(bands, analysis.TimelineBand{SiteIdentity: analysis.SiteIdentity{Site: "model.py:" + strconv.Itoa(40+i), File: "/p/model.py", Line: int64(40 + i), Function: "forward"},
			Category: analysis.CategoryActivation, MaxBytes: int64(100 - i)})
	}
	bands = append(bands, analysis.TimelineBand{Other: true, Category: analysis.CategoryOther})
	got := BandColors(bands)
	seen := map[string]int{}
	for i, c := range got[:10] {
		if j, ok := seen[c]; ok {
			t.Errorf("bands %d and %d share %s", j, i, c)
		}
		seen[c] = i
	}
	if got[10] != "#cfcfcf" {
		t.Errorf("other band %s", got[10])
	}
	// The largest site alone with a parameter band: the same shade.
	again := BandColors([]analysis.TimelineBand{bands[0], {SiteIdentity: analysis.SiteIdentity{Site: "train.py:112"}, Category: analysis.CategoryParameter, MaxBytes: 5}})
	if again[0] != got[0] {
		t.Errorf("model.py:40 is %s here, %s there", again[0], got[0])
	}
}
