package capacity

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImports: the package stays below the faces (no tools, MCP, CLI or rendering).
func TestImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"github.com/memsnap/memsnap/tools", "github.com/memsnap/memsnap/cmd", "github.com/memsnap/memsnap/render",
			"github.com/memsnap/memsnap/view", "github.com/memsnap/memsnap/prompts", "github.com/mark3labs/mcp-go", "github.com/spf13/cobra"} {
			if dep == banned || strings.HasPrefix(dep, banned+"/") {
				t.Errorf("analysis/capacity depends on %s", dep)
			}
		}
	}
}
