// Package render draws memsnap's pictures — the memory timeline of a trace and the segment map
// of a moment — as SVG or PNG, from the numbers package analysis computes (it computes nothing
// itself beyond layout). Drawing goes through gonum.org/v1/plot's vector canvas: vgsvg writes
// SVG, vgimg rasterizes PNG with the Liberation fonts the library embeds, so a picture looks
// the same on every machine and needs no system font or browser.
package render

import (
	"bytes"
	"cmp"
	"fmt"
	"hash/fnv"
	"image/color"
	"image/png"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	xfont "golang.org/x/image/font"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/memsnap/memsnap/analysis"
)

// Picture formats.
const (
	SVG = "svg"
	PNG = "png"
)

// Default picture size in pixels.
const (
	DefaultWidth  = 1400
	DefaultHeight = 700
	dpi           = 96
)

// Options sizes a picture.
type Options struct {
	Format string // SVG or PNG
	// Width and Height in pixels (0: DefaultWidth x DefaultHeight).
	Width, Height int
	// Title replaces the default title (the file's name and what is drawn).
	Title string
	// Note is a line under the picture (Picture puts there which device is drawn and what the
	// others hold, when the file has several).
	Note string
}

// FormatOf returns the picture format a file name asks for (.svg or .png).
func FormatOf(path string) (string, error) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".svg":
		return SVG, nil
	case ".png":
		return PNG, nil
	}
	return "", fmt.Errorf("%s: the picture's name must end in .svg or .png", path)
}

func (o Options) size() (int, int) {
	w, h := o.Width, o.Height
	if w <= 0 {
		w = DefaultWidth
	}
	if h <= 0 {
		h = DefaultHeight
	}
	return w, h
}

// px converts pixels to the canvas's points.
func px(n float64) vg.Length { return vg.Length(n * 72 / dpi) }

// newCanvas makes the canvas of a picture.
func newCanvas(o Options) (vg.CanvasWriterTo, draw.Canvas, error) {
	w, h := o.size()
	if w < 300 || h < 200 || w > 10000 || h > 10000 {
		return nil, draw.Canvas{}, fmt.Errorf("picture size %dx%d: width must be 300 to 10000 pixels and height 200 to 10000", w, h)
	}
	var c vg.CanvasWriterTo
	switch o.Format {
	case SVG:
		c = vgsvg.NewWith(vgsvg.UseWH(px(float64(w)), px(float64(h))))
	case PNG:
		c = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(px(float64(w)), px(float64(h))), vgimg.UseDPI(dpi), vgimg.UseBackgroundColor(color.White))}
	default:
		return nil, draw.Canvas{}, fmt.Errorf("picture format %q: use svg or png", o.Format)
	}
	dc := draw.New(c)
	if o.Format == SVG {
		dc.FillPolygon(color.White, []vg.Point{{X: dc.Min.X, Y: dc.Min.Y}, {X: dc.Max.X, Y: dc.Min.Y}, {X: dc.Max.X, Y: dc.Max.Y}, {X: dc.Min.X, Y: dc.Max.Y}})
	}
	return c, dc, nil
}

// finish writes the canvas out. A PNG is compressed at zlib's fastest level: on a picture of
// flat bands and lines it makes a file 3-7% larger in two thirds of the time (17 against 23 ms
// at the default size), the last step of every plot.
func finish(w io.Writer, c vg.CanvasWriterTo) error {
	var buf bytes.Buffer
	if pc, ok := c.(vgimg.PngCanvas); ok {
		enc := png.Encoder{CompressionLevel: png.BestSpeed}
		if err := enc.Encode(&buf, pc.Image()); err != nil {
			return fmt.Errorf("render: %w", err)
		}
	} else if _, err := c.WriteTo(&buf); err != nil {
		return fmt.Errorf("render: %w", err)
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// Fonts.
var (
	sans     = font.Font{Typeface: "Liberation", Variant: "Sans"}
	sansBold = font.Font{Typeface: "Liberation", Variant: "Sans", Weight: xfont.WeightBold}
)

func textStyle(size float64, bold bool, clr color.Color) text.Style {
	f := sans
	if bold {
		f = sansBold
	}
	return text.Style{Color: clr, Font: font.From(f, px(size)), Handler: plot.DefaultTextHandler, XAlign: draw.XLeft, YAlign: draw.YCenter}
}

// Colours.
var (
	ink       = color.RGBA{0x22, 0x22, 0x22, 0xff}
	gray      = color.RGBA{0x66, 0x66, 0x66, 0xff}
	lightGray = color.RGBA{0xdd, 0xdd, 0xdd, 0xff}
	gridColor = color.RGBA{0xe8, 0xe8, 0xe8, 0xff}
	oomColor  = color.RGBA{0xc6, 0x28, 0x28, 0xff}
	peakColor = color.RGBA{0x1a, 0x1a, 0x1a, 0xff}
	resColor  = color.RGBA{0x1f, 0x1f, 0x1f, 0xff}
	// inactiveColor: free cached blocks; pendingColor: blocks freed but used by another stream.
	inactiveColor = color.RGBA{0xee, 0xee, 0xee, 0xff}
	pendingColor  = color.RGBA{0x7a, 0x1f, 0x1f, 0xff}
	otherBand     = color.RGBA{0xcf, 0xcf, 0xcf, 0xff}
	burstColors   = map[string]color.RGBA{
		analysis.BurstEmptyCache:  {0xe0, 0x7b, 0x00, 0xff},
		analysis.BurstMallocRetry: {0xc6, 0x28, 0x28, 0xff},
		analysis.BurstRelease:     {0x80, 0x80, 0x80, 0xff},
	}
)

// roleColors: one hue per role (a colour-blind-safe Tableau order); long-lived memory cool,
// what comes and goes warm, leaks red.
var roleColors = map[string]color.RGBA{
	analysis.CategoryParameter:         {0x4e, 0x79, 0xa7, 0xff},
	analysis.CategoryOptimizerState:    {0x8c, 0x6b, 0xb1, 0xff},
	analysis.CategoryGradient:          {0xf2, 0x8e, 0x2b, 0xff},
	analysis.CategoryWorkspace:         {0x9c, 0x75, 0x5f, 0xff},
	analysis.CategoryKVCache:           {0x76, 0xb7, 0xb2, 0xff},
	analysis.CategoryCommunication:     {0x49, 0x98, 0x94, 0xff},
	analysis.CategoryUserContainer:     {0xe1, 0x57, 0x59, 0xff},
	analysis.CategoryAutocastCache:     {0xd4, 0xa6, 0xc8, 0xff},
	analysis.CategoryActivation:        {0x59, 0xa1, 0x4f, 0xff},
	analysis.CategoryBackwardTemporary: {0xff, 0x9d, 0xa7, 0xff},
	analysis.CategoryTemporary:         {0xed, 0xc9, 0x48, 0xff},
	analysis.CategoryOther:             {0xa0, 0xa0, 0xa0, 0xff},
}

// RoleColor is the colour of a role in every picture (and in the viewer), as #rrggbb.
func RoleColor(category string) string {
	c := roleColor(category)
	return fmt.Sprintf("#%02x%02x%02x", c.R, c.G, c.B)
}

// RoleColors is every role's colour, as #rrggbb.
func RoleColors() map[string]string {
	out := map[string]string{}
	for k := range roleColors {
		out[k] = RoleColor(k)
	}
	return out
}

func roleColor(category string) color.RGBA {
	if c, ok := roleColors[category]; ok {
		return c
	}
	return roleColors[analysis.CategoryOther]
}

// shadeMix is how far each shade of a role's hue is mixed towards black (negative) or white
// (positive): the first is the role's own colour, the others differ from it and from each
// other by at least 0.07.
var shadeMix = []float64{0, -0.25, 0.3, -0.4, 0.45, -0.12, 0.15, -0.33, 0.38, 0.56}

// shade is the k-th shade of a role's colour.
func shade(c color.RGBA, k int) color.RGBA {
	f := shadeMix[k%len(shadeMix)]
	to := 255.0
	if f < 0 {
		to, f = 0, -f
	}
	mix := func(v uint8) uint8 { return uint8(math.Round(float64(v)*(1-f) + to*f)) }
	return color.RGBA{mix(c.R), mix(c.G), mix(c.B), 0xff}
}

// siteShade is the shade a site prefers: a hash of its identity, so a site keeps its colour
// across zooms, windows, devices and pictures.
func siteShade(id analysis.SiteIdentity) int {
	h := fnv.New32a()
	h.Write([]byte(id.File + "\x00" + id.Function + "\x00" + strconv.FormatInt(id.Line, 10) + "\x00" + id.Site))
	return int(h.Sum32() % uint32(len(shadeMix)))
}

// BandColors gives each band its colour: a shade of its role's hue chosen by the site (see
// siteShade), the next free shade when two bands of one role would share one; the other band
// gray.
func BandColors(bands []analysis.TimelineBand) []string {
	out := make([]string, len(bands))
	for i, c := range bandColors(bands) {
		out[i] = fmt.Sprintf("#%02x%02x%02x", c.R, c.G, c.B)
	}
	return out
}

func bandColors(bands []analysis.TimelineBand) []color.RGBA {
	used := map[string]map[int]bool{}
	out := make([]color.RGBA, len(bands))
	// Bands claim shades in order of bytes (the largest keeps the shade it prefers), so the
	// picture's main bands look the same in every window.
	order := make([]int, len(bands))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(bands[b].MaxBytes, bands[a].MaxBytes) })
	for _, i := range order {
		b := bands[i]
		if b.Other {
			out[i] = otherBand
			continue
		}
		u := used[b.Category]
		if u == nil {
			u = map[int]bool{}
			used[b.Category] = u
		}
		k := siteShade(b.SiteIdentity)
		for n := 0; n < len(shadeMix) && u[k]; n++ {
			k = (k + 1) % len(shadeMix)
		}
		u[k] = true
		out[i] = shade(roleColor(b.Category), k)
	}
	return out
}

// unit picks the byte unit of an axis whose largest value is max.
func unit(max int64) (string, float64) {
	switch {
	case max >= 1<<30:
		return "GiB", 1 << 30
	case max >= 1<<20:
		return "MiB", 1 << 20
	case max >= 1<<10:
		return "KiB", 1 << 10
	}
	return "B", 1
}

// niceStep is a 1, 2 or 5 times a power of ten step giving about n ticks over span.
func niceStep(span float64, n int) float64 {
	if span <= 0 {
		return 1
	}
	raw := span / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			return m * mag
		}
	}
	return 10 * mag
}

// ticks are the labelled values between lo and hi.
func ticks(lo, hi float64, n int, label func(float64) string) []plot.Tick {
	step := niceStep(hi-lo, n)
	var out []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi+step*1e-9; v += step {
		out = append(out, plot.Tick{Value: v, Label: label(v)})
	}
	return out
}

// numLabel formats a value without trailing zeros.
func numLabel(v float64) string {
	if math.Abs(v) < 1e-9 {
		return "0"
	}
	s := strconv.FormatFloat(v, 'f', 2, 64)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}

// decimalsOf is the number of decimals that write v exactly (at most 7).
func decimalsOf(v float64) int {
	for d := range 7 {
		p := v * math.Pow(10, float64(d))
		if math.Abs(p-math.Round(p)) < 1e-6*math.Max(1, math.Abs(p)) {
			return d
		}
	}
	return 7
}

// CountTickLabel is the label function of event ticks step apart with values up to hi: in
// millions or thousands when the step is written with few decimals there ("1.25M", "120k"),
// else every digit grouped ("1,000,250"), so neighbouring ticks never read the same.
func CountTickLabel(step, hi float64) func(float64) string {
	for _, u := range []struct {
		div      float64
		suffix   string
		from, to float64
		maxDec   int
	}{{1e6, "M", 1e6, math.Inf(1), 2}, {1e3, "k", 1e4, 1e6, 1}} {
		if math.Abs(hi) < u.from || math.Abs(hi) >= u.to {
			continue
		}
		if d := decimalsOf(step / u.div); d <= u.maxDec {
			return func(v float64) string {
				if math.Abs(v) < 1e-9 {
					return "0"
				}
				return strconv.FormatFloat(v/u.div, 'f', d, 64) + u.suffix
			}
		}
	}
	return func(v float64) string { return groupDigits(int(math.Round(v))) }
}

// clipText shortens s to at most n runes, with an ellipsis.
func clipText(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// rect fills a rectangle.
func rect(c *draw.Canvas, clr color.Color, x0, y0, x1, y1 vg.Length) {
	c.FillPolygon(clr, []vg.Point{{X: x0, Y: y0}, {X: x1, Y: y0}, {X: x1, Y: y1}, {X: x0, Y: y1}})
}

// outline strokes a rectangle.
func outline(c *draw.Canvas, sty draw.LineStyle, x0, y0, x1, y1 vg.Length) {
	c.StrokeLines(sty, []vg.Point{{X: x0, Y: y0}, {X: x1, Y: y0}, {X: x1, Y: y1}, {X: x0, Y: y1}, {X: x0, Y: y0}})
}

// siteName is a site as a legend shows it, as the text answers write it:
// "model.py:41 in forward".
func siteName(id analysis.SiteIdentity) string {
	return analysis.SiteText(id.Site, id.Function)
}

// TimelineColumns is the number of pixel columns of a timeline's plot at a picture size: a
// series cut into that many columns draws one column per pixel.
func TimelineColumns(o Options) int {
	w, _ := o.size()
	legendW := math.Min(math.Max(0.27*float64(w), 300), 460)
	return max(int(float64(w)-legendW-52), 50)
}
