package main

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/memsnap/memsnap/tools"
)

func TestIsLoopback(t *testing.T) {
	for host, want := range map[string]bool{"127.0.0.1": true, "localhost": true, "::1": true, "127.0.0.2": true,
		"0.0.0.0": false, "": false, "10.0.0.1": false, "example.com": false} {
		if isLoopback(host) != want {
			t.Errorf("isLoopback(%q) = %v", host, !want)
		}
	}
}

// TestServeHTTP drives the streamable HTTP endpoint with mcp-go's client: the bearer token is
// required, and a tool call answers.
func TestServeHTTP(t *testing.T) {
	root, _ := filepath.Abs("../..")
	srv, err := tools.NewServer(tools.Config{Roots: []string{root}})
	if err != nil {
		t.Fatal(err)
	}
	h, mcpHTTP := httpHandler(srv, serveOptions{token: "s3cret"}, nil)
	ts := httptest.NewServer(h)
	defer ts.Close()
	defer mcpHTTP.Shutdown(context.Background())
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		headers map[string]string
		ok      bool
	}{
		{"no token", nil, false},
		{"wrong token", map[string]string{"Authorization": "Bearer nope"}, false},
		{"token", map[string]string{"Authorization": "Bearer s3cret"}, true},
		{"lower-case scheme", map[string]string{"Authorization": "bearer s3cret"}, true},
		{"upper-case scheme", map[string]string{"Authorization": "BEARER s3cret"}, true},
		{"other scheme", map[string]string{"Authorization": "Basic s3cret"}, false},
	} {
		c, err := client.NewStreamableHttpClient(ts.URL+"/mcp", transport.WithHTTPHeaders(tc.headers))
		if err != nil {
			t.Fatal(err)
		}
		init := mcp.InitializeRequest{}
		init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
		init.Params.ClientInfo = mcp.Implementation{Name: "t", Version: "0"}
		_, err = c.Initialize(ctx, init)
		if (err == nil) != tc.ok {
			t.Fatalf("%s: initialize err %v", tc.name, err)
		}
		if !tc.ok {
			c.Close()
			continue
		}
		req := mcp.CallToolRequest{}
		req.Params.Name = "summarize"
		req.Params.Arguments = map[string]any{"path": "testdata/scenarios/activation_oom.pickle"}
		res, err := c.CallTool(ctx, req)
		if err != nil || res.IsError {
			t.Fatalf("call: %v %v", err, res)
		}
		if txt := res.Content[0].(mcp.TextContent).Text; !strings.Contains(txt, "reserved 882 MiB") {
			t.Errorf("text %q", txt)
		}
		c.Close()
	}
}

func TestServeHTTPRefusesRemote(t *testing.T) {
	srv, err := tools.NewServer(tools.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c := newServeCmd()
	for _, addr := range []string{"0.0.0.0:0", "10.1.2.3:80", "nonsense"} {
		err := serveHTTP(context.Background(), c, srv, serveOptions{httpAddr: addr})
		if err == nil || !strings.Contains(err.Error(), "--http") {
			t.Errorf("%s: %v", addr, err)
		}
	}
	// Reachable from the network only with a token.
	err = serveHTTP(context.Background(), c, srv, serveOptions{httpAddr: "0.0.0.0:0", allowRemote: true})
	if err == nil || !strings.Contains(err.Error(), "--allow-remote needs --token") {
		t.Errorf("--allow-remote without --token: %v", err)
	}
}
