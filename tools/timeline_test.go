package tools

import (
	"bytes"
	"context"
	"encoding/base64"
	"image/png"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/memsnap/memsnap/analysis"
	"github.com/memsnap/memsnap/analysis/load"
)

// imageOf returns the PNG image content of a result.
func imageOf(t *testing.T, res *mcp.CallToolResult) []byte {
	t.Helper()
	for _, c := range res.Content {
		if ic, ok := c.(mcp.ImageContent); ok {
			if ic.MIMEType != "image/png" {
				t.Errorf("image type %s", ic.MIMEType)
			}
			data, err := base64.StdEncoding.DecodeString(ic.Data)
			if err != nil {
				t.Fatal(err)
			}
			return data
		}
	}
	t.Fatalf("no image content in %d items", len(res.Content))
	return nil
}

// TestTimelineTool: the tool answers a PNG of at most 200 KB and, in structuredContent,
// exactly analysis.Picture's numbers; its text is their Text().
func TestTimelineTool(t *testing.T) {
	c := newClient(t, Config{})
	for _, tc := range []struct {
		file string
		args map[string]any
		opt  analysis.PictureOptions
	}{
		{"activation_oom.pickle", nil, analysis.PictureOptions{At: -1, Top: 8}},
		{"growing_container_step50.pickle", map[string]any{"window": "1000:2000", "top": 3}, analysis.PictureOptions{At: -1, Top: 3, Start: 1000, End: 2000}},
		{"fragmentation_oom.pickle", map[string]any{"kind": "segments"}, analysis.PictureOptions{Kind: "segments", At: -1}},
		{"activation_oom.pickle", map[string]any{"kind": "segments", "at": 72}, analysis.PictureOptions{Kind: "segments", At: 72}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			args := map[string]any{"path": fx(t, tc.file)}
			for k, v := range tc.args {
				args[k] = v
			}
			res := call(t, c, "timeline", args)
			var got analysis.PictureResult
			structured(t, res, &got)
			data := imageOf(t, res)
			if len(data) > 200<<10 {
				t.Errorf("PNG is %d bytes", len(data))
			}
			img, err := png.Decode(bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			if b := img.Bounds(); b.Dx() < 800 || b.Dy() < 400 {
				t.Errorf("PNG %dx%d", b.Dx(), b.Dy())
			}
			snap, err := load.File(context.Background(), fx(t, tc.file), load.Options{})
			if err != nil {
				t.Fatal(err)
			}
			want, err := analysis.Picture(context.Background(), snap, tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			if want.Timeline != nil {
				// The tool answers the bounded numbers, and its text is rendered from them.
				want.Timeline = want.Timeline.Bounded(maxAnswerColumns, maxAnswerSteps, maxAnswerPhases)
			}
			if textOf(res) != want.Text() {
				t.Errorf("text:\n%s\nwant:\n%s", textOf(res), want.Text())
			}
			switch {
			case want.Timeline != nil:
				g, w := got.Timeline, want.Timeline
				if g == nil || g.PeakAllocatedBytes != w.PeakAllocatedBytes || g.PeakEvent != w.PeakEvent || len(g.Bands) != len(w.Bands) || len(g.OOMs) != len(w.OOMs) || g.Start != w.Start || g.End != w.End {
					t.Errorf("timeline %+v\nwant %+v", g, w)
				}
			default:
				g, w := got.Segments, want.Segments
				if g == nil || g.ReservedBytes != w.ReservedBytes || g.AllocatedBytes != w.AllocatedBytes || g.At != w.At || g.Segments != w.Segments {
					t.Errorf("segments %+v\nwant %+v", g, w)
				}
			}
		})
	}
}

func TestTimelineToolErrors(t *testing.T) {
	c := newClient(t, Config{})
	for _, tc := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"path": fx(t, "activation_oom.pickle"), "window": "9"}, "window \"9\""},
		{map[string]any{"path": fx(t, "activation_oom.pickle"), "window": "1:999"}, "outside device 0's trace"},
		{map[string]any{"path": fx(t, "activation_oom.pickle"), "kind": "segments", "window": "1:5"}, "window applies to kind timeline"},
		{map[string]any{"path": fx(t, "activation_oom.pickle"), "at": 3}, "at applies to kind segments"},
		{map[string]any{"path": fx(t, "activation_oom.pickle"), "kind": "flame"}, "kind"},
		{map[string]any{"path": fx(t, "activation_oom.pickle"), "device": 4}, "no device 4"},
	} {
		res := call(t, c, "timeline", tc.args)
		if !res.IsError || !strings.Contains(textOf(res), tc.want) {
			t.Errorf("%v: isError %v, %q; want %q", tc.args, res.IsError, textOf(res), tc.want)
		}
	}
	// A state-only file: the timeline says to draw the segments, which work.
	real := filepath.Join(realDir(t), "pt2.2_state-only_windows_ddpm-unet.pickle")
	cr := newClient(t, Config{Roots: []string{realDir(t)}})
	res := call(t, cr, "timeline", map[string]any{"path": real})
	if !res.IsError || !strings.Contains(textOf(res), "kind segments") {
		t.Errorf("state-only timeline: %q", textOf(res))
	}
	res = call(t, cr, "timeline", map[string]any{"path": real, "kind": "segments"})
	if res.IsError {
		t.Errorf("state-only segments: %s", textOf(res))
	}
	imageOf(t, res)
}
