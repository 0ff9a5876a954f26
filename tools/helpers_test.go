package tools

import (
	"context"
	"encoding/json"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/memsnap/memsnap/internal/realsnaps/realtest"
)

// repoRoot is the module root (two levels above this file's package dir).
func repoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

func scenarios(t testing.TB) string { return filepath.Join(repoRoot(t), "testdata", "scenarios") }

// newClient starts the server in-process with cfg and returns an initialised client.
func newClient(t testing.TB, cfg Config, opts ...client.ClientOption) *client.Client {
	t.Helper()
	srv, _ := newTestServer(t, cfg)
	return clientFor(t, srv, opts...)
}

// newTestServer builds the server with cfg (roots default to the repository) and returns it
// with what its handlers share.
func newTestServer(t testing.TB, cfg Config) (*server.MCPServer, *env) {
	t.Helper()
	if cfg.Roots == nil {
		cfg.Roots = []string{repoRoot(t)}
	}
	srv, e, err := newServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return srv, e
}

// clientFor connects an initialised in-process client to srv (with roots when opts are given).
func clientFor(t testing.TB, srv *server.MCPServer, opts ...client.ClientOption) *client.Client {
	t.Helper()
	c, err := client.NewInProcessClientWithOptions(srv, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	req := mcp.InitializeRequest{}
	req.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	req.Params.ClientInfo = mcp.Implementation{Name: "test", Version: "0"}
	if len(opts) > 0 {
		req.Params.Capabilities.Roots = &struct {
			ListChanged bool `json:"listChanged,omitempty"`
		}{ListChanged: true}
	}
	if _, err := c.Initialize(ctx, req); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func call(t testing.TB, c *client.Client, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	req := mcp.CallToolRequest{}
	req.Params.Name = name
	req.Params.Arguments = args
	res, err := c.CallTool(context.Background(), req)
	if err != nil {
		t.Fatalf("%s %v: protocol error %v", name, args, err)
	}
	return res
}

func textOf(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// structured decodes structuredContent into v.
func structured(t testing.TB, res *mcp.CallToolResult, v any) {
	t.Helper()
	if res.IsError {
		t.Fatalf("isError: %s", textOf(res))
	}
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("structuredContent: %v: %s", err, raw)
	}
}

// realDir returns the folder of real snapshots (package realsnaps), or skips the test.
func realDir(t testing.TB) string { return realtest.Require(t) }

func TestMain(m *testing.M) { realtest.Main(m) }

type rootsHandler struct{ uris []string }

func (h rootsHandler) ListRoots(context.Context, mcp.ListRootsRequest) (*mcp.ListRootsResult, error) {
	res := &mcp.ListRootsResult{}
	for _, u := range h.uris {
		res.Roots = append(res.Roots, mcp.Root{URI: u, Name: "test"})
	}
	return res, nil
}

func clientWithRoots(uris ...string) client.ClientOption {
	return client.WithRootsHandler(rootsHandler{uris})
}
