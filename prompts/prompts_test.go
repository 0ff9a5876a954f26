package prompts

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/catalog"
)

// TestPrompts: every placeholder is an argument and every argument is used; the instructions
// and the guide name every tool of the catalog.
func TestPrompts(t *testing.T) {
	ph := regexp.MustCompile(`\{\{(\w+)\}\}`)
	for _, p := range All {
		var args []string
		for _, a := range p.Arguments {
			args = append(args, a.Name)
			if !strings.Contains(p.Text, "{{"+a.Name+"}}") {
				t.Errorf("%s: argument %s unused", p.Name, a.Name)
			}
		}
		for _, m := range ph.FindAllStringSubmatch(p.Text, -1) {
			if !slices.Contains(args, m[1]) {
				t.Errorf("%s: placeholder %s is no argument", p.Name, m[1])
			}
		}
	}
	for _, tool := range catalog.Tools() {
		if !strings.Contains(Instructions, "`"+tool+"`") || !strings.Contains(Guide, "`"+tool+"`") {
			t.Errorf("instructions or guide lack %s", tool)
		}
	}
	if len(Instructions) > 2000 {
		t.Errorf("instructions are %d bytes", len(Instructions))
	}
}
