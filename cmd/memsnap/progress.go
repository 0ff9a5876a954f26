package main

import (
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// progress shows long work on a terminal: the bytes of the snapshots read so far, then the
// phase the command is in, on one line of stderr that is cleared before the command prints
// anything. It is on only when stderr is a terminal and the command is not serve (whose
// stdout and stderr belong to the MCP client), so nothing changes for pipes, files, CI logs
// or tests; it never writes to stdout.
type progress struct {
	w     io.Writer
	phase string // what the command does once the files are read

	mu     sync.Mutex
	bar    *progressbar.ProgressBar
	done   map[string]int64 // bytes read per file being read
	total  map[string]int64
	reads  int // files still being read
	ticker chan struct{}
	ended  bool
}

// activeProgress is the running command's progress, nil when off.
var activeProgress *progress

// phases name what each command does after reading its files.
var phases = map[string]string{
	"replay":     "replaying the trace",
	"whatif":     "replaying the trace through the allocator model",
	"oom":        "replaying the allocator up to each OOM",
	"diff":       "comparing the snapshots",
	"check":      "replaying the trace for the budgets",
	"plot":       "drawing",
	"view":       "indexing the timeline for the page",
	"top-stacks": "grouping the live blocks",
	"trim":       "writing the smaller snapshot",
	"convert":    "writing the snapshot",
}

// startProgress turns progress on for command c when its stderr is the process's and a
// terminal, and wraps its stdout so that the progress line is cleared before any output.
func startProgress(c *cobra.Command) {
	if c.Name() == "serve" || c.ErrOrStderr() != os.Stderr || !term.IsTerminal(int(os.Stderr.Fd())) || os.Getenv("MEMSNAP_NO_PROGRESS") != "" {
		return
	}
	phase := phases[c.Name()]
	if phase == "" {
		phase = "analysing"
	}
	p := &progress{w: os.Stderr, phase: phase, done: map[string]int64{}, total: map[string]int64{}}
	activeProgress = p
	c.SetOut(clearFirst{p: p, w: c.OutOrStdout()})
}

// reading returns the load.Options.Progress callback for one file (nil when progress is off).
// Several files may be read at once (diff): the line shows their sum.
func (p *progress) reading(path string) func(done, total int64) {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	p.reads++
	p.mu.Unlock()
	return func(done, total int64) {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.ended {
			return
		}
		p.done[path], p.total[path] = done, total
		var d, t int64
		for k := range p.done {
			d += p.done[k]
			t += p.total[k]
		}
		if p.bar == nil {
			p.bar = progressbar.NewOptions64(max(t, 1),
				progressbar.OptionSetWriter(p.w),
				progressbar.OptionSetDescription("reading "+filepath.Base(path)),
				progressbar.OptionThrottle(100*time.Millisecond),
				progressbar.OptionClearOnFinish(),
				progressbar.OptionSetPredictTime(false))
		}
		if t > 0 {
			p.bar.ChangeMax64(t)
		}
		_ = p.bar.Set64(d)
	}
}

// read marks one file's reading as over; when none is left the line shows the phase.
func (p *progress) read() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reads--; p.reads > 0 || p.ended {
		return
	}
	if p.bar != nil {
		_ = p.bar.Clear()
	}
	p.bar = progressbar.NewOptions64(-1,
		progressbar.OptionSetWriter(p.w),
		progressbar.OptionSetDescription(p.phase),
		progressbar.OptionSpinnerType(14),
		// Turned by the ticker below, which end() stops: the library's own ticker runs
		// until the bar is finished, which a spinner never is.
		progressbar.OptionSetSpinnerChangeInterval(0),
		progressbar.OptionClearOnFinish())
	p.ticker = make(chan struct{})
	go func(bar *progressbar.ProgressBar, stop chan struct{}) {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				p.mu.Lock()
				if !p.ended {
					_ = bar.Add(1)
				}
				p.mu.Unlock()
			}
		}
	}(p.bar, p.ticker)
}

// end clears the line for good; the command's output follows.
func (p *progress) end() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return
	}
	p.ended = true
	if p.ticker != nil {
		close(p.ticker)
	}
	if p.bar != nil {
		_ = p.bar.Clear()
	}
}

// clearFirst ends the progress line before the first byte of output.
type clearFirst struct {
	p *progress
	w io.Writer
}

func (c clearFirst) Write(b []byte) (int, error) {
	c.p.end()
	return c.w.Write(b)
}
