// Command memsnap diagnoses PyTorch CUDA memory from the snapshot files that
// torch.cuda.memory._dump_snapshot() writes: a CLI (one file per command; package catalog
// lists them with their MCP tools) and an MCP server, both on the analysis core.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := execute(ctx, newRootCmd(), os.Stderr)
	stop()
	if code != 0 {
		os.Exit(code)
	}
}

// execute runs the command line and returns the exit status, having written any error to
// stderr as one line. A panic (a memsnap bug an unusual file reached) is such an error too,
// exit status 1, instead of a Go stack trace: MEMSNAP_TRACEBACK=1 prints where it happened.
func execute(ctx context.Context, root *cobra.Command, stderr io.Writer) (code int) {
	defer func() {
		if p := recover(); p != nil {
			fmt.Fprintf(stderr, "memsnap: internal error (%s): this is a memsnap bug: report it with the command and the file's PyTorch version (MEMSNAP_TRACEBACK=1 shows where it happened)\n",
				oneLine(fmt.Errorf("%v", p)))
			if os.Getenv("MEMSNAP_TRACEBACK") != "" {
				stderr.Write(debug.Stack())
			}
			code = 1
		}
	}()
	root.SetContext(ctx)
	err := root.ExecuteContext(ctx)
	activeProgress.end()
	if err != nil {
		fmt.Fprintln(stderr, "memsnap: "+oneLine(err))
		return exitCode(err)
	}
	return 0
}

// exitCode: 2 for bad input or usage, 1 for anything else (an interrupted run, a memory
// budget that check found exceeded; a panic, see execute).
func exitCode(err error) int {
	if errors.Is(err, context.Canceled) || errors.Is(err, errOverBudget) {
		return 1
	}
	return 2
}

func oneLine(err error) string {
	return strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", " ")
}
