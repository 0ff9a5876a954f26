package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/memsnap/memsnap/analysis"
)

func init() { register(newFragmentationCmd) }

func newFragmentationCmd() *cobra.Command {
	var (
		lo      loadOptions
		opt     analysis.FragOptions
		devSize string
		asJSON  bool
	)
	c := &cobra.Command{
		Use:   "fragmentation PATH",
		Short: "How the cached memory is split: per pool, stream and segment type, what empty_cache() would return, advice",
		Long: `fragmentation reports, per device, pool, stream and segment type: reserved, allocated and
free (inactive) bytes, the largest free block, segments that are mostly free, internal waste
(size - requested), what torch.cuda.empty_cache() would give back (fully free segments; with
expandable segments only whole free 2 MiB / 20 MiB pages) and what it cannot (free memory
stranded next to live blocks), a one-line verdict (cache left after a peak, fragmentation, too
little free to matter), the trace's segment-release bursts (explicit empty_cache() calls,
cudaMalloc-failure retries) and advice (expandable_segments; max_split_size_mb only where it
applies). Pass --device-memory when you know the GPU's size: reserved near it means the device
is at its limit.`,
		Example: `  memsnap fragmentation snapshot.pickle
  memsnap fragmentation snapshot.pickle --json`,
		Args: needArgs(1, "a snapshot PATH"),
		RunE: func(c *cobra.Command, args []string) error {
			if devSize != "" {
				n, err := parseSize(devSize)
				if err != nil {
					return fmt.Errorf("--device-memory: %w", err)
				}
				opt.DeviceTotalBytes = n
			}
			snap, err := loadSnapshot(c.Context(), args[0], lo)
			if err != nil {
				return err
			}
			if !c.Flags().Changed("device") {
				opt.Device = analysis.AllDevices
			}
			r, err := analysis.Fragmentation(snap, opt)
			if err != nil {
				return err
			}
			return emit(c, asJSON, r)
		},
	}
	lo.addFlags(c)
	c.Flags().IntVar(&opt.Device, "device", 0, "only this CUDA device (default: all)")
	c.Flags().IntVarP(&opt.Limit, "n", "n", 50, "show at most N groups")
	c.Flags().StringVar(&devSize, "device-memory", "", "the GPU's total memory, e.g. 80GiB (the file does not record it)")
	c.Flags().BoolVar(&asJSON, "json", false, "print one JSON object instead of text")
	return c
}
