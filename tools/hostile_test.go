package tools

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/memsnap/memsnap/analysis"
	"github.com/memsnap/memsnap/analysis/bound"
	"github.com/memsnap/memsnap/analysis/pickle/writer"
	"github.com/memsnap/memsnap/analysis/raw"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// hugeNames builds a snapshot whose three frames have names of n bytes each: a user frame
// (train.py) above two library frames, live blocks on two stacks and a trace with an OOM.
func hugeNames(n int) *snapshot.Snapshot {
	in := snapshot.NewInterner()
	name := func(c string) string { return strings.Repeat(c, n) }
	user := in.Frame(snapshot.Frame{Filename: "/home/u/train.py", Line: 41, Name: name("u")})
	lib := in.Frame(snapshot.Frame{Filename: "/usr/lib/python3/site-packages/torch/nn/" + name("l") + ".py", Line: 7, Name: "forward"})
	cpp := in.Frame(snapshot.Frame{Filename: "??", Name: name("c")})
	s1 := in.Stack([]snapshot.FrameID{cpp, lib, user})
	s2 := in.Stack([]snapshot.FrameID{lib, user})
	const base = 0x7f0000000000
	segs := []snapshot.Segment{}
	var evs []snapshot.Event
	for i, st := range []snapshot.StackID{s1, s2} {
		addr := uint64(base + i<<24)
		size := int64(8<<20) * int64(i+1)
		segs = append(segs, snapshot.Segment{Device: 0, Address: addr, TotalSize: size, AllocatedSize: size, ActiveSize: size,
			RequestedSize: size, SegmentType: "large", Stack: st,
			Blocks: []snapshot.Block{{Address: addr, Size: size, RequestedSize: size, State: snapshot.StateActiveAllocated, Stack: st}}})
		evs = append(evs,
			snapshot.Event{Action: snapshot.ActionSegmentAlloc, Addr: addr, Size: size, Stack: st},
			snapshot.Event{Action: snapshot.ActionAlloc, Addr: addr, Size: size, Stack: st})
	}
	evs = append(evs, snapshot.Event{Action: snapshot.ActionOOM, Size: 1 << 30, Stack: s1}.WithDeviceFree(1<<20))
	return &snapshot.Snapshot{Frames: in.Frames, Stacks: in.Stacks, Segments: segs,
		DeviceTraces: [][]snapshot.Event{evs}, EventExtras: []snapshot.EventExtra{{}}}
}

// writeSnap encodes snap as a protocol-4 pickle in dir.
func writeSnap(t *testing.T, dir, name string, snap *snapshot.Snapshot) string {
	t.Helper()
	data, err := writer.Encode(snap, writer.Options{Protocol: 4})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestHugeStringsBounded (F1): frame names of 1 MiB reach no answer whole. Every tool's
// default answer, read-raw-section's stacks and segments and the section resource stay
// within the caps; a cut name is the same in every tool; stacks[ID].frames[K] pages through
// the whole name.
func TestHugeStringsBounded(t *testing.T) {
	const n = 1 << 20
	dir := t.TempDir()
	path := writeSnap(t, dir, "huge.pickle", hugeNames(n))
	c := newClient(t, Config{Roots: []string{dir}})
	calls := defaultCalls(path, path)
	calls["check"] = map[string]any{"path": path, "max_peak": "1GiB"}
	calls["what-if"] = map[string]any{"path": path, "settings": map[string]any{"expandable_segments": true}}
	calls["top-stacks stack 100"] = map[string]any{"path": path, "group_by": "stack", "limit": 100, "tool": "top-stacks"}
	calls["read-raw-section stacks[1]"] = map[string]any{"path": path, "section": "stacks[1]", "tool": "read-raw-section"}
	calls["read-raw-section segments[0]"] = map[string]any{"path": path, "section": "segments[0]", "tool": "read-raw-section"}
	calls["read-raw-section trace"] = map[string]any{"path": path, "section": "device_traces[0]", "tool": "read-raw-section"}
	for name, args := range calls {
		tool := name
		if tl, ok := args["tool"].(string); ok {
			tool = tl
			delete(args, "tool")
		}
		res := call(t, c, tool, args)
		if res.IsError {
			t.Errorf("%s: %s", name, clip(textOf(res), 300))
			continue
		}
		s, txt, img := answerSizes(t, res)
		if s > maxDefaultStructured || txt > maxDefaultText || img > maxTimelinePNGBytes*4/3+4 {
			t.Errorf("%s: structured %d text %d image %d bytes", name, s, txt, img)
		}
	}
	// The user's site is named alike by top-stacks and oom-report.
	var ts analysis.TopStacksResult
	structured(t, call(t, c, "top-stacks", map[string]any{"path": path, "group_by": "function"}), &ts)
	if len(ts.Sites) == 0 || !bound.IsCut(ts.Sites[0].Site) || len(ts.Sites[0].Site) > bound.MaxString {
		t.Fatalf("top-stacks by function: %+v", ts.Sites)
	}
	// stacks[s2].frames[1] is the user frame: paged whole.
	var got strings.Builder
	offset := 0
	for range 1000 {
		var r raw.Result
		structured(t, call(t, c, "read-raw-section", map[string]any{"path": path, "section": "stacks[2].frames[1]", "offset": offset}), &r)
		if r.FrameText == nil || r.Total != len("/home/u/train.py:41 ")+n {
			t.Fatalf("frame text %+v total %d", r.FrameText != nil, r.Total)
		}
		got.WriteString(string(r.FrameText.Text))
		if !r.More {
			break
		}
		offset = r.NextOffset
	}
	if got.String() != "/home/u/train.py:41 "+strings.Repeat("u", n) {
		t.Errorf("paged %d bytes, not the whole frame", got.Len())
	}
	// The resource is bounded too.
	rr, err := c.ReadResource(context.Background(), mcp.ReadResourceRequest{Params: mcp.ReadResourceParams{
		URI: "memsnap://snapshot/stacks%5B1%5D?path=" + strings.ReplaceAll(path, "/", "%2F")}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(rr)
	if len(b) > maxDefaultStructured {
		t.Errorf("resource stacks[1]: %d bytes", len(b))
	}
}

// TestSymlinkOutsideNoOracle (F4): behind a link inside the root that points outside, an
// existing file, a missing one, a path through a regular file and a directory all get the
// same answer, word for word.
func TestSymlinkOutsideNoOracle(t *testing.T) {
	base := t.TempDir()
	root, outside := filepath.Join(base, "root"), filepath.Join(base, "outside")
	for _, d := range []string{root, outside, filepath.Join(outside, "dir")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(outside, "secret.pickle"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"out": outside, "file": filepath.Join(outside, "secret.pickle"),
		"missing": filepath.Join(outside, "nothing"), "rel": "../outside/dir"} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	rs, err := newRoots([]string{root})
	if err != nil {
		t.Fatal(err)
	}
	realRoot, _ := filepath.EvalSymlinks(root)
	want := ""
	for _, p := range []string{"out/secret.pickle", "out/nothing.pickle", "out/secret.pickle/x", "out/dir", "file", "missing",
		"file/x", "rel", "rel/x", "out/../../root/../outside/secret.pickle"} {
		_, err := rs.resolve(context.Background(), filepath.Join(root, p), "path")
		if err == nil {
			t.Fatalf("%s: resolved", p)
		}
		msg := strings.ReplaceAll(err.Error(), clip(filepath.Join(root, p), maxEchoedPath), "PATH")
		if want == "" {
			want = msg
			if !strings.Contains(msg, "outside the directories this server may read ("+realRoot+")") {
				t.Fatalf("%s: %s", p, msg)
			}
		}
		if msg != want {
			t.Errorf("%s: %q, want the same answer as the others %q", p, msg, want)
		}
	}
	// Inside the root, a missing file is still named so.
	if _, err := rs.resolve(context.Background(), filepath.Join(root, "nothing.pickle"), "path"); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing file inside: %v", err)
	}
}
