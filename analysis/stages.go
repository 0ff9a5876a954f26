package analysis

import (
	"fmt"
	"slices"
	"strings"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// maxStages bounds the stages a replay keeps to page through (a long trace has three per
// step; each costs about 100 bytes); StagesTotal counts them all.
const maxStages = 1 << 20

// Stage is one forward pass, backward pass or optimizer step of a device's trace.
type Stage struct {
	// Name is forward, backward, optimizer or unwind (after an out-of-memory error: the
	// exception unwinding the pass and the teardown, see UnwindSpan).
	Name string `json:"name"`
	// Step is the 0-based step the stage belongs to (-1: before the first step start).
	Step int `json:"step"`
	// Source says how the stage was found: annotations (an Optimizer.step#… record_function
	// range) or phases (the frames of its allocations: module forwards, the autograd engine,
	// torch/optim).
	Source              string `json:"source"`
	StartEvent          int    `json:"start_event"`
	EndEvent            int    `json:"end_event"`
	StartAllocatedBytes int64  `json:"start_allocated_bytes"`
	PeakAllocatedBytes  int64  `json:"peak_allocated_bytes"`
	PeakEvent           int    `json:"peak_event"`
	EndAllocatedBytes   int64  `json:"end_allocated_bytes"`
	// AfterGap: the stage follows a gap (a snapshot the program took of itself, or GapUS of
	// idle time on the trace clock: a notebook cell run again, a script started over, a
	// torch.compile compiling), so it is not the previous stage continued.
	AfterGap bool  `json:"after_gap,omitempty"`
	GapUS    int64 `json:"gap_us,omitempty"`
}

// gapBetweenRunsUS is the idle time on the trace clock that separates two runs: no step of a
// training or inference loop waits 10 s between two allocations.
const gapBetweenRunsUS = 10_000_000

// runGap says whether event k begins a new run: the event before it is a snapshot the program
// took (torch.cuda.memory._snapshot() records a `snapshot` action) or it follows
// gapBetweenRunsUS of idle time; us is that idle time (0 when unknown).
func runGap(evs []snapshot.Event, k int) (bool, int64) {
	if k <= 0 || k >= len(evs) {
		return false, 0
	}
	var us int64
	if evs[k].TimeUS > 0 && evs[k-1].TimeUS > 0 {
		us = evs[k].TimeUS - evs[k-1].TimeUS
	}
	return evs[k-1].Action == snapshot.ActionSnapshot || us >= gapBetweenRunsUS, us
}

// stages cuts device dev's trace into its forward, backward and optimizer stages: each maximal
// run of events in one phase. before[i] and after[i] are the allocated bytes around event i.
func (r *Roles) stages(dev int, before, after []int64) ([]Stage, int) {
	d := r.device(dev)
	out := []Stage{}
	if !d.hasTrace || len(d.phases) == 0 {
		return out, 0
	}
	windows := optimizerWindows(r.snap, dev)
	starts := d.steps.Starts
	total := 0
	for i := 0; i < len(d.phases); {
		p := d.phases[i]
		j := i
		for j+1 < len(d.phases) && d.phases[j+1] == p {
			if gap, _ := runGap(d.evs, j+1); gap {
				break
			}
			j++
		}
		if p != phaseNone {
			total++
			if len(out) < maxStages {
				st := Stage{Name: phaseNames[p], Step: stepOf(starts, i), Source: "phases", StartEvent: i, EndEvent: j,
					StartAllocatedBytes: before[i], PeakAllocatedBytes: after[i], PeakEvent: i, EndAllocatedBytes: after[j]}
				if gap, us := runGap(d.evs, i); gap {
					st.AfterGap, st.GapUS = true, us
				}
				for k := i; k <= j; k++ {
					if after[k] > st.PeakAllocatedBytes {
						st.PeakAllocatedBytes, st.PeakEvent = after[k], k
					}
				}
				if p == phaseOptimizer && inWindows(windows, d.evs[i].TimeUS) {
					st.Source = "annotations"
				}
				out = append(out, st)
			}
		}
		i = j + 1
	}
	return out, total
}

func inWindows(windows [][2]int64, t int64) bool {
	for _, w := range windows {
		if t > 0 && t >= w[0] && t <= w[1] {
			return true
		}
	}
	return false
}

// stagesText renders the stages: each one when there are few, else the highest peak per kind.
func stagesText(stages []Stage, total int) string {
	if len(stages) == 0 {
		return ""
	}
	anySteps := slices.ContainsFunc(stages, func(s Stage) bool { return s.Step >= 0 })
	var b strings.Builder
	if len(stages) <= 9 {
		b.WriteString("  stages:\n")
		for _, s := range stages {
			gap := ""
			if s.AfterGap {
				gap = " (after a gap"
				if s.GapUS >= gapBetweenRunsUS {
					gap += fmt.Sprintf(": %.1f s idle", float64(s.GapUS)/1e6)
				} else {
					gap += ": a snapshot action"
				}
				gap += ")"
			}
			fmt.Fprintf(&b, "    %s%-9s events %d–%d: %s → peak %s (event %d) → %s  [%s]%s\n", stageStep(s.Step, anySteps), s.Name, s.StartEvent, s.EndEvent,
				FormatBytes(s.StartAllocatedBytes), FormatBytes(s.PeakAllocatedBytes), s.PeakEvent, FormatBytes(s.EndAllocatedBytes), s.Source, gap)
		}
		return b.String()
	}
	best := map[string]Stage{}
	var order []string
	for _, s := range stages {
		if cur, ok := best[s.Name]; !ok || s.PeakAllocatedBytes > cur.PeakAllocatedBytes {
			if !ok {
				order = append(order, s.Name)
			}
			best[s.Name] = s
		}
	}
	fmt.Fprintf(&b, "  %s; the highest peak of each kind:\n", count(total, "stage"))
	for _, n := range order {
		s := best[n]
		at := strings.TrimSpace(stageStep(s.Step, anySteps))
		if at != "" {
			at = " (" + at + ")"
		}
		fmt.Fprintf(&b, "    %-9s %s at event %d%s\n", n, FormatBytes(s.PeakAllocatedBytes), s.PeakEvent, at)
	}
	return b.String()
}

// stageStep names a stage's step for the text. A stage before the first step start (Step -1,
// kept as -1 in the JSON) reads "before step 0" when later stages have steps, and nothing
// when none has (an inference or validation trace with no step boundary): no step number a
// run does not have.
func stageStep(step int, anySteps bool) string {
	switch {
	case step >= 0:
		return fmt.Sprintf("step %d ", step)
	case anySteps:
		return "before step 0 "
	}
	return ""
}
