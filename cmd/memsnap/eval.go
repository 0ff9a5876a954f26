package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/memsnap/memsnap/evals"
)

func init() { register(newEvalCmd) }

func newEvalCmd() *cobra.Command {
	var filter string
	c := &cobra.Command{
		Use:   "eval [FILE]",
		Short: "Run the eval suite: tool calls on fixture snapshots through the real MCP server, with checks on the answers",
		Long: `eval runs the cases of an eval suite (default evals/eval.yaml; the format is in
evals/README.md) through memsnap's MCP server over an in-process client, exactly as an agent
calls the tools, and prints one line per case: PASS, FAIL with the reason for every failing
check, or SKIP (a fixture outside the repository, such as the real snapshots, is absent).
It exits non-zero when a case fails.`,
		Example: `  memsnap eval
  memsnap eval evals/eval.yaml --run diff-`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			file := "evals/eval.yaml"
			if len(args) == 1 {
				file = args[0]
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
	return c
}
