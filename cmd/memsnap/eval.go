package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/memsnap/memsnap/evals"
)

func init() { register(newEvalCmd) }

// suiteInRepo is the eval suite's place in a clone of memsnap.
var suiteInRepo = filepath.Join("evals", "eval.yaml")

func newEvalCmd() *cobra.Command {
	var filter, suite string
	c := &cobra.Command{
		Use:   "eval [FILE]",
		Short: "Run the eval suite: tool calls on fixture snapshots through the real MCP server, with checks on the answers",
		Long: `eval runs the cases of an eval suite (default evals/eval.yaml; the format is in
evals/README.md) through memsnap's MCP server over an in-process client, exactly as an agent
calls the tools, and prints one line per case: PASS, FAIL with the reason for every failing
check, or SKIP (a fixture outside the repository, such as the real snapshots, is absent).
It exits non-zero when a case fails.
The suite and its fixtures live in a clone of memsnap: without FILE or --suite, eval looks
for evals/eval.yaml in the working directory and its parents, then in the clone the binary
was built from (go install ./cmd/memsnap).`,
		Example: `  memsnap eval
  memsnap eval --run diff-
  memsnap eval --suite ~/src/memsnap/evals/eval.yaml`,
		Args: atMostOneArg("one suite FILE"),
		RunE: func(c *cobra.Command, args []string) error {
			file := suite
			if len(args) == 1 {
				if file != "" {
					return fmt.Errorf("eval: give the suite once, as FILE or with --suite")
				}
				file = args[0]
			}
			if file == "" {
				var err error
				if file, err = findSuite(); err != nil {
					return err
				}
			}
			rep, err := evals.RunFile(c.Context(), file, filter)
			if err != nil {
				return err
			}
			if err := rep.WriteTable(c.OutOrStdout()); err != nil {
				return err
			}
			if len(rep.Results) == 0 {
				return fmt.Errorf("eval: no case matches --run %q", filter)
			}
			if !rep.OK() {
				return fmt.Errorf("eval: %d of %d cases failed", rep.Failed, len(rep.Results))
			}
			return nil
		},
	}
	c.Flags().StringVar(&filter, "run", "", "only the cases whose name contains this text")
	c.Flags().StringVar(&suite, "suite", "", "the eval suite file (default: evals/eval.yaml of the memsnap clone around the working directory or the one the binary was built from)")
	return c
}

// findSuite looks for evals/eval.yaml in the working directory and its parents, then in the
// source tree this binary was compiled from (recorded unless built with -trimpath).
func findSuite() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("eval: working directory: %w", err)
	}
	var builtFrom string
	if _, src, _, ok := runtime.Caller(0); ok && filepath.IsAbs(src) {
		builtFrom = filepath.Dir(filepath.Dir(filepath.Dir(src))) // cmd/memsnap/eval.go
	}
	return searchSuite(wd, builtFrom)
}

// searchSuite looks for the suite in wd and its parents, then in the clone builtFrom ("" when
// unknown); the error names every place looked in and the --suite flag.
func searchSuite(wd, builtFrom string) (string, error) {
	for dir := wd; ; dir = filepath.Dir(dir) {
		if f := filepath.Join(dir, suiteInRepo); isFile(f) {
			return f, nil
		}
		if filepath.Dir(dir) == dir {
			break
		}
	}
	looked := wd + " and its parents"
	if builtFrom != "" {
		if f := filepath.Join(builtFrom, suiteInRepo); isFile(f) {
			return f, nil
		}
		looked += " nor in " + builtFrom + " (where this memsnap was built)"
	}
	return "", fmt.Errorf("eval: no eval suite: %s is not in %s. The suite and its fixtures live in a clone of memsnap: run memsnap eval inside the clone, or give the file with --suite PATH/TO/memsnap/evals/eval.yaml",
		suiteInRepo, looked)
}

func isFile(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}
