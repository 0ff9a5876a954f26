package analysis

import (
	"fmt"
	"slices"
	"strings"
)

// maxStages bounds the stages a replay keeps to page through (a long trace has three per
// step; each costs about 100 bytes); StagesTotal counts them all.
const maxStages = 1 << 20

// Stage is one forward pass, backward pass or optimizer step of a device's trace.
type Stage struct {
	// Name is forward, backward or optimizer.
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
			j++
		}
		if p != phaseNone {
			total++
			if len(out) < maxStages {
				st := Stage{Name: phaseNames[p], Step: stepOf(starts, i), Source: "phases", StartEvent: i, EndEvent: j,
					StartAllocatedBytes: before[i], PeakAllocatedBytes: after[i], PeakEvent: i, EndAllocatedBytes: after[j]}
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
			fmt.Fprintf(&b, "    %s%-9s events %d–%d: %s → peak %s (event %d) → %s  [%s]\n", stageStep(s.Step, anySteps), s.Name, s.StartEvent, s.EndEvent,
				FormatBytes(s.StartAllocatedBytes), FormatBytes(s.PeakAllocatedBytes), s.PeakEvent, FormatBytes(s.EndAllocatedBytes), s.Source)
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
