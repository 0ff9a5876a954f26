package main

import (
	"fmt"
	"github.com/spf13/cobra"
	"path/filepath"
	"strings"

	"github.com/memsnap/memsnap/analysis"
	"github.com/memsnap/memsnap/analysis/load"
)

func init() { register(newSummarizeCmd) }

func newSummarizeCmd() *cobra.Command {
	var (
		lo     loadOptions
		device int
		asJSON bool
	)
	c := &cobra.Command{
		Use:   "summarize PATH",
		Short: "Memory per device and in total: reserved, allocated, pending free, inactive, pools, trace coverage",
		Long: `summarize reports, per device and in total: reserved (sum of segment sizes), allocated
(live tensors), pending free (freed, still used by another stream), inactive (cached, reusable),
requested and rounding waste; segments by pool, stream and type with the largest free block;
trace coverage with peaks from replaying the trace; OOM count; and what the file cannot answer.
PATH may be a file, "-" for standard input, or a directory of per-rank snapshots.`,
		Example: `  memsnap summarize snapshot.pickle
  memsnap summarize snapshot.pickle --json --device 0
  memsnap summarize ranks/ --json`,
		Args: needArgs(1, "a snapshot PATH"),
		RunE: func(c *cobra.Command, args []string) error {
			ctx := c.Context()
			opt := analysis.SummaryOptions{}
			if c.Flags().Changed("device") {
				opt.Device = &device
			}
			path := args[0]
			var s *analysis.Summary
			if path != "-" && load.IsDir(path) {
				ranks, err := load.Dir(ctx, path, lo.options())
				if err != nil {
					return err
				}
				if s, err = analysis.SummarizeDir(ctx, path, ranks, opt); err != nil {
					return err
				}
			} else {
				snap, err := loadSnapshot(ctx, path, lo)
				if err != nil {
					return err
				}
				if s, err = analysis.Summarize(ctx, snap, opt); err != nil {
					return err
				}
			}
			if err := emit(c, asJSON, s); err != nil {
				return err
			}
			return unreadFiles(path, s)
		},
	}
	lo.addFlags(c)
	c.Flags().IntVar(&device, "device", 0, "only this CUDA device")
	c.Flags().BoolVar(&asJSON, "json", false, "print one JSON object instead of text")
	return c
}

// unreadFiles is the error (exit status 2: the input was bad) for a directory some of whose
// files could not be read, after the others were summarized.
func unreadFiles(dir string, s *analysis.Summary) error {
	var bad []string
	for _, f := range s.Files {
		if f.Error != "" {
			bad = append(bad, filepath.Base(f.File))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("%s: %d of %d files could not be read (%s): the others are summarized above", dir, len(bad), len(s.Files), strings.Join(bad, ", "))
}
