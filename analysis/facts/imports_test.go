package facts

import (
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// TestImportsOneWay: facts sits below roles, reports and advice (DESIGN.md): it imports no
// package of memsnap at all, so nothing above it can leak in.
func TestImportsOneWay(t *testing.T) {
	ents, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), e.Name(), nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		n++
		for _, im := range f.Imports {
			if p := strings.Trim(im.Path.Value, `"`); strings.HasPrefix(p, "github.com/memsnap/memsnap") {
				t.Errorf("%s imports %s: facts may import no memsnap package", e.Name(), p)
			}
		}
	}
	if n == 0 {
		t.Fatal("no source files read")
	}
}
