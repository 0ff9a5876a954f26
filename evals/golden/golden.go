// Package golden compares test output with committed golden files, and rewrites them when a
// test binary runs with -update. Both golden suites use it: the rendered text of every command
// (cmd/memsnap) and each MCP tool's interface (tools).
package golden

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files instead of comparing with them")

// Updating reports whether this run rewrites golden files (-update).
func Updating() bool { return *update }

// Check compares got with the golden file at path; with -update it writes got there instead.
// rerun is the command that rewrites the file (e.g. "go test ./tools -run Golden -update"); what
// names the output in the failure message.
func Check(t testing.TB, path string, got []byte, what, rerun string) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%s: %v (run %s)", what, err, rerun)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from %s; if the change is intended run %s and review the diff:\n--- got\n%s\n--- want\n%s", what, path, rerun, got, want)
	}
}
