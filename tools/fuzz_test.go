package tools

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
)

// FuzzToolArguments calls every tool with arguments an agent might send (any JSON object, with
// or without a real snapshot as path and as the second file): each call gets a result, a
// refusal being an isError result, never a protocol error, and the server answers the next
// call as usual.
func FuzzToolArguments(f *testing.F) {
	for _, seed := range []string{`{}`, `{"limit": 3}`, `{"group_by": "file", "state": "all", "limit": 100}`, `{"device": -1}`,
		`{"section": "segments[0].blocks[1:3]", "offset": 2}`, `{"settings": ["expandable_segments:True"], "recommend": true}`,
		`{"max_peak": "1 GiB", "baseline": 7}`, `{"kind": "segments", "start": 5, "end": 2}`, `{"device": 99999999999}`, `{"path": ""}`} {
		for k := range ToolNames {
			f.Add(uint8(k), uint8(3), seed)
		}
	}
	c := newClient(f, Config{})
	p, q := fx(f, "fragmentation_oom.pickle"), fx(f, "retained_graph_step50.pickle")
	f.Fuzz(func(t *testing.T, tool, paths uint8, argsJSON string) {
		var args map[string]any
		if json.Unmarshal([]byte(argsJSON), &args) != nil || args == nil {
			return
		}
		name := ToolNames[int(tool)%len(ToolNames)]
		if paths&1 != 0 {
			args["path"] = p
		}
		if paths&2 != 0 {
			args["before"], args["after"], args["baseline"] = p, q, q
		}
		req := mcp.CallToolRequest{}
		req.Params.Name = name
		req.Params.Arguments = args
		res, err := c.CallTool(context.Background(), req)
		if err != nil || res == nil {
			t.Fatalf("%s %s: protocol error %v", name, argsJSON, err)
		}
		if res.IsError && textOf(res) == "" {
			t.Fatalf("%s %s: an error with no text", name, argsJSON)
		}
		if ok := call(t, c, "summarize", map[string]any{"path": p}); ok.IsError {
			t.Fatalf("after %s %s, summarize failed: %s", name, argsJSON, textOf(ok))
		}
	})
}
