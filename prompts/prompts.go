// Package prompts holds the text memsnap's MCP server shows agents: the server instructions,
// the usage guide (a resource) and the workflow prompts, embedded from markdown files.
package prompts

import (
	_ "embed"
	"strings"

	"github.com/memsnap/memsnap/catalog"
)

// Instructions are the MCP server instructions: where an agent starts, with one line per
// tool from the catalog.
var Instructions = strings.Replace(instructionsTemplate, "{{tools}}\n", catalog.Hints(), 1)

//go:embed instructions.md
var instructionsTemplate string

// Guide is the usage guide served as a resource.
//
//go:embed guide.md
var Guide string

//go:embed diagnose-oom.md
var diagnoseOOM string

//go:embed find-leak.md
var findLeak string

//go:embed explain-memory.md
var explainMemory string

// Argument is one prompt argument.
type Argument struct {
	Name        string
	Description string
	Required    bool
}

// Prompt is one workflow prompt; Text holds {{name}} placeholders for its arguments.
type Prompt struct {
	Name        string
	Description string
	Arguments   []Argument
	Text        string
}

// All lists the workflow prompts.
var All = []Prompt{
	{
		Name:        "diagnose-oom",
		Description: "Find why a run hit CUDA out of memory and what to change",
		Arguments:   []Argument{{"path", "Snapshot file written at or after the OOM (e.g. by an OOM observer)", true}},
		Text:        diagnoseOOM,
	},
	{
		Name:        "find-leak",
		Description: "Find what grows between two snapshots of the same run, and the fix",
		Arguments: []Argument{
			{"before", "The earlier snapshot (e.g. step 5)", true},
			{"after", "The later snapshot (e.g. step 50), same point in the loop", true},
		},
		Text: findLeak,
	},
	{
		Name:        "explain-memory",
		Description: "Explain where a snapshot's GPU memory goes, in allocator terms and in the user's code",
		Arguments:   []Argument{{"path", "Snapshot file or directory of per-rank snapshots", true}},
		Text:        explainMemory,
	},
}
