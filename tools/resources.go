package tools

import (
	"context"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/memsnap/memsnap/prompts"
)

// GuideURI is the usage guide resource.
const GuideURI = "memsnap://guide"

// addResources registers the usage guide and the snapshot-section template.
func addResources(s *server.MCPServer, e *env) {
	s.AddResource(mcp.NewResource(GuideURI, "memsnap usage guide",
		mcp.WithResourceDescription("What each tool answers, what each number means in allocator terms, and the workflows"),
		mcp.WithMIMEType("text/markdown")),
		func(_ context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
			return []mcp.ResourceContents{mcp.TextResourceContents{URI: GuideURI, MIMEType: "text/markdown", Text: prompts.Guide}}, nil
		})
	addSectionTemplate(s, e)
}

func addSectionTemplate(s *server.MCPServer, e *env) {}
