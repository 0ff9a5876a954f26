package tools

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/memsnap/memsnap/analysis"
	"github.com/memsnap/memsnap/analysis/load"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// countingDirLoader counts directory loads per directory.
type countingDirLoader struct {
	mu    sync.Mutex
	loads map[string]int
}

func (d *countingDirLoader) load(ctx context.Context, dir string, opt load.Options) ([]snapshot.Rank, error) {
	d.mu.Lock()
	d.loads[dir]++
	d.mu.Unlock()
	return load.Dir(ctx, dir, opt)
}

func (d *countingDirLoader) count(dir string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.loads[dir]
}

// TestSummarizeRankDirCached: a directory of ranks is loaded once for repeated summarize calls
// (also with other arguments), and again when one of its files changes.
func TestSummarizeRankDirCached(t *testing.T) {
	dir := t.TempDir()
	for i := 0; i < 4; i++ {
		name := "rank" + string(rune('0'+i)) + ".pickle"
		data, err := os.ReadFile(filepath.Join(scenarios(t), "multirank", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dl := &countingDirLoader{loads: map[string]int{}}
	c := newClient(t, Config{Roots: []string{dir}, DirLoader: dl.load})
	for _, tc := range []struct {
		name  string
		args  map[string]any
		touch bool
		loads int
	}{
		{"first", map[string]any{"path": dir}, false, 1},
		{"second", map[string]any{"path": dir}, false, 1},
		{"other arguments (relative path)", map[string]any{"path": "."}, false, 1},
		{"a rank file changed", map[string]any{"path": dir}, true, 2},
		{"after the change", map[string]any{"path": dir}, false, 2},
	} {
		if tc.touch {
			later := time.Now().Add(time.Hour)
			if err := os.Chtimes(filepath.Join(dir, "rank2.pickle"), later, later); err != nil {
				t.Fatal(err)
			}
		}
		var s analysis.Summary
		structured(t, call(t, c, "summarize", tc.args), &s)
		if len(s.Ranks) != 4 {
			t.Errorf("%s: %d ranks", tc.name, len(s.Ranks))
		}
		if got := dl.count(dir); got != tc.loads {
			t.Errorf("%s: %d directory loads, want %d", tc.name, got, tc.loads)
		}
	}
}

// TestDirLinksStayInRoots: a rank folder under the roots whose entries are symbolic links is
// not followed (a link could lead out of the roots); the answer says so. The command line
// follows the user's own links (cmd/memsnap TestFolderOfSymlinks).
func TestDirLinksStayInRoots(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "ranks")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(fx(t, "multirank/rank0.pickle"), filepath.Join(dir, "rank0.pickle")); err != nil {
		t.Skip("no symbolic links here:", err)
	}
	c := newClient(t, Config{Roots: []string{root}})
	res := call(t, c, "summarize", map[string]any{"path": dir})
	if text := textOf(res); !res.IsError || !strings.Contains(text, "directory holds no snapshot files (its symbolic link is not followed here") {
		t.Errorf("isError %v: %s", res.IsError, text)
	}
}
