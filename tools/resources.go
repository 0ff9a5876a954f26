package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/memsnap/memsnap/analysis/raw"
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
	doc := resultsDoc(e.fullOutput, ToolNames)
	s.AddResource(mcp.NewResource(ResultsDocURI, "memsnap answer fields",
		mcp.WithResourceDescription("What every field of every tool's structuredContent means"),
		mcp.WithMIMEType("text/markdown")),
		func(_ context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
			return []mcp.ResourceContents{mcp.TextResourceContents{URI: ResultsDocURI, MIMEType: "text/markdown", Text: doc}}, nil
		})
	addSectionTemplate(s, e)
}

// SectionTemplate is the resource template for snapshot sections.
const SectionTemplate = "memsnap://snapshot/{section}{?path,offset,limit}"

// addSectionTemplate serves read-raw-section as resources: memsnap://snapshot/SECTION?path=FILE
// (offset and limit optional), JSON like the tool's structuredContent.
func addSectionTemplate(s *server.MCPServer, e *env) {
	s.AddResourceTemplate(mcp.NewResourceTemplate(SectionTemplate, "snapshot section",
		mcp.WithTemplateDescription("One section of a snapshot file, as JSON, paged: section is allocator_settings, external_annotations, segments, segments[N], segments[N].blocks[A:B], device_traces[D], stacks[ID], format or capabilities; path is the snapshot file under the server's roots; both percent-encoded as template expansion does (segments%5B3%5D?path=%2Fdata%2Fsnap.pickle)"),
		mcp.WithTemplateMIMEType("application/json")),
		func(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
			// bounded recovers panics (mcp-go recovers them in tool handlers only: one in a
			// resource handler would end the whole server) and bounds the call's time.
			text, err := bounded(ctx, e.callTimeout, "snapshot section", func(ctx context.Context) (string, error) {
				in, err := parseSectionURI(req.Params.URI)
				if err != nil {
					return "", err
				}
				snap, _, err := e.snapshotAt(ctx, in.Path, "path")
				if err != nil {
					return "", err
				}
				r, err := raw.Read(snap, in.Section, raw.Options{Offset: in.Offset, Limit: in.Limit})
				if err != nil {
					return "", err
				}
				b, err := json.Marshal(r)
				if err != nil {
					return "", fmt.Errorf("snapshot section: %w", err)
				}
				return string(b), nil
			})
			if err != nil {
				return nil, errors.New(clip(errorText("snapshot section", err), e.maxText))
			}
			return []mcp.ResourceContents{mcp.TextResourceContents{URI: req.Params.URI, MIMEType: "application/json", Text: text}}, nil
		})
}

// parseSectionURI reads memsnap://snapshot/SECTION?path=...&offset=...&limit=...
func parseSectionURI(uri string) (ReadRawInput, error) {
	var in ReadRawInput
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "memsnap" || u.Host != "snapshot" {
		return in, userErrorf("resource %q: want memsnap://snapshot/SECTION?path=FILE", clip(uri, maxEchoedPath))
	}
	in.Section = strings.TrimPrefix(u.Path, "/")
	q := u.Query()
	in.Path = q.Get("path")
	if in.Path == "" {
		return in, userErrorf("resource %q: the query needs path=FILE (the snapshot file)", clip(uri, maxEchoedPath))
	}
	for _, f := range []struct {
		key string
		dst *int
	}{{"offset", &in.Offset}, {"limit", &in.Limit}} {
		if v := q.Get(f.key); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return in, userErrorf("resource %q: %s must be a non-negative integer", clip(uri, maxEchoedPath), f.key)
			}
			*f.dst = n
		}
	}
	return in, nil
}
