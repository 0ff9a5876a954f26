package tools

import (
	"context"
	"strings"

	"github.com/mark3labs/mcp-go/server"

	"github.com/memsnap/memsnap/analysis"
)

// CheckInput is the check tool's input: the budgets of a memory gate.
type CheckInput struct {
	Path             string   `json:"path" jsonschema:"description=Snapshot file to gate; absolute or relative to the server's first root"`
	MaxPeak          string   `json:"max_peak,omitempty" jsonschema:"description=Budget for the allocated peak over the trace (the final allocated bytes without a trace): bytes or a size with a unit\\, e.g. 20GiB\\, 512MiB\\, 1.5GB"`
	MaxReserved      string   `json:"max_reserved,omitempty" jsonschema:"description=Budget for the reserved peak over the trace (the final reserved bytes without a trace)\\, e.g. 24GiB"`
	MaxAllocated     string   `json:"max_allocated,omitempty" jsonschema:"description=Budget for the allocated bytes of the final state\\, e.g. 16GiB"`
	Baseline         string   `json:"baseline,omitempty" jsonschema:"description=Another snapshot to compare the peak with (needs max_growth_percent)"`
	MaxGrowthPercent *float64 `json:"max_growth_percent,omitempty" jsonschema:"description=Largest allowed growth of the peak over baseline\\, in percent (final allocated bytes when either file has no trace),minimum=0"`
	Device           *int     `json:"device,omitempty" jsonschema:"description=Only this CUDA device (default: every device),minimum=0"`
}

// checkArgument spells a budget as this tool's argument (max_peak), not the CLI's flag
// (--max-peak), in the answer's sentences.
func checkArgument(budget string) string {
	if budget == "max-growth" {
		return "max_growth_percent"
	}
	return strings.ReplaceAll(budget, "-", "_")
}

func checkTool(e *env) (server.ServerTool, error) {
	return declare(e, "check", "Check memory against budgets",
		"A memory gate: compares a snapshot with budgets (max_peak, max_reserved, max_allocated; or baseline + max_growth_percent) on each device and answers pass, with one entry per budget naming the number, the budget and the top site at that moment (the peak event or the final state). Use it to decide whether a change regressed memory; the CLI's memsnap check gives the same answer with exit status 0/1/2 for CI. At least one budget is required.",
		func(ctx context.Context, in CheckInput) (*analysis.CheckResult, error) {
			opt := analysis.CheckOptions{MaxGrowthPercent: -1, Device: analysis.AllDevices, Spell: checkArgument}
			for _, b := range []struct {
				field, value string
				dst          *int64
			}{{"max_peak", in.MaxPeak, &opt.MaxPeakBytes}, {"max_reserved", in.MaxReserved, &opt.MaxReservedBytes}, {"max_allocated", in.MaxAllocated, &opt.MaxAllocatedBytes}} {
				if b.value == "" {
					continue
				}
				n, err := analysis.ParseBytes(b.value)
				if err != nil || n <= 0 {
					return nil, userErrorf("%s must be bytes or a size with a unit (20GiB, 512MiB, 1.5GB) above 0, got %q", b.field, clip(b.value, maxEchoedValue))
				}
				*b.dst = n
			}
			if in.Device != nil {
				opt.Device = *in.Device
			}
			switch {
			case in.Baseline != "" && in.MaxGrowthPercent == nil:
				return nil, userErrorf("baseline needs max_growth_percent")
			case in.Baseline == "" && in.MaxGrowthPercent != nil:
				return nil, userErrorf("max_growth_percent needs baseline (another snapshot of the same job)")
			case in.MaxGrowthPercent != nil:
				opt.MaxGrowthPercent = *in.MaxGrowthPercent
			}
			snap, _, err := e.snapshotAt(ctx, in.Path, "path")
			if err != nil {
				return nil, err
			}
			if opt.MaxPeakBytes == 0 && opt.MaxReservedBytes == 0 && opt.MaxAllocatedBytes == 0 && in.Baseline == "" {
				return nil, userErrorf("no budget given: set max_peak, max_reserved, max_allocated, or baseline with max_growth_percent")
			}
			if in.Baseline != "" {
				if opt.Baseline, _, err = e.snapshotAt(ctx, in.Baseline, "baseline"); err != nil {
					return nil, err
				}
			}
			return analysis.Check(ctx, snap, opt)
		})
}
