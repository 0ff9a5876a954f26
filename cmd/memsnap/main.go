// Command memsnap diagnoses PyTorch CUDA memory from the snapshot files that
// torch.cuda.memory._dump_snapshot() writes: a CLI (summarize, top-stacks, diff, oom,
// fragmentation) and an MCP server, both on the analysis core.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	root := newRootCmd()
	root.SetContext(ctx)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "memsnap: "+oneLine(err))
		os.Exit(exitCode(err))
	}
}

// exitCode: 2 for bad input or usage, 1 for anything else (an interrupted run, a memory
// budget that check found exceeded).
func exitCode(err error) int {
	if errors.Is(err, context.Canceled) || errors.Is(err, errOverBudget) {
		return 1
	}
	return 2
}

func oneLine(err error) string {
	return strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", " ")
}
