// Package catalog is the one list of memsnap's CLI commands and MCP tools: which command is
// which tool, what each answers, and when an agent calls it. The command line's help, the MCP
// server's instructions and tool list, and the README's tables are made from it or checked
// against it, so they cannot drift apart. It knows names and sentences only, and imports
// nothing of memsnap.
//
// A new command with an MCP tool is one Entry in All (plus its command file in cmd/memsnap and
// its tool file in tools); the tests then say which list still lacks it.
package catalog

import (
	"fmt"
	"slices"
	"strings"
)

// Entry is one thing memsnap answers, with the CLI commands and the MCP tool that answer it.
type Entry struct {
	// Commands are the CLI commands (memsnap NAME); empty when only the MCP server has it.
	Commands []string
	// Tool is the MCP tool's name; empty when only the CLI has it.
	Tool string
	// Only says why the other face lacks it, when Commands or Tool is empty.
	Only string
	// Answers says what it answers, in one sentence (the README's table, serve --help).
	Answers string
	// Hint tells an agent when to call the tool and what it gets, naming the tool in
	// backquotes (the MCP server's instructions). Empty without a tool.
	Hint string
}

// All lists every command and tool, in the order the README and the instructions give them.
var All = []Entry{
	{
		Commands: []string{"summarize"}, Tool: "summarize",
		Answers: "reserved / allocated / pending free / inactive / requested per device and in total, pools, trace coverage and peaks, OOM count, the workload, what the file cannot answer; a directory of rank files too",
		Hint:    "always first → `summarize` {path}: totals, peaks, ooms, what the file cannot answer.",
	},
	{
		Commands: []string{"top-stacks"}, Tool: "top-stacks",
		Answers: "live memory grouped by the line of your code that allocated it, with its role (parameter, gradient, optimizer_state, activation, …) and the deciding frame",
		Hint:    "who holds the memory → `top-stacks` {path}; state=inactive or pending for cached / delayed-free memory.",
	},
	{
		Commands: []string{"diff"}, Tool: "diff",
		Answers: "what grew between two snapshots of one run, by site, with named leak patterns and their fixes",
		Hint:    "two snapshots of one run (e.g. step 5 and step 50) → `diff` {before, after}: growth by site, leak patterns.",
	},
	{
		Commands: []string{"oom"}, Tool: "oom-report",
		Answers: "every OOM event: verdict capacity, fragmentation or outside_pytorch, the live sites just before, the largest usable free block, the fixes",
		Hint:    "ooms > 0 → `oom-report` {path}: verdict (capacity, fragmentation, outside_pytorch), failing site, fixes.",
	},
	{
		Commands: []string{"fragmentation"}, Tool: "fragmentation",
		Answers: "cached-but-unusable memory per pool, stream and segment type; what empty_cache() would return",
		Hint:    "large inactive or reserved ≫ allocated → `fragmentation` {path}.",
	},
	{
		Commands: []string{"replay"}, Tool: "replay",
		Answers: "the trace replayed: the peak and who held it, the stages of each step, delayed frees, sites allocated every step and never freed, the sawtooth",
		Hint:    "peak memory, steps, what grows step to step in one file → `replay` {path} (needs a trace): the peak and who held it, sites never freed.",
	},
	{
		Commands: []string{"whatif"}, Tool: "what-if",
		Answers: "would other PYTORCH_CUDA_ALLOC_CONF settings have avoided the OOM or lowered the peak: the trace replayed through a model of the caching allocator, with its fidelity",
		Hint:    "before advising PYTORCH_CUDA_ALLOC_CONF (e.g. after a fragmentation verdict) → `what-if` {path, settings or recommend}: the trace replayed under them.",
	},
	{
		Commands: []string{"check"}, Tool: "check",
		Answers: "a memory gate for CI: pass within the budgets (peak, reserved, allocated, growth over a baseline), else each violated budget with the top site; exit 1 over budget",
		Hint:    "a budget to hold (CI gate, a size limit, growth over a baseline) → `check` {path, max_peak?, …}: pass, or each violation with its top site.",
	},
	{
		Commands: []string{"plot", "view"}, Tool: "timeline",
		Answers: "a picture: allocated memory over the trace in bands by site, or the segment map; plot writes SVG or PNG, view serves an interactive page on loopback",
		Hint:    "to see memory over time or the segments → `timeline` {path, kind?, window?}: a PNG plus the numbers drawn.",
	},
	{
		Commands: []string{"capacity"}, Tool: "capacity",
		Answers: "the largest batch or sequence length that fits the GPU and the peak at other sizes, from snapshots of one workload at different sizes (or one, by roles), replayed through the allocator model",
		Hint:    "after an OOM, how far can the batch go → `capacity` {files: [{path, size}], predict?, capacity?}: the largest size that fits and the peaks at other sizes.",
	},
	{
		Tool: "read-raw-section", Only: "MCP only: on the command line, --json prints whole results and convert -o FILE.json the whole file",
		Answers: "a raw section of the file (settings, segments, a device's trace, a stack), paged",
		Hint:    "raw evidence → `read-raw-section` {path, section} (allocator_settings, segments, segments[N], device_traces[D], stacks[ID]), paged.",
	},
	{
		Commands: []string{"trim"}, Only: "CLI only: it writes a file, and the MCP tools are read-only",
		Answers: "a valid smaller snapshot that pytorch.org/memory_viz opens: the state kept, the trace cut",
	},
	{
		Commands: []string{"convert"}, Only: "CLI only: it writes a file, and the MCP tools are read-only",
		Answers: "any form memsnap reads rewritten as PyTorch writes it (pickle for memory_viz, or JSON)",
	},
	{
		Commands: []string{"serve"}, Only: "CLI only: it is the MCP server",
		Answers: "the MCP server, over stdio or streamable HTTP",
	},
	{
		Commands: []string{"eval"}, Only: "CLI only: it calls the tools itself",
		Answers: "the eval suite replayed through the MCP server, as a pass/fail table",
	},
}

// Commands lists every CLI command in the order of All.
func Commands() []string {
	var out []string
	for _, e := range All {
		out = append(out, e.Commands...)
	}
	return out
}

// Tools lists every MCP tool in the order of All.
func Tools() []string {
	var out []string
	for _, e := range All {
		if e.Tool != "" {
			out = append(out, e.Tool)
		}
	}
	return out
}

// ToolOf returns the MCP tool that answers a CLI command ("" when none).
func ToolOf(command string) string {
	for _, e := range All {
		if slices.Contains(e.Commands, command) {
			return e.Tool
		}
	}
	return ""
}

// CommandsOf returns the CLI commands that answer an MCP tool (none when it has none).
func CommandsOf(tool string) []string {
	for _, e := range All {
		if e.Tool == tool {
			return e.Commands
		}
	}
	return nil
}

// ToolList is the MCP tools as an English list of names in backquotes: "`a`, `b` and `c`".
func ToolList() string { return list(Tools()) }

// CommandList is the CLI commands as an English list of names in backquotes.
func CommandList() string { return list(Commands()) }

func list(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = "`" + n + "`"
	}
	if len(q) < 2 {
		return strings.Join(q, "")
	}
	return strings.Join(q[:len(q)-1], ", ") + " and " + q[len(q)-1]
}

// Hints are the instructions' lines, one per tool: when an agent calls it.
func Hints() string {
	var b strings.Builder
	for _, e := range All {
		if e.Hint != "" {
			b.WriteString("- " + e.Hint + "\n")
		}
	}
	return b.String()
}

// CommandTable is the README's table: every command, its MCP tool and what it answers.
func CommandTable() string {
	var b strings.Builder
	b.WriteString("| command | MCP tool | what it answers |\n|---|---|---|\n")
	for _, e := range All {
		cmds, tool := "—", "—"
		if len(e.Commands) > 0 {
			q := make([]string, len(e.Commands))
			for i, c := range e.Commands {
				q[i] = "`memsnap " + c + "`"
			}
			cmds = strings.Join(q, ", ")
		}
		if e.Tool != "" {
			tool = "`" + e.Tool + "`"
		}
		answers := e.Answers
		if e.Only != "" {
			answers += " (" + e.Only + ")"
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", cmds, tool, strings.ReplaceAll(answers, "|", `\|`))
	}
	return b.String()
}
