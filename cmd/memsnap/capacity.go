package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/memsnap/memsnap/analysis"
	"github.com/memsnap/memsnap/analysis/capacity"
)

func init() { register(newCapacityCmd) }

// parseSizeList reads "8" or "8,16,32" (repeatable flags join their values) as positive
// integers.
func parseSizeList(flag string, vals []string) ([]int64, error) {
	var out []int64
	for _, v := range vals {
		for _, s := range strings.Split(v, ",") {
			n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
			if err != nil || n <= 0 {
				return nil, fmt.Errorf("%s %s: want positive whole numbers separated by commas, e.g. 8,16", flag, v)
			}
			out = append(out, n)
		}
	}
	return out, nil
}

func newCapacityCmd() *cobra.Command {
	var (
		lo        loadOptions
		sizes     []string
		predict   []string
		dimension string
		device    int
		devMem    string
		capSize   string
		asJSON    bool
	)
	c := &cobra.Command{
		Use:   "capacity FILE [FILE2 ...] --sizes N[,M,...] [--dimension batch|seq] [--device-memory SIZE | --capacity SIZE] [--predict K]...",
		Short: "The largest batch (or sequence length) that fits the GPU, and the peak at other sizes, from the run's own trace",
		Long: `capacity predicts the peak memory of a workload at other batch sizes (or sequence lengths)
and the largest one that fits, from snapshots of the same workload recorded with history on.
--sizes gives each file's size, in order.

Two or more files (the exact method, two_points): each allocation is matched across the files
by its call stack and its position in the step, and its size is fitted over the sizes (fixed,
linear, or with three or more files quadratic: eager attention grows with the sequence
squared). The trace's peak step (and the step before it, which rebuilds the cache) is built at
each size and replayed through the allocator model under the file's own settings, so rounding,
caching and fragmentation count; the largest size is searched with that replay.

One file (the estimate, roles): the allocations whose roles grow with the batch (activations,
temporaries, backward temporaries, KV cache) are scaled; parameters, gradients, optimizer state
and workspaces are not. The assumptions are listed.

The capacity is --capacity (what PyTorch may reserve); else --device-memory (the GPU's total)
less the memory outside PyTorch an OOM event shows; else reserved + device_free at an OOM event
in the files. Without any, the largest size is not given (the peaks are).`,
		Example: `  memsnap capacity bs8.pickle bs16.pickle --sizes 8,16 --device-memory 80GiB
  memsnap capacity bs8.pickle bs16.pickle bs32_oom.pickle --sizes 8,16,32
  memsnap capacity seq1k.pickle seq2k.pickle seq4k.pickle --sizes 1024,2048,4096 --dimension seq --capacity 75GiB --predict 8192
  memsnap capacity bs8.pickle --sizes 8 --capacity 22GiB --json`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			ns, err := parseSizeList("--sizes", sizes)
			if err != nil {
				return err
			}
			if len(ns) != len(args) {
				return fmt.Errorf("--sizes gives %d sizes for %d files: give each file's %s, in order (e.g. --sizes 8,16)", len(ns), len(args), dimensionWord(dimension))
			}
			var opt capacity.Options
			opt.Dimension = dimension
			if opt.Predict, err = parseSizeList("--predict", predict); err != nil {
				return err
			}
			if devMem != "" && capSize != "" {
				return fmt.Errorf("give --capacity (what PyTorch may reserve) or --device-memory (the GPU's total), not both")
			}
			if devMem != "" {
				if opt.DeviceMemory, err = analysis.ParseBytes(devMem); err != nil || opt.DeviceMemory <= 0 {
					return fmt.Errorf("--device-memory %s: want a size such as 80GiB or 85899345920", devMem)
				}
			}
			if capSize != "" {
				if opt.Capacity, err = analysis.ParseBytes(capSize); err != nil || opt.Capacity <= 0 {
					return fmt.Errorf("--capacity %s: want a size such as 75GiB or 80530636800", capSize)
				}
			}
			if c.Flags().Changed("device") {
				opt.Device = &device
			}
			files := make([]capacity.File, len(args))
			for i, p := range args {
				snap, err := loadSnapshot(c.Context(), p, lo)
				if err != nil {
					return err
				}
				files[i] = capacity.File{Snap: snap, Size: ns[i]}
			}
			r, err := capacity.Analyze(c.Context(), files, opt)
			if err != nil {
				return err
			}
			return emit(c, asJSON, r)
		},
	}
	lo.addFlags(c)
	c.Flags().StringArrayVar(&sizes, "sizes", nil, "each file's batch size (or sequence length), in order: N[,M,...]")
	c.Flags().StringArrayVar(&predict, "predict", nil, "also predict this size (repeatable, or K,L)")
	c.Flags().StringVar(&dimension, "dimension", "batch", "what the sizes count: batch or seq")
	c.Flags().IntVar(&device, "device", 0, "only this CUDA device (default: every device traced in all files)")
	c.Flags().StringVar(&devMem, "device-memory", "", "the GPU's total memory, e.g. 80GiB (the memory outside PyTorch is subtracted when an OOM event shows it)")
	c.Flags().StringVar(&capSize, "capacity", "", "what PyTorch may reserve on the device, e.g. 75GiB")
	c.Flags().BoolVar(&asJSON, "json", false, "print one JSON object instead of text")
	return c
}

func dimensionWord(d string) string {
	if d == "seq" {
		return "sequence length"
	}
	return "batch size"
}
