package tools

import (
	"context"

	"github.com/mark3labs/mcp-go/server"

	"github.com/memsnap/memsnap/analysis"
)

// TopStacksInput is the top-stacks tool's input.
type TopStacksInput struct {
	Path    string `json:"path" jsonschema:"description=Snapshot file; absolute or relative to the server's first root"`
	GroupBy string `json:"group_by,omitempty" jsonschema:"description=Group blocks by the user's site (file:line; default)\\, by whole stack\\, by file or by function,enum=site,enum=stack,enum=file,enum=function,default=site"`
	State   string `json:"state,omitempty" jsonschema:"description=Which blocks to count: allocated (live tensors; default)\\, pending (freed but awaiting another stream)\\, inactive (cached free: stack of last use) or all,enum=allocated,enum=pending,enum=inactive,enum=all,default=allocated"`
	Limit   int    `json:"limit,omitempty" jsonschema:"description=Groups to return\\, largest first (default 10),minimum=1,maximum=100,default=10"`
	Device  *int   `json:"device,omitempty" jsonschema:"description=Only this CUDA device (default: every device),minimum=0"`
}

// topStacksDefaultLimit keeps the default answer under the text cap.
const topStacksDefaultLimit = 10

func topStacksTool(e *env) (server.ServerTool, error) {
	return declare("top-stacks",
		"Who holds the memory at the snapshot: blocks grouped by the user's own source line (site), largest first, with a category guess (parameter, gradient, optimizer_state, activation, …), the evidence and a short filtered stack. Use state=inactive to see whose freed memory sits in the cache, state=pending for cross-stream delayed frees. Site ids (model.py:41) match diff and oom-report; stack_id opens the representative stack whole with read-raw-section section stacks[ID].",
		func(ctx context.Context, in TopStacksInput) (*analysis.TopStacksResult, error) {
			snap, version, err := e.snapshotAt(ctx, in.Path, "path")
			if err != nil {
				return nil, err
			}
			opt := analysis.TopStacksOptions{GroupBy: in.GroupBy, State: in.State, Limit: in.Limit, Device: analysis.AllDevices}
			if opt.Limit <= 0 {
				opt.Limit = topStacksDefaultLimit
			}
			if in.Device != nil {
				opt.Device = *in.Device
			}
			return memoized(e, "top-stacks", opt, []string{version}, func() (*analysis.TopStacksResult, error) {
				return analysis.TopStacks(snap, opt)
			})
		}, e.maxText)
}
