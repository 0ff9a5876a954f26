package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/memsnap/memsnap/analysis"
)

func init() { register(newTrimCmd) }

func newTrimCmd() *cobra.Command {
	var (
		out        string
		force      bool
		protocol   int
		window     string
		device     int
		lastEvents int
		asJSON     bool
	)
	c := &cobra.Command{
		Use:   "trim PATH -o OUT [--last-events N] [--window A:B] [--device N]",
		Short: "Write a smaller snapshot: the state kept, the trace cut (opens in pytorch.org/memory_viz)",
		Long: `trim writes a valid, smaller snapshot that pytorch.org/memory_viz opens even when the original
is too large for it. It keeps the state and cuts the trace:

  --last-events N   keep the newest N events of each device's trace
  --window A:B      keep trace events A to B-1 (A: or :B leave one end open); needs --device
                    when several devices have traces
  --device N        keep only device N (its segments and trace)

When the window ends before the trace does, the segments written are the state after event B-1,
rebuilt by replay (allocated and pending blocks at their addresses, the gaps cached free), so
the trace still leads to the state it is written with, as memory_viz's views assume. Otherwise
the file's own final segments are kept and the output has the same final totals as the input.

The output's form follows its name (.pickle/.pkl: pickle protocol 4; .json; .gz compresses). It
is written whole or not at all; an existing file is kept unless --force, and the input is never
overwritten.`,
		Example: `  memsnap trim huge.pickle -o last200k.pickle --last-events 200000
  memsnap trim huge.pickle -o around_oom.pickle --window 1650000:1672696 --device 0`,
		Args: needArgs(1, "a snapshot PATH"),
		RunE: func(c *cobra.Command, args []string) error {
			if out == "" {
				return fmt.Errorf("give the output file with -o OUT.pickle (see %s --help)", c.CommandPath())
			}
			if lastEvents < 0 {
				return fmt.Errorf("--last-events %d: must not be negative", lastEvents)
			}
			opt := analysis.TrimOptions{Device: -1, LastEvents: lastEvents}
			if window != "" {
				var err error
				if opt.Start, opt.End, err = parseWindow(window); err != nil {
					return err
				}
				opt.Window = true
			}
			if c.Flags().Changed("device") {
				opt.Device = device
			}
			if lastEvents == 0 && window == "" && opt.Device < 0 {
				return fmt.Errorf("say what to keep: --last-events N, --window A:B or --device N (memsnap convert rewrites a file whole)")
			}
			wopt, err := outputSnapshot(args[0], out, protocol, force)
			if err != nil {
				return err
			}
			snap, err := loadSnapshot(c.Context(), args[0], loadOptions{})
			if err != nil {
				return err
			}
			trimmed, rep, err := analysis.Trim(c.Context(), snap, opt)
			if err != nil {
				return err
			}
			n, err := writeSnapshot(c.Context(), trimmed, out, wopt, force)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(c.OutOrStdout(), rep)
			}
			in := int64(0)
			if st, err := os.Stat(args[0]); err == nil {
				in = st.Size()
			}
			if _, err := fmt.Fprintf(c.OutOrStdout(), "wrote %s (%s; the input is %s)\n", out, analysis.FormatBytes(n), analysis.FormatBytes(in)); err != nil {
				return err
			}
			return emit(c, false, rep)
		},
	}
	c.Flags().StringVarP(&out, "output", "o", "", "the snapshot to write: OUT.pickle, OUT.pkl or OUT.json (optionally .gz)")
	c.Flags().BoolVar(&force, "force", false, "replace the output file if it exists")
	c.Flags().IntVar(&protocol, "protocol", 4, "pickle protocol (2 to 5; memory_viz reads 2 to 4)")
	c.Flags().StringVar(&window, "window", "", "keep trace events A to B-1 (A:B; A: or :B leave one end open)")
	c.Flags().IntVar(&device, "device", 0, "keep only this device")
	c.Flags().IntVar(&lastEvents, "last-events", 0, "keep the newest N events of each device's trace")
	c.Flags().BoolVar(&asJSON, "json", false, "print what was kept as one JSON object")
	return c
}
