package render

import (
	"cmp"
	"fmt"
	"image/color"
	"io"
	"math"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/memsnap/memsnap/analysis"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// SegmentRow is one placed segment of a segment map's layout.
type SegmentRow struct {
	Segment int   // index in SegmentMapResult.Map
	Row     int   // row, from the top
	Offset  int64 // bytes from the row's start
}

// SegmentLayout packs segments into rows of Capacity bytes: largest first within each pool and
// stream, one after another with Gap bytes between them, as text fills lines. The viewer
// draws the same layout.
type SegmentLayout struct {
	Capacity, Gap int64
	Rows          int
	Placed        []SegmentRow
}

// LayoutSegments packs the segments of r into rows for a map width pixels wide, in at most
// about maxRows rows: the row capacity is the smallest (from the largest segment up, in 5% steps)
// whose packing fits.
func LayoutSegments(r *analysis.SegmentMapResult, width float64, maxRows int) SegmentLayout {
	var total, largest int64
	for _, s := range r.Map {
		total += s.Size
		largest = max(largest, s.Size)
	}
	if maxRows <= 0 {
		maxRows = 48
	}
	order := make([]int, len(r.Map))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		sa, sb := r.Map[a], r.Map[b]
		if c := cmp.Compare(sa.Pool[0], sb.Pool[0]); c != 0 {
			return c
		}
		if c := cmp.Compare(sa.Pool[1], sb.Pool[1]); c != 0 {
			return c
		}
		if c := cmp.Compare(sa.Stream, sb.Stream); c != 0 {
			return c
		}
		if c := cmp.Compare(sb.Size, sa.Size); c != 0 {
			return c
		}
		return cmp.Compare(sa.Address, sb.Address)
	})
	capacity := max(largest, (total+int64(maxRows)-1)/int64(maxRows), 1)
	for range 200 {
		l := pack(r, order, capacity, width)
		if l.Rows <= maxRows {
			return l
		}
		capacity += max(capacity/20, 1)
	}
	return pack(r, order, capacity, width)
}

// pack places the segments in order into rows of capacity bytes.
func pack(r *analysis.SegmentMapResult, order []int, capacity int64, width float64) SegmentLayout {
	l := SegmentLayout{Capacity: capacity, Gap: max(int64(float64(capacity)*3/math.Max(width, 1)), 1)}
	row, at := 0, int64(0)
	for _, i := range order {
		s := r.Map[i]
		if at > 0 && at+s.Size > capacity {
			row++
			at = 0
		}
		l.Placed = append(l.Placed, SegmentRow{Segment: i, Row: row, Offset: at})
		at += s.Size + l.Gap
	}
	if len(r.Map) > 0 {
		l.Rows = row + 1
	}
	return l
}

// blockColor is the fill of a block: its role when allocated, dark red when its free waits for
// another stream, light gray when cached free.
func blockColor(r *analysis.SegmentMapResult, b analysis.MapBlock) color.RGBA {
	switch b.State {
	case snapshot.StateActiveAllocated:
		if b.Site >= 0 && int(b.Site) < len(r.Sites) {
			return roleColor(r.Sites[b.Site].Category)
		}
		return roleColor(analysis.CategoryOther)
	case snapshot.StateActivePendingFree:
		return pendingColor
	}
	return inactiveColor
}

// Segments draws a segment map: every segment a bar (packed into rows), its blocks coloured by
// state and role, with a legend of the roles and byte totals.
func Segments(w io.Writer, r *analysis.SegmentMapResult, opt Options) error {
	if r == nil {
		return fmt.Errorf("render: no segment map")
	}
	cw, dc, err := newCanvas(opt)
	if err != nil {
		return err
	}
	W, _ := opt.size()
	legendW := math.Min(math.Max(0.24*float64(W), 280), 400)
	title := opt.Title
	if title == "" {
		when := "final state"
		if r.At >= 0 {
			when = fmt.Sprintf("after event %s (replayed)", groupDigits(r.At))
		}
		title = fmt.Sprintf("%s — device %d segments, %s", filepath.Base(r.Path), r.Device, when)
	}
	sub := fmt.Sprintf("reserved %s in %d segments · allocated %s", analysis.FormatBytes(r.ReservedBytes), r.Segments, analysis.FormatBytes(r.AllocatedBytes))
	if r.PendingFreeBytes > 0 {
		sub += " · pending free " + analysis.FormatBytes(r.PendingFreeBytes)
	}
	sub += fmt.Sprintf(" · inactive %s · largest free block %s", analysis.FormatBytes(r.InactiveBytes), analysis.FormatBytes(r.LargestFreeBytes))
	drawTitle(&dc, title, sub)
	area := draw.Crop(dc, px(14), -px(legendW), px(30), -px(66))
	drawSegmentMap(&area, r)
	legend := draw.Crop(dc, dc.Max.X-dc.Min.X-px(legendW)+px(14), -px(10), px(10), -px(70))
	drawSegmentLegend(&legend, r)
	return finish(w, cw)
}

func drawSegmentMap(c *draw.Canvas, r *analysis.SegmentMapResult) {
	if len(r.Map) == 0 {
		ts := textStyle(14, false, gray)
		c.FillText(ts, vg.Point{X: c.Min.X, Y: c.Max.Y - px(20)}, "no segments")
		return
	}
	width := float64((c.Max.X - c.Min.X) / px(1))
	height := float64((c.Max.Y - c.Min.Y) / px(1))
	l := LayoutSegments(r, width, int(math.Max(8, math.Min(64, height/9))))
	pitch := math.Min(height/float64(l.Rows), 42)
	barH := px(math.Max(pitch*0.78, 1))
	scale := (c.Max.X - c.Min.X) / vg.Length(l.Capacity)
	edge := draw.LineStyle{Color: color.RGBA{0x55, 0x55, 0x55, 0xff}, Width: px(0.6)}
	for _, p := range l.Placed {
		s := r.Map[p.Segment]
		y1 := c.Max.Y - px(float64(p.Row)*pitch)
		y0 := y1 - barH
		x0 := c.Min.X + vg.Length(p.Offset)*scale
		// Runs of blocks of one colour narrower than two pixels are drawn as one.
		var runStart vg.Length
		var runColor color.RGBA
		inRun := false
		flush := func(end vg.Length) {
			if inRun {
				rect(c, runColor, runStart, y0, end, y1)
				inRun = false
			}
		}
		for _, b := range s.Blocks {
			bx0 := x0 + vg.Length(b.Offset)*scale
			bx1 := bx0 + vg.Length(b.Size)*scale
			clr := blockColor(r, b)
			if bx1-bx0 < px(2) {
				if inRun && clr != runColor {
					flush(bx0)
				}
				if !inRun {
					runStart, runColor, inRun = bx0, clr, true
				}
				continue
			}
			flush(bx0)
			rect(c, clr, bx0, y0, bx1, y1)
			if b.State != snapshot.StateInactive && bx1-bx0 >= px(4) {
				c.StrokeLine2(draw.LineStyle{Color: color.White, Width: px(0.8)}, bx1, y0, bx1, y1)
			}
		}
		flush(x0 + vg.Length(s.Size)*scale)
		outline(c, edge, x0, y0, x0+vg.Length(s.Size)*scale, y1)
	}
	// Where each pool and stream begins: a label on its first segment (rows tall enough).
	if pitch >= 12 {
		ts := textStyle(10, false, ink)
		ts.YAlign = draw.YTop
		var last [3]uint64
		for k, p := range l.Placed {
			seg := r.Map[p.Segment]
			key := [3]uint64{uint64(seg.Pool[0]), uint64(seg.Pool[1]), seg.Stream}
			if k > 0 && key == last {
				continue
			}
			last = key
			pool := "default pool"
			if seg.Pool != (snapshot.PoolID{}) {
				pool = fmt.Sprintf("pool (%d, %d)", seg.Pool[0], seg.Pool[1])
			}
			label := fmt.Sprintf("%s · stream 0x%x", pool, seg.Stream)
			x := c.Min.X + vg.Length(p.Offset)*scale + px(3)
			y := c.Max.Y - px(float64(p.Row)*pitch) - px(1)
			rect(c, color.RGBA{0xff, 0xff, 0xff, 0xff}, x-px(1), y-px(11), x+ts.Width(label)+px(2), y)
			c.FillText(ts, vg.Point{X: x, Y: y}, label)
		}
	}
	foot := textStyle(10, false, gray)
	c.FillText(foot, vg.Point{X: c.Min.X, Y: c.Min.Y - px(14)}, fmt.Sprintf("each row holds %s; segments largest first per pool and stream", analysis.FormatBytes(l.Capacity)))
}

func drawSegmentLegend(c *draw.Canvas, r *analysis.SegmentMapResult) {
	x := c.Min.X
	y := c.Max.Y - px(6)
	head := textStyle(13, true, ink)
	c.FillText(head, vg.Point{X: x, Y: y}, "blocks")
	y -= px(24)
	name := textStyle(12, false, ink)
	sub := textStyle(11, false, gray)
	item := func(clr color.RGBA, label, detail string) {
		rect(c, clr, x, y-px(13), x+px(14), y+px(1))
		outline(c, draw.LineStyle{Color: color.RGBA{0x99, 0x99, 0x99, 0xff}, Width: px(0.5)}, x, y-px(13), x+px(14), y+px(1))
		c.FillText(name, vg.Point{X: x + px(22), Y: y - px(5)}, label)
		c.FillText(sub, vg.Point{X: x + px(22), Y: y - px(20)}, detail)
		y -= px(38)
	}
	for _, rb := range r.Roles {
		item(roleColor(rb.Category), "allocated: "+rb.Category, fmt.Sprintf("%s in %d blocks (%.1f%%)", analysis.FormatBytes(rb.Bytes), rb.Blocks, 100*float64(rb.Bytes)/math.Max(float64(r.AllocatedBytes), 1)))
	}
	if r.PendingFreeBytes > 0 {
		item(pendingColor, "freed, waiting for another stream", analysis.FormatBytes(r.PendingFreeBytes)+" (active_pending_free)")
	}
	item(inactiveColor, "cached free (inactive)", analysis.FormatBytes(r.InactiveBytes)+", largest "+analysis.FormatBytes(r.LargestFreeBytes))
}
