package tools

import (
	"context"
	"errors"

	"github.com/mark3labs/mcp-go/server"

	"github.com/memsnap/memsnap/analysis/raw"
)

// ReadRawInput is the read-raw-section tool's input.
type ReadRawInput struct {
	Path    string `json:"path" jsonschema:"description=Snapshot file; absolute or relative to the server's first root"`
	Section string `json:"section" jsonschema:"description=Part of the snapshot to read: allocator_settings\\, external_annotations\\, format\\, capabilities\\, segments\\, segments[N]\\, segments[N].blocks[A:B]\\, device_traces[D]\\, device_traces[D][A:B] or stacks[ID]"`
	Offset  int    `json:"offset,omitempty" jsonschema:"description=First item to return within the section (default 0); pass next_offset to continue,minimum=0,default=0"`
	Limit   int    `json:"limit,omitempty" jsonschema:"description=Items to return at most (default 50); answers are also capped at about 12 KB,minimum=1,maximum=500,default=50"`
}

func readRawTool(e *env) (server.ServerTool, error) {
	return declare(e, "read-raw-section", "Read a raw snapshot section",
		"Raw evidence from one part of the snapshot, paged and capped: allocator_settings, external_annotations, segments (one line each), segments[N] (a segment and its blocks), segments[N].blocks[A:B], device_traces[D] or device_traces[D][A:B] (trace events; oom-report's event_index points here), stacks[ID]. Every stack_id in the items is rendered once in stacks. Use it to check a claim, not to browse: the other tools summarise.",
		func(ctx context.Context, in ReadRawInput) (*raw.Result, error) {
			snap, _, err := e.snapshotAt(ctx, in.Path, "path")
			if err != nil {
				return nil, err
			}
			r, err := raw.Read(snap, in.Section, raw.Options{Offset: in.Offset, Limit: in.Limit})
			var re *raw.Error
			if errors.As(err, &re) {
				return nil, userErrorf("%s", re.Msg)
			}
			return r, err
		})
}
