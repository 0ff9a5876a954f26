// Package evals is memsnap's evaluation harness: it replays fixture snapshots through the real
// MCP server, the way an agent would call the tools, and checks the answers.
//
// A suite is a YAML file (evals/eval.yaml; the format is documented in evals/README.md). Each
// case names its fixtures, one tool and its arguments, and a list of checks on the structured
// output (JSON-path equals / contains / at_least / at_most / count; top site; diff pattern
// present or absent; OOM verdict) and on the text block (mentions, mentions_fix, max_text_bytes).
// Run reports pass, fail (with every reason) or skip (a fixture outside the repository is
// absent) per case; `memsnap eval` prints the table and `go test ./evals/...` runs the
// committed suite.
package evals
