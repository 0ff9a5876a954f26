package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/memsnap/memsnap/analysis/pickle/writer"
)

// Answer caps every tool keeps on its default arguments (issue: agent-sized answers).
const (
	maxToolsListBytes     = 48 << 10
	maxDefaultStructured  = 16 << 10
	maxDefaultText        = 8 << 10
	maxLimit100Structured = 56 << 10
	maxTimelinePNGBytes   = 200 << 10
)

// defaultCalls lists each tool's arguments for one snapshot at its defaults.
func defaultCalls(path, other string) map[string]map[string]any {
	return map[string]map[string]any{
		"summarize":        {"path": path},
		"top-stacks":       {"path": path},
		"diff":             {"before": path, "after": other},
		"oom-report":       {"path": path},
		"fragmentation":    {"path": path},
		"replay":           {"path": path},
		"read-raw-section": {"path": path, "section": "segments"},
		"check":            {"path": path},
		"timeline":         {"path": path},
		"what-if":          {"path": path},
	}
}

// answerSizes returns the bytes of structuredContent and of the text blocks (images apart).
func answerSizes(t testing.TB, res *mcp.CallToolResult) (structured, text, image int) {
	t.Helper()
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range res.Content {
		switch c := c.(type) {
		case mcp.TextContent:
			text += len(c.Text)
		case mcp.ImageContent:
			image += len(c.Data)
		}
	}
	return len(raw), text, image
}

// TestAnswerSizes: tools/list and every tool's default answer on every real snapshot stay
// within the caps an agent can afford; with limit 100 structuredContent stays under 56 KB.
func TestAnswerSizes(t *testing.T) {
	c := newClient(t, Config{Roots: []string{repoRoot(t), filepath.Join(repoRoot(t), "..", "shared")}})
	list, err := c.ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(list)
	t.Logf("tools/list: %d bytes", len(raw))
	if len(raw) > maxToolsListBytes {
		t.Errorf("tools/list is %d bytes, over %d", len(raw), maxToolsListBytes)
	}
	dir := realDir(t)
	entries, _ := os.ReadDir(dir)
	var files []string
	for _, e := range entries {
		if n := e.Name(); strings.HasSuffix(n, ".pickle") || strings.HasSuffix(n, ".json") || strings.HasSuffix(n, ".pkl") {
			files = append(files, filepath.Join(dir, n))
		}
	}
	for i, f := range files {
		other := files[(i+1)%len(files)]
		for tool, args := range defaultCalls(f, other) {
			for _, limit := range []int{0, 100} {
				if limit > 0 {
					args["limit"] = limit
				}
				res := call(t, c, tool, args)
				if res.IsError {
					if testing.Verbose() {
						t.Logf("%s %s limit %d: %.100s", filepath.Base(f), tool, limit, textOf(res))
					}
					continue // a tool that cannot answer this file (no trace, no OOM) says so briefly
				}
				s, txt, img := answerSizes(t, res)
				if testing.Verbose() {
					t.Logf("%s %s limit %d: structured %d text %d image %d", filepath.Base(f), tool, limit, s, txt, img)
				}
				maxS := maxDefaultStructured
				if limit > 0 {
					maxS = maxLimit100Structured
				}
				if s > maxS || txt > maxDefaultText || img > maxTimelinePNGBytes*4/3+4 {
					t.Errorf("%s %s limit %d: structured %d text %d image %d bytes (caps %d, %d, %d)", filepath.Base(f), tool, limit, s, txt, img, maxS, maxDefaultText, maxTimelinePNGBytes)
				}
			}
		}
	}
}

// FuzzAnswerSizes: any file the fuzzer makes (seeded with real snapshots and the hostile
// forms: huge names, many devices), every tool's answer stays within its caps, and a file
// that is not a snapshot is a capped isError answer, never a protocol error.
func FuzzAnswerSizes(f *testing.F) {
	for _, name := range []string{"cross_stream_pending.pickle", "summarize_basic_legacy20.pickle"} {
		data, err := os.ReadFile(filepath.Join(scenarios(f), name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	huge, err := writer.Encode(hugeNames(64<<10), writer.Options{Protocol: 4})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(huge)
	dir := f.TempDir()
	c := newClient(f, Config{Roots: []string{dir}, CallTimeout: 20 * time.Second})
	n := 0
	f.Fuzz(func(t *testing.T, data []byte) {
		n++
		path := filepath.Join(dir, fmt.Sprintf("f%d.pickle", n))
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(path)
		calls := defaultCalls(path, path)
		calls["check"] = map[string]any{"path": path, "max_peak": "1GiB"}
		calls["what-if"] = map[string]any{"path": path, "settings": map[string]any{"expandable_segments": true}}
		for tool, args := range calls {
			res := call(t, c, tool, args)
			s, txt, img := answerSizes(t, res)
			if s > maxDefaultStructured || txt > maxDefaultText || img > maxTimelinePNGBytes*4/3+4 {
				t.Errorf("%s: structured %d text %d image %d bytes", tool, s, txt, img)
			}
		}
	})
}
