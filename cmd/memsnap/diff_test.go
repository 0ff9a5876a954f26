package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/memsnap/memsnap/analysis"
	"github.com/memsnap/memsnap/analysis/snapshot"

	"github.com/memsnap/memsnap/internal/realsnaps/realtest"
)

// TestDiffCommand: the CLI carries the run verdict, the swap, peaks and roles, in text and JSON.
func TestDiffCommand(t *testing.T) {
	sc := func(n string) string { return filepath.Join(scenarios, n) }
	step5, step50 := sc("growing_container_step5.pickle"), sc("growing_container_step50.pickle")
	tests := []struct {
		name      string
		args      []string
		sameRun   string // JSON value
		swapped   bool
		before    string
		pattern   string
		firstLine string
	}{
		{"in order", []string{step5, step50}, "true", false, step5, analysis.PatternGrowingContainer,
			"live memory 92.5 MiB -> 273 MiB (+180 MiB), 5 sites"},
		{"reversed", []string{step50, step5}, "true", true, step5, analysis.PatternGrowingContainer,
			"live memory 92.5 MiB -> 273 MiB (+180 MiB), 5 sites (files swapped into time order)"},
		{"itself", []string{step50, step50}, "true", false, step50, analysis.PatternNoGrowth,
			"live memory 273 MiB -> 273 MiB (0 B), 5 sites"},
		{"two different runs", []string{sc("summarize_basic.pickle"), step50}, "false", false, sc("summarize_basic.pickle"), analysis.PatternNotComparable,
			"two different runs: the difference is not growth"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			text, err := run(t, append([]string{"diff"}, tc.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			first, rest, _ := strings.Cut(text, "\n")
			if strings.HasPrefix(first, "peak ") { // two runs are compared at their peaks first
				first, rest, _ = strings.Cut(rest, "\n")
			}
			if !strings.Contains(first, tc.firstLine) {
				t.Errorf("first line %q, want %q", first, tc.firstLine)
			}
			if !strings.HasPrefix(rest, "same run: "+tc.sameRun+" (") {
				t.Errorf("second line: %q", rest)
			}
			out, err := run(t, append([]string{"diff", "--json"}, tc.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			var r map[string]json.RawMessage
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"same_run", "same_run_evidence", "swapped", "peak_before_bytes", "peak_after_bytes", "peak_sites_before", "peak_sites_after", "roles"} {
				if _, ok := r[k]; !ok {
					t.Errorf("JSON lacks %s", k)
				}
			}
			var typed analysis.DiffResult
			if err := json.Unmarshal([]byte(out), &typed); err != nil {
				t.Fatal(err)
			}
			if string(r["same_run"]) != tc.sameRun || typed.Swapped != tc.swapped || typed.BeforePath != tc.before ||
				len(typed.Patterns) != 1 || typed.Patterns[0].Name != tc.pattern || len(typed.Roles) == 0 {
				t.Errorf("same_run %s swapped %v before %s patterns %+v roles %+v", r["same_run"], typed.Swapped, typed.BeforePath, typed.Patterns, typed.Roles)
			}
		})
	}
}

// TestDiffCommandRealPair: two CS336 files from different students' runs, months apart.
func TestDiffCommandRealPair(t *testing.T) {
	dir := realtest.Require(t)
	a, b := filepath.Join(dir, "pt2.5-2.7_small-full-trace_cs336.pickle"), filepath.Join(dir, "pt2.10_user-metadata_windows_cs336.pickle")
	for _, p := range []string{a, b} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("real snapshots not available at %s: %v", dir, err)
		}
	}
	out, err := run(t, "diff", a, b)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"live memory 30.3 MiB -> 1.3 GiB (+1.3 GiB), 13 sites; two different runs: the difference is not growth\n",
		"same run: false (not one run: ",
		"the traces are 43 days apart",
		"trace peak 3.0 GiB -> 13.0 GiB (+9.9 GiB)\n",
		"peak 3.0 GiB -> 13.0 GiB (+9.9 GiB), at the peaks by role: activation +10.9 GiB",
		"by role at the peaks:\n",
		"by role (final state):\n",
		"not_comparable: these files are not two points of one run",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, bad := range []string{"growing_container", "no_growth", "retained_autograd_graph", "unexplained_growth"} {
		if strings.Contains(out, bad) {
			t.Errorf("output names %s:\n%s", bad, out)
		}
	}
}

// TestDiffLoadErrorNamesFile: diff loads both files at once; when one is bad, the error names
// that one, whichever side it is on.
func TestDiffLoadErrorNamesFile(t *testing.T) {
	good := filepath.Join(scenarios, "growing_container_step5.pickle")
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	truncated, garbage := filepath.Join(dir, "truncated.pickle"), filepath.Join(dir, "garbage.pickle")
	if err := os.WriteFile(truncated, data[:len(data)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(garbage, []byte("not a snapshot\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pickle")
	for _, bad := range []string{truncated, garbage, missing} {
		for _, args := range [][]string{{good, bad}, {bad, good}} {
			_, err := run(t, "diff", args[0], args[1])
			if err == nil || !strings.Contains(err.Error(), bad) || strings.Contains(err.Error(), good) {
				t.Errorf("diff %s %s: error %v, want one naming %s", args[0], args[1], err, bad)
			}
		}
	}
}

// TestLoadPair: a failing load stops the other at once and its error is the one returned,
// whichever side it is on; two failures of their own give the first; a cancelled caller gets
// its cancellation, with the file named.
func TestLoadPair(t *testing.T) {
	errBad := errors.New("bad.pickle: corrupt pickle")
	load := func(ctx context.Context, path string) (*snapshot.Snapshot, error) {
		switch path {
		case "bad", "bad2":
			return nil, fmt.Errorf("%s: %w", path, errBad)
		case "slow": // a large file: done only when stopped
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return &snapshot.Snapshot{Path: path}, nil
	}
	for _, tc := range []struct {
		paths [2]string
		want  string
	}{
		{[2]string{"slow", "bad"}, "bad: "},
		{[2]string{"bad", "slow"}, "bad: "},
		{[2]string{"bad", "bad2"}, "bad: "},
		{[2]string{"good", "bad2"}, "bad2: "},
	} {
		done := make(chan struct{})
		var err error
		go func() {
			defer close(done)
			_, err = loadPair(context.Background(), tc.paths, load)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%v: the failing load did not stop the other", tc.paths)
		}
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) || !errors.Is(err, errBad) {
			t.Errorf("%v: error %v, want %q…", tc.paths, err, tc.want)
		}
	}
	snaps, err := loadPair(context.Background(), [2]string{"a", "b"}, load)
	if err != nil || snaps[0].Path != "a" || snaps[1].Path != "b" {
		t.Errorf("two good files: %v %v", snaps, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := loadPair(ctx, [2]string{"slow", "slow"}, load); !errors.Is(err, context.Canceled) || !strings.HasPrefix(err.Error(), "slow: ") {
		t.Errorf("cancelled: error %v", err)
	}
}
