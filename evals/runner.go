package evals

import (
	"context"
	"errors"
	"fmt"
	"github.com/memsnap/memsnap/internal/realsnaps"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
)

// Caller calls one tool the way an MCP client does.
type Caller interface {
	CallTool(ctx context.Context, tool string, args map[string]any) (*Output, error)
}

// Status of a case.
type Status string

// Case outcomes.
const (
	Pass Status = "PASS"
	Fail Status = "FAIL"
	Skip Status = "SKIP"
)

// Result is the outcome of one case.
type Result struct {
	Case    string
	Tool    string
	Status  Status
	Reasons []string // why it failed (every failing check), or why it was skipped
}

// Report is the outcome of a suite.
type Report struct {
	Results             []Result
	Passed, Failed, Skp int
}

// OK reports whether no case failed.
func (r *Report) OK() bool { return r.Failed == 0 }

// ResolveArgs returns the case's arguments with relative file arguments joined to root.
func (c *Case) ResolveArgs(root string) map[string]any {
	out := make(map[string]any, len(c.Args))
	for k, v := range c.Args {
		out[k] = v
	}
	for _, k := range pathArgs {
		if s, ok := out[k].(string); ok {
			if s = realsnaps.Rewrite(s); !filepath.IsAbs(s) {
				s = filepath.Join(root, s)
			}
			out[k] = s
		}
	}
	return out
}

// RunCase runs one case.
func RunCase(ctx context.Context, s *Suite, c *Case, caller Caller) Result {
	r := Result{Case: c.Name, Tool: c.Tool}
	for _, f := range c.Fixtures {
		p := realsnaps.Rewrite(f)
		if !filepath.IsAbs(p) {
			p = filepath.Join(s.Root, f)
		}
		if _, err := os.Stat(p); err != nil {
			if c.SkipIfMissing && errors.Is(err, os.ErrNotExist) {
				r.Status = Skip
				r.Reasons = []string{fmt.Sprintf("fixture %s is absent", f)}
				return r
			}
			r.Status = Fail
			r.Reasons = []string{fmt.Sprintf("fixture %s: %v", f, err)}
			return r
		}
	}
	out, err := caller.CallTool(ctx, c.Tool, c.ResolveArgs(s.Root))
	if err != nil {
		r.Status = Fail
		r.Reasons = []string{fmt.Sprintf("call failed: %v", err)}
		return r
	}
	switch {
	case c.ExpectError && !out.IsError:
		r.Reasons = append(r.Reasons, "expected an error result, got a normal answer")
	case !c.ExpectError && out.IsError:
		r.Reasons = append(r.Reasons, "tool answered with an error: "+head(strings.TrimSpace(out.Text), 300))
	}
	if len(r.Reasons) == 0 {
		for _, ch := range c.Checks {
			if why := Evaluate(c.Tool, ch, out); why != "" {
				r.Reasons = append(r.Reasons, why)
			}
		}
	}
	r.Status = Pass
	if len(r.Reasons) > 0 {
		r.Status = Fail
	}
	return r
}

// Run runs every case of the suite whose name contains filter ("" = all), in order.
func Run(ctx context.Context, s *Suite, caller Caller, filter string) (*Report, error) {
	rep := &Report{}
	for i := range s.Cases {
		c := &s.Cases[i]
		if filter != "" && !strings.Contains(c.Name, filter) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return rep, fmt.Errorf("eval: %w", err)
		}
		res := RunCase(ctx, s, c, caller)
		switch res.Status {
		case Pass:
			rep.Passed++
		case Fail:
			rep.Failed++
		case Skip:
			rep.Skp++
		}
		rep.Results = append(rep.Results, res)
	}
	return rep, nil
}

// WriteTable prints one line per case (status, case, tool, reason) and a total line; a failed
// case lists each failing check on its own line.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STATUS\tCASE\tTOOL\tREASON")
	for _, res := range r.Results {
		first := ""
		if len(res.Reasons) > 0 {
			first = res.Reasons[0]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", res.Status, res.Case, res.Tool, oneLine(first))
		for _, more := range res.Reasons[min(1, len(res.Reasons)):] {
			fmt.Fprintf(tw, "\t\t\t%s\n", oneLine(more))
		}
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("eval table: %w", err)
	}
	if _, err := fmt.Fprintf(w, "%d passed, %d failed, %d skipped, %d case%s\n", r.Passed, r.Failed, r.Skp, len(r.Results), map[bool]string{true: "", false: "s"}[len(r.Results) == 1]); err != nil {
		return err
	}
	if absent := r.absentReal(); absent > 0 {
		_, err := fmt.Fprintf(w, "%d of the skipped cases need the real snapshots: %s\n", absent, realsnaps.Absent())
		return err
	}
	return nil
}

// absentReal counts the cases skipped because a real snapshot is absent.
func (r *Report) absentReal() int {
	n := 0
	for _, res := range r.Results {
		if res.Status == Skip && len(res.Reasons) > 0 && strings.Contains(res.Reasons[0], realsnaps.SuitePrefix) {
			n++
		}
	}
	return n
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
