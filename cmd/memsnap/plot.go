package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/spf13/cobra"

	"github.com/memsnap/memsnap/analysis"
	"github.com/memsnap/memsnap/render"
)

func init() { register(newPlotCmd) }

func newPlotCmd() *cobra.Command {
	var (
		lo     loadOptions
		af     attributionFlags
		opt    analysis.PictureOptions
		ro     render.Options
		out    string
		window string
		device int
		asJSON bool
		force  bool
	)
	c := &cobra.Command{
		Use:   "plot PATH -o FILE.svg|FILE.png",
		Short: "Draw memory over the trace (timeline) or the segments (segment map) as SVG or PNG",
		Long: `plot draws a picture of a snapshot.

--kind timeline (the default) draws allocated memory over the trace, stacked in bands by site:
the --top N sites reaching the highest level in the window get a band each (a shade of their
role's colour: parameter, gradient, optimizer_state, activation, temporary, ...; a site keeps its
shade in every picture), every other site shares one gray band. The trace is cut into one column
per pixel; each column keeps the minimum and maximum of its events: bands are drawn at the
maximum, washed pale above the minimum, so a peak is never smoothed away and a sawtooth shows at
any zoom. The black line is reserved memory; markers show the peak, each OOM (red), step starts
(a dotted line per step, or a step-count axis when steps are dense), the phases (a strip:
setup, forward, backward, optimizer, OOM unwinding) and segment-release bursts (triangles:
empty_cache() calls, the allocator's cache flushes after a failed cudaMalloc). The device
drawn is the one with an OOM, else the highest allocated peak (--device picks another); the
picture and the text say what the other devices hold. --json prints the numbers drawn,
with the envelope (each column's events and min/max allocated bytes) and every step start. The x axis is the
trace event index (--x time: seconds, when every event has time_us); --window A:B draws events
A to B-1 only (bands then come from the window's own peak).

--kind segments draws every segment of the final state (or, with --at EVENT, rebuilt by replay
after that trace event) as a bar, its blocks coloured by role when allocated, dark red when
freed but still used by another stream, light gray when cached free. It works on files without
a trace.

The picture's format follows the file name (.svg or .png); it is written whole or not at all,
never over the snapshot itself. The numbers drawn are printed (--json: one object).`,
		Example: `  memsnap plot snapshot.pickle -o timeline.png
  memsnap plot snapshot.pickle -o peak.svg --window 120000:180000 --top 12
  memsnap plot snapshot.pickle -o segments.png --kind segments
  memsnap plot snapshot.pickle -o before-oom.png --kind segments --at 51234`,
		Args: needArgs(1, "a snapshot PATH"),
		RunE: func(c *cobra.Command, args []string) error {
			if out == "" {
				return fmt.Errorf("give the picture's file with -o FILE.svg or -o FILE.png (see %s --help)", c.CommandPath())
			}
			format, err := render.FormatOf(out)
			if err != nil {
				return err
			}
			ro.Format = format
			if err := notTheInput(args[0], out); err != nil {
				return err
			}
			if err := refuseExisting(out, force); err != nil {
				return err
			}
			switch opt.Kind {
			case analysis.PictureTimeline, analysis.PictureSegments:
			default:
				return fmt.Errorf("--kind %q: use timeline or segments", opt.Kind)
			}
			if window != "" {
				if opt.Kind != analysis.PictureTimeline {
					return fmt.Errorf("--window applies to --kind timeline; use --at EVENT for segments")
				}
				if opt.Start, opt.End, err = parseWindow(window); err != nil {
					return err
				}
			}
			if c.Flags().Changed("at") && opt.Kind != analysis.PictureSegments {
				return fmt.Errorf("--at applies to --kind segments; use --window A:B for a timeline")
			}
			if c.Flags().Changed("device") {
				opt.Device = &device
			}
			if opt.Top < 1 || opt.Top > 40 {
				return fmt.Errorf("--top %d: must be 1 to 40", opt.Top)
			}
			snap, err := loadSnapshot(c.Context(), args[0], lo)
			if err != nil {
				return err
			}
			opt.Attribution = af.options()
			if opt.Columns == 0 {
				opt.Columns = render.TimelineColumns(ro)
			}
			pic, err := analysis.Picture(c.Context(), snap, opt)
			var nt *analysis.NoTraceError
			if errors.As(err, &nt) {
				return fmt.Errorf("%w; draw its segments with --kind segments", err)
			}
			if err != nil {
				return err
			}
			var buf bytes.Buffer
			if err := render.Picture(&buf, pic, ro); err != nil {
				return err
			}
			if err := writeFileAtomic(out, buf.Bytes(), force); err != nil {
				return err
			}
			if asJSON {
				return printJSON(c.OutOrStdout(), pic)
			}
			if _, err := fmt.Fprintf(c.OutOrStdout(), "wrote %s (%s)\n", out, analysis.FormatBytes(int64(buf.Len()))); err != nil {
				return err
			}
			return emit(c, false, pic)
		},
	}
	lo.addFlags(c)
	af.addFlags(c)
	c.Flags().StringVarP(&out, "output", "o", "", "the picture to write: FILE.svg or FILE.png")
	c.Flags().BoolVar(&force, "force", false, "replace the output file if it exists")
	c.Flags().StringVar(&opt.Kind, "kind", analysis.PictureTimeline, "timeline (memory over the trace) or segments (the segments at one moment)")
	c.Flags().IntVar(&device, "device", 0, "the CUDA device to draw (default: the one with an OOM, else the highest allocated peak; state-only files: the most allocated)")
	c.Flags().StringVar(&window, "window", "", "timeline: draw trace events A to B-1 only (A:B; A: or :B leave one end open)")
	c.Flags().IntVar(&opt.At, "at", -1, "segments: rebuild the segments after this trace event (default: the final state)")
	c.Flags().IntVar(&opt.Top, "top", analysis.DefaultTimelineTop, "timeline: sites drawn as their own band (the highest in the window); the rest share one band")
	c.Flags().StringVar(&opt.X, "x", analysis.TimelineXEvent, "timeline: x axis, event (trace event index) or time (seconds; needs time_us on every event)")
	c.Flags().IntVar(&ro.Width, "width", render.DefaultWidth, "picture width in pixels")
	c.Flags().IntVar(&ro.Height, "height", render.DefaultHeight, "picture height in pixels")
	c.Flags().StringVar(&ro.Title, "title", "", "title (default: the file's name, device and what is drawn)")
	c.Flags().BoolVar(&asJSON, "json", false, "print the numbers drawn as one JSON object instead of text")
	return c
}

// parseWindow reads A:B (events A to B-1), A: (from A) or :B (up to B).
func parseWindow(s string) (int, int, error) {
	a, b, ok := strings.Cut(s, ":")
	if !ok {
		return 0, 0, fmt.Errorf("--window %q: write A:B (trace events A to B-1), A: or :B", s)
	}
	var start, end int
	var err error
	if a != "" {
		if start, err = strconv.Atoi(a); err != nil || start < 0 {
			return 0, 0, fmt.Errorf("--window %q: A must be an event index (0 or more)", s)
		}
	}
	if b != "" {
		if end, err = strconv.Atoi(b); err != nil || end <= start {
			return 0, 0, fmt.Errorf("--window %q: B must be an event index above A", s)
		}
	}
	return start, end, nil
}

// notTheInput refuses an output path that names the input file.
func notTheInput(in, out string) error {
	if in == "-" {
		return nil
	}
	ai, err1 := filepath.Abs(in)
	ao, err2 := filepath.Abs(out)
	if err1 == nil && err2 == nil && ai == ao {
		return fmt.Errorf("%s: the output would overwrite the input snapshot; choose another file", out)
	}
	si, err1 := os.Stat(in)
	so, err2 := os.Stat(out)
	if err1 == nil && err2 == nil && os.SameFile(si, so) {
		return fmt.Errorf("%s: the output is the input snapshot (same file); choose another file", out)
	}
	return nil
}

// refuseExisting fails when path exists and force is off (checked before the work, so a long
// load is not wasted; writeFileAtomic never replaces a file without overwrite either).
func refuseExisting(path string, force bool) error {
	if force {
		return nil
	}
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("%s exists; pass --force to replace it", path)
	}
	return nil
}

// writeFileAtomic writes data to path through a temporary file in the same directory, so the
// file is either whole or untouched. Without overwrite an existing path is an error (the file is
// linked into place, which fails rather than replace one that appeared meanwhile).
func writeFileAtomic(path string, data []byte, overwrite bool) error {
	_, err := writeAtomic(path, overwrite, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
	return err
}

// writeAtomic is writeFileAtomic for output that fill streams (a snapshot can encode to many
// times its size: nothing holds it whole in memory). It returns the bytes written. An error of
// fill's own (the encoder's) is returned as it is; one writing the file names the file.
func writeAtomic(path string, overwrite bool, fill func(io.Writer) error) (int64, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return 0, fmt.Errorf("cannot write %s: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	fw := &fileWriter{f: f}
	aw := newWriteBehind(fw)
	err = fill(aw)
	aw.close()
	werr := fw.err()
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Chmod(tmp, 0o644)
	}
	switch {
	case werr != nil:
		return 0, fmt.Errorf("cannot write %s: %w", path, werr)
	case err != nil:
		return 0, err
	}
	if overwrite {
		err = os.Rename(tmp, path)
	} else if err = os.Link(tmp, path); os.IsExist(err) {
		return 0, fmt.Errorf("%s exists; pass --force to replace it", path)
	}
	if err != nil {
		return 0, fmt.Errorf("cannot write %s: %w", path, err)
	}
	return fw.n, nil
}

// writeBehind hands what is written to it to w on a goroutine of its own, in chunks, so that
// writing the file (the kernel's copy into the page cache: a third of a second for 100 MB
// here) runs beside the encoder instead of after each of its chunks.
type writeBehind struct {
	w    *fileWriter
	cur  []byte
	full chan []byte
	free chan []byte
	done chan struct{}
}

const writeBehindChunk = 1 << 20

func newWriteBehind(w *fileWriter) *writeBehind {
	b := &writeBehind{w: w, full: make(chan []byte, 2), free: make(chan []byte, 3), done: make(chan struct{})}
	for range 2 {
		b.free <- make([]byte, 0, writeBehindChunk)
	}
	b.cur = make([]byte, 0, writeBehindChunk)
	go func() {
		defer close(b.done)
		for c := range b.full {
			b.w.Write(c) // keeps its error (and writes nothing after one)
			b.free <- c[:0]
		}
	}()
	return b
}

// Write fails once the file did (the chunks before were written in order).
func (b *writeBehind) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		k := copy(b.cur[len(b.cur):cap(b.cur)], p)
		b.cur, p = b.cur[:len(b.cur)+k], p[k:]
		if len(b.cur) == cap(b.cur) {
			b.full <- b.cur
			b.cur = <-b.free
		}
	}
	if err := b.w.err(); err != nil {
		return 0, err
	}
	return n, nil
}

// close writes what is left and waits until everything is written.
func (b *writeBehind) close() {
	if len(b.cur) > 0 {
		b.full <- b.cur
	}
	close(b.full)
	<-b.done
}

// fileWriter counts the bytes written to f and keeps the first error, which the encoder's
// goroutine reads while writeBehind's writes.
type fileWriter struct {
	f      *os.File
	n      int64
	failed atomic.Pointer[error]
}

// err is the first write error, nil while there is none.
func (w *fileWriter) err() error {
	if p := w.failed.Load(); p != nil {
		return *p
	}
	return nil
}

func (w *fileWriter) Write(p []byte) (int, error) {
	if err := w.err(); err != nil {
		return 0, err
	}
	n, err := w.f.Write(p)
	w.n += int64(n)
	if err != nil {
		w.failed.Store(&err)
	}
	return n, err
}
