package main

import (
	"context"
	"errors"
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
		Args: needArgs(2, "two snapshots of one run, BEFORE and AFTER"),
		RunE: func(c *cobra.Command, args []string) error {
			if args[0] == "-" && args[1] == "-" {
				return fmt.Errorf("diff: only one of BEFORE and AFTER can be standard input")
			}
			snaps, err := loadPair(c.Context(), [2]string{args[0], args[1]}, func(ctx context.Context, path string) (*snapshot.Snapshot, error) {
				return loadSnapshot(ctx, path, lo)
			})
			if err != nil {
				return err
			}
			before, after := snaps[0], snaps[1]
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

// loadPair loads two files at once, each on its own goroutine (a load's decoder is one core's
// work; where there are cores to spare the two overlap). A load that fails stops the other, so
// that a bad small file does not wait for a large one, and the error returned names its file:
// the first file's when both fail on their own, and never the cancellation that one's failure
// caused in the other.
func loadPair(ctx context.Context, paths [2]string, load func(context.Context, string) (*snapshot.Snapshot, error)) ([2]*snapshot.Snapshot, error) {
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		snaps [2]*snapshot.Snapshot
		errs  [2]error
		wg    sync.WaitGroup
	)
	for i := range paths {
		wg.Go(func() {
			if snaps[i], errs[i] = load(lctx, paths[i]); errs[i] != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	// stopped: the other load's failure ended this one (the caller's context is still live).
	stopped := func(err error) bool { return ctx.Err() == nil && errors.Is(err, context.Canceled) }
	for _, own := range []bool{true, false} {
		for i, err := range errs {
			if err != nil && (!own || !stopped(err)) {
				if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
					err = fmt.Errorf("%s: %w", paths[i], err) // the loader's bare context error
				}
				return [2]*snapshot.Snapshot{}, err
			}
		}
	}
	return snaps, nil
}
