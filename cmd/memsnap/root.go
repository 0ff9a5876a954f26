package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/memsnap/memsnap/analysis"
	"github.com/memsnap/memsnap/analysis/bound"
	"github.com/memsnap/memsnap/analysis/load"
	"github.com/memsnap/memsnap/analysis/snapshot"
	"github.com/memsnap/memsnap/tools"
)

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "memsnap",
		Short: "Diagnose PyTorch CUDA memory snapshots (torch.cuda.memory._dump_snapshot)",
		Long: `memsnap reads the snapshot files that torch.cuda.memory._dump_snapshot() writes —
any PyTorch version, pickle or JSON, gzip or not — without running any code from them,
and answers in allocator terms and in your own code.`,
		Version:       appVersion(),
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(c *cobra.Command, _ []string) error {
			// Flags several commands share: negative values mean nothing.
			for _, name := range []string{"device", "max-trace-events"} {
				if f := c.Flags().Lookup(name); f != nil && f.Changed && strings.HasPrefix(f.Value.String(), "-") {
					return fmt.Errorf("--%s %s: must not be negative (see %s --help)", name, f.Value, c.CommandPath())
				}
			}
			// A one-shot command holds one snapshot and exits: collect garbage less often (the
			// measured gain on a 300 MB file is ~15% at the same peak RSS). The server keeps
			// snapshots for long, so it stays with Go's default.
			if c.Name() != "serve" {
				debug.SetGCPercent(200)
			}
			startProgress(c)
			return nil
		},
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return fmt.Errorf("%w (see %s --help)", err, c.CommandPath())
	})
	for _, add := range commands {
		root.AddCommand(add())
	}
	return root
}

// version, when set with -ldflags "-X main.version=v1.2.3", replaces the version read from
// the build information.
var version string

// appVersion is what memsnap --version prints and the MCP server reports as serverInfo.version:
// the module version, VCS revision and modified flag of the build ("(devel)" when unknown).
func appVersion() string {
	if version != "" {
		return version
	}
	return tools.BuildVersion()
}

// commands are registered by each command's file (init), so commands stay one file each.
var commands []func() *cobra.Command

func register(c func() *cobra.Command) { commands = append(commands, c) }

// loadOptions are the flags every command that reads snapshots shares.
type loadOptions struct {
	maxTraceEvents  int
	maxDecompressed decompressedFlag
}

func (o *loadOptions) addFlags(c *cobra.Command) {
	c.Flags().IntVar(&o.maxTraceEvents, "max-trace-events", 0, "keep only the newest N trace events per device (bounds memory; 0 = keep all)")
	c.Flags().Var(&o.maxDecompressed, "max-decompressed", "largest size a .gz snapshot may decompress to, e.g. 8GiB (-1 = no limit; default 4GiB)")
}

func (o *loadOptions) options() load.Options {
	// The command line reads the user's own symbolic links (the MCP server does not).
	return load.Options{MaxTraceEvents: o.maxTraceEvents, MaxDecompressed: o.maxDecompressed.bytes, FollowLinks: true}
}

// decompressedFlag is --max-decompressed: a size (8GiB, 512MiB, bytes) or -1 for no limit.
type decompressedFlag struct{ bytes int64 }

func (f *decompressedFlag) String() string {
	if f.bytes == 0 {
		return ""
	}
	return fmt.Sprint(f.bytes)
}
func (f *decompressedFlag) Type() string { return "SIZE" }
func (f *decompressedFlag) Set(s string) error {
	if strings.TrimSpace(s) == "-1" {
		f.bytes = -1
		return nil
	}
	b, err := analysis.ParseBytes(s)
	if err != nil {
		return err
	}
	if b == 0 {
		return fmt.Errorf("use -1 for no limit, or a size above 0")
	}
	f.bytes = b
	return nil
}

// loadSnapshot loads one snapshot file ("-" = standard input).
func loadSnapshot(ctx context.Context, path string, o loadOptions) (*snapshot.Snapshot, error) {
	opt := o.options()
	opt.Progress = activeProgress.reading(path)
	snap, err := load.File(ctx, path, opt)
	activeProgress.read()
	// What the decoder leaves (tens of MB on a large file) is garbage now, and the next
	// collection would be far off (SetGCPercent above): collect it, so that the analysis
	// reuses those pages instead of new ones the kernel must zero first, which on a VM may
	// also have to be backed by the host again. The collection takes about a millisecond: the
	// snapshot is mostly pointer-free arrays.
	runtime.GC()
	return snap, err
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// texter is a result that renders itself for a person or an agent.
type texter interface{ Text() string }

// emit prints a result as JSON or text.
func emit(c *cobra.Command, asJSON bool, r texter) error {
	// Every string cut to a bound, exactly as the MCP server cuts it: --json and
	// structuredContent stay identical, and a 15 MiB frame name prints as 1 KiB.
	r = bound.Strings(r)
	if asJSON {
		return printJSON(c.OutOrStdout(), r)
	}
	_, err := io.WriteString(c.OutOrStdout(), r.Text())
	return err
}

// needArgs checks a command's positional arguments and says what is missing in a sentence
// ("summarize needs a snapshot PATH"), instead of cobra's "accepts 1 arg(s), received 0".
// what names the arguments as the object of "needs"; n is how many (0 for none).
func needArgs(n int, what string) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		switch {
		case len(args) < n:
			return fmt.Errorf("%s needs %s (see %s --help)", c.Name(), what, c.CommandPath())
		case len(args) > n && n == 0:
			return fmt.Errorf("%s takes no arguments; got %s (see %s --help)", c.Name(), quoteArgs(args), c.CommandPath())
		case len(args) > n:
			return fmt.Errorf("%s takes %s; got %d arguments: %s (see %s --help)", c.Name(), strings.Replace(what, "a ", "one ", 1), len(args), quoteArgs(args), c.CommandPath())
		}
		return nil
	}
}

// atMostOneArg is needArgs for an optional argument.
func atMostOneArg(what string) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if len(args) > 1 {
			return fmt.Errorf("%s takes at most %s; got %d arguments: %s (see %s --help)", c.Name(), what, len(args), quoteArgs(args), c.CommandPath())
		}
		return nil
	}
}

func quoteArgs(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = fmt.Sprintf("%q", a)
	}
	return strings.Join(q, " ")
}
