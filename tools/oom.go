package tools

import (
	"context"

	"github.com/mark3labs/mcp-go/server"

	"github.com/memsnap/memsnap/analysis"
)

// OOMInput is the oom-report tool's input.
type OOMInput struct {
	Path  string `json:"path" jsonschema:"description=Snapshot file that recorded the OOM (history on: the oom event is in device_traces); absolute or relative to the server's first root"`
	Limit int    `json:"limit,omitempty" jsonschema:"description=Live sites listed per OOM\\, largest first (default 10),minimum=1,maximum=100,default=10"`
	// DeviceMemoryBytes is the GPU's total memory; the file does not record it.
	DeviceMemoryBytes int64 `json:"device_memory_bytes,omitempty" jsonschema:"description=The GPU's total memory in bytes (e.g. 17179869184 for 16 GiB; nvidia-smi shows it). The file does not record it: without it the device size is estimated and memory held outside PyTorch is only a lower bound,minimum=1"`
}

func oomTool(e *env) (server.ServerTool, error) {
	return declare(e, "oom-report", "Explain CUDA out-of-memory errors",
		"Why each CUDA out-of-memory in the trace happened: verdict capacity (live tensors fill the device), fragmentation (enough cached free memory but no block large enough) or outside_pytorch (another process or the CUDA context holds the device), the failing site and request size, memory at the OOM, the live sites by category, memory held outside PyTorch (device total − reserved − free, every verdict), whether the file was written after the OOM (its final state is the unwound pass; the live sites come from the replay up to the OOM), and concrete fixes gated on what the device shows (checkpointing only with a backward pass, never for inference; fused attention only with attention code live; optimizer fixes only with material optimizer state). event_index points into device_traces for read-raw-section.",
		func(ctx context.Context, in OOMInput) (*analysis.OOMResult, error) {
			snap, version, err := e.snapshotAt(ctx, in.Path, "path")
			if err != nil {
				return nil, err
			}
			limit := in.Limit
			if limit <= 0 {
				limit = 10
			}
			opt := analysis.OOMOptions{Limit: limit, DeviceTotalBytes: in.DeviceMemoryBytes}
			return memoized(e, "oom-report", opt, []string{version}, func() (*analysis.OOMResult, error) {
				return analysis.OOMReport(ctx, snap, opt)
			})
		})
}
