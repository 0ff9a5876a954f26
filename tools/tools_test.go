package tools

import (
	"context"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/memsnap/memsnap/analysis"
	"github.com/memsnap/memsnap/analysis/raw"

	"github.com/memsnap/memsnap/internal/realsnaps"
)

func fx(t testing.TB, name string) string { return filepath.Join(scenarios(t), name) }

// TestToolsSucceed calls every tool on fixtures with known ground truth (testdata/scenarios/README.md).
func TestToolsSucceed(t *testing.T) {
	c := newClient(t, Config{})
	t.Run("summarize", func(t *testing.T) {
		var s analysis.Summary
		structured(t, call(t, c, "summarize", map[string]any{"path": fx(t, "activation_oom.pickle")}), &s)
		if s.Totals.ReservedBytes != 924844032 || s.Totals.AllocatedBytes != 922779648 || s.OOMs != 1 || len(s.Devices) != 1 {
			t.Errorf("got reserved %d allocated %d ooms %d devices %d", s.Totals.ReservedBytes, s.Totals.AllocatedBytes, s.OOMs, len(s.Devices))
		}
	})
	t.Run("summarize relative path and device", func(t *testing.T) {
		var s analysis.Summary
		structured(t, call(t, c, "summarize", map[string]any{"path": "testdata/scenarios/activation_oom.pickle", "device": 0}), &s)
		if len(s.Devices) != 1 || s.Devices[0].Device != 0 || s.Totals.ReservedBytes != 924844032 {
			t.Errorf("got %+v", s.Totals)
		}
	})
	t.Run("summarize ranks", func(t *testing.T) {
		var s analysis.Summary
		structured(t, call(t, c, "summarize", map[string]any{"path": fx(t, "multirank")}), &s)
		if len(s.Ranks) != 4 || len(s.Devices) != 4 {
			t.Fatalf("ranks %d devices %d", len(s.Ranks), len(s.Devices))
		}
		if len(s.Notes) == 0 || !strings.Contains(s.Notes[0], "rank 1 is an outlier") {
			t.Errorf("notes %q", s.Notes)
		}
	})
	t.Run("top-stacks", func(t *testing.T) {
		var r analysis.TopStacksResult
		res := call(t, c, "top-stacks", map[string]any{"path": fx(t, "activation_oom.pickle"), "limit": 2})
		structured(t, res, &r)
		if len(r.Sites) != 2 || r.Groups != 6 || r.TotalBytes != 922779648 {
			t.Fatalf("sites %d groups %d total %d", len(r.Sites), r.Groups, r.TotalBytes)
		}
		if r.Sites[0].Site != "train.py:112" || r.Sites[0].Bytes != 288<<20 || r.Sites[1].Site != "model.py:41" || r.Sites[1].Bytes != 256<<20 {
			t.Errorf("sites %+v", r.Sites)
		}
		if !strings.Contains(textOf(res), "(4 more groups)") {
			t.Errorf("text does not say groups were left out:\n%s", textOf(res))
		}
	})
	t.Run("top-stacks default limit", func(t *testing.T) {
		var r analysis.TopStacksResult
		structured(t, call(t, c, "top-stacks", map[string]any{"path": fx(t, "fragmentation_oom.pickle"), "state": "inactive", "group_by": "file"}), &r)
		if r.State != "inactive" || r.GroupBy != "file" || len(r.Sites) > topStacksDefaultLimit || r.TotalBytes != 498073600 {
			t.Errorf("state %s group %s sites %d total %d", r.State, r.GroupBy, len(r.Sites), r.TotalBytes)
		}
	})
	t.Run("diff", func(t *testing.T) {
		var r analysis.DiffResult
		structured(t, call(t, c, "diff", map[string]any{"before": fx(t, "growing_container_step5.pickle"), "after": fx(t, "growing_container_step50.pickle"), "limit": 1}), &r)
		if r.DeltaBytes != 180<<20 || len(r.Sites) != 1 || r.Sites[0].Site != "train.py:97" || r.Sites[0].DeltaBlocks != 45 {
			t.Fatalf("delta %d sites %+v", r.DeltaBytes, r.Sites)
		}
		if len(r.Patterns) == 0 || r.Patterns[0].Name != analysis.PatternGrowingContainer {
			t.Errorf("patterns %+v", r.Patterns)
		}
	})
	t.Run("oom-report", func(t *testing.T) {
		for _, tc := range []struct {
			file, verdict, site string
			requested           int64
		}{
			{"activation_oom.pickle", analysis.VerdictCapacity, "model.py:41", 67108864},
			{"fragmentation_oom.pickle", analysis.VerdictFragmentation, "model.py:58", 33554432},
			{"outside_pytorch_oom.pickle", analysis.VerdictOutsidePyTorch, "train.py:103", 1073741824},
		} {
			var r analysis.OOMResult
			structured(t, call(t, c, "oom-report", map[string]any{"path": fx(t, tc.file), "limit": 2}), &r)
			if len(r.OOMs) != 1 {
				t.Fatalf("%s: %d ooms", tc.file, len(r.OOMs))
			}
			o := r.OOMs[0]
			if o.Verdict != tc.verdict || o.Site != tc.site || o.RequestedBytes != tc.requested || len(o.LiveSites) > 2 {
				t.Errorf("%s: verdict %s site %s requested %d live sites %d", tc.file, o.Verdict, o.Site, o.RequestedBytes, len(o.LiveSites))
			}
		}
	})
	t.Run("fragmentation", func(t *testing.T) {
		var r analysis.FragmentationResult
		structured(t, call(t, c, "fragmentation", map[string]any{"path": fx(t, "fragmentation_oom.pickle")}), &r)
		if r.ReservedBytes != 1048576000 || r.InactiveBytes != 498073600 || r.StrandedBytes != 498073600 || len(r.Groups) != 1 || r.Groups[0].LargestFreeBlockBytes != 9961472 {
			t.Errorf("got %+v", r)
		}
	})
	t.Run("read-raw-section segments paged", func(t *testing.T) {
		var r raw.Result
		structured(t, call(t, c, "read-raw-section", map[string]any{"path": fx(t, "activation_oom.pickle"), "section": "segments", "offset": 28, "limit": 5}), &r)
		if r.Kind != raw.KindSegments || r.Total != 31 || r.Returned != 3 || r.More || r.NextOffset != 31 || len(r.Segments) != 3 || r.Segments[0].Index != 28 {
			t.Errorf("got kind %s total %d returned %d more %v next %d", r.Kind, r.Total, r.Returned, r.More, r.NextOffset)
		}
	})
	t.Run("read-raw-section oom event", func(t *testing.T) {
		var r raw.Result
		structured(t, call(t, c, "read-raw-section", map[string]any{"path": fx(t, "activation_oom.pickle"), "section": "device_traces[0][76]"}), &r)
		if len(r.Events) != 1 || r.Events[0].Action != "oom" || r.Events[0].Size != 67108864 || r.Events[0].DeviceFree != 60817408 {
			t.Fatalf("events %+v", r.Events)
		}
		if len(r.Stacks) != 1 || r.Stacks[0].ID != r.Events[0].StackID {
			t.Errorf("stacks %+v", r.Stacks)
		}
	})
	t.Run("read-raw-section settings", func(t *testing.T) {
		var r raw.Result
		structured(t, call(t, c, "read-raw-section", map[string]any{"path": fx(t, "activation_oom.pickle"), "section": "allocator_settings"}), &r)
		if r.Kind != raw.KindSettings || r.Settings == nil {
			t.Errorf("got %+v", r)
		}
	})
}

// TestToolErrors: every tool answers isError (never a protocol error) with an actionable
// message for a missing path, a path outside the roots, a corrupt file and wrong arguments.
func TestToolErrors(t *testing.T) {
	extra := t.TempDir()
	corrupt := filepath.Join(extra, "corrupt.pickle")
	if err := os.WriteFile(corrupt, []byte("\x80\x04\x95garbage that is not a snapshot"), 0o644); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	outsideFile := filepath.Join(outside, "snap.pickle")
	data, err := os.ReadFile(fx(t, "activation_oom.pickle"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(outsideFile, data, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(extra, "link.pickle")
	if err := os.Symlink(outsideFile, link); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, Config{Roots: []string{repoRoot(t), extra}})
	missing := fx(t, "does_not_exist.pickle")
	args := func(tool, p string) map[string]any {
		switch tool {
		case "diff":
			return map[string]any{"before": fx(t, "no_growth_step5.pickle"), "after": p}
		case "read-raw-section":
			return map[string]any{"path": p, "section": "segments"}
		case "capacity":
			return map[string]any{"files": []any{map[string]any{"path": p, "size": 8}}}
		}
		return map[string]any{"path": p}
	}
	for _, tool := range ToolNames {
		for _, tc := range []struct {
			name string
			path string
			want []string
		}{
			{"missing", missing, []string{"no such file", "Check the path"}},
			{"outside roots", outsideFile, []string{"outside the directories", "--root"}},
			{"symlink out of roots", link, []string{"outside the directories"}},
			{"corrupt", corrupt, []string{"cannot read the snapshot", "corrupt.pickle", "dump it again"}},
			{"empty", "", []string{"is empty"}},
		} {
			res := call(t, c, tool, args(tool, tc.path))
			if !res.IsError {
				t.Errorf("%s %s: not an error: %s", tool, tc.name, textOf(res))
				continue
			}
			for _, w := range tc.want {
				if !strings.Contains(textOf(res), w) {
					t.Errorf("%s %s: %q lacks %q", tool, tc.name, textOf(res), w)
				}
			}
		}
	}
	for _, tc := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"top-stacks", map[string]any{"path": fx(t, "activation_oom.pickle"), "group_by": "bogus"}, "group_by"},
		{"top-stacks", map[string]any{"path": fx(t, "activation_oom.pickle"), "limit": 0}, "limit"},
		{"summarize", map[string]any{"path": fx(t, "activation_oom.pickle"), "bogus": 1}, "bogus"},
		{"summarize", map[string]any{}, "path"},
		{"summarize", map[string]any{"path": fx(t, "activation_oom.pickle"), "device": 7}, "no device 7"},
		{"summarize", map[string]any{"path": fx(t, "activation_oom.pickle"), "device": 7}, "call summarize without device"},
		{"summarize", map[string]any{"path": fx(t, "multirank"), "device": 7}, "call summarize without device"},
		{"read-raw-section", map[string]any{"path": fx(t, "activation_oom.pickle"), "section": "segments[99]"}, "31 segments"},
		{"read-raw-section", map[string]any{"path": fx(t, "activation_oom.pickle"), "section": "nonsense"}, "sections are"},
		{"top-stacks", map[string]any{"path": scenarios(t)}, "is a directory"},
	} {
		res := call(t, c, tc.tool, tc.args)
		if !res.IsError || !strings.Contains(textOf(res), tc.want) {
			t.Errorf("%s %v: isError=%v %q, want %q", tc.tool, tc.args, res.IsError, textOf(res), tc.want)
		}
	}
	// The server still answers after every failure.
	var s analysis.Summary
	structured(t, call(t, c, "summarize", map[string]any{"path": fx(t, "no_growth_step5.pickle")}), &s)
}

// TestTextSized: every answer's text stays under the cap; summarize of every fixture and real
// snapshot fits in about 2,000 tokens (8,000 bytes).
func TestTextSized(t *testing.T) {
	roots := []string{repoRoot(t)}
	var files []string
	_ = filepath.Walk(scenarios(t), func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() && !strings.HasSuffix(p, ".md") {
			files = append(files, p)
		}
		return nil
	})
	if d := realsnaps.Dir(); d != "" {
		roots = append(roots, d)
		real, _ := filepath.Glob(filepath.Join(d, "*.*"))
		for _, f := range real {
			if !strings.HasSuffix(f, ".md") {
				files = append(files, f)
			}
		}
	} else {
		t.Logf("real snapshots absent (%s): fixtures only", d)
	}
	c := newClient(t, Config{Roots: roots})
	for _, f := range files {
		for _, tool := range []string{"summarize", "top-stacks", "oom-report", "fragmentation", "replay", "read-raw-section"} {
			args := map[string]any{"path": f}
			if tool == "read-raw-section" {
				args["section"] = "device_traces[0]"
			}
			res := call(t, c, tool, args)
			txt := textOf(res)
			if res.IsError {
				if tool == "read-raw-section" && strings.Contains(txt, "does not exist") {
					continue
				}
				t.Errorf("%s %s: %s", tool, filepath.Base(f), txt)
				continue
			}
			if len(txt) > DefaultMaxTextBytes {
				t.Errorf("%s %s: text %d bytes > %d", tool, filepath.Base(f), len(txt), DefaultMaxTextBytes)
			}
			if tool == "summarize" && len(txt) > 8000 {
				t.Errorf("summarize %s: %d bytes of text", filepath.Base(f), len(txt))
			}
			raw, _ := json.Marshal(res.StructuredContent)
			if tool == "read-raw-section" && len(raw) > 20000 {
				t.Errorf("read-raw-section %s: structuredContent %d bytes", filepath.Base(f), len(raw))
			}
		}
	}
}

func TestCapText(t *testing.T) {
	long := strings.Repeat("0123456789abcdef\n", 1000)
	for _, tc := range []struct {
		in   string
		max  int
		same bool
	}{{"short\n", 100, true}, {long, 8192, false}, {long, 300, false}} {
		got := capText(tc.in, tc.max)
		if (got == tc.in) != tc.same || len(got) > tc.max {
			t.Errorf("capText(%d bytes, %d) = %d bytes", len(tc.in), tc.max, len(got))
		}
		if !tc.same && !strings.Contains(got, "text truncated at") {
			t.Errorf("no truncation note")
		}
	}
}

// TestClientRoots: a file outside the configured roots is readable when the client offers a
// root that holds it.
func TestClientRoots(t *testing.T) {
	dir := t.TempDir()
	data, err := os.ReadFile(fx(t, "activation_oom.pickle"))
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "snap.pickle")
	if err := os.WriteFile(f, data, 0o644); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, Config{ClientRoots: true}, clientWithRoots("file://"+filepath.ToSlash(dir)))
	var s analysis.Summary
	structured(t, call(t, c, "summarize", map[string]any{"path": f}), &s)
	if s.Totals.ReservedBytes != 924844032 {
		t.Errorf("reserved %d", s.Totals.ReservedBytes)
	}
	// Without the client root the same file is refused.
	c2 := newClient(t, Config{})
	if res := call(t, c2, "summarize", map[string]any{"path": f}); !res.IsError {
		t.Errorf("file outside roots was read")
	}
}

func TestPromptsAndResources(t *testing.T) {
	c := newClient(t, Config{})
	ctx := context.Background()
	lp, err := c.ListPrompts(ctx, mcp.ListPromptsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range lp.Prompts {
		names = append(names, p.Name)
	}
	if strings.Join(names, ",") != "diagnose-oom,explain-memory,find-leak" {
		t.Errorf("prompts %v", names)
	}
	gp := mcp.GetPromptRequest{}
	gp.Params.Name = "find-leak"
	gp.Params.Arguments = map[string]string{"before": "a.pickle", "after": "b.pickle"}
	got, err := c.GetPrompt(ctx, gp)
	if err != nil {
		t.Fatal(err)
	}
	txt := got.Messages[0].Content.(mcp.TextContent).Text
	if !strings.Contains(txt, `"before": "a.pickle", "after": "b.pickle"`) || strings.Contains(txt, "{{") {
		t.Errorf("prompt text:\n%s", txt)
	}
	rr := mcp.ReadResourceRequest{}
	rr.Params.URI = GuideURI
	guide, err := c.ReadResource(ctx, rr)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(guide.Contents[0].(mcp.TextResourceContents).Text, "read-raw-section") {
		t.Errorf("guide lacks the tools")
	}
	lt, err := c.ListResourceTemplates(ctx, mcp.ListResourceTemplatesRequest{})
	if err != nil || len(lt.ResourceTemplates) != 1 {
		t.Fatalf("templates %v %v", lt, err)
	}
	// Values are percent-encoded, as RFC 6570 expansion of the template does.
	rr.Params.URI = "memsnap://snapshot/segments%5B0%5D?path=" + url.QueryEscape(fx(t, "activation_oom.pickle")) + "&limit=1"
	sec, err := c.ReadResource(ctx, rr)
	if err != nil {
		t.Fatal(err)
	}
	var r raw.Result
	if err := json.Unmarshal([]byte(sec.Contents[0].(mcp.TextResourceContents).Text), &r); err != nil {
		t.Fatal(err)
	}
	if r.Kind != raw.KindSegment || r.Segment == nil || r.Segment.TotalSize != 16777216 || len(r.Blocks) != 1 {
		t.Errorf("section %+v", r)
	}
}

// TestRootThroughSymlink: a root given through a symlink (macOS's /tmp is /private/tmp)
// accepts the paths an agent writes through it, resolved; a symlink out of it is still
// refused, and so is a path outside it.
func TestRootThroughSymlink(t *testing.T) {
	base := t.TempDir()
	real := filepath.Join(base, "real")
	outside := filepath.Join(base, "outside")
	for _, d := range []string{real, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(real, "snap.pickle"), filepath.Join(outside, "secret.pickle")} {
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "secret.pickle"), filepath.Join(real, "escape.pickle")); err != nil {
		t.Fatal(err)
	}
	rs, err := newRoots([]string{link})
	if err != nil {
		t.Fatal(err)
	}
	realDir, _ := filepath.EvalSymlinks(real)
	ctx := context.Background()
	for _, c := range []struct {
		path, want, err string
	}{
		{filepath.Join(link, "snap.pickle"), filepath.Join(realDir, "snap.pickle"), ""},
		{"snap.pickle", filepath.Join(realDir, "snap.pickle"), ""},
		{filepath.Join(realDir, "snap.pickle"), filepath.Join(realDir, "snap.pickle"), ""},
		{filepath.Join(link, "escape.pickle"), "", "outside the directories"},
		{filepath.Join(link, "..", "outside", "secret.pickle"), "", "outside the directories"},
		{filepath.Join(outside, "secret.pickle"), "", "outside the directories"},
		{filepath.Join(link, "missing.pickle"), "", "no such file"},
	} {
		got, err := rs.resolve(ctx, c.path, "path")
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: %q, %v; want an error saying %q", c.path, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s: %q, %v; want %q", c.path, got, err, c.want)
		}
	}
}
