// Package realtest is the tests' side of package realsnaps: a test asks for the real snapshots
// and skips when they are absent, and each package's TestMain prints one line saying how many
// of its tests skipped for want of them.
package realtest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/memsnap/memsnap/internal/realsnaps"
)

var skipped atomic.Int64

// Require returns the folder, or skips the test (counted for Main's line) when it is absent.
func Require(t testing.TB) string {
	t.Helper()
	d := realsnaps.Dir()
	if d == "" {
		skipped.Add(1)
		t.Skip(realsnaps.Absent())
	}
	return d
}

// Path returns the named real snapshot, or skips the test when the folder or the file is
// absent.
func Path(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(Require(t), name)
	if _, err := os.Stat(p); err != nil {
		skipped.Add(1)
		t.Skipf("real snapshot %s absent: %v", name, err)
	}
	return p
}

// Files returns every snapshot file of the folder (its notes left out), or skips the test.
func Files(t testing.TB) []string {
	t.Helper()
	d := Require(t)
	ents, err := os.ReadDir(d)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if !e.Type().IsRegular() || strings.HasSuffix(e.Name(), ".md") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		out = append(out, filepath.Join(d, e.Name()))
	}
	if len(out) == 0 {
		skipped.Add(1)
		t.Skipf("no real snapshots in %s", d)
	}
	return out
}

// Skip skips a test that needs a real snapshot absent here, with why, counted for Main's line.
func Skip(t testing.TB, why string) {
	t.Helper()
	skipped.Add(1)
	t.Skip(why)
}

// Main runs a package's tests and then prints one line on how many skipped for want of the
// real snapshots (go test shows it with -v, or when run in the package's directory).
func Main(m *testing.M) {
	code := m.Run()
	if n := skipped.Load(); n > 0 {
		fmt.Printf("real snapshots: %d tests skipped: %s\n", n, realsnaps.Absent())
	}
	os.Exit(code)
}
