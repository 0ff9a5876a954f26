package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/memsnap/memsnap/analysis"
)

func init() { register(newReplayCmd) }

func newReplayCmd() *cobra.Command {
	var (
		lo     loadOptions
		af     attributionFlags
		opt    analysis.ReplayOptions
		asJSON bool
	)
	c := &cobra.Command{
		Use:   "replay PATH",
		Short: "Replay the trace: peak and who held it, delayed frees, leaks per iteration, the sawtooth, garbage-collector frees",
		Long: `replay walks each device's trace (device_traces) event by event and rebuilds allocated and
reserved memory over time. It reports the peak and the sites live at the peak, each with its
role and user_site; the workload (training, inference, unknown); activation checkpointing advice
only when a backward pass is visible and activations are material; frees delayed by another
stream (record_stream); steps (ProfilerStep#N annotations, or a forward pass after a backward
pass or an optimizer step; never repeated layers) with the per-step sawtooth and growth; sites
that allocate in every step without freeing (first-step optimizer state is marked expected);
empty_cache() and cudaMalloc-retry bursts; and frees made by the garbage collector (reference
cycles). It says what the file cannot tell: no trace, a trace that starts late or wrapped its
ring buffer, frees without stacks.`,
		Example: `  memsnap replay snapshot.pickle
  memsnap replay snapshot.pickle --device 1 --json`,
		Args: needArgs(1, "a snapshot PATH"),
		RunE: func(c *cobra.Command, args []string) error {
			snap, err := loadSnapshot(c.Context(), args[0], lo)
			if err != nil {
				return err
			}
			opt.Attribution = af.options()
			var device *int
			if c.Flags().Changed("device") {
				if opt.Device < 0 {
					return fmt.Errorf("--device must be 0 or more, not %d", opt.Device)
				}
				device = &opt.Device
			}
			out, err := analysis.ReplaySnapshot(c.Context(), snap, device, opt)
			if err != nil {
				return err
			}
			return emit(c, asJSON, out)
		},
	}
	lo.addFlags(c)
	af.addFlags(c)
	c.Flags().IntVar(&opt.Device, "device", 0, "only this CUDA device (default: every device with segments or events)")
	c.Flags().IntVarP(&opt.Limit, "n", "n", 10, "list at most N sites per section")
	c.Flags().BoolVar(&asJSON, "json", false, "print one JSON object instead of text")
	return c
}
