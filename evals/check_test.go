package evals

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// diffDoc is shaped like the diff tool's structured output.
const diffDoc = `{
 "bytes_before": 100, "bytes_after": 300, "delta_bytes": 200,
 "sites": [
  {"site": "train.py:97", "file": "/w/train.py", "line": 97, "function": "train_step", "delta_bytes": 188743680, "delta_blocks": 45, "category": "user_container"},
  {"site": "train.py:112", "file": "/w/train.py", "line": 112, "function": "main", "delta_bytes": 0, "delta_blocks": 0, "category": "parameter"}
 ],
 "patterns": [{"name": "growing_container", "site": "train.py:97", "evidence": "went from 5 to 50", "fix": "at train.py:97 detach and move to CPU (x.detach().cpu())"}],
 "notes": [],
 "ratio": 0.25
}`

const oomDoc = `{"path": "x", "ooms": [{"site": "model.py:58", "verdict": "fragmentation", "fixes": ["set expandable_segments:True"],
  "live_sites": [{"site": "model.py:71", "file": "/w/model.py", "line": 71, "bytes": 5}]}], "notes": []}`

func mustDoc(t *testing.T, s string) any {
	t.Helper()
	v, err := DecodeStructured([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func parseCheck(t *testing.T, tool, y string) Check {
	t.Helper()
	s, err := Parse([]byte("cases:\n- name: c\n  tool: "+tool+"\n  fixtures: [a]\n  checks:\n  - "+y+"\n"), ".")
	if err != nil {
		t.Fatalf("parse %q: %v", y, err)
	}
	return s.Cases[0].Checks[0]
}

func TestEvaluate(t *testing.T) {
	diffOut := &Output{Structured: mustDoc(t, diffDoc), Text: "growing_container at train.py:97\n  fix: at train.py:97 detach and move to CPU (x.detach().cpu())\n"}
	oomOut := &Output{Structured: mustDoc(t, oomDoc), Text: "OOM at model.py:58: fragmentation\nfix: set expandable_segments:True\n"}
	tests := []struct {
		check string
		tool  string
		out   *Output
		fail  string // "" = passes; otherwise a substring of the reason
	}{
		{`{path: delta_bytes, equals: 200}`, "diff", diffOut, ""},
		{`{path: delta_bytes, equals: 200.0}`, "diff", diffOut, ""},
		{`{path: delta_bytes, equals: 201}`, "diff", diffOut, "delta_bytes equals 201: got 200"},
		{`{path: delta_bytes, equals: "200"}`, "diff", diffOut, "got 200"},
		{`{path: ratio, equals: 0.25}`, "diff", diffOut, ""},
		{`{path: ratio, equals: 0.2500001}`, "diff", diffOut, "got 0.25"},
		{`{path: delta_bytes, equals: 200, not: true}`, "diff", diffOut, "not equals"},
		{`{path: "sites[0].site", equals: train.py:97}`, "diff", diffOut, ""},
		{`{path: "sites[-1].site", equals: train.py:112}`, "diff", diffOut, ""},
		{`{path: "sites[2].site", equals: x}`, "diff", diffOut, "sites[2]: index out of range (length 2)"},
		{`{path: "sites[site=train.py:97].delta_blocks", equals: 45}`, "diff", diffOut, ""},
		{`{path: "sites[site=nope.py:1].delta_blocks", equals: 45}`, "diff", diffOut, "resolves to no value"},
		{`{path: "sites[line=112].function", equals: main}`, "diff", diffOut, ""},
		{`{path: "sites[*].delta_bytes", equals: 0}`, "diff", diffOut, "got 188743680"},
		{`{path: nope, equals: 1}`, "diff", diffOut, "nope: no such key"},
		{`{path: "notes", equals: []}`, "diff", diffOut, ""},
		{`{path: "sites[*].site", contains: train.py:112}`, "diff", diffOut, ""},
		{`{path: "sites[*].site", contains: model.py}`, "diff", diffOut, "not among"},
		{`{path: "sites[*].site", contains: model.py, not: true}`, "diff", diffOut, ""},
		{`{path: "patterns[0].fix", contains: "detach().cpu()"}`, "diff", diffOut, ""},
		{`{path: "notes", contains: x}`, "diff", diffOut, "not among [] (nothing)"},
		{`{path: "sites[0].delta_blocks", at_least: 45, at_most: 45}`, "diff", diffOut, ""},
		{`{path: "sites[0].delta_blocks", at_least: 46}`, "diff", diffOut, "got 45"},
		{`{path: "sites[*].delta_blocks", at_most: 44}`, "diff", diffOut, "got 45"},
		{`{path: "ratio", at_most: 0.25}`, "diff", diffOut, ""},
		{`{path: "sites[0].site", at_least: 1}`, "diff", diffOut, "not a number"},
		{`{path: "sites[*]", count: 2}`, "diff", diffOut, ""},
		{`{path: "sites[category=parameter]", count: 1}`, "diff", diffOut, ""},
		{`{path: "notes[*]", count: 1}`, "diff", diffOut, "resolves to 0 values"},
		{`{top_site: train.py:97}`, "diff", diffOut, ""},
		{`{top_site: /w/train.py:97}`, "diff", diffOut, ""},
		{`{top_site: train.py:112}`, "diff", diffOut, `top site is "train.py:97"`},
		{`{top_site: train.py:112, not: true}`, "diff", diffOut, ""},
		{`{top_site: model.py:71}`, "oom-report", oomOut, ""},
		{`{pattern: growing_container}`, "diff", diffOut, ""},
		{`{pattern: growing_container, site: train.py:97}`, "diff", diffOut, ""},
		{`{pattern: growing_container, site: train.py:98}`, "diff", diffOut, "patterns: growing_container at train.py:97"},
		{`{pattern: retained_autograd_graph}`, "diff", diffOut, "patterns: growing_container at train.py:97"},
		{`{pattern: retained_autograd_graph, not: true}`, "diff", diffOut, ""},
		{`{pattern: growing_container, not: true}`, "diff", diffOut, "not pattern growing_container"},
		{`{verdict: fragmentation}`, "oom-report", oomOut, ""},
		{`{verdict: capacity}`, "oom-report", oomOut, `verdict is "fragmentation"`},
		{`{verdict: capacity, not: true}`, "oom-report", oomOut, ""},
		{`{verdict: capacity}`, "oom-report", &Output{Structured: mustDoc(t, `{"ooms": []}`)}, "no oom events"},
		{`{mentions: "train.py:97"}`, "diff", diffOut, ""},
		{`{mentions: "model.py:41"}`, "diff", diffOut, `text does not mention "model.py:41"`},
		{`{mentions: "model.py:41", not: true}`, "diff", diffOut, ""},
		{`{mentions_fix: "detach().cpu()"}`, "diff", diffOut, ""},
		{`{mentions_fix: "expandable_segments"}`, "oom-report", oomOut, ""},
		{`{mentions_fix: "item()"}`, "diff", diffOut, "no fix in the structured output mentions"},
		{`{mentions_fix: "detach().cpu()"}`, "diff", &Output{Structured: diffOut.Structured, Text: "short"}, "the text does not mention"},
		{`{max_text_bytes: 1000}`, "diff", diffOut, ""},
		{`{max_text_bytes: 10}`, "diff", diffOut, "max_text_bytes 10: text is 97 bytes"},
		{`{path: x, equals: 1}`, "diff", &Output{Text: "err"}, "no structured output"},
	}
	for i, tc := range tests {
		t.Run(fmt.Sprintf("%d_%s", i, tc.check), func(t *testing.T) {
			tool := "diff"
			if tc.tool != "" {
				tool = tc.tool
			}
			c := parseCheck(t, tool, tc.check)
			got := Evaluate(tool, c, tc.out)
			if tc.fail == "" && got != "" {
				t.Fatalf("want pass, got %q", got)
			}
			if tc.fail != "" && !strings.Contains(got, tc.fail) {
				t.Fatalf("want failure containing %q, got %q", tc.fail, got)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		yaml string
		want string
	}{
		{"cases: []", "no cases"},
		{"cases:\n- name: a\n  tool: nope\n  fixtures: [x]\n  checks: [{mentions: a}]", `unknown tool "nope"`},
		{"cases:\n- name: a\n  tool: diff\n  checks: [{mentions: a}]", "no fixtures"},
		{"cases:\n- name: a\n  tool: diff\n  fixtures: [x]", "no checks"},
		{"cases:\n- name: a\n  tool: diff\n  fixtures: [x]\n  checks: [{mentions: a}]\n- name: a\n  tool: diff\n  fixtures: [x]\n  checks: [{mentions: a}]", `duplicate name "a"`},
		{"cases:\n- name: a\n  tool: diff\n  fixtures: [x]\n  bogus: 1\n  checks: [{mentions: a}]", "field bogus not found"},
		{"cases:\n- name: a\n  tool: diff\n  fixtures: [x]\n  checks: [{mentions: a, verdict: b}]", "exactly one"},
		{"cases:\n- name: a\n  tool: diff\n  fixtures: [x]\n  checks: [{path: a}]", "exactly one"},
		{"cases:\n- name: a\n  tool: diff\n  fixtures: [x]\n  checks: [{mention: a}]", `unknown check key "mention"`},
		{"cases:\n- name: a\n  tool: diff\n  fixtures: [x]\n  checks: [{equals: 1}]", "equals needs a path"},
		{"cases:\n- name: a\n  tool: diff\n  fixtures: [x]\n  checks: [{path: a, mentions: x}]", "mentions takes no path"},
		{"cases:\n- name: a\n  tool: diff\n  fixtures: [x]\n  checks: [{path: 'a[', equals: 1}]", "unclosed ["},
		{"cases:\n- name: a\n  tool: diff\n  fixtures: [x]\n  checks: [{path: 'a..b', equals: 1}]", "empty key"},
		{"cases:\n- name: a\n  tool: diff\n  fixtures: [x]\n  checks: [{path: 'a[x]', equals: 1}]", "is not an index"},
		{"cases:\n- name: a\n  tool: diff\n  fixtures: [x]\n  checks: [{path: a, at_least: 1, not: true}]", "not cannot negate range"},
		{"cases:\n- name: a\n  tool: diff\n  fixtures: [x]\n  checks: [{path: a, count: -1}]", "non-negative integer"},
		{"cases:\n- name: a\n  tool: diff\n  fixtures: [x]\n  checks: [{path: a, at_least: big}]", "at_least must be a number"},
		{"cases:\n- name: a\n  tool: diff\n  fixtures: [x]\n  checks: [{mentions: a, site: b}]", "site only narrows"},
		{"cases:\n- name: a\n  tool: summarize\n  fixtures: [x]\n  checks: [{verdict: capacity}]", "verdict applies to oom-report"},
		{"cases:\n- name: a\n  tool: summarize\n  fixtures: [x]\n  checks: [{pattern: no_growth}]", "pattern applies to diff"},
		{"cases:\n- name: a\n  tool: summarize\n  fixtures: [x]\n  checks: [{top_site: a.py:1}]", "top_site applies to"},
		{"cases:\n- name: a\n  tool: summarize\n  fixtures: [x]\n  args: {path: y}\n  checks: [{mentions: a}]", `argument path="y" is not one of the case's fixtures`},
		{"cases:\n- name: a\n  tool: summarize\n  fixtures: [x]\n  expect_error: true\n  checks: [{path: a, equals: 1}]", "an expect_error case has only text"},
	}
	for _, tc := range tests {
		_, err := Parse([]byte(tc.yaml), ".")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want error containing %q", tc.yaml, err, tc.want)
		}
	}
}

func TestParseRoots(t *testing.T) {
	s, err := Parse([]byte("root: ..\nextra_roots: [../shared]\ncases:\n- name: a\n  tool: summarize\n  fixtures: [x.pickle]\n  args: {path: x.pickle, device: 0}\n  checks: [{mentions: a}]"), "/repo/evals")
	if err != nil {
		t.Fatal(err)
	}
	if s.Root != "/repo" || len(s.ExtraRoots) != 1 || s.ExtraRoots[0] != "/shared" {
		t.Fatalf("root %q extra %q", s.Root, s.ExtraRoots)
	}
	args := s.Cases[0].ResolveArgs(s.Root)
	if args["path"] != "/repo/x.pickle" || args["device"] != 0 {
		t.Fatalf("args %v", args)
	}
	if got := s.Roots(); len(got) != 1 || got[0] != "/repo" {
		t.Fatalf("Roots() = %q: absent extra roots must be left out", got)
	}
	dir := t.TempDir()
	s.ExtraRoots = []string{dir}
	if got := s.Roots(); len(got) != 2 || got[1] != dir {
		t.Fatalf("Roots() = %q", got)
	}
	if s.Cases[0].Args["path"] != "x.pickle" {
		t.Fatalf("ResolveArgs changed the case: %v", s.Cases[0].Args)
	}
}

// fakeCaller answers from a table keyed by tool name.
type fakeCaller struct {
	out   map[string]*Output
	calls []map[string]any
}

func (f *fakeCaller) CallTool(_ context.Context, tool string, args map[string]any) (*Output, error) {
	f.calls = append(f.calls, args)
	o, ok := f.out[tool]
	if !ok {
		return nil, fmt.Errorf("the server has no tool %q", tool)
	}
	return o, nil
}

func TestRun(t *testing.T) {
	dir := t.TempDir()
	suite := fmt.Sprintf(`root: %s
cases:
- name: passes
  tool: diff
  fixtures: [evals/eval.yaml]
  args: {before: evals/eval.yaml, after: /abs/after.pickle}
  checks: [{pattern: growing_container}, {top_site: train.py:97}]
- name: fails-twice
  tool: diff
  fixtures: [evals/eval.yaml]
  checks: [{pattern: no_growth}, {path: delta_bytes, equals: 5}, {mentions: train.py:97}]
- name: real-absent
  tool: summarize
  fixtures: [../shared/snapshots/real/none.pickle]
  skip_if_missing: true
  checks: [{mentions: x}]
- name: fixture-missing
  tool: summarize
  fixtures: [nope.pickle]
  checks: [{mentions: x}]
- name: wants-error
  tool: diff
  fixtures: [evals/eval.yaml]
  expect_error: true
  checks: [{mentions: x}]
- name: got-error
  tool: oom-report
  fixtures: [evals/eval.yaml]
  checks: [{verdict: capacity}]
- name: error-expected
  tool: oom-report
  fixtures: [evals/eval.yaml]
  expect_error: true
  checks: [{mentions: "not a snapshot"}]
- name: no-such-tool
  tool: fragmentation
  fixtures: [evals/eval.yaml]
  checks: [{mentions: x}]
`, dir)
	s, err := Parse([]byte(suite), dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := mkfile(dir, "evals/eval.yaml"); err != nil {
		t.Fatal(err)
	}
	fc := &fakeCaller{out: map[string]*Output{
		"diff":       {Structured: mustDoc(t, diffDoc), Text: "growing_container at train.py:97"},
		"oom-report": {IsError: true, Text: "x.pickle: not a snapshot (at byte 0)"},
	}}
	rep, err := Run(context.Background(), s, fc, "")
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		status  Status
		reasons []string
	}{
		{Pass, nil},
		{Fail, []string{"pattern no_growth: patterns: growing_container at train.py:97", "delta_bytes equals 5: got 200"}},
		{Skip, []string{"fixture ../shared/snapshots/real/none.pickle is absent"}},
		{Fail, []string{"fixture nope.pickle: stat " + dir + "/nope.pickle: no such file or directory"}},
		{Fail, []string{"expected an error result, got a normal answer"}},
		{Fail, []string{"tool answered with an error: x.pickle: not a snapshot (at byte 0)"}},
		{Pass, nil},
		{Fail, []string{`call failed: the server has no tool "fragmentation"`}},
	}
	if len(rep.Results) != len(want) {
		t.Fatalf("%d results", len(rep.Results))
	}
	for i, w := range want {
		r := rep.Results[i]
		if r.Status != w.status || strings.Join(r.Reasons, "|") != strings.Join(w.reasons, "|") {
			t.Errorf("case %s: %s %q, want %s %q", r.Case, r.Status, r.Reasons, w.status, w.reasons)
		}
	}
	if rep.Passed != 2 || rep.Failed != 5 || rep.Skp != 1 || rep.OK() {
		t.Errorf("counts %d/%d/%d", rep.Passed, rep.Failed, rep.Skp)
	}
	if fc.calls[0]["before"] != dir+"/evals/eval.yaml" || fc.calls[0]["after"] != "/abs/after.pickle" {
		t.Errorf("args sent: %v", fc.calls[0])
	}
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	table := b.String()
	for _, line := range []string{
		"STATUS  CASE             TOOL           REASON\n",
		"FAIL    fails-twice      diff           pattern no_growth: patterns: growing_container at train.py:97\n",
		"                                        delta_bytes equals 5: got 200\n",
		"SKIP    real-absent      summarize      fixture ../shared/snapshots/real/none.pickle is absent\n",
		"FAIL    no-such-tool     fragmentation  call failed: the server has no tool \"fragmentation\"\n",
		"2 passed, 5 failed, 1 skipped, 8 cases\n1 of the skipped cases need the real snapshots: the real snapshots are not in ",
	} {
		if !strings.Contains(table, line) {
			t.Errorf("table lacks %q:\n%s", line, table)
		}
	}
	rep, err = Run(context.Background(), s, fc, "error")
	if err != nil || len(rep.Results) != 3 {
		t.Fatalf("filter: %v %d", err, len(rep.Results))
	}
}
