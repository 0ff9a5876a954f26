package main

import (
	"github.com/spf13/cobra"

	"github.com/memsnap/memsnap/analysis"
)

func init() { register(newTopStacksCmd) }

// attributionFlags are the frame-selection flags of every command that names sites.
type attributionFlags struct {
	userRoots []string
	skip      []string
	keep      []string
}

func (f *attributionFlags) addFlags(c *cobra.Command) {
	c.Flags().StringArrayVar(&f.userRoots, "user-root", nil, "directory of your own code: frames under it win (repeatable)")
	c.Flags().StringArrayVar(&f.skip, "skip", nil, "regular expression on \"file:function\": matching frames are never the site (repeatable)")
	c.Flags().StringArrayVar(&f.keep, "keep", nil, "regular expression on \"file:function\": matching frames count as your code (repeatable)")
}

func (f *attributionFlags) options() analysis.AttributionOptions {
	return analysis.AttributionOptions{UserRoots: f.userRoots, Skip: f.skip, Keep: f.keep}
}

func newTopStacksCmd() *cobra.Command {
	var (
		lo     loadOptions
		af     attributionFlags
		opt    analysis.TopStacksOptions
		asJSON bool
	)
	c := &cobra.Command{
		Use:   "top-stacks PATH",
		Short: "Live memory grouped by the line of your code that allocated it, largest first",
		Long: `top-stacks groups the blocks of the snapshot by site — the innermost frame in your own code,
skipping C++, the Python runtime, PyTorch internals and other libraries (model-defining code such
as transformers' modeling_*.py counts as yours) — and lists bytes, share of the selected memory,
blocks, a category guess (parameter, gradient, optimizer state, activation, backward temporary,
communication, user container, other) and a filtered stack.`,
		Example: `  memsnap top-stacks snapshot.pickle
  memsnap top-stacks snapshot.pickle --group-by file -n 5 --json
  memsnap top-stacks snapshot.pickle --state inactive --user-root ~/proj`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			snap, err := loadSnapshot(c.Context(), args[0], lo)
			if err != nil {
				return err
			}
			if !c.Flags().Changed("device") {
				opt.Device = analysis.AllDevices
			}
			opt.Attribution = af.options()
			r, err := analysis.TopStacks(snap, opt)
			if err != nil {
				return err
			}
			return emit(c, asJSON, r)
		},
	}
	lo.addFlags(c)
	af.addFlags(c)
	c.Flags().StringVar(&opt.GroupBy, "group-by", "site", "site, stack, file or function")
	c.Flags().StringVar(&opt.State, "state", "allocated", "allocated, pending, inactive or all")
	c.Flags().IntVarP(&opt.Limit, "n", "n", 20, "show the N largest groups")
	c.Flags().IntVar(&opt.Device, "device", 0, "only this CUDA device (default: all)")
	c.Flags().BoolVar(&asJSON, "json", false, "print one JSON object instead of text")
	return c
}
