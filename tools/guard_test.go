package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/memsnap/memsnap/analysis"
	"github.com/memsnap/memsnap/analysis/load"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// concurrencyLoader records how many loads run at once and checks, inside each load, that the
// cache's results and admitted loads stay within its budget.
type concurrencyLoader struct {
	cache   func() *Cache
	budget  int64
	running atomic.Int64
	peak    atomic.Int64
	loads   atomic.Int64
	overrun atomic.Int64 // bytes over the budget seen by a load (0: never)
}

func (l *concurrencyLoader) load(ctx context.Context, path string, opt load.Options) (*snapshot.Snapshot, error) {
	n := l.running.Add(1)
	defer l.running.Add(-1)
	l.loads.Add(1)
	for {
		p := l.peak.Load()
		if n <= p || l.peak.CompareAndSwap(p, n) {
			break
		}
	}
	if l.cache != nil {
		c := l.cache()
		loading, _ := c.Loading()
		if over := c.Used() + loading - l.budget; over > 0 {
			l.overrun.Store(over)
		}
	}
	select {
	case <-time.After(30 * time.Millisecond):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return load.File(ctx, path, opt)
}

// TestLoadsInFlightWithinBudget: 24 concurrent summarize calls on different files through the
// server, with a budget that holds three loads: never more than three load at once, the
// results and loads in flight never exceed the budget, and every call answers.
func TestLoadsInFlightWithinBudget(t *testing.T) {
	dir := t.TempDir()
	src := fx(t, "activation_oom.pickle")
	const files = 24
	var paths []string
	for i := range files {
		p := filepath.Join(dir, fmt.Sprintf("snap%02d.pickle", i))
		copyFile(t, src, p)
		paths = append(paths, p)
	}
	st, err := os.Stat(src)
	if err != nil {
		t.Fatal(err)
	}
	est := EstimateLoadCost(src, st.Size())
	if want := int64(1.5*float64(st.Size())) + 4<<20; est != want {
		t.Fatalf("estimate %d, want %d", est, want)
	}
	budget := 3*est + est/2 // three loads fit, a fourth does not
	srvCfg := Config{Roots: []string{dir}, CacheBytes: budget}
	l := &concurrencyLoader{budget: budget}
	srvCfg.Loader = l.load
	srv, e := newTestServer(t, srvCfg)
	l.cache = func() *Cache { return e.cache }
	c := clientFor(t, srv)

	var wg sync.WaitGroup
	errs := make([]string, files)
	for i, p := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := call(t, c, "summarize", map[string]any{"path": p})
			if res.IsError {
				errs[i] = textOf(res)
			}
		}()
	}
	wg.Wait()
	for i, e := range errs {
		if e != "" {
			t.Errorf("call %d: %s", i, e)
		}
	}
	if p := l.peak.Load(); p > 3 || p < 1 {
		t.Errorf("%d loads ran at once; the budget admits 3", p)
	}
	if o := l.overrun.Load(); o > 0 {
		t.Errorf("results and loads in flight went %d bytes over the budget", o)
	}
	if n := l.loads.Load(); n != files {
		t.Errorf("%d loads for %d files", n, files)
	}
	if b, n := e.cache.Loading(); b != 0 || n != 0 {
		t.Errorf("after the calls: %d bytes in %d loads still counted", b, n)
	}
	t.Logf("peak loads at once: %d (budget %d B, estimate %d B per load)", l.peak.Load(), budget, est)
}

// TestOneLoadAlwaysAdmitted: a file whose estimate exceeds the whole budget still loads,
// alone, and every call answers.
func TestOneLoadAlwaysAdmitted(t *testing.T) {
	l := &concurrencyLoader{}
	c := NewCache(1, l.load)
	var wg sync.WaitGroup
	for _, f := range []string{"activation_oom.pickle", "fragmentation_oom.pickle", "no_growth_step5.pickle", "outside_pytorch_oom.pickle"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Get(context.Background(), fx(t, f), nil); err != nil {
				t.Errorf("%s: %v", f, err)
			}
		}()
	}
	wg.Wait()
	if p := l.peak.Load(); p != 1 {
		t.Errorf("%d loads at once over a 1-byte budget, want 1", p)
	}
}

// TestEstimateGzip: a gzip file's estimate comes from its uncompressed size.
func TestEstimateGzip(t *testing.T) {
	gz := fx(t, "summarize_basic.pickle.gz")
	st, err := os.Stat(gz)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := os.Stat(fx(t, "summarize_basic.pickle"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := EstimateLoadCost(gz, st.Size()), int64(1.5*float64(plain.Size()))+4<<20; got != want {
		t.Errorf("gzip estimate %d, want %d (from the uncompressed %d bytes)", got, want, plain.Size())
	}
}

// TestFIFOAnswersAndOthersToo: a call on a FIFO inside the root answers with isError at once
// (nothing ever writes to it), five of them do not hold the workers, and a call on a good file
// still answers.
func TestFIFOAnswersAndOthersToo(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "stuck.pickle")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	good := filepath.Join(dir, "good.pickle")
	copyFile(t, fx(t, "activation_oom.pickle"), good)
	c := newClient(t, Config{Roots: []string{dir}, CallTimeout: 5 * time.Second})
	var wg sync.WaitGroup
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			res := call(t, c, "top-stacks", map[string]any{"path": fifo})
			if !res.IsError || !strings.Contains(textOf(res), "is not a regular file (a FIFO, socket or device)") {
				t.Errorf("FIFO: isError %v: %s", res.IsError, textOf(res))
			}
			if d := time.Since(start); d > 4*time.Second {
				t.Errorf("FIFO call took %s", d)
			}
		}()
	}
	var s analysis.Summary
	structured(t, call(t, c, "summarize", map[string]any{"path": good}), &s)
	if s.Totals.ReservedBytes != 924844032 {
		t.Errorf("good file: reserved %d", s.Totals.ReservedBytes)
	}
	wg.Wait()
}

// TestStuckLoadTimesOut: a load that never returns and ignores its context (a read stuck in
// the kernel) costs its call a timeout error, not the server: a concurrent call on another
// file answers meanwhile, and the stuck load stops counting against the budget.
func TestStuckLoadTimesOut(t *testing.T) {
	dir := t.TempDir()
	stuck := filepath.Join(dir, "stuck.pickle")
	copyFile(t, fx(t, "fragmentation_oom.pickle"), stuck)
	good := filepath.Join(dir, "good.pickle")
	copyFile(t, fx(t, "activation_oom.pickle"), good)
	release := make(chan struct{})
	defer close(release)
	loader := func(ctx context.Context, path string, opt load.Options) (*snapshot.Snapshot, error) {
		if path == stuck {
			<-release // ignores ctx
		}
		return load.File(ctx, path, opt)
	}
	srv, e := newTestServer(t, Config{Roots: []string{dir}, Loader: loader, CallTimeout: 400 * time.Millisecond})
	c := clientFor(t, srv)
	done := make(chan *mcp.CallToolResult, 1)
	start := time.Now()
	go func() { done <- call(t, c, "summarize", map[string]any{"path": stuck}) }()
	var s analysis.Summary
	structured(t, call(t, c, "summarize", map[string]any{"path": good}), &s)
	if s.Totals.ReservedBytes != 924844032 {
		t.Errorf("good file: reserved %d", s.Totals.ReservedBytes)
	}
	res := <-done
	if d := time.Since(start); d < 400*time.Millisecond || d > 10*time.Second {
		t.Errorf("stuck call answered after %s, want the 400ms timeout", d)
	}
	want := "summarize did not finish within 400ms (the server's --call-timeout)"
	if !res.IsError || !strings.HasPrefix(textOf(res), want) {
		t.Errorf("stuck call: isError %v: %s", res.IsError, textOf(res))
	}
	// The call's waiter leaves just after the answer; then the load stops counting.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		b, n := e.cache.Loading()
		if b == 0 && n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the abandoned load still counts: %d bytes in %d loads", b, n)
		}
	}
}

// TestArgumentErrorsAreSentences: schema violations read as sentences, not Go structs.
func TestArgumentErrorsAreSentences(t *testing.T) {
	c := newClient(t, Config{})
	usage := "top-stacks takes path (required), group_by, state, limit, device, rules; tools/list gives each argument's description."
	p := fx(t, "activation_oom.pickle")
	for _, tc := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"path": p, "group_by": "foo"}, "invalid arguments for top-stacks: group_by must be one of site, stack, file, function, annotation, compile_context; got foo. " + usage},
		{map[string]any{"path": p, "limit": 0}, "invalid arguments for top-stacks: limit must be at least 1; got 0. " + usage},
		{map[string]any{"path": p, "limit": 1000}, "invalid arguments for top-stacks: limit must be at most 100; got 1000. " + usage},
		{map[string]any{"path": p, "limit": "10"}, "invalid arguments for top-stacks: limit must be an integer; got a string. " + usage},
		{map[string]any{"group_by": "site"}, "invalid arguments for top-stacks: path is required. " + usage},
		{map[string]any{"path": p, "bogus": 1}, "invalid arguments for top-stacks: unknown argument bogus. " + usage},
	} {
		res := call(t, c, "top-stacks", tc.args)
		if got := textOf(res); !res.IsError || got != tc.want {
			t.Errorf("%v:\n got %q\nwant %q", tc.args, got, tc.want)
		}
	}
}

// TestEchoedTextCapped: a huge path argument is not echoed whole.
func TestEchoedTextCapped(t *testing.T) {
	c := newClient(t, Config{})
	huge := "/" + strings.Repeat("x", 200_000) + ".pickle"
	res := call(t, c, "summarize", map[string]any{"path": huge})
	got := textOf(res)
	if !res.IsError || len(got) > 2*maxEchoedPath+1000 || !strings.Contains(got, "is outside the directories") || !strings.Contains(got, "…") {
		t.Errorf("isError %v, %d bytes: %.300s", res.IsError, len(got), got)
	}
	res = call(t, c, "top-stacks", map[string]any{"path": fx(t, "activation_oom.pickle"), "group_by": strings.Repeat("y", 100_000)})
	if got := textOf(res); !res.IsError || len(got) > DefaultMaxTextBytes || !strings.Contains(got, "group_by must be one of site, stack, file, function, annotation, compile_context; got yyy") {
		t.Errorf("isError %v, %d bytes: %.300s", res.IsError, len(got), got)
	}
}

// TestTopStacksStructuredCapped: top-stacks' structuredContent stays under its cap, keeps the
// largest groups and says what it left out.
func TestTopStacksStructuredCapped(t *testing.T) {
	const max = 2500
	c := newClient(t, Config{MaxStructuredBytes: max})
	res := call(t, c, "top-stacks", map[string]any{"path": fx(t, "summarize_basic.pickle"), "group_by": "stack", "limit": 100})
	var r analysis.TopStacksResult
	structured(t, res, &r)
	raw, _ := json.Marshal(res.StructuredContent)
	if len(raw) > max {
		t.Errorf("structuredContent %d bytes over the %d cap", len(raw), max)
	}
	if r.Groups <= len(r.Sites) || len(r.Sites) == 0 {
		t.Fatalf("kept %d of %d groups", len(r.Sites), r.Groups)
	}
	note := fmt.Sprintf("structuredContent keeps the largest %d of the %d groups asked for, to stay under %d bytes", len(r.Sites), r.Groups, max)
	if !strings.HasPrefix(r.Notes[len(r.Notes)-1], note) {
		t.Errorf("last note %q, want prefix %q", r.Notes[len(r.Notes)-1], note)
	}
	if !strings.Contains(textOf(res), note) {
		t.Errorf("the text lacks the note:\n%s", textOf(res))
	}
	// Under the default cap the same call is whole, and a memoized full answer is not altered.
	full := newClient(t, Config{})
	structured(t, call(t, full, "top-stacks", map[string]any{"path": fx(t, "summarize_basic.pickle"), "group_by": "stack", "limit": 100}), &r)
	if len(r.Sites) != r.Groups {
		t.Errorf("default cap: %d of %d groups", len(r.Sites), r.Groups)
	}
}

// TestToolTitles: every tool has a human title, also as the title annotation.
func TestToolTitles(t *testing.T) {
	for _, tool := range listTools(t) {
		if tool.Title == "" || tool.Title == tool.Name || tool.Annotations.Title != tool.Title {
			t.Errorf("%s: title %q, annotation title %q", tool.Name, tool.Title, tool.Annotations.Title)
		}
	}
}

// TestClientRootsOptIn: a client root widens the readable directories only with ClientRoots
// (serve --client-roots): a client offering file:/// reads nothing outside the roots by default.
func TestClientRootsOptIn(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "snap.pickle")
	copyFile(t, fx(t, "activation_oom.pickle"), f)
	for _, on := range []bool{false, true} {
		c := newClient(t, Config{ClientRoots: on}, clientWithRoots("file:///"))
		res := call(t, c, "summarize", map[string]any{"path": f})
		if res.IsError == on {
			t.Errorf("ClientRoots %v: isError %v: %.200s", on, res.IsError, textOf(res))
		}
	}
}

// TestVersionOf: the version constant, then the revision, or a sentence saying there is none.
func TestVersionOf(t *testing.T) {
	set := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	for _, tc := range []struct {
		version  string
		settings []debug.BuildSetting
		want     string
	}{
		{"", nil, "0.1.0 (built without VCS information)"},
		{"(devel)", nil, "0.1.0 (built without VCS information)"},
		{"(devel)", set("vcs.revision", "54ef69f1a2b3c4d5e6f7", "vcs.modified", "true"), "0.1.0 (rev 54ef69f1a2b3, modified)"},
		{"(devel)", set("vcs.revision", "54ef69f1a2b3c4d5e6f7", "vcs.modified", "false"), "0.1.0 (rev 54ef69f1a2b3)"},
		{"v1.2.0", nil, "0.1.0 (module v1.2.0)"},
		{"v0.0.0-20261201030441-54ef69f1a2b3+dirty", set("vcs.revision", "54ef69f1a2b3c4d5e6f7", "vcs.modified", "true"), "0.1.0 (module v0.0.0-20261201030441-54ef69f1a2b3+dirty)"},
		{"v0.0.0-20261201030441-54ef69f1a2b3", set("vcs.revision", "54ef69f1a2b3c4d5e6f7", "vcs.modified", "true"), "0.1.0 (module v0.0.0-20261201030441-54ef69f1a2b3, modified)"},
		{"v1.2.0", set("vcs.revision", "abcdef123456789", "vcs.modified", "false"), "0.1.0 (module v1.2.0, rev abcdef123456)"},
	} {
		info := &debug.BuildInfo{Main: debug.Module{Version: tc.version}, Settings: tc.settings}
		if got := versionOf(info); got != tc.want {
			t.Errorf("versionOf(%q, %v) = %q, want %q", tc.version, tc.settings, got, tc.want)
		}
	}
}

// TestServerInfoVersion: clients see the build's version unless the configuration sets one.
func TestServerInfoVersion(t *testing.T) {
	for cfg, want := range map[string]string{"": BuildVersion(), "v9.9.9": "v9.9.9"} {
		srv, _ := newTestServer(t, Config{Version: cfg})
		c, err := client.NewInProcessClient(srv)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		req := mcp.InitializeRequest{}
		req.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
		req.Params.ClientInfo = mcp.Implementation{Name: "t", Version: "0"}
		res, err := c.Initialize(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if res.ServerInfo.Version != want || want == "" {
			t.Errorf("Version %q: serverInfo.version %q, want %q", cfg, res.ServerInfo.Version, want)
		}
		c.Close()
	}
}
