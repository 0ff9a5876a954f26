package render

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/memsnap/memsnap/analysis"
)

// Timeline draws a timeline: allocated memory stacked in bands by site (coloured by role), the
// reserved line, and markers for the peak, OOMs, step starts and segment-release bursts, with
// the legend naming each band's site on the right. r must carry its Series.
func Timeline(w io.Writer, r *analysis.TimelineResult, opt Options) error {
	if r == nil || r.Series == nil || len(r.Series.Columns) == 0 {
		return fmt.Errorf("render: a timeline needs its columns")
	}
	cw, dc, err := newCanvas(opt)
	if err != nil {
		return err
	}
	W, _ := opt.size()
	legendW := math.Min(math.Max(0.27*float64(W), 300), 460)
	title := opt.Title
	if title == "" {
		title = fmt.Sprintf("%s — device %d", filepath.Base(r.Path), r.Device)
	}
	subtitle := fmt.Sprintf("allocated peak %s after event %s", analysis.FormatBytes(r.PeakAllocatedBytes), groupDigits(r.PeakEvent))
	if r.Reserved {
		subtitle += fmt.Sprintf(" · reserved peak %s", analysis.FormatBytes(r.PeakReservedBytes))
	} else {
		subtitle += fmt.Sprintf(" · reserved %s (final; no segment events)", analysis.FormatBytes(r.PeakReservedBytes))
	}
	if len(r.OOMs) > 0 {
		subtitle += fmt.Sprintf(" · %d OOM", len(r.OOMs))
	}
	if r.Start > 0 || r.End < r.Events {
		subtitle += fmt.Sprintf(" · events %s–%s of %s", groupDigits(r.Start), groupDigits(r.End-1), groupDigits(r.Events))
	}
	drawTitle(&dc, title, subtitle)
	bottom := px(4)
	if opt.Note != "" {
		bottom = px(24)
		ts := textStyle(12, false, ink)
		dc.FillText(ts, vg.Point{X: dc.Min.X + px(14), Y: dc.Min.Y + px(12)}, clipText(opt.Note, int((float64(W)-28)/6.3)))
	}
	plotArea := draw.Crop(dc, px(6), -px(legendW), bottom, -px(62))
	colors := bandColors(r.Bands)
	if err := drawTimelinePlot(plotArea, r, colors); err != nil {
		return err
	}
	legend := draw.Crop(dc, dc.Max.X-dc.Min.X-px(legendW)+px(14), -px(10), px(10), -px(70))
	drawTimelineLegend(&legend, r, colors)
	return finish(w, cw)
}

// drawTitle writes the title and subtitle at the top left.
func drawTitle(c *draw.Canvas, title, subtitle string) {
	ts := textStyle(17, true, ink)
	c.FillText(ts, vg.Point{X: c.Min.X + px(14), Y: c.Max.Y - px(20)}, title)
	ss := textStyle(13, false, gray)
	c.FillText(ss, vg.Point{X: c.Min.X + px(14), Y: c.Max.Y - px(44)}, subtitle)
}

// groupDigits writes an integer with thousands separators.
func groupDigits(n int) string {
	s := fmt.Sprint(n)
	neg := n < 0
	if neg {
		s = s[1:]
	}
	out := ""
	for len(s) > 3 {
		out = "," + s[len(s)-3:] + out
		s = s[:len(s)-3]
	}
	if neg {
		s = "-" + s
	}
	return s + out
}

// xAxis maps events to the x axis of a series: event index, or seconds since the window's
// first event.
type xAxis struct {
	s     *analysis.TimelineSeries
	edges []float64 // column c spans edges[c]..edges[c+1]
}

func newXAxis(s *analysis.TimelineSeries) xAxis {
	a := xAxis{s: s, edges: make([]float64, len(s.Columns)+1)}
	n := len(s.Columns)
	if s.X == analysis.TimelineXTime {
		span := float64(s.T1-s.T0+1) / 1e6
		for c := 0; c <= n; c++ {
			a.edges[c] = span * float64(c) / float64(n)
		}
		return a
	}
	for c, col := range s.Columns {
		a.edges[c] = float64(col.First)
	}
	a.edges[n] = float64(s.End)
	return a
}

// at is the x of the state after event i (the middle of its step on the event axis).
func (a xAxis) at(i int) float64 {
	if a.s.X == analysis.TimelineXTime {
		return float64(a.s.EventTime(i)-a.s.T0) / 1e6
	}
	return float64(i) + 0.5
}

// start is the x where event i begins.
func (a xAxis) start(i int) float64 {
	if a.s.X == analysis.TimelineXTime {
		return float64(a.s.EventTime(i)-a.s.T0) / 1e6
	}
	return float64(i)
}

func (a xAxis) label() string {
	if a.s.X == analysis.TimelineXTime {
		return "time since the window's first event (s)"
	}
	return "trace event"
}

// timelinePlot is the gonum plotter of the bands, the reserved line and the markers.
type timelinePlot struct {
	r      *analysis.TimelineResult
	x      xAxis
	colors []color.RGBA
	scale  float64 // bytes per axis unit
	ymax   float64
}

func drawTimelinePlot(c draw.Canvas, r *analysis.TimelineResult, colors []color.RGBA) error {
	s := r.Series
	ax := newXAxis(s)
	top := max(r.PeakAllocatedBytes, r.PeakReservedBytes, 1)
	uname, scale := unit(top)
	p := plot.New()
	p.BackgroundColor = color.White
	p.X.Min, p.X.Max = ax.edges[0], ax.edges[len(ax.edges)-1]
	p.Y.Min, p.Y.Max = 0, float64(top)/scale*1.12
	p.X.Padding, p.Y.Padding = 0, 0
	p.X.Label.Text = ax.label()
	p.Y.Label.Text = "memory (" + uname + ")"
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle = textStyle(13, false, ink)
		a.Tick.Label = textStyle(12, false, ink)
		a.Tick.Label.XAlign, a.Tick.Label.YAlign = draw.XCenter, draw.YTop
		a.LineStyle.Color, a.Tick.LineStyle.Color = gray, gray
		a.LineStyle.Width, a.Tick.LineStyle.Width = px(1), px(1)
	}
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.XAlign, a.Label.TextStyle.YAlign = draw.XCenter, draw.YBottom
	}
	p.Y.Tick.Label.XAlign, p.Y.Tick.Label.YAlign = draw.XRight, draw.YCenter
	p.X.Tick.Marker = plot.TickerFunc(func(lo, hi float64) []plot.Tick {
		if s.X == analysis.TimelineXTime {
			return ticks(lo, hi, 8, numLabel)
		}
		return ticks(lo, hi, 8, CountTickLabel(niceStep(hi-lo, 8), math.Max(math.Abs(lo), math.Abs(hi))))
	})
	p.Y.Tick.Marker = plot.TickerFunc(func(lo, hi float64) []plot.Tick { return ticks(lo, hi, 6, numLabel) })
	p.Add(&timelinePlot{r: r, x: ax, colors: colors, scale: scale, ymax: p.Y.Max})
	p.Draw(c)
	return nil
}

func (t *timelinePlot) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	s := t.r.Series
	n := len(s.Columns)
	// Grid: horizontal lines at the y ticks.
	grid := draw.LineStyle{Color: gridColor, Width: px(1)}
	for _, tk := range p.Y.Tick.Marker.Ticks(p.Y.Min, p.Y.Max) {
		if tk.Label != "" && tk.Value > 0 {
			y := trY(tk.Value)
			c.StrokeLine2(grid, c.Min.X, y, c.Max.X, y)
		}
	}
	// Phases: a strip along the bottom, and a light wash behind the bands where runs are
	// wide enough to tell apart.
	t.drawPhases(c, trX, true)
	// Step starts: every step as a dotted line when they are far apart, else a step-count axis.
	t.drawSteps(c, trX)
	// Bands, bottom to top: step outlines per column at each column's maximum.
	nb := len(t.r.Bands)
	lower := make([]float64, n)
	upper := make([]float64, n)
	for b := range nb {
		for ci, col := range s.Columns {
			lower[ci] = upper[ci]
			if b < len(col.Bands) {
				upper[ci] = lower[ci] + float64(col.Bands[b])/t.scale
			}
		}
		pts := make([]vg.Point, 0, 4*n)
		for ci := range n {
			x0, x1 := trX(t.x.edges[ci]), trX(t.x.edges[ci+1])
			pts = append(pts, vg.Point{X: x0, Y: trY(upper[ci])}, vg.Point{X: x1, Y: trY(upper[ci])})
		}
		for ci := n - 1; ci >= 0; ci-- {
			x0, x1 := trX(t.x.edges[ci]), trX(t.x.edges[ci+1])
			pts = append(pts, vg.Point{X: x1, Y: trY(lower[ci])}, vg.Point{X: x0, Y: trY(lower[ci])})
		}
		c.FillPolygon(t.colors[b], c.ClipPolygonXY(pts))
	}
	// The envelope: between each column's minimum and maximum the bands are washed pale (memory
	// was that high only for part of the column), with a line at the minimum, so a sawtooth and
	// a run that grows step by step show at any zoom.
	wash := make([]vg.Point, 0, 4*n)
	minLine := make([]vg.Point, 0, 2*n)
	for ci, col := range s.Columns {
		x0, x1 := trX(t.x.edges[ci]), trX(t.x.edges[ci+1])
		y := trY(float64(col.MaxAllocated) / t.scale)
		wash = append(wash, vg.Point{X: x0, Y: y}, vg.Point{X: x1, Y: y})
		ym := trY(float64(col.MinAllocated) / t.scale)
		minLine = append(minLine, vg.Point{X: x0, Y: ym}, vg.Point{X: x1, Y: ym})
	}
	for ci := n - 1; ci >= 0; ci-- {
		wash = append(wash, minLine[2*ci+1], minLine[2*ci])
	}
	c.FillPolygon(washColor, c.ClipPolygonXY(wash))
	c.StrokeLines(draw.LineStyle{Color: minColor, Width: px(1)}, c.ClipLinesXY(minLine)...)
	// The peak's column, at least three pixels wide: a one-event peak in a column thinner than
	// a pixel would vanish (or hide under the drop line) and leave its dot floating.
	if pc := peakColumn(s, t.r.PeakEvent); pc >= 0 {
		col := s.Columns[pc]
		x0, x1 := trX(t.x.edges[pc]), trX(t.x.edges[pc+1])
		if w := x1 - x0; w < px(3) {
			// Three pixels about the peak's drop line, so the column shows on both sides of it.
			mid := trX(t.x.at(t.r.PeakEvent))
			x0, x1 = mid-px(1.5), mid+px(1.5)
		}
		var acc float64
		for b, v := range col.Bands {
			lo := acc
			acc += float64(v) / t.scale
			if v > 0 && b < len(t.colors) {
				rect(&c, t.colors[b], x0, trY(lo), x1, trY(acc))
			}
		}
	}
	t.drawPhases(c, trX, false)
	// Reserved: the column maximum as a step line.
	res := make([]vg.Point, 0, 2*n)
	for ci, col := range s.Columns {
		x0, x1 := trX(t.x.edges[ci]), trX(t.x.edges[ci+1])
		y := trY(float64(col.MaxReserved) / t.scale)
		res = append(res, vg.Point{X: x0, Y: y}, vg.Point{X: x1, Y: y})
	}
	c.StrokeLines(draw.LineStyle{Color: resColor, Width: px(1.6)}, c.ClipLinesXY(res)...)
	// OOMs: red lines across the plot.
	oom := draw.LineStyle{Color: oomColor, Width: px(1.6)}
	for k, o := range t.r.OOMs {
		x := trX(t.x.at(o.Event))
		c.StrokeLine2(oom, x, c.Min.Y, x, c.Max.Y)
		if k < 3 {
			ts := textStyle(12, true, oomColor)
			ts.XAlign = draw.XRight
			c.FillText(ts, vg.Point{X: x - px(4), Y: c.Max.Y - px(10)}, "OOM")
		}
	}
	// Segment-release bursts: triangles along the top edge.
	for _, b := range t.r.SegmentBursts {
		clr := burstColors[b.Kind]
		x := trX(t.x.at(b.FirstEvent))
		y := c.Max.Y - px(3)
		c.FillPolygon(clr, []vg.Point{{X: x - px(5), Y: y}, {X: x + px(5), Y: y}, {X: x, Y: y - px(8)}})
	}
	// The peak: a dashed drop line, a dot and its value.
	pk := t.r.PeakAllocatedBytes
	x := trX(t.x.at(t.r.PeakEvent))
	y := trY(float64(pk) / t.scale)
	c.StrokeLine2(draw.LineStyle{Color: peakColor, Width: px(1.2), Dashes: []vg.Length{px(4), px(3)}}, x, c.Min.Y, x, y)
	c.DrawGlyph(draw.GlyphStyle{Color: peakColor, Radius: px(4), Shape: draw.CircleGlyph{}}, vg.Point{X: x, Y: y})
	ts := textStyle(13, true, peakColor)
	ts.YAlign = draw.YBottom
	label := "peak " + analysis.FormatBytes(pk)
	lx := x + px(8)
	if lx+ts.Width(label) > c.Max.X {
		ts.XAlign = draw.XRight
		lx = x - px(8)
	}
	c.FillText(ts, vg.Point{X: lx, Y: y + px(4)}, label)
}

// drawTimelineLegend names each band (top band first, as stacked) and the markers.
func drawTimelineLegend(c *draw.Canvas, r *analysis.TimelineResult, colors []color.RGBA) {
	x := c.Min.X
	y := c.Max.Y - px(6)
	head := textStyle(13, true, ink)
	c.FillText(head, vg.Point{X: x, Y: y}, "allocated by site (bytes at the peak)")
	y -= px(22)
	avail := float64((y-c.Min.Y)/px(1)) - 150
	entry := 38.0
	if n := float64(len(r.Bands)); n*entry > avail && n > 0 {
		entry = math.Max(avail/n, 24)
	}
	name := textStyle(12, false, ink)
	sub := textStyle(11, false, gray)
	for i := len(r.Bands) - 1; i >= 0; i-- {
		b := r.Bands[i]
		rect(c, colors[i], x, y-px(13), x+px(14), y+px(1))
		outline(c, draw.LineStyle{Color: color.RGBA{0x99, 0x99, 0x99, 0xff}, Width: px(0.5)}, x, y-px(13), x+px(14), y+px(1))
		label := siteName(b.SiteIdentity)
		if b.Other {
			label = fmt.Sprintf("%d other sites", b.Sites)
			if b.Sites == 1 {
				label = "1 other site"
			}
		}
		c.FillText(name, vg.Point{X: x + px(22), Y: y - px(5)}, clipText(label, 46))
		if entry >= 30 {
			detail := fmt.Sprintf("%s · %s (%.1f%%)", b.Category, analysis.FormatBytes(b.BytesAtPeak), b.Percent)
			if b.Other {
				detail = fmt.Sprintf("%s (%.1f%%)", analysis.FormatBytes(b.BytesAtPeak), b.Percent)
			}
			if b.MaxBytes > b.BytesAtPeak {
				detail += " · up to " + analysis.FormatBytes(b.MaxBytes)
			}
			c.FillText(sub, vg.Point{X: x + px(22), Y: y - px(20)}, detail)
		}
		y -= px(entry)
	}
	y -= px(6)
	c.StrokeLine2(draw.LineStyle{Color: lightGray, Width: px(1)}, x, y+px(8), c.Max.X, y+px(8))
	markers := []struct {
		draw  func(y vg.Length)
		label string
	}{{func(y vg.Length) {
		c.StrokeLine2(draw.LineStyle{Color: resColor, Width: px(1.6)}, x, y, x+px(14), y)
	}, "reserved (cudaMalloc'd segments)"}}
	markers = append(markers, struct {
		draw  func(y vg.Length)
		label string
	}{func(y vg.Length) {
		c.DrawGlyph(draw.GlyphStyle{Color: peakColor, Radius: px(4), Shape: draw.CircleGlyph{}}, vg.Point{X: x + px(7), Y: y})
	}, "allocated peak"}, struct {
		draw  func(y vg.Length)
		label string
	}{func(y vg.Length) {
		rect(c, roleColor(analysis.CategoryActivation), x, y-px(7), x+px(14), y+px(7))
		rect(c, washColor, x, y-px(1), x+px(14), y+px(7))
		c.StrokeLine2(draw.LineStyle{Color: minColor, Width: px(1)}, x, y-px(1), x+px(14), y-px(1))
	}, "pale: above the column's minimum"})
	seen := map[string]bool{}
	for _, p := range r.Phases {
		seen[p.Name] = true
	}
	var names []string
	for _, n := range phaseOrder {
		if seen[n] {
			names = append(names, strings.ReplaceAll(n, "_", " "))
		}
	}
	if len(names) > 0 {
		markers = append(markers, struct {
			draw  func(y vg.Length)
			label string
		}{func(y vg.Length) {
			w := px(14) / vg.Length(len(names))
			k := 0
			for _, n := range phaseOrder {
				if seen[n] {
					rect(c, phaseColors[n], x+w*vg.Length(k), y-px(4), x+w*vg.Length(k+1), y+px(3))
					k++
				}
			}
		}, phaseLegend(r.PhasesAsDrawn) + strings.Join(names, ", ")})
	}
	if len(r.OOMs) > 0 {
		markers = append(markers, struct {
			draw  func(y vg.Length)
			label string
		}{func(y vg.Length) {
			c.StrokeLine2(draw.LineStyle{Color: oomColor, Width: px(1.6)}, x+px(7), y-px(7), x+px(7), y+px(7))
		}, fmt.Sprintf("OOM (%d)", len(r.OOMs))})
	}
	if r.Steps.Count > 0 {
		markers = append(markers, struct {
			draw  func(y vg.Length)
			label string
		}{func(y vg.Length) {
			c.StrokeLine2(draw.LineStyle{Color: color.RGBA{0xb0, 0xb0, 0xb0, 0xff}, Width: px(0.8), Dashes: []vg.Length{px(2), px(3)}}, x+px(7), y-px(7), x+px(7), y+px(7))
		}, fmt.Sprintf("step start (%d, from %s)", r.Steps.Count, r.Steps.Source)})
	}
	kinds := map[string]int{}
	for _, b := range r.SegmentBursts {
		kinds[b.Kind]++
	}
	for _, k := range []struct{ kind, label string }{
		{analysis.BurstEmptyCache, "empty_cache() call"},
		{analysis.BurstMallocRetry, "cache flushed after a failed cudaMalloc"},
		{analysis.BurstRelease, "segments released"},
	} {
		if kinds[k.kind] == 0 {
			continue
		}
		clr := burstColors[k.kind]
		markers = append(markers, struct {
			draw  func(y vg.Length)
			label string
		}{func(y vg.Length) {
			c.FillPolygon(clr, []vg.Point{{X: x + px(2), Y: y + px(5)}, {X: x + px(12), Y: y + px(5)}, {X: x + px(7), Y: y - px(4)}})
		}, fmt.Sprintf("%s (%d)", k.label, kinds[k.kind])})
	}
	for _, m := range markers {
		m.draw(y)
		c.FillText(name, vg.Point{X: x + px(22), Y: y}, m.label)
		y -= px(20)
	}
	foot := textStyle(10, false, gray)
	c.FillText(foot, vg.Point{X: x, Y: c.Min.Y + px(6)}, fmt.Sprintf("%s columns over %s events; each keeps its events' min and max", groupDigits(r.Columns), groupDigits(r.End-r.Start)))
}

// peakColumn is the column holding event i (-1: none).
func peakColumn(s *analysis.TimelineSeries, i int) int {
	for ci, col := range s.Columns {
		if col.First <= i && i <= col.Last {
			return ci
		}
	}
	return -1
}

// Phase colours: a strip along the bottom of the plot.
var phaseColors = map[string]color.RGBA{
	analysis.PhaseSetup:        {0xb8, 0xc4, 0xd6, 0xff},
	"forward":                  {0x8c, 0xc0, 0x84, 0xff},
	"backward":                 {0xf0, 0xa8, 0x5c, 0xff},
	"optimizer":                {0xa7, 0x8b, 0xc9, 0xff},
	analysis.PhaseOOMUnwinding: {0xe5, 0x73, 0x73, 0xff},
}

// phaseOrder is the order of the phases in the legend.
var phaseOrder = [...]string{analysis.PhaseSetup, "forward", "backward", "optimizer", analysis.PhaseOOMUnwinding}

const phaseStrip = 7 // pixels

// drawPhases draws the phase runs as a strip along the bottom of the plot, by level of
// detail: a run a pixel wide or more is drawn as it is; in a pixel column holding runs
// narrower than a pixel, the phase with the most events there fills it. Where runs are on
// average at least 12 pixels wide, a light wash of each phase's colour goes behind everything
// (washOnly draws that wash, else the strip).
func (t *timelinePlot) drawPhases(c draw.Canvas, trX func(float64) vg.Length, washOnly bool) {
	ph := t.r.Phases
	if len(ph) == 0 {
		return
	}
	width := float64((c.Max.X - c.Min.X) / px(1))
	wide := width/float64(len(ph)) >= 12 && !t.r.PhasesAsDrawn
	if washOnly && !wide {
		return
	}
	cols := int(math.Ceil(width)) + 1
	var dense [][5]int // events of sub-pixel runs per pixel column and phase
	for _, p := range ph {
		k := slices.Index(phaseOrder[:], p.Name)
		if k < 0 {
			continue
		}
		x0, x1 := trX(t.x.start(p.StartEvent)), trX(t.x.start(p.EndEvent)+1)
		if t.x.s.X == analysis.TimelineXTime {
			x1 = trX(t.x.at(p.EndEvent))
		}
		x0, x1 = max(x0, c.Min.X), min(x1, c.Max.X)
		if x1 < x0 {
			continue
		}
		clr := phaseColors[p.Name]
		switch {
		case washOnly:
			w := clr
			w.A = 0x22
			rect(&c, premultiply(w), x0, c.Min.Y, x1, c.Max.Y)
		case x1-x0 >= px(1):
			rect(&c, clr, x0, c.Min.Y, x1, c.Min.Y+px(phaseStrip))
		default:
			if dense == nil {
				dense = make([][5]int, cols)
			}
			col := min(max(int(float64((x0-c.Min.X)/px(1))), 0), cols-1)
			dense[col][k] += p.EndEvent - p.StartEvent + 1
		}
	}
	for col, n := range dense {
		best, bestN := -1, 0
		for k, v := range n {
			if v > bestN {
				best, bestN = k, v
			}
		}
		if best >= 0 {
			x0 := c.Min.X + px(float64(col))
			rect(&c, phaseColors[phaseOrder[best]], x0, c.Min.Y, x0+px(1), c.Min.Y+px(phaseStrip))
		}
	}
}

// premultiply turns a colour with alpha into the premultiplied form color.RGBA holds.
func premultiply(c color.RGBA) color.RGBA {
	f := float64(c.A) / 255
	return color.RGBA{uint8(float64(c.R) * f), uint8(float64(c.G) * f), uint8(float64(c.B) * f), c.A}
}

// Step marks: at least this many pixels between two step lines, else a step-count axis.
const stepLineGap = 5

var stepLine = color.RGBA{0xb0, 0xb0, 0xb0, 0xff}

// drawSteps draws the step starts by level of detail: a dotted line per step when steps are at
// least stepLineGap pixels apart; else a step-count axis along the top of the plot, a tick and
// its step number every nice number of steps (1, 2, 5 × 10^k) about 70 pixels apart, so every
// part of the run carries its marks.
func (t *timelinePlot) drawSteps(c draw.Canvas, trX func(float64) vg.Length) {
	steps := t.r.Steps.StartEvents
	if len(steps) == 0 {
		return
	}
	width := float64((c.Max.X - c.Min.X) / px(1))
	span := float64(trX(t.x.start(steps[len(steps)-1]))-trX(t.x.start(steps[0]))) / float64(px(1))
	gap := width
	if len(steps) > 1 {
		gap = span / float64(len(steps)-1)
	}
	dotted := draw.LineStyle{Color: stepLine, Width: px(0.8), Dashes: []vg.Length{px(2), px(3)}}
	// The first step in the window is step first (the steps before the window count too).
	first := t.r.Steps.FirstStep
	if gap >= stepLineGap {
		for _, e := range steps {
			if x := trX(t.x.start(e)); c.ContainsX(x) {
				c.StrokeLine2(dotted, x, c.Min.Y, x, c.Max.Y)
			}
		}
		return
	}
	every := int(niceStep(float64(len(steps))*70/math.Max(span, 1), 1))
	every = max(every, 1)
	tick := draw.LineStyle{Color: gray, Width: px(1)}
	ts := textStyle(10, false, gray)
	ts.XAlign, ts.YAlign = draw.XCenter, draw.YTop
	for k, e := range steps {
		if (first+k)%every != 0 {
			continue
		}
		x := trX(t.x.start(e))
		if !c.ContainsX(x) {
			continue
		}
		c.StrokeLine2(dotted, x, c.Min.Y+px(phaseStrip), x, c.Max.Y-px(16))
		c.StrokeLine2(tick, x, c.Max.Y, x, c.Max.Y-px(5))
		c.FillText(ts, vg.Point{X: x, Y: c.Max.Y - px(6)}, fmt.Sprintf("step %d", first+k))
	}
}

var (
	washColor = premultiply(color.RGBA{0xff, 0xff, 0xff, 0x9c})
	minColor  = color.RGBA{0x55, 0x55, 0x55, 0xff}
)

// phaseLegend is the legend's head of the phase strip.
func phaseLegend(asDrawn bool) string {
	if asDrawn {
		return "phases (strip; each pixel the one with most events): "
	}
	return "phases (strip): "
}
