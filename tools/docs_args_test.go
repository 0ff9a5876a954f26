package tools

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/prompts"
)

// TestDocsListEveryArgument: the guide's tool table and SKILL.md's name every input property of
// every tool, so an agent reading them knows each argument exists.
func TestDocsListEveryArgument(t *testing.T) {
	skill, err := os.ReadFile(filepath.Join(repoRoot(t), "SKILL.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := func(doc, tool string) string {
		for _, line := range strings.Split(doc, "\n") {
			if strings.HasPrefix(line, "| `"+tool+"` ") {
				return line
			}
		}
		return ""
	}
	for _, tool := range listTools(t) {
		var in struct {
			Properties map[string]any `json:"properties"`
		}
		if err := json.Unmarshal(toolAsJSON(t, tool).InputSchema, &in); err != nil {
			t.Fatal(err)
		}
		for doc, text := range map[string]string{"prompts/guide.md": prompts.Guide, "SKILL.md": string(skill)} {
			r := row(text, tool.Name)
			if r == "" {
				t.Errorf("%s has no table row for %s", doc, tool.Name)
				continue
			}
			for p := range in.Properties {
				if !regexp.MustCompile(`\b` + p + `\b`).MatchString(r) {
					t.Errorf("%s: the row of %s lacks the argument %s: %s", doc, tool.Name, p, r)
				}
			}
		}
	}
}
