package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runEval(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append([]string{"eval"}, args...))
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

func TestEvalCommand(t *testing.T) {
	suite := filepath.Join("..", "..", "evals", "eval.yaml")
	out, err := runEval(t, suite, "--run", "diff-growing-container")
	if err != nil {
		t.Fatalf("eval: %v\n%s", err, out)
	}
	for _, want := range []string{"PASS    diff-growing-container  diff", "1 passed, 0 failed, 0 skipped, 1 case\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	// A failing case: the table gives the reason and the command fails.
	dir := t.TempDir()
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	bad := "root: " + repo + `
cases:
- name: wrong-verdict
  tool: oom-report
  fixtures: [testdata/scenarios/fragmentation_oom.pickle]
  args: {path: testdata/scenarios/fragmentation_oom.pickle}
  checks: [{verdict: capacity}]
`
	file := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(file, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = runEval(t, file)
	if err == nil || err.Error() != "eval: 1 of 1 cases failed" {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(out, `FAIL    wrong-verdict  oom-report  verdict capacity: verdict is "fragmentation"`) {
		t.Errorf("table:\n%s", out)
	}

	if _, err := runEval(t, suite, "--run", "no-such-case"); err == nil || !strings.Contains(err.Error(), "no case matches") {
		t.Errorf("empty filter: %v", err)
	}
	if _, err := runEval(t, filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: %v", err)
	}
}

// TestEvalOutsideRepo: from a directory outside any clone, eval finds the suite of the clone it
// was built from, or says how to give it.
func TestEvalOutsideRepo(t *testing.T) {
	elsewhere := t.TempDir()
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := searchSuite(elsewhere, repo); err != nil || got != filepath.Join(repo, "evals", "eval.yaml") {
		t.Errorf("built from the clone: %q %v", got, err)
	}
	if got, err := searchSuite(filepath.Join(repo, "analysis", "load"), ""); err != nil || got != filepath.Join(repo, "evals", "eval.yaml") {
		t.Errorf("inside the clone: %q %v", got, err)
	}
	_, err = searchSuite(elsewhere, filepath.Join(elsewhere, "src"))
	want := "eval: no eval suite: evals/eval.yaml is not in " + elsewhere + " and its parents nor in " + filepath.Join(elsewhere, "src") +
		" (where this memsnap was built). The suite and its fixtures live in a clone of memsnap: run memsnap eval inside the clone, or give the file with --suite PATH/TO/memsnap/evals/eval.yaml"
	if err == nil || err.Error() != want {
		t.Errorf("error:\n got %v\nwant %s", err, want)
	}

	t.Chdir(elsewhere)
	out, err := runEval(t, "--run", "diff-growing-container")
	if err != nil || !strings.Contains(out, "PASS    diff-growing-container") {
		t.Errorf("eval from %s: %v\n%s", elsewhere, err, out)
	}
	out, err = runEval(t, "--suite", filepath.Join(repo, "evals", "eval.yaml"), "--run", "diff-growing-container")
	if err != nil || !strings.Contains(out, "PASS    diff-growing-container") {
		t.Errorf("eval --suite: %v\n%s", err, out)
	}
}
