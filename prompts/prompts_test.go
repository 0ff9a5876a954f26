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

// TestDiagnoseOOMExitsEarly: the OOM workflow stops after summarize when the file records no
// OOM, and sends the agent to the explain-memory workflow instead of five more tools.
func TestDiagnoseOOMExitsEarly(t *testing.T) {
	text := All[0].Text
	first := strings.SplitN(text, "\n2. ", 2)[0]
	if All[0].Name != "diagnose-oom" || !strings.Contains(first, "If ooms is 0, stop here") || !strings.Contains(first, "explain-memory") {
		t.Errorf("diagnose-oom's first step does not exit early:\n%s", first)
	}
}
