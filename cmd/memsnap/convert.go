package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/memsnap/memsnap/analysis/pickle/writer"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

func init() { register(newConvertCmd) }

// snapshotFormat is the form a snapshot file's name asks for: a pickle (.pickle, .pkl) or JSON
// (.json), gzip-compressed with a further .gz.
// outputSnapshot checks, before anything is loaded, that a snapshot may be written to out (not
// the input, not an existing file without --force) and returns the writer's options for its
// name: what convert and trim share.
func outputSnapshot(in, out string, protocol int, force bool) (writer.Options, error) {
	opt, err := snapshotFormat(out, protocol)
	if err != nil {
		return opt, err
	}
	if err := notTheInput(in, out); err != nil {
		return opt, err
	}
	return opt, refuseExisting(out, force)
}

func snapshotFormat(path string, protocol int) (writer.Options, error) {
	name := strings.ToLower(filepath.Base(path))
	opt := writer.Options{Protocol: protocol}
	if strings.HasSuffix(name, ".gz") {
		opt.Gzip = true
		name = strings.TrimSuffix(name, ".gz")
	}
	switch filepath.Ext(name) {
	case ".pickle", ".pkl", ".pt":
	case ".json":
		opt.JSON = true
	default:
		return opt, fmt.Errorf("%s: the output's name must end in .pickle, .pkl or .json (optionally .gz)", path)
	}
	if protocol < 2 || protocol > 5 {
		return opt, fmt.Errorf("--protocol %d: use 2 to 5 (4 is what PyTorch writes and what pytorch.org/memory_viz reads)", protocol)
	}
	return opt, nil
}

// writeSnapshot encodes snap in the form the output's name asks for and writes it atomically,
// streaming: JSON expands every shared frame list, so its output can be tens of times the
// input's size.
func writeSnapshot(ctx context.Context, snap *snapshot.Snapshot, out string, opt writer.Options, force bool) (int64, error) {
	return writeAtomic(out, force, func(w io.Writer) error { return writer.EncodeTo(ctx, w, snap, opt) })
}

func newConvertCmd() *cobra.Command {
	var (
		out      string
		force    bool
		protocol int
	)
	c := &cobra.Command{
		Use:   "convert PATH -o OUT.pickle|OUT.json",
		Short: "Rewrite a snapshot as a plain pickle (what pytorch.org/memory_viz opens) or as JSON",
		Long: `convert reads a snapshot in any form memsnap reads (pickle protocols 2 to 5, the TorchScript
writer's form, JSON, gzip, the oldest bare list of segments, PyTorch 2.0 block histories) and
writes it as PyTorch itself writes it: a protocol-4 pickle (--protocol to change) that
pytorch.org/memory_viz and torch.cuda._memory_viz open, or with a .json name json.dumps's form;
a further .gz compresses it (memory_viz does not read gzip). Frames and stacks are shared
through the pickle memo as PyTorch shares them. Fields newer than memsnap's model (pool_id,
forward_frames, category, internal_metadata on events; host segments) are not carried over.

The output is written whole or not at all; an existing file is kept unless --force, and the
input is never overwritten.`,
		Example: `  memsnap convert old_snapshot.pickle -o for_memory_viz.pickle
  memsnap convert snapshot.json.gz -o snapshot.pickle
  memsnap convert snapshot.pickle -o snapshot.json`,
		Args: needArgs(1, "a snapshot PATH"),
		RunE: func(c *cobra.Command, args []string) error {
			if out == "" {
				return fmt.Errorf("give the output file with -o OUT.pickle or -o OUT.json (see %s --help)", c.CommandPath())
			}
			opt, err := outputSnapshot(args[0], out, protocol, force)
			if err != nil {
				return err
			}
			snap, err := loadSnapshot(c.Context(), args[0], loadOptions{})
			if err != nil {
				return err
			}
			n, err := writeSnapshot(c.Context(), snap, out, opt, force)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(c.OutOrStdout(), "wrote %s (%d bytes, %s)\n", out, n, describeForm(opt))
			return err
		},
	}
	c.Flags().StringVarP(&out, "output", "o", "", "the snapshot to write: OUT.pickle, OUT.pkl or OUT.json (optionally .gz)")
	c.Flags().BoolVar(&force, "force", false, "replace the output file if it exists")
	c.Flags().IntVar(&protocol, "protocol", 4, "pickle protocol (2 to 5; memory_viz reads 2 to 4)")
	return c
}

func describeForm(o writer.Options) string {
	s := fmt.Sprintf("pickle protocol %d", o.Protocol)
	if o.JSON {
		s = "JSON"
	}
	if o.Gzip {
		s += ", gzip"
	}
	return s
}
