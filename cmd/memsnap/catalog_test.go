package main

import (
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
