package analysis

import (
	"cmp"
	"slices"
	"sort"
	"strings"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// Iteration sources reported by ReplayResult.IterationSource.
const (
	IterationsFromAnnotations = "annotations"   // ProfilerStep#N record_function spans, or Optimizer.step#… spans when frames cannot tell phases
	IterationsFromMetadata    = "user_metadata" // the value set with torch.cuda.memory._set_memory_metadata changed to a new one
	IterationsFromPhases      = "phases"        // a forward pass after a backward pass or an optimizer step
	IterationsFromPeriodicity = "periodicity"   // the trace's own repeating allocation sequence (no frames: a guess)
	IterationsNone            = "none"
)

// maxIterationStarts bounds ReplayResult.IterationStartEvents.
const maxIterationStarts = 1000

// Sawtooth is the per-iteration shape of allocated memory: each iteration starts low, rises as
// the forward pass allocates activations, and falls as the backward pass frees them.
type Sawtooth struct {
	// Iterations measured: complete iterations (a next iteration starts after them).
	Iterations int `json:"iterations"`
	// FirstStartBytes / LastStartBytes: allocated memory when the first and the last measured
	// iteration started (the trough).
	FirstStartBytes int64 `json:"first_start_bytes"`
	LastStartBytes  int64 `json:"last_start_bytes"`
	// GrowthPerIterationBytes is the median change of the start level from one iteration to the
	// next: memory each iteration leaves behind for the next (0 for a steady loop; a first step
	// that creates optimizer state once does not count).
	GrowthPerIterationBytes int64 `json:"growth_per_iteration_bytes"`
	// MaxRiseBytes is the largest (peak - start) within one iteration: what an iteration
	// allocates on top of what it started with (activations, gradients, temporaries).
	MaxRiseBytes   int64 `json:"max_rise_bytes"`
	MaxRiseIndex   int   `json:"max_rise_iteration"` // 0-based among the measured iterations
	MaxPeakBytes   int64 `json:"max_peak_bytes"`     // highest allocated within any measured iteration
	FirstPeakBytes int64 `json:"first_peak_bytes"`   // peak of the first measured iteration
}

// allocRec is one alloc event of a replay: its event index, its repetition key (the stack when
// the event has frames, else the size) and allocated bytes just before it.
type allocRec struct {
	idx   int
	key   uint64
	level int64
}

func allocKey(ev snapshot.Event) uint64 {
	if ev.Stack > snapshot.EmptyStack {
		return uint64(ev.Stack) << 1
	}
	return uint64(ev.Size)<<1 | 1
}

// periodResult is the repeating part of an alloc-key sequence.
type periodResult struct {
	period int // in alloc events
	starts []int
}

// detectPeriod finds the smallest period P (in alloc events) such that the alloc keys repeat
// with period P over at least three periods with at least 90% of the positions matching, and
// returns the alloc positions where iterations start: the position of the lowest allocated level
// within the first period (the trough of the sawtooth), every P allocs from there, and earlier
// iterations (e.g. a first step that also created optimizer state) whose first allocations are
// the same as an iteration's.
func detectPeriod(allocs []allocRec) (periodResult, bool) {
	if len(allocs) < 6 {
		return periodResult{}, false
	}
	for _, p := range candidatePeriods(allocs) {
		start, lastMatch, ok := periodicRegion(allocs, p)
		if !ok {
			continue
		}
		starts := troughStarts(allocs, p, start, lastMatch)
		return periodResult{period: p, starts: warmupStarts(allocs, p, starts)}, true
	}
	return periodResult{}, false
}

// candidatePeriods are the distances between consecutive allocations with the same key that
// occur at least twice and fit three times in the sequence: the 32 most frequent, shortest
// first.
func candidatePeriods(allocs []allocRec) []int {
	n := len(allocs)
	last := map[uint64]int{}
	gaps := map[int]int{}
	for i, a := range allocs {
		if j, ok := last[a.key]; ok {
			gaps[i-j]++
		}
		last[a.key] = i
	}
	type cand struct{ gap, count int }
	cands := []cand{}
	for g, c := range gaps {
		if c >= 2 && 3*g <= n {
			cands = append(cands, cand{g, c})
		}
	}
	slices.SortFunc(cands, func(x, y cand) int { return cmp.Or(y.count-x.count, x.gap-y.gap) })
	if len(cands) > 32 {
		cands = cands[:32]
	}
	out := make([]int, len(cands))
	for i, c := range cands {
		out[i] = c.gap
	}
	slices.Sort(out)
	return out
}

// periodicRegion finds where period p holds: from the first run of p consecutive matches to
// the last match, spanning at least two periods with at least 90% of the positions matching.
func periodicRegion(allocs []allocRec, p int) (start, lastMatch int, ok bool) {
	n := len(allocs)
	start, run := -1, 0
	for i := 0; i+p < n; i++ {
		if allocs[i].key == allocs[i+p].key {
			run++
			if run == p {
				start = i - p + 1
				break
			}
		} else {
			run = 0
		}
	}
	if start < 0 {
		return 0, 0, false
	}
	lastMatch, matches := start, 0
	for i := start; i+p < n; i++ {
		if allocs[i].key == allocs[i+p].key {
			matches++
			lastMatch = i
		}
	}
	span := lastMatch - start + 1
	if span < 2*p || matches*10 < span*9 {
		return 0, 0, false
	}
	return start, lastMatch, true
}

// troughStarts puts the iteration starts at the lowest allocated level within the first period
// (the trough of the sawtooth) and every p allocations from there.
func troughStarts(allocs []allocRec, p, start, lastMatch int) []int {
	j := start
	for i := start; i < start+p; i++ {
		if allocs[i].level < allocs[j].level {
			j = i
		}
	}
	var starts []int
	for b := j; b <= lastMatch+p && b < len(allocs); b += p {
		starts = append(starts, b)
	}
	return starts
}

// warmupStarts adds earlier iterations that begin like one (warm-up steps that differ later
// on, e.g. a first step that also creates optimizer state).
func warmupStarts(allocs []allocRec, p int, starts []int) []int {
	m := min(p, 8)
	for {
		b0 := starts[0]
		found := -1
		for c := b0 - m; c >= 0 && c >= b0-2*p; c-- {
			if sameKeys(allocs[c:c+m], allocs[b0:b0+m]) {
				found = c
				break
			}
		}
		if found < 0 {
			return starts
		}
		starts = slices.Insert(starts, 0, found)
	}
}

func sameKeys(a, b []allocRec) bool {
	for k := range a {
		if a[k].key != b[k].key {
			return false
		}
	}
	return true
}

// annotationStarts returns the event indices where ProfilerStep#N annotations start iterations
// (the first event at or after each START), and how many START annotations there are.
func annotationStarts(snap *snapshot.Snapshot, dev int, evs []snapshot.Event) (idx []int, count int) {
	var times []int64
	for _, an := range snap.Annotations {
		if an.Stage == "START" && strings.HasPrefix(an.Name, "ProfilerStep#") && (an.Device == dev || an.Device < 0) {
			times = append(times, an.TimeUS)
		}
	}
	slices.Sort(times)
	for _, t := range times {
		i := sort.Search(len(evs), func(i int) bool { return evs[i].TimeUS >= t })
		idx = append(idx, i)
	}
	return idx, len(times)
}

// metadataStarts marks a step start at each event whose user_metadata (set by the program with
// torch._C._cuda_setMemoryMetadata / torch.cuda.memory._set_memory_metadata) takes a value not
// seen before, when at least two values appear: programs label their steps this way ("step 3").
func metadataStarts(snap *snapshot.Snapshot, evs []snapshot.Event) []int {
	if len(snap.EventExtras) < 2 {
		return nil
	}
	var starts []int
	seen := map[string]bool{}
	prev := ""
	for i, ev := range evs {
		if ev.Extra.Index() >= len(snap.EventExtras) {
			continue
		}
		md := snap.EventExtras[ev.Extra.Index()].UserMetadata
		if md == "" || md == prev {
			continue
		}
		prev = md
		if !seen[md] {
			seen[md] = true
			starts = append(starts, i)
		}
	}
	if len(starts) < 2 {
		return nil
	}
	return starts
}

// optimizerStepStarts: with Optimizer.step#… START/END annotations, each step ends with its
// optimizer step, so a step starts at the first event and after each optimizer step that
// another one follows (the events after the last one are not a step).
func optimizerStepStarts(snap *snapshot.Snapshot, dev int, evs []snapshot.Event) []int {
	windows := optimizerWindows(snap, dev)
	if len(windows) == 0 || len(evs) == 0 || evs[0].TimeUS == 0 {
		return nil
	}
	slices.SortFunc(windows, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
	starts := []int{0}
	for _, w := range windows[:len(windows)-1] {
		i := sort.Search(len(evs), func(i int) bool { return evs[i].TimeUS > w[1] })
		if i < len(evs) && i > starts[len(starts)-1] {
			starts = append(starts, i)
		}
	}
	return starts
}

// sawtooth measures the complete iterations between starts (event indices) from the allocated
// level before each event (before[i]) and after it (after[i]).
func sawtooth(starts []int, before, after []int64) Sawtooth {
	var st Sawtooth
	var growth []int64
	for k := 0; k+1 < len(starts); k++ {
		s, e := starts[k], starts[k+1]
		if s >= len(before) || e > len(after) || s >= e {
			continue
		}
		lvl := before[s]
		peak := lvl
		for i := s; i < e; i++ {
			peak = max(peak, after[i])
		}
		if st.Iterations == 0 {
			st.FirstStartBytes, st.FirstPeakBytes = lvl, peak
		} else {
			growth = append(growth, lvl-st.LastStartBytes)
		}
		st.LastStartBytes = lvl
		if rise := peak - lvl; rise > st.MaxRiseBytes || st.Iterations == 0 {
			st.MaxRiseBytes, st.MaxRiseIndex = rise, st.Iterations
		}
		st.MaxPeakBytes = max(st.MaxPeakBytes, peak)
		st.Iterations++
	}
	if len(growth) > 0 {
		slices.Sort(growth)
		st.GrowthPerIterationBytes = growth[(len(growth)-1)/2] // lower median
	}
	return st
}
