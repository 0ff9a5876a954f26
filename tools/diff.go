package tools

import (
	"context"
	"errors"
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
		"What grew between two snapshots of the same run. First says whether the files are two points of one process (same_run true/false/null with same_run_evidence: trace clocks and shared events, segments at the same address holding same-site blocks, allocator settings, devices, workload) and swaps a later-first pair into time order (swapped). Then live (allocated) memory matched by site (file:line of the user's code, immune to address reuse) and by role (roles), the traces' peaks and who is live at each, and, for one run only, recognised patterns with their fixes: retained_autograd_graph, growing_container, optimizer_state_first_step (not a leak), unexplained_growth, no_growth (also when sites grew but as much shrank elsewhere: memory moved, it did not accumulate), within_one_step (both snapshots inside one step: growth is the step's own memory, not a leak). Files of different processes get not_comparable: their difference is not growth. Take the snapshots k steps apart at the same point of the loop, in one process.",
		func(ctx context.Context, in DiffInput) (*analysis.DiffResult, error) {
			rules, err := rulesArg(in.Rules)
			if err != nil {
				return nil, err
			}
			snaps, versions, err := e.snapshotPair(ctx, [2]string{in.Before, in.After}, [2]string{"before", "after"})
			if err != nil {
				return nil, err
			}
			before, after, v1, v2 := snaps[0], snaps[1], versions[0], versions[1]
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

// snapshotPair is snapshotAt for two files at once, each on its own goroutine (a load's decoder
// is one core's work; where there are cores to spare the two overlap). A load that fails stops
// the other, so that a bad small file does not wait for a large one, and the error returned is
// about its file: the first's when both fail on their own, and never the cancellation that
// one's failure caused in the other. The client's progress token gets the two loads' progress
// added up, so that it only grows.
func (e *env) snapshotPair(ctx context.Context, paths, fields [2]string) ([2]*snapshot.Snapshot, [2]string, error) {
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		snaps    [2]*snapshot.Snapshot
		versions [2]string
		errs     [2]error
		wg       sync.WaitGroup
	)
	progress := pairProgress(ctx)
	for i := range paths {
		wg.Go(func() {
			c := lctx
			if progress != nil {
				c = context.WithValue(lctx, progressKey{}, func(done, total int64) { progress(i, done, total) })
			}
			if snaps[i], versions[i], errs[i] = e.snapshotAt(c, paths[i], fields[i]); errs[i] != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	// stopped: the other load's failure ended this one (the call's context is still live).
	stopped := func(err error) bool { return ctx.Err() == nil && errors.Is(err, context.Canceled) }
	for _, own := range []bool{true, false} {
		for _, err := range errs {
			if err != nil && (!own || !stopped(err)) {
				return [2]*snapshot.Snapshot{}, [2]string{}, err
			}
		}
	}
	return snaps, versions, nil
}

// pairProgress adds up the progress of two loads for the call's progress reporter (nil
// without one): it reports only when the sum grows, with a total once every load that
// reports has one.
func pairProgress(ctx context.Context) func(i int, done, total int64) {
	report, _ := ctx.Value(progressKey{}).(func(int64, int64))
	if report == nil {
		return nil
	}
	var (
		mu          sync.Mutex
		done, total [2]int64
		seen        [2]bool
		last        int64 = -1
	)
	return func(i int, d, t int64) {
		mu.Lock()
		defer mu.Unlock()
		done[i], total[i], seen[i] = d, t, true
		sum := done[0] + done[1]
		if sum <= last {
			return
		}
		last = sum
		var all int64
		for k := range seen {
			if seen[k] && total[k] <= 0 {
				all = 0
				break
			}
			all += total[k]
		}
		report(sum, all)
	}
}
