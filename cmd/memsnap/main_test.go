package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestExecute: an error is one line and its exit status; a panic in a command (a memsnap bug)
// is one line and exit status 1, with no stack trace.
func TestExecute(t *testing.T) {
	for _, tc := range []struct {
		run  func(*cobra.Command, []string) error
		code int
		want string
	}{
		{func(*cobra.Command, []string) error { return nil }, 0, ""},
		{func(*cobra.Command, []string) error { return errors.New("x.pickle: not a snapshot\nat byte 3") }, 2, "memsnap: x.pickle: not a snapshot at byte 3\n"},
		{func(*cobra.Command, []string) error { return context.Canceled }, 1, "memsnap: context canceled\n"},
		{func(*cobra.Command, []string) error { panic("index out of range [5] with length 4\nmore") }, 1,
			"memsnap: internal error (index out of range [5] with length 4 more): this is a memsnap bug: report it with the command and the file's PyTorch version (MEMSNAP_TRACEBACK=1 shows where it happened)\n"},
	} {
		t.Setenv("MEMSNAP_TRACEBACK", "")
		var stderr strings.Builder
		root := &cobra.Command{Use: "memsnap", SilenceUsage: true, SilenceErrors: true, RunE: tc.run}
		root.SetArgs([]string{})
		if code := execute(context.Background(), root, &stderr); code != tc.code || stderr.String() != tc.want {
			t.Errorf("exit %d, stderr %q; want %d, %q", code, stderr.String(), tc.code, tc.want)
		}
	}
}
