package main

import (
	"errors"
	"fmt"
	"math"

	"github.com/spf13/cobra"

	"github.com/memsnap/memsnap/analysis"
)

func init() { register(newCheckCmd) }

// errOverBudget makes memsnap exit with status 1: the snapshot was read, and a budget failed.
var errOverBudget = errors.New("over budget")

// sizeFlag is a byte size flag that accepts 20GiB, 512MiB, 1.5GB or plain bytes.
type sizeFlag struct{ bytes int64 }

func (f *sizeFlag) String() string {
	if f.bytes == 0 {
		return ""
	}
	return fmt.Sprint(f.bytes)
}
func (f *sizeFlag) Type() string { return "SIZE" }
func (f *sizeFlag) Set(s string) error {
	b, err := analysis.ParseBytes(s)
	if err != nil {
		return err
	}
	if b <= 0 {
		return fmt.Errorf("a budget must be more than 0 bytes")
	}
	f.bytes = b
	return nil
}

func newCheckCmd() *cobra.Command {
	var (
		lo                        loadOptions
		af                        attributionFlags
		peak, reserved, allocated sizeFlag
		baseline                  string
		growth                    float64
		device                    int
		asJSON                    bool
	)
	c := &cobra.Command{
		Use:   "check PATH",
		Short: "A memory gate for CI: exit 0 within budget, 1 over it, 2 on bad input",
		Long: `check compares a snapshot with memory budgets and exits 0 when every budget holds, 1 when one
is exceeded (one line per violated budget naming the number, the budget and the top site at that
moment) and 2 when the input is bad. Budgets apply to each device:
  --max-peak       the allocated peak over the trace (the final allocated bytes without a trace)
  --max-reserved   the reserved peak over the trace (the final reserved bytes without a trace)
  --max-allocated  the allocated bytes in the final state
  --baseline OTHER --max-growth PCT   the peak's growth over another snapshot's (final allocated
                   bytes when either file has no trace), in percent
Sizes accept bytes or units: 20GiB, 512MiB, 1.5GB.`,
		Example: `  memsnap check snapshot.pickle --max-peak 20GiB
  memsnap check new.pickle --baseline main.pickle --max-growth 5 --json`,
		Args: needArgs(1, "a snapshot PATH"),
		RunE: func(c *cobra.Command, args []string) error {
			opt := analysis.CheckOptions{MaxPeakBytes: peak.bytes, MaxReservedBytes: reserved.bytes,
				MaxAllocatedBytes: allocated.bytes, MaxGrowthPercent: -1, Device: analysis.AllDevices, Attribution: af.options()}
			if c.Flags().Changed("device") {
				opt.Device = device
			}
			if c.Flags().Changed("max-growth") {
				if baseline == "" {
					return fmt.Errorf("--max-growth needs --baseline OTHER (see memsnap check --help)")
				}
				if growth < 0 || math.IsNaN(growth) || math.IsInf(growth, 0) {
					return fmt.Errorf("--max-growth must be a percentage of 0 or more, not %g", growth)
				}
				opt.MaxGrowthPercent = growth
			}
			if baseline != "" && opt.MaxGrowthPercent < 0 {
				return fmt.Errorf("--baseline needs --max-growth PCT (see memsnap check --help)")
			}
			snap, err := loadSnapshot(c.Context(), args[0], lo)
			if err != nil {
				return err
			}
			if baseline != "" {
				if opt.Baseline, err = loadSnapshot(c.Context(), baseline, lo); err != nil {
					return err
				}
			}
			r, err := analysis.Check(c.Context(), snap, opt)
			if err != nil {
				return err
			}
			if err := emit(c, asJSON, r); err != nil {
				return err
			}
			if !r.Pass {
				n := 0
				for _, b := range r.Budgets {
					if !b.Pass {
						n++
					}
				}
				return fmt.Errorf("%w: %d of %d budgets exceeded", errOverBudget, n, len(r.Budgets))
			}
			return nil
		},
	}
	lo.addFlags(c)
	af.addFlags(c)
	c.Flags().Var(&peak, "max-peak", "budget for the allocated peak (e.g. 20GiB)")
	c.Flags().Var(&reserved, "max-reserved", "budget for the reserved peak (e.g. 24GiB)")
	c.Flags().Var(&allocated, "max-allocated", "budget for the allocated bytes of the final state")
	c.Flags().StringVar(&baseline, "baseline", "", "another snapshot to compare the peak with (needs --max-growth)")
	c.Flags().Float64Var(&growth, "max-growth", 0, "largest allowed growth over --baseline, in percent")
	c.Flags().IntVar(&device, "device", 0, "only this CUDA device (default: every device)")
	c.Flags().BoolVar(&asJSON, "json", false, "print one JSON object instead of text")
	return c
}
