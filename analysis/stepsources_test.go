package analysis

import (
	"slices"
	"testing"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// frameless trace of n alloc/free pairs at 10 µs apart, with the given user_metadata per pair.
func framelessTrace(metadata []string) *snapshot.Snapshot {
	snap := &snapshot.Snapshot{Stacks: [][]snapshot.FrameID{{}}, EventExtras: []snapshot.EventExtra{{}}}
	extra := map[string]uint32{"": 0}
	var evs []snapshot.Event
	for i, md := range metadata {
		x, ok := extra[md]
		if !ok {
			x = uint32(len(snap.EventExtras))
			snap.EventExtras = append(snap.EventExtras, snapshot.EventExtra{UserMetadata: md})
			extra[md] = x
		}
		t := int64(1000 + 20*i)
		evs = append(evs,
			snapshot.Event{Action: snapshot.ActionAlloc, Addr: 0x1000, Size: 512, TimeUS: t, Extra: snapshot.MakeExtraID(x), Stack: snapshot.NoStack},
			snapshot.Event{Action: snapshot.ActionFreeCompleted, Addr: 0x1000, Size: 512, TimeUS: t + 10, Extra: snapshot.MakeExtraID(x), Stack: snapshot.NoStack})
	}
	snap.DeviceTraces = [][]snapshot.Event{evs}
	return snap
}

func TestStepsFromUserMetadata(t *testing.T) {
	cases := []struct {
		name     string
		metadata []string
		source   string
		starts   []int
	}{
		{"three labelled steps", []string{"", "step 1", "step 1", "step 2", "step 3", "step 3"}, IterationsFromMetadata, []int{2, 6, 8}},
		{"a value that comes back is not a new step", []string{"train", "eval", "train", "eval"}, IterationsFromMetadata, []int{0, 2}},
		{"one value only", []string{"run", "run", "run"}, IterationsNone, []int{}},
		{"no metadata", []string{"", "", ""}, IterationsNone, []int{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := rolesWith(framelessTrace(tc.metadata), DefaultAttributor())
			st := r.Steps(0)
			if st.Source != tc.source || !slices.Equal(st.Starts, tc.starts) {
				t.Fatalf("steps %s %v, want %s %v", st.Source, st.Starts, tc.source, tc.starts)
			}
		})
	}
}

func TestStepsFromOptimizerAnnotations(t *testing.T) {
	snap := framelessTrace(make([]string, 10)) // events at 1000, 1010, 1020, ... 1190
	win := func(start, end int64) []snapshot.Annotation {
		return []snapshot.Annotation{{Device: 0, Name: "Optimizer.step#AdamW.step", Stage: "START", TimeUS: start},
			{Device: 0, Name: "Optimizer.step#AdamW.step", Stage: "END", TimeUS: end}}
	}
	snap.Annotations = append(append(win(1045, 1055), win(1105, 1115)...), win(1165, 1175)...)
	st := rolesWith(snap, DefaultAttributor()).Steps(0)
	// Steps end with their optimizer step: starts at 0 and after the first two windows; the
	// events after the last window are not a step.
	if want := []int{0, 6, 12}; st.Source != IterationsFromAnnotations || !slices.Equal(st.Starts, want) {
		t.Fatalf("steps %s %v, want annotations %v", st.Source, st.Starts, want)
	}
	snap.Annotations = win(1045, 1055) // one step
	st = rolesWith(snap, DefaultAttributor()).Steps(0)
	if st.Source == IterationsFromAnnotations {
		t.Fatalf("one optimizer step gave steps %v", st.Starts)
	}
}
