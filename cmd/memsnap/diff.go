package main

import (
	"fmt"
	"sync"

	"github.com/spf13/cobra"

	"github.com/memsnap/memsnap/analysis"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

func init() { register(newDiffCmd) }

func newDiffCmd() *cobra.Command {
	var (
		lo     loadOptions
		af     attributionFlags
		opt    analysis.DiffOptions
		asJSON bool
	)
	c := &cobra.Command{
		Use:   "diff BEFORE AFTER",
		Short: "What grew between two snapshots of the same run, by site, with leak patterns and fixes",
		Long: `diff first says whether the two files are two points of one run (same_run: true, false or
unknown, with the evidence: trace clocks and the events they share, segments at the same address
holding blocks of the same site, allocator settings, devices, workload); two points of one run
given later-first are swapped into time order (and said so).

It then matches the live memory of both by site (file, function, line — immune to address reuse)
and by role (parameter, gradient, optimizer_state, activation, ...), compares the traces' peaks and
who is live at each, and, for one run only, recognises: a retained autograd graph, a growing
container, optimizer state created on the first step (not a leak), growth no site pattern explains,
or no growth. Files of two different processes get not_comparable instead: their difference is not
growth.`,
		Example: `  memsnap diff step5.pickle step50.pickle
  memsnap diff before.pickle after.pickle --json`,
		Args: cobra.ExactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			if args[0] == "-" && args[1] == "-" {
				return fmt.Errorf("diff: only one of BEFORE and AFTER can be standard input")
			}
			// Both files load at once: each load is mostly one core's work.
			var (
				after    *snapshot.Snapshot
				afterErr error
				wg       sync.WaitGroup
			)
			wg.Go(func() { after, afterErr = loadSnapshot(c.Context(), args[1], lo) })
			before, err := loadSnapshot(c.Context(), args[0], lo)
			wg.Wait()
			if err != nil {
				return err
			}
			if afterErr != nil {
				return afterErr
			}
			if !c.Flags().Changed("device") {
				opt.Device = analysis.AllDevices
			}
			opt.Attribution = af.options()
			r, err := analysis.Diff(before, after, opt)
			if err != nil {
				return err
			}
			return emit(c, asJSON, r)
		},
	}
	lo.addFlags(c)
	af.addFlags(c)
	c.Flags().IntVarP(&opt.Limit, "n", "n", 20, "show the N sites that grew most")
	c.Flags().IntVar(&opt.Device, "device", 0, "only this CUDA device (default: all)")
	c.Flags().BoolVar(&asJSON, "json", false, "print one JSON object instead of text")
	return c
}
