package tools

import (
	"context"
	"fmt"
	"sync"

	"github.com/mark3labs/mcp-go/server"

	"github.com/memsnap/memsnap/analysis"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// DiffInput is the diff tool's input.
type DiffInput struct {
	Before string          `json:"before" jsonschema:"description=The earlier snapshot of the run (e.g. step 5); absolute or relative to the server's first root"`
	After  string          `json:"after" jsonschema:"description=The later snapshot of the same run at the same point in the loop (e.g. step 50); a later-first pair of one run is swapped into time order"`
	Limit  int             `json:"limit,omitempty" jsonschema:"description=Sites to return\\, largest growth first (default 10),minimum=1,maximum=100,default=10"`
	Rules  []analysis.Rule `json:"rules,omitempty" jsonschema:"description=The user's own categories (like the CLI's --rules): blocks whose stack has a frame whose file:function matches a rule's pattern are grouped under its name and carry rule; the first rule that matches wins\\, innermost frame first"`
}

func diffTool(e *env) (server.ServerTool, error) {
	return declare(e, "diff", "Compare two snapshots of one run",
		"What grew between two snapshots of the same run. First says whether the files are two points of one process (same_run true/false/null with same_run_evidence: trace clocks and shared events, segments at the same address holding same-site blocks, allocator settings, devices, workload) and swaps a later-first pair into time order (swapped). Then live (allocated) memory matched by site (file:line of the user's code, immune to address reuse) and by role (roles), the traces' peaks and who is live at each, and, for one run only, recognised patterns with their fixes: retained_autograd_graph, growing_container, optimizer_state_first_step (not a leak), unexplained_growth, no_growth. Files of different processes get not_comparable: their difference is not growth. Take the snapshots k steps apart at the same point of the loop, in one process.",
		func(ctx context.Context, in DiffInput) (*analysis.DiffResult, error) {
			rules, err := rulesArg(in.Rules)
			if err != nil {
				return nil, err
			}
			// Both files load at once (each load is mostly one core's work).
			var (
				after    *snapshot.Snapshot
				v2       string
				afterErr error
				wg       sync.WaitGroup
			)
			wg.Go(func() { after, v2, afterErr = e.snapshotAt(ctx, in.After, "after") })
			before, v1, err := e.snapshotAt(ctx, in.Before, "before")
			wg.Wait()
			if err != nil {
				return nil, err
			}
			if afterErr != nil {
				return nil, afterErr
			}
			limit := in.Limit
			if limit <= 0 {
				limit = 10
			}
			opt := analysis.DiffOptions{Limit: limit, Device: analysis.AllDevices, Attribution: analysis.AttributionOptions{Rules: rules}}
			r, err := memoized(e, "diff", opt, []string{v1, v2}, func() (*analysis.DiffResult, error) {
				return analysis.Diff(before, after, opt)
			})
			if err != nil {
				return nil, fmt.Errorf("diff: %w", err)
			}
			return r, nil
		})
}
