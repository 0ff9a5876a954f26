package tools

import (
	"context"
	"regexp"

	"github.com/mark3labs/mcp-go/server"

	"github.com/memsnap/memsnap/analysis"
)

// ReplayInput is the replay tool's input.
type ReplayInput struct {
	Path     string          `json:"path" jsonschema:"description=Snapshot file recorded with history on (_record_memory_history: device_traces holds the events); absolute or relative to the server's first root"`
	Device   *int            `json:"device,omitempty" jsonschema:"description=Only this CUDA device (default: every device with segments or trace events),minimum=0"`
	Limit    int             `json:"limit,omitempty" jsonschema:"description=Items listed per section (peak sites\\, delayed-free sites\\, repeating sites\\, GC-freed sites\\, stages)\\, largest first (default 10),minimum=1,maximum=100,default=10"`
	Offset   int             `json:"offset,omitempty" jsonschema:"description=First stage listed (stages are paged by offset and limit; stages_next_offset continues),minimum=0,default=0"`
	UserRoot []string        `json:"user_root,omitempty" jsonschema:"description=Directories of the user's own code: the innermost frame under one of them is the site (like the CLI's --user-root)"`
	Skip     []string        `json:"skip,omitempty" jsonschema:"description=Regular expressions on file:function: matching frames are never the site (like --skip)"`
	Keep     []string        `json:"keep,omitempty" jsonschema:"description=Regular expressions on file:function: matching frames count as the user's code even inside site-packages or torch (like --keep)"`
	Rules    []analysis.Rule `json:"rules,omitempty" jsonschema:"description=The user's own categories (like the CLI's --rules): blocks whose stack has a frame whose file:function matches a rule's pattern are grouped under its name and carry rule; the first rule that matches wins\\, innermost frame first"`
}

// replayDefaultLimit keeps the default answer under the text cap.
const replayDefaultLimit = 10

// replayKey is what a replay's answer depends on besides the file.
type replayKey struct {
	Device *int                   `json:"device"`
	Opt    analysis.ReplayOptions `json:"opt"`
}

func replayTool(e *env) (server.ServerTool, error) {
	return declare(e, "replay", "Replay memory over time",
		"Memory over time: replays the trace (device_traces) event by event. The peak of allocated and reserved memory with the event index and the sites live at the peak, each with its role (activation, temporary, optimizer_state, …) and user_site; the workload (training, inference, unknown); checkpointing advice only when a backward pass is visible and activations are material; frees delayed by another stream (record_stream); steps (ProfilerStep annotations, or a forward pass after a backward pass or optimizer step; never repeated layers) with the per-step sawtooth and the growth each step leaves behind; sites that allocate in every step and never free (leaks; first-step optimizer state is marked expected); empty_cache() and cudaMalloc-retry bursts; frees made by the garbage collector (reference cycles); OOM events. Use it when the question is about the peak rather than the moment of the dump, or about what grows step to step within one file. Needs a trace; says what the file cannot tell. Event indexes open with read-raw-section device_traces[D][A:B].",
		func(ctx context.Context, in ReplayInput) (*analysis.ReplayReport, error) {
			for _, p := range []struct {
				field string
				list  []string
			}{{"skip", in.Skip}, {"keep", in.Keep}} {
				for _, re := range p.list {
					if _, err := regexp.Compile(re); err != nil {
						return nil, userErrorf("%s pattern %q is not a regular expression (Go RE2 syntax): %v", p.field, clip(re, maxEchoedValue), clip(err.Error(), maxEchoedPath))
					}
				}
			}
			rules, err := rulesArg(in.Rules)
			if err != nil {
				return nil, err
			}
			snap, version, err := e.snapshotAt(ctx, in.Path, "path")
			if err != nil {
				return nil, err
			}
			opt := analysis.ReplayOptions{Limit: in.Limit, StagesOffset: in.Offset, Attribution: analysis.AttributionOptions{UserRoots: in.UserRoot, Skip: in.Skip, Keep: in.Keep, Rules: rules}}
			if opt.Limit <= 0 {
				opt.Limit = replayDefaultLimit
			}
			r, err := memoized(e, "replay", replayKey{Device: in.Device, Opt: opt}, []string{version}, func() (*analysis.ReplayReport, error) {
				return analysis.ReplaySnapshot(ctx, snap, in.Device, opt)
			})
			if err != nil && in.Device != nil && ctx.Err() == nil {
				return nil, userErrorf("%v: call replay without device to replay every device", err)
			}
			return r, err
		})
}
