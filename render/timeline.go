package render

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"path/filepath"

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
	plotArea := draw.Crop(dc, px(6), -px(legendW), px(4), -px(62))
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
	xlabel := countLabel
	if s.X == analysis.TimelineXTime {
		xlabel = numLabel
	}
	p.X.Tick.Marker = plot.TickerFunc(func(lo, hi float64) []plot.Tick { return ticks(lo, hi, 8, xlabel) })
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
	// Step starts: thin dotted lines under the bands.
	steps := t.r.Steps.StartEvents
	if len(steps) > 0 {
		sty := draw.LineStyle{Color: color.RGBA{0xb0, 0xb0, 0xb0, 0xff}, Width: px(0.8), Dashes: []vg.Length{px(2), px(3)}}
		every := 1
		if len(steps) > 120 {
			every = (len(steps) + 119) / 120
		}
		for k, e := range steps {
			if x := trX(t.x.start(e)); k%every == 0 && c.ContainsX(x) {
				c.StrokeLine2(sty, x, c.Min.Y, x, c.Max.Y)
			}
		}
	}
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
	// The column minimum of allocated memory, where it dips below the maximum.
	minLine := make([]vg.Point, 0, 2*n)
	for ci, col := range s.Columns {
		x0, x1 := trX(t.x.edges[ci]), trX(t.x.edges[ci+1])
		y := trY(float64(col.MinAllocated) / t.scale)
		minLine = append(minLine, vg.Point{X: x0, Y: y}, vg.Point{X: x1, Y: y})
	}
	_ = minLine
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
	c.FillText(head, vg.Point{X: x, Y: y}, "allocated at the peak, by site")
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
		}
		c.FillText(name, vg.Point{X: x + px(22), Y: y - px(5)}, clipText(label, 46))
		if entry >= 30 {
			detail := fmt.Sprintf("%s · %s (%.1f%%)", b.Category, analysis.FormatBytes(b.BytesAtPeak), b.Percent)
			if b.Other {
				detail = fmt.Sprintf("%s (%.1f%%)", analysis.FormatBytes(b.BytesAtPeak), b.Percent)
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
	}, "allocated peak"})
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
	c.FillText(foot, vg.Point{X: x, Y: c.Min.Y + px(6)}, fmt.Sprintf("%s columns over %s events; each keeps its events' maximum", groupDigits(r.Columns), groupDigits(r.End-r.Start)))
}
