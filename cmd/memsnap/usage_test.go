package main

import (
	"context"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/internal/realsnaps/realtest"
	"github.com/memsnap/memsnap/tools"
)

// TestArgumentErrors: a missing or extra argument is a sentence naming what the command needs,
// exit status 2.
func TestArgumentErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"summarize"}, "memsnap: summarize needs a snapshot PATH (see memsnap summarize --help)\n"},
		{[]string{"oom"}, "memsnap: oom needs a snapshot PATH (see memsnap oom --help)\n"},
		{[]string{"diff", "a.pickle"}, "memsnap: diff needs two snapshots of one run, BEFORE and AFTER (see memsnap diff --help)\n"},
		{[]string{"top-stacks", "a.pickle", "b.pickle"}, `memsnap: top-stacks takes one snapshot PATH; got 2 arguments: "a.pickle" "b.pickle" (see memsnap top-stacks --help)` + "\n"},
		{[]string{"serve", "x"}, `memsnap: serve takes no arguments; got "x" (see memsnap serve --help)` + "\n"},
		{[]string{"eval", "a", "b"}, `memsnap: eval takes at most one suite FILE; got 2 arguments: "a" "b" (see memsnap eval --help)` + "\n"},
	} {
		root := newRootCmd()
		root.SetArgs(tc.args)
		var stderr strings.Builder
		if code := execute(context.Background(), root, &stderr); code != 2 || stderr.String() != tc.want {
			t.Errorf("%v: exit %d, %q; want 2, %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}

// TestVersionSentence: --version prints the version constant, then the revision or the sentence
// saying the build has none (tests build without -buildvcs, so either may hold).
func TestVersionSentence(t *testing.T) {
	root := newRootCmd()
	root.SetArgs([]string{"--version"})
	var out strings.Builder
	root.SetOut(&out)
	if code := execute(context.Background(), root, &out); code != 0 {
		t.Fatalf("exit %d: %s", code, out.String())
	}
	got := out.String()
	if !strings.HasPrefix(got, "memsnap version "+tools.Version+" (") ||
		!strings.Contains(got, "(rev ") && !strings.Contains(got, "built without VCS information") {
		t.Errorf("--version printed %q", got)
	}
}

func TestMain(m *testing.M) { realtest.Main(m) }

// TestWordingFixes: sentences a newcomer read as wrong or odd: a "why" said once for rows that
// share it, "1 event", the fragmentation verdict without its label twice.
func TestWordingFixes(t *testing.T) {
	for _, tc := range []struct {
		args      []string
		want, not []string
	}{
		{[]string{"top-stacks", scenarioDir + "whatif_capacity_oom.pickle"}, []string{"      why: as for model.py:71 above\n"}, nil},
		{[]string{"summarize", scenarioDir + "summarize_basic_legacy20.pickle"}, []string{"  trace: 1 event (snapshot 1)"}, []string{"1 events"}},
		{[]string{"fragmentation", scenarioDir + "summarize_basic.pickle"}, []string{"verdict: cache, not fragmentation: ", "(largest piece 20.0 MiB, 42% of the free)"}, []string{"verdict: cache: cache"}},
	} {
		out, err := run(t, tc.args...)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		for _, w := range tc.want {
			if strings.Count(out, w) != 1 {
				t.Errorf("%v: %q appears %d times, want once:\n%s", tc.args[0], w, strings.Count(out, w), out)
			}
		}
		for _, n := range tc.not {
			if strings.Contains(out, n) {
				t.Errorf("%v: still says %q", tc.args[0], n)
			}
		}
	}
}
