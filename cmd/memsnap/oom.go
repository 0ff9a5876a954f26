package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/memsnap/memsnap/analysis"
)

func init() { register(newOOMCmd) }

// parseSize reads "80GiB", "80G", "81920MiB", "85899345920" as bytes.
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(strings.ToUpper(s))
	mult := int64(1)
	for _, u := range []struct {
		suf string
		m   int64
	}{{"TIB", 1 << 40}, {"GIB", 1 << 30}, {"MIB", 1 << 20}, {"KIB", 1 << 10}, {"TB", 1 << 40}, {"GB", 1 << 30}, {"MB", 1 << 20}, {"KB", 1 << 10}, {"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}, {"B", 1}} {
		if strings.HasSuffix(t, u.suf) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suf)), u.m
			break
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	n := f * float64(mult)
	// NaN, infinities, sizes past int64 and sizes under one byte would convert to a negative or
	// zero size, which the analysis reads as "estimate it" without saying so.
	if err != nil || !(n >= 1 && n < math.MaxInt64) {
		return 0, fmt.Errorf("bad size %q (use e.g. 80GiB)", s)
	}
	return int64(n), nil
}

func newOOMCmd() *cobra.Command {
	var (
		lo      loadOptions
		af      attributionFlags
		opt     analysis.OOMOptions
		devSize string
		asJSON  bool
	)
	c := &cobra.Command{
		Use:   "oom PATH",
		Short: "Explain every out-of-memory event: who held the memory and whether it was capacity, fragmentation or memory outside PyTorch",
		Long: `oom explains each oom event of the trace: the request, the device's free memory, the site
of the failing allocation, allocated/reserved/cached memory just before it (replayed from the
trace), the live sites holding memory, the largest cached block that could have served the
request, and the verdict — capacity, fragmentation or outside_pytorch — with the fixes.
The file does not record the device's size; pass --device-memory when you know it.`,
		Example: `  memsnap oom oom_snapshot.pickle
  memsnap oom oom_snapshot.pickle --device-memory 80GiB --json`,
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
			opt.Attribution = af.options()
			r, err := analysis.OOMReport(c.Context(), snap, opt)
			if err != nil {
				return err
			}
			return emit(c, asJSON, r)
		},
	}
	lo.addFlags(c)
	af.addFlags(c)
	c.Flags().IntVarP(&opt.Limit, "n", "n", 10, "live sites to list per OOM")
	c.Flags().StringVar(&devSize, "device-memory", "", "the GPU's total memory, e.g. 80GiB (the file does not record it)")
	c.Flags().BoolVar(&asJSON, "json", false, "print one JSON object instead of text")
	return c
}
