package analysis

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// Labels used when grouping by annotation or compile context.
const (
	LabelNone     = "<none>"             // outside any range / no compile context
	LabelPreTrace = "<before the trace>" // a live block the trace did not see allocated
	LabelNoTime   = "<no time recorded>" // the event has no time_us to place it in a range
	LabelInactive = "<inactive>"         // a cached free block: no allocation owns it now
)

// eventLabels gives each event of one device trace a label: the innermost external_annotations
// range open at its time, or its compile_context.
type eventLabels struct {
	names []string // label id -> name
	at    []int32  // per event: label id
	notes []string // what could not be placed (orphan ENDs, unclosed STARTs, events without time)
}

// annotationLabels places every event of device dev inside the record_function ranges
// (external_annotations START/END on the trace clock) open at its time: the innermost wins.
// An END without a START is ignored; a START without an END stays open to the end. Both are
// counted in the notes.
func annotationLabels(snap *snapshot.Snapshot, dev int, evs []snapshot.Event) eventLabels {
	l := eventLabels{names: []string{LabelNone, LabelNoTime}, at: make([]int32, len(evs))}
	ids := map[string]int32{}
	id := func(name string) int32 {
		if i, ok := ids[name]; ok {
			return i
		}
		i := int32(len(l.names))
		l.names = append(l.names, name)
		ids[name] = i
		return i
	}
	var anns []snapshot.Annotation
	for _, an := range snap.Annotations {
		if an.Device == dev || an.Device < 0 {
			anns = append(anns, an)
		}
	}
	slices.SortStableFunc(anns, func(a, b snapshot.Annotation) int { return cmp.Compare(a.TimeUS, b.TimeUS) })
	var open []int32 // label ids, innermost last
	orphanEnds, noTime := 0, 0
	j := 0
	apply := func(an snapshot.Annotation) {
		switch an.Stage {
		case "START":
			open = append(open, id(an.Name))
		case "END":
			want := id(an.Name)
			for k := len(open) - 1; k >= 0; k-- {
				if open[k] == want {
					open = slices.Delete(open, k, k+1)
					return
				}
			}
			orphanEnds++
		}
	}
	for i, ev := range evs {
		if ev.TimeUS == 0 {
			l.at[i] = 1
			noTime++
			continue
		}
		for j < len(anns) && anns[j].TimeUS <= ev.TimeUS {
			apply(anns[j])
			j++
		}
		if len(open) > 0 {
			l.at[i] = open[len(open)-1]
		}
	}
	for ; j < len(anns); j++ {
		apply(anns[j])
	}
	if orphanEnds > 0 {
		l.notes = append(l.notes, fmt.Sprintf("%s without a matching START (ignored: the range began before recording)", count(orphanEnds, "annotation END")))
	}
	if len(open) > 0 {
		names := make([]string, 0, min(len(open), 3))
		for _, o := range open[:min(len(open), 3)] {
			names = append(names, l.names[o])
		}
		l.notes = append(l.notes, fmt.Sprintf("%s never closed (%s): counted as open to the end of the trace", count(len(open), "annotation START"), strings.Join(names, ", ")))
	}
	if noTime > 0 && len(anns) > 0 {
		l.notes = append(l.notes, fmt.Sprintf("%s without time_us cannot be placed in an annotation range (%s)", count(noTime, "event"), LabelNoTime))
	}
	return l
}

// compileLabels labels every event of a trace with its compile_context (torch.compile frame and
// graph), LabelNone where it is absent or "N/A".
func compileLabels(snap *snapshot.Snapshot, evs []snapshot.Event) eventLabels {
	l := eventLabels{names: []string{LabelNone}, at: make([]int32, len(evs))}
	byExtra := map[int]int32{}
	for i, ev := range evs {
		x := ev.Extra.Index()
		id, ok := byExtra[x]
		if !ok {
			cc := ""
			if x < len(snap.EventExtras) {
				cc = snap.EventExtras[x].CompileContext
			}
			if cc == "" || cc == "N/A" {
				id = 0
			} else {
				id = int32(slices.Index(l.names, cc))
				if id < 0 {
					id = int32(len(l.names))
					l.names = append(l.names, cc)
				}
			}
			byExtra[x] = id
		}
		l.at[i] = id
	}
	return l
}

// label is the label of event i (LabelPreTrace for -1).
func (l eventLabels) label(i int) string {
	if i < 0 || i >= len(l.at) {
		return LabelPreTrace
	}
	return l.names[l.at[i]]
}
