package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	"github.com/mark3labs/mcp-go/server"

	"github.com/memsnap/memsnap/analysis"
	"github.com/memsnap/memsnap/analysis/capacity"
)

// CapacityFileInput is one snapshot of the workload and its size.
type CapacityFileInput struct {
	Path string `json:"path" jsonschema:"description=Snapshot file recorded with history on (_record_memory_history); absolute or relative to the server's first root"`
	Size int64  `json:"size" jsonschema:"description=The batch size (or with dimension seq the sequence length) the file was recorded at,minimum=1"`
}

// CapacityInput is the capacity tool's input.
type CapacityInput struct {
	Files        []CapacityFileInput `json:"files" jsonschema:"description=Snapshots of one workload at different sizes\\, each with its size: two or more give the exact method (sizes fitted per allocation)\\, one the estimate from roles,minItems=1,maxItems=8"`
	Predict      []int64             `json:"predict,omitempty" jsonschema:"description=More sizes to predict (the recorded sizes\\, the largest that fits and the next are always given),maxItems=16"`
	Dimension    string              `json:"dimension,omitempty" jsonschema:"description=What the sizes count: batch (default) or seq (sequence length: eager attention grows with its square; give three files for the quadratic fit),enum=batch,enum=seq"`
	Device       *int                `json:"device,omitempty" jsonschema:"description=Only this CUDA device (default: every device traced in all files),minimum=0"`
	DeviceMemory string              `json:"device_memory,omitempty" jsonschema:"description=The GPU's total memory as a size ('80GiB' or '85899345920'); the memory outside PyTorch is subtracted when an OOM event shows it. Give this or capacity"`
	Capacity     string              `json:"capacity,omitempty" jsonschema:"description=What PyTorch may reserve on the device as a size ('75GiB' or '80530636800'): the GPU's memory less the CUDA context and other processes. Give this or device_memory; without either the capacity comes from an OOM event in the files\\, else no largest size is given"`
}

// capacityDocs describes the capacity tool's result fields (kept here, merged into fieldDocs,
// so that the tool's docs travel with it).
var capacityDocs = map[string]string{
	"Answer.Files":                   "The snapshots and the size each was recorded at",
	"Answer.Dimension":               "What the sizes count: batch or seq",
	"Answer.Devices":                 "One answer per device traced in every file",
	"Answer.Notes":                   "What could not be answered (devices traced in some files only)",
	"FileInfo.Path":                  "The snapshot file",
	"FileInfo.Size":                  "The batch size or sequence length it was recorded at",
	"DeviceAnswer.Device":            "CUDA device index",
	"DeviceAnswer.Method":            "two_points: each allocation's size fitted across two or more files (exact); roles: one file, allocations of growing roles scaled (an estimate: see assumptions)",
	"DeviceAnswer.Dimension":         "What the sizes count: batch or seq",
	"DeviceAnswer.FixedBytes":        "Linear summary: peak allocated ≈ fixed_bytes + per_unit_bytes × size (the predictions come from the replay, not from this line)",
	"DeviceAnswer.PerUnitBytes":      "Linear summary: the peak allocated added per unit of size",
	"DeviceAnswer.Predictions":       "The replay at each size: the recorded sizes, those asked for, the largest that fits and the next; at most 24",
	"DeviceAnswer.MaxSize":           "The largest size whose replay completes within device_bytes, found by a search with the replay (rounding and fragmentation count); null when the capacity is unknown (max_size_note says what to pass); 0 when even size 1 fails",
	"DeviceAnswer.MaxSizeNote":       "Why max_size is null and what to pass",
	"DeviceAnswer.DeviceBytes":       "The capacity the replays run under: what PyTorch may reserve (0 when unknown)",
	"DeviceAnswer.DeviceBytesSource": "capacity (given), device_memory (given, less the memory outside PyTorch an OOM event shows), oom_event (reserved + device_free at an OOM in the files) or unknown",
	"DeviceAnswer.Headline":          "The line to act on: the largest size that fits and where the next one fails",
	"DeviceAnswer.Fidelity":          "Each recorded size predicted back: the file's own peak against the prediction",
	"DeviceAnswer.Unmatched":         "Allocations found in some files only, by site, most bytes first (at most 12): how each was counted",
	"DeviceAnswer.UnmatchedTotal":    "Unmatched rows before the limit",
	"DeviceAnswer.Assumptions":       "What the prediction assumes: how allocations were matched or scaled, what is replayed, where the capacity comes from",
	"DeviceAnswer.ReferenceFile":     "The file whose trace is rebuilt at each size and replayed (the largest that did not end in an OOM)",
	"DeviceAnswer.PeakStepEvents":    "The trace events replayed: [first, last+1) of the step before the peak step and the peak step",
	"DeviceAnswer.Fits":              "How many replayed allocations were predicted fixed, linear, quadratic (two_points) or scaled (roles)",
	"FitCount.Fixed":                 "Allocations whose size does not change with the size",
	"FitCount.Linear":                "Allocations fitted as a + b × size",
	"FitCount.Quadratic":             "Allocations fitted with a size² term (eager attention's scores)",
	"FitCount.Scaled":                "Roles method: allocations scaled in proportion to the size",
	"Prediction.Size":                "The batch size or sequence length",
	"Prediction.PeakAllocatedBytes":  "Predicted peak allocated bytes (rounded blocks, as torch.cuda.max_memory_allocated counts them); for a size that fails, what its step would need",
	"Prediction.PeakReservedBytes":   "Predicted peak reserved bytes (segments, as torch.cuda.max_memory_reserved counts them); for a size that fails, what its step would need",
	"Prediction.Fits":                "The replay at device_bytes completes; null when the capacity is unknown",
	"Prediction.FirstOOMSite":        "Where the first allocation that does not fit is made (file:line); empty when it fits",
	"Prediction.FirstOOMRole":        "The role of that allocation",
	"Prediction.FirstOOMBytes":       "The size of that allocation",
	"Prediction.Recorded":            "A file was recorded at this size",
	"Fidelity.File":                  "The recorded file",
	"Fidelity.RecordedSize":          "Its size",
	"Fidelity.RecordedPeakBytes":     "Its own peak allocated (its allocations replayed as recorded; up to the OOM when it ended in one)",
	"Fidelity.PredictedPeakBytes":    "The predicted peak allocated at its size",
	"Fidelity.ErrorPercent":          "(predicted − recorded) / recorded × 100; 0 for a file that ended in an OOM",
	"Fidelity.RecordedOOM":           "The file's trace ends in an OOM",
	"Fidelity.PredictedFits":         "The prediction at its size fits the capacity (for a file that ended in an OOM it should not); null when the capacity is unknown",
	"Unmatched.Site":                 "Where the allocations are made (file:line, or the autograd node without a Python frame)",
	"Unmatched.File":                 "The file they are in",
	"Unmatched.Count":                "How many allocations",
	"Unmatched.Bytes":                "Their bytes added up (they need not be alive together)",
	"Unmatched.LargestBytes":         "The largest of them",
	"Unmatched.Reason":               "Why they are unmatched and how they were counted",
}

func init() { maps.Copy(fieldDocs, capacityDocs) }

// parseSizeArg reads a size string argument ("80GiB" or "85899345920").
func parseSizeArg(field, s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := analysis.ParseBytes(s)
	if err != nil || n <= 0 {
		return 0, userErrorf("%s %q: want a size such as \"80GiB\" or \"85899345920\"", field, clip(s, maxEchoedValue))
	}
	return n, nil
}

func capacityTool(e *env) (server.ServerTool, error) {
	return declare(e, "capacity", "Largest batch or sequence that fits the GPU",
		"After an OOM, or before scaling up: the largest batch size (or sequence length) that fits the device, and the peak at other sizes, from the run's own traces. With two or more snapshots of one workload at different sizes (files: [{path, size}]) each allocation is matched across them (same call stack, same position in the step) and its size fitted (fixed, linear, quadratic with three files: eager attention's T²); the trace's peak step is rebuilt at each size and replayed through PyTorch's caching-allocator model under the file's own settings, so rounding and fragmentation count, and the largest size is searched with that replay (max_size). With one snapshot, allocations whose roles grow with the batch (activations, temporaries, backward temporaries, KV cache) are scaled: method roles, an estimate with its assumptions. Capacity: capacity (what PyTorch may reserve), else device_memory less the memory outside PyTorch an OOM event shows, else reserved + device_free at an OOM event; without any, max_size is null. fidelity predicts each recorded size back. Needs traces (_record_memory_history). Say \"the largest batch that would have fit is max_size\" with the headline's failing site, and the assumptions for method roles.",
		func(ctx context.Context, in CapacityInput) (*capacity.Answer, error) {
			opt := capacity.Options{Dimension: in.Dimension, Device: in.Device, Predict: in.Predict}
			var err error
			if opt.DeviceMemory, err = parseSizeArg("device_memory", in.DeviceMemory); err != nil {
				return nil, err
			}
			if opt.Capacity, err = parseSizeArg("capacity", in.Capacity); err != nil {
				return nil, err
			}
			if opt.DeviceMemory > 0 && opt.Capacity > 0 {
				return nil, userErrorf("give capacity (what PyTorch may reserve) or device_memory (the GPU's total), not both")
			}
			files := make([]capacity.File, len(in.Files))
			versions := make([]string, len(in.Files))
			for i, f := range in.Files {
				snap, v, err := e.snapshotAt(ctx, f.Path, fmt.Sprintf("files[%d].path", i))
				if err != nil {
					return nil, err
				}
				files[i], versions[i] = capacity.File{Snap: snap, Size: f.Size}, v
			}
			r, err := memoized(e, "capacity", in, versions, func() (*capacity.Answer, error) {
				return capacity.Analyze(ctx, files, opt)
			})
			if err != nil {
				if ctx.Err() != nil {
					return nil, err
				}
				if errors.Is(err, capacity.ErrNoTrace) {
					return nil, userErrorf("%v", err)
				}
				return nil, userErrorf("capacity: %v", err)
			}
			return capAnswer(r, e.maxStructured), nil
		})
}

// capAnswer keeps the answer within max bytes of JSON: fewer unmatched rows, then fewer
// devices (a note says which were left out). The memoized answer is not changed.
func capAnswer(r *capacity.Answer, max int) *capacity.Answer {
	size := func(a *capacity.Answer) int {
		b, _ := json.Marshal(a)
		return len(b)
	}
	if size(r) <= max {
		return r
	}
	c := *r
	c.Devices = append([]capacity.DeviceAnswer(nil), r.Devices...)
	c.Notes = append([]string(nil), r.Notes...)
	for i := range c.Devices {
		c.Devices[i].Unmatched = c.Devices[i].Unmatched[:min(len(c.Devices[i].Unmatched), 3)]
	}
	for len(c.Devices) > 1 && size(&c) > max {
		d := c.Devices[len(c.Devices)-1]
		c.Devices = c.Devices[:len(c.Devices)-1]
		c.Notes = append(c.Notes, fmt.Sprintf("device %d left out to keep the answer small: call again with device %d", d.Device, d.Device))
	}
	return &c
}
