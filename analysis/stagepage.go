package analysis

import (
	"fmt"
	"slices"
	"strings"
)

// stagePeaks returns the stage with the highest peak of each kind, in the order the kinds
// first appear: what the text names when the stages are many.
func stagePeaks(stages []Stage) []Stage {
	out := []Stage{}
	for _, s := range stages {
		i := slices.IndexFunc(out, func(o Stage) bool { return o.Name == s.Name })
		switch {
		case i < 0:
			out = append(out, s)
		case s.PeakAllocatedBytes > out[i].PeakAllocatedBytes:
			out[i] = s
		}
	}
	return out
}

// pageStages keeps the stages [offset, offset+limit) of r (all of them were found): limit
// bounds this list like every other list of the answer, and stages_next_offset continues it.
// The highest peak of each kind is kept from all of them.
func (r *ReplayResult) pageStages(offset, limit int) {
	all := r.Stages
	r.StagePeaks = stagePeaks(all)
	lo := min(max(offset, 0), len(all))
	hi := min(lo+max(limit, 1), len(all))
	r.Stages = slices.Clip(all[lo:hi])
	if len(r.Stages) == 0 {
		r.Stages = []Stage{}
	}
	r.StagesOffset = lo
	r.StagesNextOffset = hi
}

// stagesListText renders the stages: all of them when they are few and all listed, else the
// count, the highest peak of each kind (over every stage) and which are listed.
func stagesListText(r *ReplayResult) string {
	if r.StagesTotal <= 9 && len(r.Stages) == r.StagesTotal {
		return stagesText(r.Stages, r.StagesTotal)
	}
	if r.StagesTotal == 0 {
		return ""
	}
	anySteps := slices.ContainsFunc(r.StagePeaks, func(s Stage) bool { return s.Step >= 0 })
	var b strings.Builder
	fmt.Fprintf(&b, "  %s; the highest peak of each kind:\n", count(r.StagesTotal, "stage"))
	for _, s := range r.StagePeaks {
		at := strings.TrimSpace(stageStep(s.Step, anySteps))
		if at != "" {
			at = " (" + at + ")"
		}
		fmt.Fprintf(&b, "    %-9s %s at event %d%s\n", s.Name, FormatBytes(s.PeakAllocatedBytes), s.PeakEvent, at)
	}
	if len(r.Stages) > 0 {
		fmt.Fprintf(&b, "    (stages %d–%d listed in stages", r.StagesOffset, r.StagesNextOffset-1)
		if r.StagesNextOffset < min(r.StagesTotal, maxStages) {
			fmt.Fprintf(&b, "; stages_offset=%d continues", r.StagesNextOffset)
		}
		b.WriteString(")\n")
	}
	return b.String()
}
