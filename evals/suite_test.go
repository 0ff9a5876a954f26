package evals

import (
	"context"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/internal/realsnaps"
	"github.com/memsnap/memsnap/internal/realsnaps/realtest"
)

func TestMain(m *testing.M) { realtest.Main(m) }

// TestSuite runs the committed suite (evals/eval.yaml) through the real MCP server: one subtest
// per case; cases over the real snapshots skip when they are absent (package realsnaps).
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
				realtest.Skip(t, strings.Join(r.Reasons, "; ")+": "+realsnaps.Absent())
			case Fail:
				for _, why := range r.Reasons {
					t.Error(why)
				}
			}
		})
	}
}
