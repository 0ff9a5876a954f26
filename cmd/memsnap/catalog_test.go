package main

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/catalog"
)

// TestCommandsMatchCatalog: the binary's commands are the catalog's, no more and no fewer, and
// serve --help names every MCP tool of the catalog.
func TestCommandsMatchCatalog(t *testing.T) {
	root := newRootCmd()
	var got []string
	for _, c := range root.Commands() {
		if n := c.Name(); n != "help" && n != "completion" {
			got = append(got, n)
		}
	}
	slices.Sort(got)
	want := slices.Sorted(slices.Values(catalog.Commands()))
	if !slices.Equal(got, want) {
		t.Errorf("commands %v, the catalog lists %v: add the command to catalog.All (or its file to cmd/memsnap)", got, want)
	}
	serve, _, err := root.Find([]string{"serve"})
	if err != nil {
		t.Fatal(err)
	}
	help := serve.Long
	for _, tool := range catalog.Tools() {
		if !strings.Contains(help, tool) {
			t.Errorf("serve --help does not name the tool %s", tool)
		}
	}
	if !strings.Contains(help, "Tools: "+strings.Join(catalog.Tools(), ", ")+".") {
		t.Errorf("serve --help's tool line is not the catalog's:\n%s", help)
	}
}

// TestReadmeExample: the README's example output is what memsnap prints for that command (each
// line, or the part before an ellipsis where the README cuts a long line).
func TestReadmeExample(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), "```text\n$ memsnap ")
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("README.md has no ```text block starting with $ memsnap")
	}
	lines := strings.Split(strings.TrimSuffix(block, "\n"), "\n")
	args := strings.Fields(lines[0])
	args[len(args)-1] = "../../" + args[len(args)-1]
	out, err := run(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lines[1:] {
		for _, part := range strings.Split(l, "...") {
			if part = strings.TrimSpace(strings.Trim(part, " ;:")); part != "" && !strings.Contains(out, part) {
				t.Errorf("README's example line %q: memsnap %s does not print %q", l, strings.Join(args, " "), part)
			}
		}
	}
}
