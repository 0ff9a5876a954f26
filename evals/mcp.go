package evals

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// MCPCaller drives an MCP server through an in-process client, exactly as an agent's client
// would: initialize, list tools, call them.
type MCPCaller struct {
	c     *client.Client
	tools map[string]bool
}

// NewMCPCaller starts an in-process client on srv and initializes the session.
func NewMCPCaller(ctx context.Context, srv *server.MCPServer) (*MCPCaller, error) {
	c, err := client.NewInProcessClient(srv)
	if err != nil {
		return nil, fmt.Errorf("mcp client: %w", err)
	}
	if err := c.Start(ctx); err != nil {
		return nil, fmt.Errorf("mcp client start: %w", err)
	}
	req := mcp.InitializeRequest{}
	req.Params.ClientInfo = mcp.Implementation{Name: "memsnap-eval", Version: "1"}
	if _, err := c.Initialize(ctx, req); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("mcp initialize: %w", err)
	}
	lt, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("mcp tools/list: %w", err)
	}
	m := &MCPCaller{c: c, tools: map[string]bool{}}
	for _, t := range lt.Tools {
		m.tools[t.Name] = true
	}
	return m, nil
}

// Close ends the session.
func (m *MCPCaller) Close() error { return m.c.Close() }

// CallTool calls a tool; a tool the server does not list is an error.
func (m *MCPCaller) CallTool(ctx context.Context, tool string, args map[string]any) (*Output, error) {
	if !m.tools[tool] {
		return nil, fmt.Errorf("the server has no tool %q", tool)
	}
	req := mcp.CallToolRequest{}
	req.Params.Name = tool
	req.Params.Arguments = args
	res, err := m.c.CallTool(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("tools/call %s: %w", tool, err)
	}
	out := &Output{IsError: res.IsError}
	var texts []string
	for _, c := range res.Content {
		if t, ok := mcp.AsTextContent(c); ok {
			texts = append(texts, t.Text)
		}
	}
	out.Text = strings.Join(texts, "\n")
	raw := []byte(res.RawStructuredContent)
	if len(raw) == 0 && res.StructuredContent != nil {
		if raw, err = json.Marshal(res.StructuredContent); err != nil {
			return nil, fmt.Errorf("tools/call %s: structured content: %w", tool, err)
		}
	}
	if len(raw) > 0 {
		if out.Structured, err = DecodeStructured(raw); err != nil {
			return nil, fmt.Errorf("tools/call %s: %w", tool, err)
		}
	}
	return out, nil
}
