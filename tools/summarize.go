package tools

import (
	"context"

	"github.com/mark3labs/mcp-go/server"

	"github.com/memsnap/memsnap/analysis"
	"github.com/memsnap/memsnap/analysis/load"
)

// SummarizeInput is the summarize tool's input.
type SummarizeInput struct {
	Path   string `json:"path" jsonschema:"description=Snapshot file (from torch.cuda.memory._dump_snapshot: pickle or JSON\\, gzip or not) or a directory of per-rank snapshots; absolute or relative to the server's first root"`
	Device *int   `json:"device,omitempty" jsonschema:"description=Only this CUDA device (default: every device),minimum=0"`
}

// summaryPoolsPerDevice bounds each device's pool list so any summary fits in ~2,000 tokens.
const summaryPoolsPerDevice = 6

func summarizeTool(e *env) (server.ServerTool, error) {
	return declare(e, "summarize", "Summarize a CUDA memory snapshot",
		"Start here. What a PyTorch CUDA memory snapshot holds, per device and in total: reserved, allocated (live tensors), pending free, inactive (cached), requested vs rounded; pools by stream and segment type with the largest free block; trace coverage and peaks; OOM count; and what the file cannot answer. Accepts a directory of per-rank snapshots (ranks compared, outliers noted). Next: top-stacks for who holds memory, oom-report when ooms > 0, diff for two snapshots of one run.",
		func(ctx context.Context, in SummarizeInput) (*analysis.Summary, error) {
			opt := analysis.SummaryOptions{Device: in.Device, MaxPools: summaryPoolsPerDevice}
			p, err := e.roots.resolve(ctx, in.Path, "path")
			if err != nil {
				return nil, err
			}
			var s *analysis.Summary
			if load.IsDir(p) {
				ranks, version, lerr := e.cache.getDir(ctx, p)
				if lerr != nil {
					return nil, lerr
				}
				s, err = memoized(e, "summarize", in, []string{version}, func() (*analysis.Summary, error) {
					return analysis.SummarizeDir(ctx, p, ranks, opt)
				})
			} else {
				snap, version, lerr := e.snapshotAt(ctx, p, "path")
				if lerr != nil {
					return nil, lerr
				}
				s, err = memoized(e, "summarize", in, []string{version}, func() (*analysis.Summary, error) {
					return analysis.Summarize(ctx, snap, opt)
				})
			}
			if err != nil && in.Device != nil && ctx.Err() == nil {
				return nil, userErrorf("%v: call summarize without device to see every device", err)
			}
			return s, err
		})
}
