package tools

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"regexp"
	"strconv"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/memsnap/memsnap/analysis"
	"github.com/memsnap/memsnap/render"
)

// TimelineInput is the timeline tool's input.
type TimelineInput struct {
	Path     string   `json:"path" jsonschema:"description=Snapshot file; absolute or relative to the server's first root. kind timeline needs a trace (recorded with _record_memory_history); kind segments works on any snapshot"`
	Device   *int     `json:"device,omitempty" jsonschema:"description=CUDA device to draw (default: the one with an OOM\\, else the highest allocated peak; without a trace the most allocated); the answer says why and what the other devices hold,minimum=0"`
	Kind     string   `json:"kind,omitempty" jsonschema:"description=timeline: allocated memory over the trace stacked by site with reserved memory and markers for the peak\\, OOMs\\, steps and empty_cache() bursts; segments: every segment as a bar with its blocks coloured by state and role,enum=timeline,enum=segments,default=timeline"`
	Window   string   `json:"window,omitempty" jsonschema:"description=timeline only: trace events A:B to draw (A to B-1; A: or :B leave one end open)\\, e.g. around an OOM or the peak from replay"`
	At       *int     `json:"at,omitempty" jsonschema:"description=segments only: rebuild the segments by replay after this trace event (default: the file's final state),minimum=0"`
	Top      int      `json:"top,omitempty" jsonschema:"description=timeline only: sites drawn as a band of their own (the largest at the peak); the others share one band,minimum=1,maximum=40,default=8"`
	UserRoot []string `json:"user_root,omitempty" jsonschema:"description=Directories of the user's own code: the innermost frame under one of them is the site (like the CLI's --user-root)"`
	Skip     []string `json:"skip,omitempty" jsonschema:"description=Regular expressions on file:function: matching frames are never the site (like --skip)"`
	Keep     []string `json:"keep,omitempty" jsonschema:"description=Regular expressions on file:function: matching frames count as the user's code even inside site-packages or torch (like --keep)"`
}

// maxImageBytes bounds the PNG the tool returns.
const maxImageBytes = 200 << 10

// Bounds of the numbers the tool answers beside the picture: the envelope merged into at most
// this many columns, this many step starts listed (evenly spaced, with a summary), and this many
// phase runs and segment-release bursts.
const (
	maxAnswerColumns = 40
	maxAnswerSteps   = 20
	maxAnswerPhases  = 16
)

// imageSizes are tried in turn until the PNG fits maxImageBytes.
var imageSizes = [][2]int{{1200, 600}, {1000, 500}, {800, 400}, {640, 360}}

// pictureOut is the tool's answer: the numbers drawn (structuredContent) and the PNG (an image
// content item, not part of the structured answer).
type pictureOut struct {
	analysis.PictureResult
	png []byte
}

// timelineKey is what a picture depends on besides the file.
type timelineKey struct {
	In  TimelineInput           `json:"in"`
	Opt analysis.PictureOptions `json:"opt"`
}

func timelineTool(e *env) (server.ServerTool, error) {
	st, err := declare(e, "timeline", "Draw memory over time or the segment map",
		"A picture of the snapshot as a PNG image, plus the numbers it shows in structuredContent. kind timeline (default): allocated memory over the trace, stacked in bands by site (the top sites by their highest level in the window, each a shade of its role's colour; the rest as one gray band), reserved memory as a black line, markers for the peak, each OOM (red line), step starts (dotted) and segment-release bursts (triangles); each pixel column keeps its events' minimum and maximum (pale between); a strip shows the phases (setup, forward, backward, optimizer, OOM unwinding). Default device: the one with an OOM, else the highest allocated peak (device_note: the others). Numbers: peak_allocated_bytes and peak_event, bands with bytes_at_peak and role, ooms, steps (start events summarised), phases, segment_bursts, envelope (at most 40 columns of min/max allocated bytes). kind segments: every segment of the final state (or at=EVENT, rebuilt by replay) as a bar, blocks coloured by role when allocated, dark red when freed but used by another stream, light gray when cached free; numbers: reserved/allocated/pending/inactive bytes, largest free block, bytes by role. Use it to see the shape of memory before reading replay or oom-report. kind timeline needs a trace.",
		func(ctx context.Context, in TimelineInput) (*pictureOut, error) {
			for _, p := range []struct {
				field string
				list  []string
			}{{"skip", in.Skip}, {"keep", in.Keep}} {
				for _, re := range p.list {
					if _, err := regexp.Compile(re); err != nil {
						return nil, userErrorf("%s pattern %q is not a regular expression (Go RE2 syntax): %v", p.field, clip(re, maxEchoedValue), clip(err.Error(), maxEchoedPath))
					}
				}
			}
			opt := analysis.PictureOptions{Kind: in.Kind, Device: in.Device, At: -1, Top: in.Top,
				Attribution: analysis.AttributionOptions{UserRoots: in.UserRoot, Skip: in.Skip, Keep: in.Keep}}
			if opt.Kind == "" {
				opt.Kind = analysis.PictureTimeline
			}
			if opt.Top <= 0 {
				opt.Top = analysis.DefaultTimelineTop
			}
			// One column per pixel of the largest picture tried.
			opt.Columns = render.TimelineColumns(render.Options{Width: imageSizes[0][0], Height: imageSizes[0][1]})
			if in.Window != "" {
				if opt.Kind != analysis.PictureTimeline {
					return nil, userErrorf("window applies to kind timeline; for kind segments give at (a trace event)")
				}
				start, end, err := parseEventWindow(in.Window)
				if err != nil {
					return nil, err
				}
				opt.Start, opt.End = start, end
			}
			if in.At != nil {
				if opt.Kind != analysis.PictureSegments {
					return nil, userErrorf("at applies to kind segments; for a timeline give window A:B")
				}
				opt.At = *in.At
			}
			snap, version, err := e.snapshotAt(ctx, in.Path, "path")
			if err != nil {
				return nil, err
			}
			return memoized(e, "timeline", timelineKey{In: in, Opt: opt}, []string{version}, func() (*pictureOut, error) {
				pic, err := analysis.Picture(ctx, snap, opt)
				var nt *analysis.NoTraceError
				if errors.As(err, &nt) {
					return nil, userErrorf("%v; call timeline with kind segments to draw its segments", err)
				}
				if err != nil {
					if ctx.Err() == nil {
						return nil, userErrorf("%v", err)
					}
					return nil, err
				}
				out := &pictureOut{PictureResult: *pic}
				for _, sz := range imageSizes {
					var buf bytes.Buffer
					if err := render.Picture(&buf, pic, render.Options{Format: render.PNG, Width: sz[0], Height: sz[1]}); err != nil {
						return nil, err
					}
					out.png = buf.Bytes()
					if buf.Len() <= maxImageBytes {
						break
					}
				}
				if pic.Timeline != nil {
					out.Timeline = pic.Timeline.Bounded(maxAnswerColumns, maxAnswerSteps, maxAnswerPhases)
				}
				return out, nil
			})
		})
	if err != nil {
		return st, err
	}
	inner := st.Handler
	st.Handler = func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		res, err := inner(ctx, req)
		if err != nil || res == nil || res.IsError {
			return res, err
		}
		if out, ok := res.StructuredContent.(*pictureOut); ok && len(out.png) > 0 {
			res.Content = append(res.Content, mcp.NewImageContent(base64.StdEncoding.EncodeToString(out.png), "image/png"))
		}
		return res, nil
	}
	return st, nil
}

// parseEventWindow reads A:B, A: or :B.
func parseEventWindow(s string) (int, int, error) {
	a, b, ok := strings.Cut(s, ":")
	bad := func() (int, int, error) {
		return 0, 0, userErrorf("window %q: write A:B (trace events A to B-1, B above A), A: or :B", clip(s, maxEchoedValue))
	}
	if !ok {
		return bad()
	}
	var start, end int
	var err error
	if a != "" {
		if start, err = strconv.Atoi(a); err != nil || start < 0 {
			return bad()
		}
	}
	if b != "" {
		if end, err = strconv.Atoi(b); err != nil || end <= start {
			return bad()
		}
	}
	return start, end, nil
}
