package analysis

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis/sim"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// blockZeroFC1 returns the event indices of the fc1 allocations of block 0 (every other
// model.py:41 alloc: block 1's fc1 has the same stack): where each training step begins.
func blockZeroFC1(s *snapshot.Snapshot) []int {
	var out []int
	n := 0
	for i, ev := range s.DeviceTraces[0] {
		if ev.Action == snapshot.ActionAlloc && sim.UserSite(s, ev.Stack) == sim.SiteFC1 {
			if n%2 == 0 {
				out = append(out, i)
			}
			n++
		}
	}
	return out
}

// TestStepsFromPhases: loops without annotations get their steps from the trace's phases (a
// forward pass after a backward pass or an optimizer step); each step starts at its first
// forward allocation.
func TestStepsFromPhases(t *testing.T) {
	const (
		params = 24 * mib
		batch  = 512*kib + 2*kib // x and y (requested sizes)
		adam   = 48*mib + 5*4    // exp_avg, exp_avg_sq and 5 step tensors of 4 B
		grads  = 24 * mib
		logits = 4 * mib
		loss   = 4
	)
	last := func(f func() (*snapshot.Snapshot, *snapshot.Snapshot)) func() *snapshot.Snapshot {
		return func() *snapshot.Snapshot { _, s := f(); return s }
	}
	tests := []struct {
		name          string
		snap          func() *snapshot.Snapshot
		period        int
		growth        int64
		lastStart     int64
		repeatingSite string
	}{
		{"no growth", last(sim.NoGrowthPair), 0, 0, params + batch + adam, ""},
		{"growing container", last(sim.GrowingContainerPair), 0, 4 * mib, params + batch + adam + 48*4*mib, "train.py:97"},
		// per step: fc1 2×2 MiB, gelu 2×2 MiB, residual 2×512 KiB, log_softmax 4 MiB, loss 4 B
		{"retained graph", last(sim.RetainedGraphPair), 0, 13*mib + 4, params + batch + adam + 48*(13*mib+4), "train.py:89"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.snap()
			r, err := Replay(context.Background(), s, 0)
			if err != nil {
				t.Fatal(err)
			}
			want := blockZeroFC1(s)
			if len(want) != 50 {
				t.Fatalf("ground truth has %d steps", len(want))
			}
			if r.IterationSource != IterationsFromPhases || r.Iterations != 50 || r.IterationPeriodAllocs != 0 ||
				!slices.Equal(r.IterationStartEvents, want) {
				t.Fatalf("iterations = %s %d period %d starts %v, want phases 50 starts %v",
					r.IterationSource, r.Iterations, r.IterationPeriodAllocs, r.IterationStartEvents, want)
			}
			var d []int
			for k := 1; k < len(want); k++ {
				d = append(d, want[k]-want[k-1])
			}
			slices.Sort(d)
			if r.IterationPeriodEvents != d[len(d)/2] {
				t.Errorf("period events = %d, want %d", r.IterationPeriodEvents, d[len(d)/2])
			}
			st := r.Sawtooth
			// Step 1 starts with params and batch only; its peak (after its backward, during the
			// first opt.step) also holds grads, the new AdamW state, logits and loss.
			firstPeak := int64(params + batch + grads + adam + logits + loss)
			if tc.name == "retained graph" {
				firstPeak += 13*mib + 4 - loss // the step's graph stays: activations and log_softmax
			}
			got := Sawtooth{Iterations: st.Iterations, FirstStartBytes: st.FirstStartBytes, LastStartBytes: st.LastStartBytes,
				GrowthPerIterationBytes: st.GrowthPerIterationBytes, MaxRiseIndex: st.MaxRiseIndex, FirstPeakBytes: st.FirstPeakBytes}
			wantST := Sawtooth{Iterations: 49, FirstStartBytes: params + batch, LastStartBytes: tc.lastStart,
				GrowthPerIterationBytes: tc.growth, MaxRiseIndex: 0, FirstPeakBytes: firstPeak}
			if got != wantST {
				t.Errorf("sawtooth = %+v\nwant %+v", got, wantST)
			}
			if st.MaxRiseBytes != st.FirstPeakBytes-st.FirstStartBytes {
				t.Errorf("max rise %d is not step 1's rise", st.MaxRiseBytes)
			}
			if tc.name == "no growth" {
				// AdamW state made by step 1 and kept: expected, listed as such
				if len(r.RepeatingSites) != 1 || !r.RepeatingSites[0].Expected || r.RepeatingSites[0].Site != "train.py:91" ||
					r.RepeatingSites[0].Category != CategoryOptimizerState || r.RepeatingSites[0].Bytes != adam {
					t.Errorf("repeating sites = %+v, want the first step's optimizer state only", r.RepeatingSites)
				}
			} else if tc.repeatingSite != "" {
				if len(r.RepeatingSites) == 0 || r.RepeatingSites[0].Site != tc.repeatingSite || r.RepeatingSites[0].Iterations != 50 {
					t.Errorf("repeating sites = %+v", r.RepeatingSites)
				}
			} else if len(r.RepeatingSites) != 0 {
				t.Errorf("repeating sites = %+v, want none", r.RepeatingSites)
			}
			txt := r.Text()
			if !strings.Contains(txt, "50 steps (a forward pass after each backward pass or optimizer step)") {
				t.Errorf("text does not explain the iterations:\n%s", txt)
			}
		})
	}
}

// TestIterationsAnnotationsVsPhases: the same loop with and without ProfilerStep annotations:
// the annotated trace uses them; the plain one finds the same steps from its phases (each
// inferred start is the first allocation of the annotated step).
func TestIterationsAnnotationsVsPhases(t *testing.T) {
	for _, steps := range []int{2, 4, 12} {
		ann, err := Replay(context.Background(), sim.TrainingLoop(steps, true), 0)
		if err != nil {
			t.Fatal(err)
		}
		plainSnap := sim.TrainingLoop(steps, false)
		plain, err := Replay(context.Background(), plainSnap, 0)
		if err != nil {
			t.Fatal(err)
		}
		if ann.IterationSource != IterationsFromAnnotations || ann.Iterations != steps || len(ann.IterationStartEvents) != steps {
			t.Fatalf("%d steps annotated: %s %d %v", steps, ann.IterationSource, ann.Iterations, ann.IterationStartEvents)
		}
		if plain.IterationSource != IterationsFromPhases || plain.Iterations != steps {
			t.Fatalf("%d steps plain: %s %d period %d", steps, plain.IterationSource, plain.Iterations, plain.IterationPeriodAllocs)
		}
		evs := plainSnap.DeviceTraces[0]
		for k, a := range ann.IterationStartEvents {
			first := a
			for evs[first].Action != snapshot.ActionAlloc {
				first++
			}
			if plain.IterationStartEvents[k] != first {
				t.Errorf("%d steps: step %d starts at event %d (first alloc after the annotation), inferred %d", steps, k+1, first, plain.IterationStartEvents[k])
			}
		}
		if ann.Sawtooth.Iterations != steps-1 || plain.Sawtooth.GrowthPerIterationBytes != 0 || ann.Sawtooth.GrowthPerIterationBytes != 0 {
			t.Errorf("%d steps: sawtooth annotated %+v plain %+v", steps, ann.Sawtooth, plain.Sawtooth)
		}
	}
}

// TestIterationsNone: a trace without a backward pass or annotations has no steps, and says so.
func TestIterationsNone(t *testing.T) {
	tests := []struct {
		name string
		snap *snapshot.Snapshot
	}{
		{"hand trace", lateTrace()},
	}
	for _, tc := range tests {
		r, err := Replay(context.Background(), tc.snap, 0)
		if err != nil {
			t.Fatal(err)
		}
		if r.IterationSource != IterationsNone || r.Iterations != 0 || len(r.IterationStartEvents) != 0 || r.Sawtooth != (Sawtooth{}) {
			t.Errorf("%s: %s %d %v %+v", tc.name, r.IterationSource, r.Iterations, r.IterationStartEvents, r.Sawtooth)
		}
		if !strings.Contains(strings.Join(r.Notes, " "), "steps are unknown") {
			t.Errorf("%s: notes %v", tc.name, r.Notes)
		}
	}
}

// TestDetectPeriod: the period and phase on hand-made key sequences.
func TestDetectPeriod(t *testing.T) {
	mk := func(keys string, levels ...int64) []allocRec {
		out := make([]allocRec, len(keys))
		for i, c := range keys {
			out[i] = allocRec{idx: i, key: uint64(c)}
			if i < len(levels) {
				out[i].level = levels[i]
			} else {
				out[i].level = 100
			}
		}
		return out
	}
	tests := []struct {
		name   string
		in     []allocRec
		ok     bool
		period int
		starts []int
	}{
		{"plain", mk("abcabcabcabc", 0, 10, 20), true, 3, []int{0, 3, 6, 9}},
		// lowest level at 'b': iterations start at b
		{"phase", mk("abcabcabcabc", 50, 10, 20), true, 3, []int{1, 4, 7, 10}},
		{"warm-up", mk("xyzabcabcabcab", 0, 0, 0, 5, 10, 20), true, 3, []int{3, 6, 9, 12}},
		{"two periods only", mk("abcdabcd"), false, 0, nil},
		{"no repetition", mk("abcdefghijkl"), false, 0, nil},
		{"too short", mk("aaaaa"), false, 0, nil},
	}
	for _, tc := range tests {
		pr, ok := detectPeriod(tc.in)
		if ok != tc.ok || pr.period != tc.period || !slices.Equal(pr.starts, tc.starts) {
			t.Errorf("%s: got %v %d %v, want %v %d %v", tc.name, ok, pr.period, pr.starts, tc.ok, tc.period, tc.starts)
		}
	}
}
