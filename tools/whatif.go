package tools

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/mark3labs/mcp-go/server"

	"github.com/memsnap/memsnap/analysis"
	"github.com/memsnap/memsnap/analysis/allocator"
)

// WhatIfSettingsInput are the allocator settings to change; absent ones keep the file's.
type WhatIfSettingsInput struct {
	ExpandableSegments         *bool    `json:"expandable_segments,omitempty" jsonschema:"description=expandable_segments: true replays one growing range per pool and stream; false turns it off"`
	MaxSplitSizeMB             *int64   `json:"max_split_size_mb,omitempty" jsonschema:"description=max_split_size_mb: cached blocks at least this large (MiB) are not split for smaller requests; more than 20\\, or 0 to unset it,minimum=0"`
	RoundupPower2Divisions     *int     `json:"roundup_power2_divisions,omitempty" jsonschema:"description=roundup_power2_divisions: round sizes up to this many divisions of their power-of-two interval (0 or a power of two; 0 turns it off),minimum=0"`
	GarbageCollectionThreshold *float64 `json:"garbage_collection_threshold,omitempty" jsonschema:"description=garbage_collection_threshold: above this fraction of the capacity free old unused cached segments before a cudaMalloc (below 1; 0 turns it off); only with set_per_process_memory_fraction,minimum=0"`
}

// WhatIfInput is the what-if tool's input.
type WhatIfInput struct {
	Path     string               `json:"path" jsonschema:"description=Snapshot file recorded with history on (_record_memory_history: device_traces holds the allocations); absolute or relative to the server's first root"`
	Settings *WhatIfSettingsInput `json:"settings,omitempty" jsonschema:"description=The PYTORCH_CUDA_ALLOC_CONF options to change\\, on top of the file's own: expandable_segments\\, max_split_size_mb\\, roundup_power2_divisions\\, garbage_collection_threshold. Give at least one\\, or recommend"`
	Device   *int                 `json:"device,omitempty" jsonschema:"description=Only this CUDA device (default: every device with allocation events),minimum=0"`
	// DeviceMemory is the capacity when no OOM event measures it.
	DeviceMemory int64 `json:"device_memory,omitempty" jsonschema:"description=Bytes PyTorch may reserve on the device: its memory less the CUDA context and other processes. Used when the trace has no OOM event (an OOM event measures it: reserved + device_free),minimum=1"`
	Recommend    bool  `json:"recommend,omitempty" jsonschema:"description=Try a small grid of settings (expandable segments\\, max_split_size_mb 128/256/512\\, roundup_power2_divisions 4\\, garbage_collection_threshold 0.8/0.6) on top of settings and rank them: fewest OOMs\\, then fewest cache flushes\\, then lowest peak reserved\\, then fewest cudaMalloc calls"`
}

// settings turns the input into KEY=VALUE changes, in allocator.Keys order.
func (s *WhatIfSettingsInput) settings() []analysis.WhatIfSetting {
	var out []analysis.WhatIfSetting
	if s == nil {
		return out
	}
	if s.ExpandableSegments != nil {
		v := "False"
		if *s.ExpandableSegments {
			v = "True"
		}
		out = append(out, analysis.WhatIfSetting{Key: "expandable_segments", Value: v})
	}
	if s.MaxSplitSizeMB != nil {
		out = append(out, analysis.WhatIfSetting{Key: "max_split_size_mb", Value: strconv.FormatInt(*s.MaxSplitSizeMB, 10)})
	}
	if s.RoundupPower2Divisions != nil {
		out = append(out, analysis.WhatIfSetting{Key: "roundup_power2_divisions", Value: strconv.Itoa(*s.RoundupPower2Divisions)})
	}
	if s.GarbageCollectionThreshold != nil {
		out = append(out, analysis.WhatIfSetting{Key: "garbage_collection_threshold", Value: strconv.FormatFloat(*s.GarbageCollectionThreshold, 'g', -1, 64)})
	}
	return out
}

func whatIfTool(e *env) (server.ServerTool, error) {
	return declare(e, "what-if", "Replay the trace under other allocator settings",
		"Would other PYTORCH_CUDA_ALLOC_CONF settings (expandable_segments, max_split_size_mb, roundup_power2_divisions, garbage_collection_threshold) have avoided the OOM or lowered the peak? Replays the trace's requests (sizes, streams, order, frees as recorded) through a model of PyTorch's caching allocator: once with the file's own settings (the baseline, checked against the recording: fidelity.recorded_segment_allocs vs reproduced_segment_allocs, recorded OOMs reproduced) and once with settings changed; per device the peak reserved and allocated bytes, cudaMalloc calls and OOMs of both, and for every recorded OOM whether each replay serves it with the headroom. recommend=true tries a small grid and ranks it. Capacity: reserved + device_free at the first OOM event, else device_memory, else the recorded peak when the trace shows cudaMalloc failures, else unbounded (peaks only). Use it after oom-report says fragmentation, before telling anyone to set expandable_segments: the replay answers, not a rule of thumb. Needs a trace; says when the replay starts from a rebuilt state and where fidelity is below 100%.",
		func(ctx context.Context, in WhatIfInput) (*analysis.WhatIfResult, error) {
			opt := analysis.WhatIfOptions{Settings: in.Settings.settings(), DeviceMemory: in.DeviceMemory, Recommend: in.Recommend}
			var probe allocator.Settings
			for _, s := range opt.Settings {
				if err := probe.Set(s.Key, s.Value); err != nil {
					return nil, userErrorf("settings.%s: %v (accepted keys: %s)", s.Key, err, strings.Join(allocator.Keys, ", "))
				}
			}
			snap, version, err := e.snapshotAt(ctx, in.Path, "path")
			if err != nil {
				return nil, err
			}
			if len(opt.Settings) == 0 && !opt.Recommend {
				return nil, userErrorf("settings is empty: name at least one of %s, or set recommend to try a grid", strings.Join(allocator.Keys, ", "))
			}
			key := struct {
				Device *int                   `json:"device"`
				Opt    analysis.WhatIfOptions `json:"opt"`
			}{in.Device, opt}
			r, err := memoized(e, "what-if", key, []string{version}, func() (*analysis.WhatIfResult, error) {
				return analysis.WhatIf(ctx, snap, in.Device, opt)
			})
			if err != nil && ctx.Err() == nil {
				var se *allocator.SettingError
				switch {
				case errors.Is(err, allocator.ErrNoTrace):
					return nil, userErrorf("%v", err)
				case errors.As(err, &se):
					return nil, userErrorf("%v", err)
				case in.Device != nil:
					return nil, userErrorf("%v: call what-if without device to replay every device with a trace", err)
				}
			}
			return r, err
		})
}
