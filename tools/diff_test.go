package tools

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/memsnap/memsnap/analysis"
	"github.com/memsnap/memsnap/analysis/load"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// TestDiffLoadsBothAtOnce: the diff tool loads its two files at once; when one is bad, the
// answer names that one, whichever side it is on, and the other load (here one that would
// never finish) is stopped instead of waited for.
func TestDiffLoadsBothAtOnce(t *testing.T) {
	dir := t.TempDir()
	slow, bad := filepath.Join(dir, "slow.pickle"), filepath.Join(dir, "bad.pickle")
	copyFile(t, fx(t, "growing_container_step5.pickle"), slow)
	if err := os.WriteFile(bad, []byte("\x80\x04\x95garbage that is not a snapshot"), 0o644); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	stopped := 0
	loader := func(ctx context.Context, path string, opt load.Options) (*snapshot.Snapshot, error) {
		if path == slow { // a file too large to wait for: done only when stopped
			<-ctx.Done()
			mu.Lock()
			stopped++
			mu.Unlock()
			return nil, ctx.Err()
		}
		return load.File(ctx, path, opt)
	}
	c := newClient(t, Config{Roots: []string{dir}, Loader: loader})
	for i, args := range []map[string]any{{"before": slow, "after": bad}, {"before": bad, "after": slow}} {
		done := make(chan *mcp.CallToolResult, 1)
		go func() { done <- call(t, c, "diff", args) }()
		var res *mcp.CallToolResult
		select {
		case res = <-done:
		case <-time.After(20 * time.Second):
			t.Fatalf("%v: the bad file's failure did not stop the other load", args)
		}
		if text := textOf(res); !res.IsError || !strings.Contains(text, "bad.pickle") || strings.Contains(text, "slow.pickle") || strings.Contains(text, "cancel") {
			t.Errorf("%v: isError %v: %s", args, res.IsError, text)
		}
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			mu.Lock()
			n := stopped
			mu.Unlock()
			if n == i+1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%v: the slow load was not stopped", args)
			}
		}
	}
	// Two good files (here one file twice) still load and compare.
	good := fx(t, "growing_container_step5.pickle")
	c = newClient(t, Config{})
	var r analysis.DiffResult
	structured(t, call(t, c, "diff", map[string]any{"before": good, "after": good}), &r)
	if r.SameRun == nil || !*r.SameRun || r.DeltaBytes != 0 {
		t.Errorf("a file against itself: same_run %v delta %d", r.SameRun, r.DeltaBytes)
	}
}

// TestPairProgress: the two loads' progress is added up and only ever grows; the total is
// given once every load that reports has one.
func TestPairProgress(t *testing.T) {
	type note struct{ done, total int64 }
	var got []note
	ctx := context.WithValue(context.Background(), progressKey{}, func(done, total int64) { got = append(got, note{done, total}) })
	p := pairProgress(ctx)
	p(0, 10, 0)
	p(1, 5, 100)
	p(0, 12, 50)
	p(1, 5, 100) // no growth: not reported
	p(0, 50, 50)
	want := []note{{10, 0}, {15, 0}, {17, 150}, {55, 150}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	if pairProgress(context.Background()) != nil {
		t.Error("a call without a progress token got a reporter")
	}
}
