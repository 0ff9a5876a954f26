package tools

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocsInOnePlace: result fields are described in fieldDocs only, never also in jsonschema
// description tags on the analysis types, and every fieldDocs entry describes a field some
// tool's schema has (a renamed field leaves no stale text behind).
func TestDocsInOnePlace(t *testing.T) {
	tagged := regexp.MustCompile(`jsonschema:"[^"]*description=`)
	root := filepath.Join(repoRoot(t), "analysis")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(data), "\n") {
			if tagged.MatchString(line) {
				t.Errorf("%s:%d: a jsonschema description tag on an analysis type; describe the field in tools/docs.go instead", path, i+1)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	listTools(t) // builds every schema, which looks up the docs
	for key := range fieldDocs {
		if _, ok := docsUsed.Load(key); !ok {
			t.Errorf("fieldDocs[%q] describes no field of any tool's output", key)
		}
	}
}
