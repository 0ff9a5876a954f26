package catalog

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/evals/golden"
)

// TestEntries: every entry has a command or a tool, says why when it lacks one, answers
// something, and hints at its tool by name; no name is listed twice.
func TestEntries(t *testing.T) {
	seen := map[string]bool{}
	for _, e := range All {
		names := append(slices.Clone(e.Commands), "tool "+e.Tool)
		if len(e.Commands) == 0 && e.Tool == "" {
			t.Errorf("%v: neither a command nor a tool", e)
		}
		if (len(e.Commands) == 0 || e.Tool == "") != (e.Only != "") {
			t.Errorf("%v: Only must say why exactly when a command or the tool is missing", names)
		}
		if e.Answers == "" {
			t.Errorf("%v: no Answers", names)
		}
		if (e.Tool != "") != strings.Contains(e.Hint, "`"+e.Tool+"`") {
			t.Errorf("%v: the Hint must name the tool in backquotes, and only a tool has one", names)
		}
		for _, n := range names {
			if n != "tool " && seen[n] {
				t.Errorf("%s listed twice", n)
			}
			seen[n] = true
		}
	}
	if ToolOf("oom") != "oom-report" || ToolOf("view") != "timeline" || ToolOf("trim") != "" ||
		!slices.Equal(CommandsOf("timeline"), []string{"plot", "view"}) || CommandsOf("read-raw-section") != nil {
		t.Error("ToolOf/CommandsOf disagree with the entries")
	}
	if got := list([]string{"a", "b", "c"}); got != "`a`, `b` and `c`" {
		t.Errorf("list: %q", got)
	}
}

// readmeBlocks are the README's parts made from the catalog, between <!-- catalog:NAME -->
// and <!-- /catalog:NAME -->.
func readmeBlocks() map[string]string {
	return map[string]string{
		"intro":    "Commands: " + CommandList() + ".\nMCP tools: " + ToolList() + ".\n",
		"tools":    "Tools: " + ToolList() + ".\n",
		"commands": CommandTable(),
	}
}

// TestReadme: the README's command list, tool list and command table are the catalog's (go
// test ./catalog -update rewrites them), and the README stays within 300 lines.
func TestReadme(t *testing.T) {
	const path = "../README.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	for name, want := range readmeBlocks() {
		begin, end := "<!-- catalog:"+name+" -->\n", "<!-- /catalog:"+name+" -->"
		i, j := strings.Index(readme, begin), strings.Index(readme, end)
		if i < 0 || j < i {
			t.Errorf("README.md lacks %s…%s", begin, end)
			continue
		}
		if got := readme[i+len(begin) : j]; got != want {
			if !golden.Updating() {
				t.Errorf("README.md's %s list differs from the catalog (run go test ./catalog -update and review the diff):\n--- README\n%s--- catalog\n%s", name, got, want)
				continue
			}
			readme = readme[:i+len(begin)] + want + readme[j:]
		}
	}
	if golden.Updating() && readme != string(b) {
		if err := os.WriteFile(path, []byte(readme), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(readme, "\n"); n > 300 {
		t.Errorf("README.md has %d lines: at most 300 (move details to docs/)", n)
	}
}

// TestOtherLists: the other hand-written lists of commands and tools name exactly the
// catalog's: docs/commands.md's table, SKILL.md's table (tool and command per row).
func TestOtherLists(t *testing.T) {
	read := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	var docs []string
	for _, m := range regexp.MustCompile("(?m)^\\| `memsnap ([a-z-]+)").FindAllStringSubmatch(read("../docs/commands.md"), -1) {
		docs = append(docs, m[1])
	}
	if want := Commands(); !slices.Equal(docs, want) {
		t.Errorf("docs/commands.md's table lists %v, the catalog %v", docs, want)
	}
	var tools []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z-]+)` \\{[^|]*\\| ([^|]*) \\|").FindAllStringSubmatch(read("../SKILL.md"), -1) {
		tools = append(tools, m[1])
		var cmds []string
		for _, c := range regexp.MustCompile("`memsnap ([a-z-]+)").FindAllStringSubmatch(m[2], -1) {
			cmds = append(cmds, c[1])
		}
		if want := CommandsOf(m[1]); len(cmds) > 0 && !slices.Contains(want, cmds[0]) || len(cmds) == 0 && len(want) > 0 {
			t.Errorf("SKILL.md: tool %s is given the command %v; the catalog says %v", m[1], cmds, want)
		}
	}
	if want := Tools(); !slices.Equal(slices.Sorted(slices.Values(tools)), slices.Sorted(slices.Values(want))) {
		t.Errorf("SKILL.md's table lists the tools %v, the catalog %v", tools, want)
	}
}
