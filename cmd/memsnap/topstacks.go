package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/memsnap/memsnap/analysis"
)

func init() { register(newTopStacksCmd) }

// attributionFlags are the frame-selection flags of every command that names sites.
type attributionFlags struct {
	userRoots []string
	skip      []string
	keep      []string
	rules     rulesFlag
}

// rulesFlag is --rules FILE: the file is read and checked when the flag is parsed, so a bad file
// or pattern is a one-line usage error (exit 2) before any snapshot is loaded.
type rulesFlag struct {
	path  string
	rules []analysis.Rule
}

func (f *rulesFlag) String() string { return f.path }
func (f *rulesFlag) Type() string   { return "FILE" }
func (f *rulesFlag) Set(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("cannot read rules: %w", err)
	}
	rules, err := analysis.ParseRules(data)
	if err != nil {
		return fmt.Errorf("rules %s: %w", path, err)
	}
	f.path, f.rules = path, rules
	return nil
}

func (f *attributionFlags) addFlags(c *cobra.Command) {
	c.Flags().StringArrayVar(&f.userRoots, "user-root", nil, "directory of your own code: frames under it win (repeatable)")
	c.Flags().StringArrayVar(&f.skip, "skip", nil, "regular expression on \"file:function\": matching frames are never the site (repeatable)")
	c.Flags().StringArrayVar(&f.keep, "keep", nil, "regular expression on \"file:function\": matching frames count as your code (repeatable)")
	c.Flags().Var(&f.rules, "rules", "YAML file of your own categories (name: regex over \"file:function\"; first match wins, innermost frame first): matching blocks are grouped under the name and carry rule")
}

func (f *attributionFlags) options() analysis.AttributionOptions {
	return analysis.AttributionOptions{UserRoots: f.userRoots, Skip: f.skip, Keep: f.keep, Rules: f.rules.rules}
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
communication, user container, other) and a filtered stack. --group-by annotation groups by the
innermost record_function range (external_annotations, e.g. Optimizer.step#AdamW.step,
ProfilerStep#3) open when each block was allocated (<none> outside any), with every allocation
the trace made in each range; --group-by compile_context groups by torch.compile's frame/graph.
--rules FILE groups by your own categories.`,
		Example: `  memsnap top-stacks snapshot.pickle
  memsnap top-stacks snapshot.pickle --group-by file -n 5 --json
  memsnap top-stacks snapshot.pickle --state inactive --user-root ~/proj
  memsnap top-stacks snapshot.pickle --group-by annotation
  memsnap top-stacks snapshot.pickle --rules categories.yaml`,
		Args: needArgs(1, "a snapshot PATH"),
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
	c.Flags().StringVar(&opt.GroupBy, "group-by", "site", "site, stack, file, function, annotation or compile_context")
	c.Flags().StringVar(&opt.State, "state", "allocated", "allocated, pending, inactive or all")
	c.Flags().IntVarP(&opt.Limit, "n", "n", 20, "show the N largest groups")
	c.Flags().IntVar(&opt.Device, "device", 0, "only this CUDA device (default: all)")
	c.Flags().BoolVar(&asJSON, "json", false, "print one JSON object instead of text")
	return c
}
