package tools

import (
	"context"

	"github.com/mark3labs/mcp-go/server"

	"github.com/memsnap/memsnap/analysis"
)

// FragmentationInput is the fragmentation tool's input.
type FragmentationInput struct {
	Path   string `json:"path" jsonschema:"description=Snapshot file; absolute or relative to the server's first root"`
	Device *int   `json:"device,omitempty" jsonschema:"description=Only this CUDA device (default: every device),minimum=0"`
	Limit  int    `json:"limit,omitempty" jsonschema:"description=Cache groups to return (default 20),minimum=1,maximum=200,default=20"`
}

func fragmentationTool(e *env) (server.ServerTool, error) {
	return declare(e, "fragmentation", "Cached memory and fragmentation",
		"How the cached memory is split, per device, pool, stream and segment type: free (inactive) bytes, the largest free block (the largest request served without cudaMalloc), releasable bytes (what empty_cache() returns: fully free segments, or with expandable segments only whole free 2 MiB / 20 MiB pages) vs stranded bytes (free space in segments that still hold a live tensor), rounding waste, a one-line verdict (cache left after a peak, not fragmentation; fragmented; too little free to matter), the trace's segment-release bursts (explicit empty_cache() calls with the calling site, cudaMalloc-failure retries: the device at its limit), and advice (expandable_segments when the device is full; max_split_size_mb only where it applies).",
		func(ctx context.Context, in FragmentationInput) (*analysis.FragmentationResult, error) {
			snap, version, err := e.snapshotAt(ctx, in.Path, "path")
			if err != nil {
				return nil, err
			}
			opt := analysis.FragOptions{Device: analysis.AllDevices, Limit: in.Limit}
			if opt.Limit <= 0 {
				opt.Limit = 20
			}
			if in.Device != nil {
				opt.Device = *in.Device
			}
			return memoized(e, "fragmentation", opt, []string{version}, func() (*analysis.FragmentationResult, error) {
				return analysis.Fragmentation(snap, opt)
			})
		})
}
