package analysis

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// sameStep is what says that two snapshots of one run were taken inside one step: the later
// file's trace covers the moment the earlier one was written, and no step starts after it.
// Growth between two moments of one step is that step's own memory as it runs (a forward pass
// saving activations, an optimizer replacing its state), not memory kept from step to step,
// so no leak pattern reads it.
type sameStep struct {
	dev    int
	from   int    // the later trace's first event after the earlier file's last
	events int    // the later trace's events
	source string // the steps' source (StepInfo.Source)
	steps  int    // the steps the later trace shows in all
	guess  bool   // steps unknown: read from one grad-enabled forward run
}

// lastEventTime is the trace clock of the file's last timed event (0: none), on device (or
// on any, AllDevices).
func lastEventTime(s *snapshot.Snapshot, device int) int64 {
	var last int64
	for dev, evs := range s.DeviceTraces {
		if device >= 0 && dev != device {
			continue
		}
		for i := len(evs) - 1; i >= 0; i-- {
			if evs[i].TimeUS != 0 {
				last = max(last, evs[i].TimeUS)
				break
			}
		}
	}
	return last
}

// findSameStep reports whether before and after (one run, in time order) were written inside
// one step of every device whose trace shows it: the later trace starts no later than the
// earlier file's last event and shows events after it, and either its steps (annotations,
// metadata or phases) start none after that moment, or, with steps unknown, the device runs a
// grad-enabled forward and no backward (the forward half of a step) and everything from that
// moment on is its one forward run (a guess). Phases carry over events without frames of
// their own, so a trace without backward or optimizer work is one forward run however many
// calls it makes: an inference loop is never read as one step.
func findSameStep(before, after *snapshot.Snapshot, ra *Roles, device int) (sameStep, bool) {
	t := lastEventTime(before, device)
	if t == 0 {
		return sameStep{}, false
	}
	var found sameStep
	n := 0
	for dev, evs := range after.DeviceTraces {
		if len(evs) == 0 || (device >= 0 && dev != device) {
			continue
		}
		if evs[0].TimeUS == 0 || evs[0].TimeUS > t {
			return sameStep{}, false // the trace does not reach back to the earlier snapshot
		}
		k := sort.Search(len(evs), func(i int) bool { return evs[i].TimeUS > t })
		if k == len(evs) {
			return sameStep{}, false // nothing happened after it: nothing to place
		}
		s := sameStep{dev: dev, from: k, events: len(evs)}
		st := ra.Steps(dev)
		s.source, s.steps = st.Source, len(st.Starts)
		switch st.Source {
		case "annotations", "user_metadata", "phases", "periodicity":
			if slices.ContainsFunc(st.Starts, func(i int) bool { return i >= k }) {
				return sameStep{}, false
			}
		default:
			if w, _ := ra.Workload(dev); w != WorkloadTraining || ra.HasBackward(dev) {
				return sameStep{}, false
			}
			d := ra.device(dev)
			d.phaseRuns()
			run := func(i int) int { // the phase run holding event i
				j, _ := slices.BinarySearch(d.runStarts, i+1)
				return j - 1
			}
			forwardRuns := 0
			for _, p := range d.runPhases {
				if p == phaseForward {
					forwardRuns++
				}
			}
			if r := run(k); d.runPhases[r] != phaseForward || r != run(len(evs)-1) || forwardRuns != 1 {
				return sameStep{}, false
			}
			s.guess = true
		}
		if n == 0 || s.guess && !found.guess {
			found = s
		}
		n++
	}
	return found, n > 0
}

// sameStepPattern words the verdict: what grew is the step itself, not a leak.
func sameStepPattern(s sameStep, all []DiffSite, r *DiffResult) DiffPattern {
	ev := fmt.Sprintf("both snapshots fall inside one step: device %d's trace in %s covers the moment %s was written (its events from %d of %d come after it)",
		s.dev, baseName(r.AfterPath), baseName(r.BeforePath), s.from, s.events)
	own := "that step's own memory as it runs (what it makes and frees within the step: activations, gradients, an optimizer's new state), not memory kept from step to step"
	if s.guess {
		ev += " and all of them are one grad-enabled forward pass with no backward in the trace (a guess: the file records no steps, and a forward called in a loop reads the same)"
		own = "that forward pass's own memory as it runs (activations it saves for its backward), not memory kept from one call to the next"
	} else {
		ev += fmt.Sprintf(" and no step starts after it (the trace's %s, found from %s)", count(s.steps, "step"), strings.ReplaceAll(s.source, "_", " "))
	}
	ev += "; so what changed (" + r.totalClause()
	if len(all) > 0 && all[0].DeltaBytes > 0 {
		d := all[0]
		ev += fmt.Sprintf("; the largest growth %s %s in %+d blocks [%s]", d.Site, formatDelta(d.DeltaBytes), d.DeltaBlocks, d.Category)
	}
	ev += ") is " + own + ", and no leak pattern applies"
	return DiffPattern{Name: PatternWithinOneStep, Evidence: ev}
}
