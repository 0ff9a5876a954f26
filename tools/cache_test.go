package tools

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/memsnap/memsnap/analysis"
	"github.com/memsnap/memsnap/analysis/load"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// gatedLoader counts loads per path and blocks each until released (or its context ends).
type gatedLoader struct {
	gate      chan struct{}
	started   chan string
	cancelled chan string
	mu        sync.Mutex
	loads     map[string]int
}

func newGatedLoader() *gatedLoader {
	return &gatedLoader{gate: make(chan struct{}), started: make(chan string, 100), cancelled: make(chan string, 100), loads: map[string]int{}}
}

func (g *gatedLoader) load(ctx context.Context, path string, opt load.Options) (*snapshot.Snapshot, error) {
	g.mu.Lock()
	g.loads[path]++
	g.mu.Unlock()
	g.started <- path
	select {
	case <-g.gate:
	case <-ctx.Done():
		g.cancelled <- path
		return nil, ctx.Err()
	}
	if opt.Progress != nil {
		opt.Progress(1, 2)
	}
	return load.File(ctx, path, opt)
}

func (g *gatedLoader) count(path string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.loads[path]
}

// waitWaiters spins until the in-flight load of path has n waiters.
func waitWaiters(t *testing.T, c *Cache, path string, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		c.mu.Lock()
		got := 0
		for k, f := range c.inflight {
			if k.path == path {
				got = f.waiters
			}
		}
		c.mu.Unlock()
		if got == n {
			return
		}
		runtime.Gosched()
	}
	t.Fatalf("never saw %d waiters for %s", n, path)
}

func TestCacheOneLoadWhenRacing(t *testing.T) {
	g := newGatedLoader()
	c := NewCache(0, g.load)
	path := fx(t, "activation_oom.pickle")
	var wg sync.WaitGroup
	snaps := make([]*snapshot.Snapshot, 10)
	errs := make([]error, 10)
	for i := range snaps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			snaps[i], errs[i] = c.Get(context.Background(), path, nil)
		}()
	}
	waitWaiters(t, c, path, 10)
	close(g.gate)
	wg.Wait()
	for i := range snaps {
		if errs[i] != nil || snaps[i] != snaps[0] {
			t.Fatalf("call %d: %v (shared=%v)", i, errs[i], snaps[i] == snaps[0])
		}
	}
	if n := g.count(path); n != 1 {
		t.Errorf("%d loads, want 1", n)
	}
	// A later call is served from the cache.
	s, err := c.Get(context.Background(), path, nil)
	if err != nil || s != snaps[0] || g.count(path) != 1 {
		t.Errorf("second call: err %v, same %v, loads %d", err, s == snaps[0], g.count(path))
	}
}

func TestCacheReloadsChangedFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "s.pickle")
	copyFile(t, fx(t, "activation_oom.pickle"), p)
	c := NewCache(0, nil)
	a, err := c.Get(context.Background(), p, nil)
	if err != nil {
		t.Fatal(err)
	}
	copyFile(t, fx(t, "fragmentation_oom.pickle"), p) // different size
	b, err := c.Get(context.Background(), p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a == b || c.Loads() != 2 || len(b.Segments) != 50 {
		t.Errorf("same %v loads %d segments %d", a == b, c.Loads(), len(b.Segments))
	}
}

func TestCacheEvictsLRU(t *testing.T) {
	files := []string{fx(t, "activation_oom.pickle"), fx(t, "fragmentation_oom.pickle"), fx(t, "outside_pytorch_oom.pickle")}
	var costs []int64
	for _, f := range files {
		s, err := load.File(context.Background(), f, load.Options{})
		if err != nil {
			t.Fatal(err)
		}
		costs = append(costs, SnapshotCost(s))
	}
	// Room for the first two, not all three (loads in flight not counted here).
	c := NewCache(costs[0]+costs[1]+costs[2]-1, nil)
	c.estimate = func(string, int64) int64 { return 0 }
	get := func(f string) {
		if _, err := c.Get(context.Background(), f, nil); err != nil {
			t.Fatal(err)
		}
	}
	get(files[0])
	get(files[1])
	get(files[0]) // files[1] is now least recently used
	get(files[2]) // evicts files[1]
	if c.Loads() != 3 {
		t.Fatalf("loads %d", c.Loads())
	}
	get(files[0])
	if c.Loads() != 3 {
		t.Errorf("files[0] was evicted (loads %d)", c.Loads())
	}
	get(files[1])
	if c.Loads() != 4 {
		t.Errorf("files[1] was not evicted (loads %d)", c.Loads())
	}
	if c.Used() > costs[0]+costs[1]+costs[2]-1 {
		t.Errorf("used %d over budget", c.Used())
	}
	// A snapshot larger than the whole budget is served but not kept.
	small := NewCache(1, nil)
	for i := 0; i < 2; i++ {
		if _, err := small.Get(context.Background(), files[0], nil); err != nil {
			t.Fatal(err)
		}
	}
	if small.Loads() != 2 || small.Used() != 0 {
		t.Errorf("oversized: loads %d used %d", small.Loads(), small.Used())
	}
}

func TestCacheCancel(t *testing.T) {
	g := newGatedLoader()
	c := NewCache(0, g.load)
	path := fx(t, "activation_oom.pickle")
	// Two waiters; the first leaving does not cancel the load, the second does.
	ctx1, cancel1 := context.WithCancel(context.Background())
	ctx2, cancel2 := context.WithCancel(context.Background())
	errc := make(chan error, 2)
	go func() { _, err := c.Get(ctx1, path, nil); errc <- err }()
	go func() { _, err := c.Get(ctx2, path, nil); errc <- err }()
	waitWaiters(t, c, path, 2)
	cancel1()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("first: %v", err)
	}
	select {
	case p := <-g.cancelled:
		t.Fatalf("load of %s cancelled while a caller still waits", p)
	default:
	}
	cancel2()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("second: %v", err)
	}
	if p := <-g.cancelled; p != path {
		t.Errorf("cancelled %s", p)
	}
	close(g.gate)
	// A new call starts a fresh load and succeeds.
	if _, err := c.Get(context.Background(), path, nil); err != nil || g.count(path) != 2 {
		t.Errorf("after cancel: %v, loads %d", err, g.count(path))
	}
}

// TestCancelledCallServerStillAnswers cancels a tool call mid-load through the MCP client and
// checks the load stops and the server answers the next call.
func TestCancelledCallServerStillAnswers(t *testing.T) {
	g := newGatedLoader()
	c := newClient(t, Config{Loader: g.load})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		req := mcp.CallToolRequest{}
		req.Params.Name = "summarize"
		req.Params.Arguments = map[string]any{"path": fx(t, "activation_oom.pickle")}
		_, err := c.CallTool(ctx, req)
		done <- err
	}()
	<-g.started
	cancel()
	<-done
	if p := <-g.cancelled; !strings.HasSuffix(p, "activation_oom.pickle") {
		t.Errorf("cancelled %s", p)
	}
	close(g.gate)
	var s analysis.Summary
	structured(t, call(t, c, "summarize", map[string]any{"path": fx(t, "no_growth_step5.pickle")}), &s)
	if s.Totals.Segments == 0 {
		t.Errorf("empty summary")
	}
}

// TestProgress: a call with a progress token gets notifications/progress for the load.
func TestProgress(t *testing.T) {
	g := newGatedLoader()
	close(g.gate)
	c := newClient(t, Config{Loader: g.load})
	got := make(chan mcp.JSONRPCNotification, 10)
	c.OnNotification(func(n mcp.JSONRPCNotification) {
		if n.Method == string(mcp.MethodNotificationProgress) {
			got <- n
		}
	})
	req := mcp.CallToolRequest{}
	req.Params.Name = "summarize"
	req.Params.Arguments = map[string]any{"path": fx(t, "activation_oom.pickle")}
	req.Params.Meta = &mcp.Meta{ProgressToken: "tok-1"}
	if res, err := c.CallTool(context.Background(), req); err != nil || res.IsError {
		t.Fatalf("%v %v", err, res)
	}
	select { // notifications may arrive after the response
	case n := <-got:
		if fmt.Sprint(n.Params.AdditionalFields["progressToken"]) != "tok-1" {
			t.Errorf("token %v", n.Params.AdditionalFields)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no progress notification")
	}
}

// TestConcurrentCalls: 20 concurrent calls on different files all answer correctly.
func TestConcurrentCalls(t *testing.T) {
	var files []string
	_ = filepath.Walk(scenarios(t), func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() && !strings.HasSuffix(p, ".md") {
			files = append(files, p)
		}
		return nil
	})
	if len(files) < 20 {
		t.Fatalf("only %d fixtures", len(files))
	}
	files = files[:20]
	want := map[string]int64{}
	for _, f := range files {
		s, err := load.File(context.Background(), f, load.Options{})
		if err != nil {
			t.Fatal(err)
		}
		sum, err := analysis.Summarize(context.Background(), s, analysis.SummaryOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want[f] = sum.Totals.ReservedBytes
	}
	var loads atomic.Int64
	c := newClient(t, Config{Loader: func(ctx context.Context, p string, o load.Options) (*snapshot.Snapshot, error) {
		loads.Add(1)
		return load.File(ctx, p, o)
	}})
	var wg sync.WaitGroup
	for _, f := range files {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := mcp.CallToolRequest{}
			req.Params.Name = "summarize"
			req.Params.Arguments = map[string]any{"path": f}
			res, err := c.CallTool(context.Background(), req)
			if err != nil || res.IsError {
				t.Errorf("%s: %v %v", f, err, res)
				return
			}
			var s analysis.Summary
			structured(t, res, &s)
			if s.Totals.ReservedBytes != want[f] || s.Path != f {
				t.Errorf("%s: reserved %d want %d (path %s)", f, s.Totals.ReservedBytes, want[f], s.Path)
			}
		}()
	}
	wg.Wait()
	if loads.Load() != 20 {
		t.Errorf("%d loads for 20 files", loads.Load())
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
