package evals

import (
	"context"
	"strings"
	"testing"
)

// TestSuite runs the committed suite (evals/eval.yaml) through the real MCP server: one subtest
// per case; cases over the real snapshots skip when ../shared is absent.
func TestSuite(t *testing.T) {
	s, err := Load("eval.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c, err := NewServerCaller(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range s.Cases {
		tc := &s.Cases[i]
		t.Run(tc.Name, func(t *testing.T) {
			r := RunCase(ctx, s, tc, c)
			switch r.Status {
			case Skip:
				t.Skipf("%s (the real snapshots live in ../shared/snapshots/real)", strings.Join(r.Reasons, "; "))
			case Fail:
				for _, why := range r.Reasons {
					t.Error(why)
				}
			}
		})
	}
}
