package analysis

import (
	"fmt"
	"sort"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// A forward output that outlives the pass that made it is no longer an activation or a
// temporary: the caller keeps a reference (the previous batch's logits, the loss with its
// graph). Two signs, both read from the trace alone:
//   - training: a backward pass ran, and finished, after the block was allocated, and the block
//     is still alive. Backward frees what the graph saved, so something else holds it.
//   - any workload: the function that allocated it has been called again (the next batch's
//     forward runs) while the block is alive. Seen as the first frame where the two stacks differ
//     being the same function at an earlier line, under a caller that is not itself a module's
//     forward (a layer's output alive in the next layer is that layer's input, not held).

// bwRun is one backward pass: the events from its first to its last backward event.
type bwRun struct {
	start, end int
	finished   bool // no OOM inside it (an OOM in backward unwinds the pass instead of ending it)
}

// backwardRuns lists the backward passes of d's trace (once; safe on any goroutine).
func (d *deviceRoles) backwardRuns() []bwRun {
	if !d.hasTrace {
		return nil
	}
	d.bwOnce.Do(func() {
		// The backward runs among the phase runs, and the oom events in them.
		d.phaseRuns()
		n := 0
		for _, p := range d.runPhases {
			if p == phaseBackward {
				n++
			}
		}
		d.bwRuns = make([]bwRun, 0, n)
		ooms := d.index.Tally.OOMEvents // in order, as the runs are
		for k, p := range d.runPhases {
			if p != phaseBackward {
				continue
			}
			run := bwRun{start: d.runStarts[k], end: len(d.phases) - 1}
			if k+1 < len(d.runStarts) {
				run.end = d.runStarts[k+1] - 1
			}
			for len(ooms) > 0 && ooms[0] < run.start {
				ooms = ooms[1:]
			}
			// An OOM inside the pass, or right after its last event (the unwinding that
			// follows the error is a run of its own), unwound it.
			run.finished = (len(ooms) == 0 || ooms[0] > run.end) && (k+1 >= len(d.runPhases) || d.runPhases[k+1] != phaseUnwind)
			d.bwRuns = append(d.bwRuns, run)
		}
	})
	return d.bwRuns
}

// backwardSince returns a finished backward pass that began after event allocIdx and ended
// before event now (now = len(events): the end of the trace).
func (d *deviceRoles) backwardSince(allocIdx, now int) (bwRun, bool) {
	for _, run := range d.backwardRuns() {
		if run.start > allocIdx && run.end < now && run.finished {
			return run, true
		}
	}
	return bwRun{}, false
}

// runOf is the phase run of event i.
func (d *deviceRoles) runOf(i int) int32 {
	return int32(sort.SearchInts(d.runStarts, i+1) - 1)
}

// phaseName is the phase device dev was in at event i ("" when no frames say).
func (r *Roles) phaseName(dev, i int) string {
	d := r.device(dev)
	if i < 0 || i >= len(d.phases) {
		return ""
	}
	return phaseNames[d.phases[i]]
}

// peakOutside is the highest of level (allocated bytes after each event) over the events not in
// phase p.
func (r *Roles) peakOutside(dev int, p phase, level []int64) int64 {
	d := r.device(dev)
	var peak int64
	for i, v := range level {
		if i < len(d.phases) && d.phases[i] != p {
			peak = max(peak, v)
		}
	}
	return peak
}

// sameOptimizerRun says whether the allocation at event allocIdx was made in the optimizer run
// still running at event now.
func (r *Roles) sameOptimizerRun(dev, allocIdx, now int) bool {
	d := r.deviceLifetimes(dev)
	if allocIdx < 0 || allocIdx >= len(d.phases) || now >= len(d.phases) || d.phases[allocIdx] != phaseOptimizer {
		return false
	}
	return d.runOf(allocIdx) == d.runOf(now)
}

// stackAt is the stack of the latest allocation at or before event now.
func (d *deviceRoles) stackAt(now int) (snapshot.StackID, bool) {
	for i := min(now, len(d.evs)-1); i >= 0; i-- {
		if d.evs[i].Action == snapshot.ActionAlloc {
			return d.evs[i].Stack, true
		}
	}
	return 0, false
}

// codeFrames are the Python frames of a stack that belong to code (the user's, model or other
// libraries), outermost first: torch internals, the runtime and C++ frames are left out.
func (r *Roles) codeFrames(id snapshot.StackID) []snapshot.Frame {
	if id < 0 || int(id) >= len(r.snap.Stacks) {
		return nil
	}
	ids := r.snap.Stacks[id]
	infos := r.attrs.frames.infos // filled when the table was made: only read
	out := make([]snapshot.Frame, 0, 16)
	for i := len(ids) - 1; i >= 0; i-- {
		switch fi := &infos[ids[i]]; fi.kind {
		case kindUser, kindModelLib, kindLibrary:
			out = append(out, fi.f)
		}
	}
	return out
}

// driver is the frame that called the model: the innermost code frame outside any module's
// forward ("" when the stack has none).
func (r *Roles) driver(id snapshot.StackID) string {
	frames := r.codeFrames(id)
	for i, f := range frames {
		if f.Name == "forward" || f.Name == "__call__" {
			if i > 0 {
				return frameString(frames[i-1])
			}
			return ""
		}
	}
	return ""
}

// reentered says whether the code running at stack cur has called again the function that
// allocated a block from stack made: the evidence names the function and its caller.
func (r *Roles) reentered(made, cur snapshot.StackID) (string, bool) {
	if made == cur {
		return "", false
	}
	a, b := r.codeFrames(made), r.codeFrames(cur)
	k := 0
	for k < len(a) && k < len(b) && a[k] == b[k] {
		k++
	}
	if k == 0 || k >= len(a) || k >= len(b) {
		return "", false
	}
	caller, was, now := a[k-1], a[k], b[k]
	if caller.Name == "forward" || caller.Name == "__call__" {
		return "", false
	}
	if was.Filename != now.Filename || was.Name != now.Name || now.Line >= was.Line {
		return "", false
	}
	return fmt.Sprintf("the output of an earlier call of %s (made at %s), still alive while the next call runs (now at %s): held by its caller %s",
		was.Name, frameString(was), frameString(now), frameString(caller)), true
}

// heldByCaller refines the role of a forward block allocated at event allocIdx and still alive
// at event now (len(events): the end of the trace) when it has outlived the pass that made it.
func (r *Roles) heldByCaller(d *deviceRoles, at Attribution, stack snapshot.StackID, allocIdx, now int) (Attribution, bool) {
	if !d.hasTrace || allocIdx < 0 || allocIdx >= len(d.phases) {
		return at, false
	}
	switch {
	case (at.ctx == ctxForward || at.ctx == ctxAutocast) && (at.Category == CategoryActivation || at.Category == CategoryTemporary):
	case at.ctx == ctxUser && d.phases[allocIdx] == phaseForward && at.Category != CategoryTemporary:
		// your code between the model's forward and backward: the loss, a metric
	default:
		return at, false
	}
	holder := r.driver(stack)
	if holder == "" {
		holder = at.UserSite
	}
	if run, ok := d.backwardSince(allocIdx, now); ok {
		if d.retained[d.runOf(allocIdx)] && at.ctx != ctxUser {
			at.Category, at.retained = CategoryActivation, true
			at.Evidence = fmt.Sprintf("allocated in the forward pass (event %d) and still alive after the backward pass that followed (events %d–%d), like the per-layer activations of that pass: a retained autograd graph. A reference your code keeps to the loss or the outputs (%s) holds the graph and what it saved (retain_graph=True, or tensors kept on ctx outside save_for_backward); del outputs and loss after backward, keep loss.item()",
				allocIdx, run.start, run.end, holder)
			return at, true
		}
		at.Category = CategoryUserContainer
		at.Evidence = fmt.Sprintf("allocated in the forward pass (event %d) and still alive after the backward pass that followed (events %d–%d): backward frees what the graph saved, so a reference your code keeps holds it (%s: the outputs, or the loss with its graph); del them after backward and keep loss.item()",
			allocIdx, run.start, run.end, holder)
		return at, true
	}
	if at.ctx == ctxUser {
		return at, false
	}
	cur, ok := d.stackAt(now)
	if !ok {
		return at, false
	}
	if ev, ok := r.reentered(stack, cur); ok {
		at.Category = CategoryUserContainer
		at.Evidence = ev + "; if nothing later reads it, del it before the next call or keep only what you need (argmax, .item(), .cpu()); an output kept as the next call's input is needed"
		return at, true
	}
	return at, false
}
