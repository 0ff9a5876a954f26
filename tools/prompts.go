package tools

import (
	"context"
	"fmt"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/memsnap/memsnap/prompts"
)

// addPrompts registers the workflow prompts (diagnose-oom, find-leak, explain-memory).
func addPrompts(s *server.MCPServer) {
	for _, p := range prompts.All {
		opts := []mcp.PromptOption{mcp.WithPromptDescription(p.Description)}
		for _, a := range p.Arguments {
			aopts := []mcp.ArgumentOption{mcp.ArgumentDescription(a.Description)}
			if a.Required {
				aopts = append(aopts, mcp.RequiredArgument())
			}
			opts = append(opts, mcp.WithArgument(a.Name, aopts...))
		}
		s.AddPrompt(mcp.NewPrompt(p.Name, opts...), func(_ context.Context, req mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			text := p.Text
			for _, a := range p.Arguments {
				v, ok := req.Params.Arguments[a.Name]
				if !ok || v == "" {
					if a.Required {
						return nil, fmt.Errorf("prompt %s needs the argument %q: %s", p.Name, a.Name, a.Description)
					}
				}
				text = strings.ReplaceAll(text, "{{"+a.Name+"}}", v)
			}
			return mcp.NewGetPromptResult(p.Description, []mcp.PromptMessage{
				mcp.NewPromptMessage(mcp.RoleUser, mcp.NewTextContent(text)),
			}), nil
		})
	}
}
