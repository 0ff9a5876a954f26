package tools

import (
	"context"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/memsnap/memsnap/analysis/load"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// TestSectionResourcePanicIsAnError: a panic while reading a section (here a stack whose frame
// id has no frame) answers the resource read with an error; the server keeps serving.
func TestSectionResourcePanicIsAnError(t *testing.T) {
	bad := &snapshot.Snapshot{Path: "bad.pickle", Stacks: [][]snapshot.FrameID{{7}}}
	c := newClient(t, Config{Loader: func(context.Context, string, load.Options) (*snapshot.Snapshot, error) {
		return bad, nil
	}})
	f := filepath.Join(scenarios(t), "summarize_basic.pickle")
	rr := mcp.ReadResourceRequest{}
	rr.Params.URI = "memsnap://snapshot/stacks%5B0%5D?path=" + url.QueryEscape(f)
	_, err := c.ReadResource(context.Background(), rr)
	if err == nil || !strings.Contains(err.Error(), "internal error") {
		t.Fatalf("resource read: %v, want an internal-error answer", err)
	}
	if res := call(t, c, "summarize", map[string]any{"path": f}); res.IsError {
		t.Errorf("server after the panic: %s", textOf(res))
	}
}
