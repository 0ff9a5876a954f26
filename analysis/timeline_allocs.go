package analysis

import (
	"cmp"
	"slices"
	"sort"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// Allocation is one allocated block of a device's trace, from its alloc event to the event that
// took its bytes out of the allocated total (its first free event), as memory_viz's Active
// Memory Timeline draws each tensor.
type Allocation struct {
	Addr uint64
	Size int64
	// AllocEvent is the alloc event (-1: alive before the trace); FreeEvent the event that
	// freed it (-1: alive at the end of the trace).
	AllocEvent, FreeEvent int32
	Stack                 snapshot.StackID
	site                  int32
}

// freeOr is the free event, or end when the block is never freed.
func (a *Allocation) freeOr(end int) int32 {
	if a.FreeEvent < 0 {
		return int32(end)
	}
	return a.FreeEvent
}

// allocIndex records every allocation of a walk: the blocks alive before the trace first (by
// address), then one per alloc event in event order.
type allocIndex struct {
	list []Allocation
	pre  map[uint64]int32 // pre-trace blocks still alive, by address: their index in list
	nPre int
}

// addPre records a block alive before the first event.
func (ai *allocIndex) addPre(addr uint64, size int64, stack snapshot.StackID, site int32) {
	ai.list = append(ai.list, Allocation{Addr: addr, Size: size, AllocEvent: -1, FreeEvent: -1, Stack: stack, site: site})
}

// sortPre orders the pre-trace blocks by address and indexes them.
func (ai *allocIndex) sortPre() {
	slices.SortFunc(ai.list, func(a, b Allocation) int { return cmp.Compare(a.Addr, b.Addr) })
	ai.nPre = len(ai.list)
	ai.pre = make(map[uint64]int32, ai.nPre)
	for i, a := range ai.list {
		ai.pre[a.Addr] = int32(i)
	}
}

// freed records that the block allocated at event allocIdx (-1: before the trace, at addr) was
// freed at event i.
func (ai *allocIndex) freed(i int, allocIdx int32, addr uint64) {
	if allocIdx < 0 {
		if k, ok := ai.pre[addr]; ok {
			ai.list[k].FreeEvent = int32(i)
			delete(ai.pre, addr)
		}
		return
	}
	post := ai.list[ai.nPre:]
	k := sort.Search(len(post), func(j int) bool { return post[j].AllocEvent >= allocIdx })
	if k < len(post) && post[k].AllocEvent == allocIdx && post[k].FreeEvent < 0 {
		post[k].FreeEvent = int32(i)
	}
}

// Allocations is every allocation of the indexed trace (blocks alive before it first, then in
// allocation order). Read-only.
func (x *TimelineIndex) Allocations() []Allocation { return x.allocs.list }

// AllocationSite is the site of an allocation.
func (x *TimelineIndex) AllocationSite(a *Allocation) SiteIdentity { return x.sites[a.site] }

// AllocationRole is the role of an allocation while it is alive (as the replay names it).
func (x *TimelineIndex) AllocationRole(a *Allocation) Attribution {
	now := int(a.FreeEvent)
	if now < 0 {
		now = len(x.evs) - 1
	}
	return x.roles.Live(x.dev, a.Stack, a.Addr, a.Size, int(a.AllocEvent), now)
}

// StackFrames is the filtered stack of a snapshot stack (innermost first) and its full frames.
func (x *TimelineIndex) StackFrames(id snapshot.StackID) (Attribution, []string) {
	at := x.roles.attr(id)
	frames := []string{}
	for _, f := range x.snap.StackFrames(id) {
		frames = append(frames, frameString(f))
	}
	return at, frames
}

// AllocatedAfter is allocated bytes after event i (-1: before the first event).
func (x *TimelineIndex) AllocatedAfter(i int) int64 {
	a, _ := x.after(i)
	return a
}

// siteMaxes is each site's highest allocated total after the events of [start, end).
func (x *TimelineIndex) siteMaxes(start, end int) []int64 {
	cur := slices.Clone(x.startSite)
	for len(cur) < len(x.sites) {
		cur = append(cur, 0)
	}
	hi := make([]int64, len(cur))
	prev := x.startAlloc
	for i := range end {
		switch s := x.site[i]; {
		case s >= 0:
			cur[s] += x.alloc[i] - prev
			if i >= start && cur[s] > hi[s] {
				hi[s] = cur[s]
			}
		case s == -2:
			d := x.extra[i]
			cur[d[0].site] += d[0].bytes
			cur[d[1].site] += d[1].bytes
			if i >= start && cur[d[1].site] > hi[d[1].site] {
				hi[d[1].site] = cur[d[1].site]
			}
		}
		if i == start {
			for k, v := range cur { // the levels after the window's first event
				hi[k] = max(hi[k], v)
			}
		}
		prev = x.alloc[i]
	}
	return hi
}

// roleOfAbsent finds, for each site of gs (none alive at the window's peak), its largest
// allocation alive in the window [start, end) and hands it to set.
func (x *TimelineIndex) roleOfAbsent(start, end int, gs []*siteAgg, set func(*siteAgg, *Allocation)) {
	want := map[string]*siteAgg{}
	for _, g := range gs {
		want[g.id.key()] = g
	}
	bySite := map[int32]*siteAgg{}
	for s, id := range x.sites {
		if g, ok := want[id.key()]; ok {
			bySite[int32(s)] = g
		}
	}
	best := map[*siteAgg]*Allocation{}
	for k := range x.allocs.list {
		a := &x.allocs.list[k]
		g, ok := bySite[a.site]
		if !ok || int(a.AllocEvent) >= end || int(a.freeOr(end)) < start {
			continue
		}
		if b := best[g]; b == nil || a.Size > b.Size {
			best[g] = a
		}
	}
	for _, g := range gs {
		if a := best[g]; a != nil {
			set(g, a)
		} else {
			g.cat = CategoryOther
		}
	}
}

// Phase names a timeline draws besides the roles' forward, backward and optimizer.
const (
	PhaseSetup        = "setup"         // the events before the first forward pass
	PhaseOOMUnwinding = "oom_unwinding" // the frees right after an oom event (the exception unwinding)
)

// TimelinePhase is one run of events in one phase.
type TimelinePhase struct {
	Name       string `json:"name"`
	StartEvent int    `json:"start_event"`
	EndEvent   int    `json:"end_event"` // inclusive
}

// phases lists every phase run overlapping [start, end), clipped to it: setup, forward,
// backward and optimizer runs (the roles' phases: the frames of each event's allocations), and
// after each oom event the run of frees that follows it (oom_unwinding; it may overlap the
// phase it interrupted, and is listed after the others).
func (x *TimelineIndex) phases(start, end int) []TimelinePhase {
	out := []TimelinePhase{}
	d := x.roles.device(x.dev)
	if len(d.phases) == len(x.evs) && len(x.evs) > 0 {
		d.phaseRuns()
		seenPhase := false
		for k, s := range d.runStarts {
			e := len(x.evs) - 1
			if k+1 < len(d.runStarts) {
				e = d.runStarts[k+1] - 1
			}
			p := d.runPhases[k]
			name := phaseNames[p]
			if p == phaseNone {
				if seenPhase {
					continue
				}
				name = PhaseSetup
			} else {
				seenPhase = true
			}
			if e < s || e < start || s >= end {
				continue
			}
			if p == phaseNone && k+1 == len(d.runStarts) {
				continue // no phase at all: no setup either
			}
			out = append(out, TimelinePhase{Name: name, StartEvent: max(s, start), EndEvent: min(e, end-1)})
		}
	}
	for i := start; i < end; i++ {
		if x.evs[i].Action != snapshot.ActionOOM {
			continue
		}
		j := i + 1
		for j < len(x.evs) {
			a := x.evs[j].Action
			if a != snapshot.ActionFreeRequested && a != snapshot.ActionFreeCompleted && a != snapshot.ActionSegmentFree && a != snapshot.ActionSegmentUnmap {
				break
			}
			j++
		}
		if j > i+1 && i+1 < end {
			out = append(out, TimelinePhase{Name: PhaseOOMUnwinding, StartEvent: i + 1, EndEvent: min(j, end) - 1})
		}
	}
	return out
}

// Phases lists the phase runs overlapping events [start, end) (see TimelineResult.Phases).
func (x *TimelineIndex) Phases(start, end int) []TimelinePhase { return x.phases(start, end) }

// ColumnPhases is the phase with the most events in each column (events first[k]..last[k],
// first increasing): setup, forward, backward, optimizer or oom_unwinding, "" for none. An OOM's
// unwinding wins the columns it touches over the phase it interrupted.
func ColumnPhases(runs []TimelinePhase, first, last []int) []string {
	n := len(first)
	out := make([]string, n)
	best := make([]int, n)
	counts := map[string][]int{}
	for _, r := range runs {
		cs := counts[r.Name]
		if cs == nil {
			cs = make([]int, n)
			counts[r.Name] = cs
		}
		// The columns the run overlaps: from the last column starting at or before it.
		k := max(sort.SearchInts(first, r.StartEvent+1)-1, 0)
		for ; k < n && first[k] <= r.EndEvent; k++ {
			if ov := min(last[k], r.EndEvent) - max(first[k], r.StartEvent) + 1; ov > 0 {
				cs[k] += ov
			}
		}
	}
	for _, name := range []string{PhaseSetup, "forward", "backward", "optimizer", PhaseOOMUnwinding} {
		for k, v := range counts[name] {
			if v > best[k] || (v > 0 && name == PhaseOOMUnwinding) {
				best[k], out[k] = v, name
			}
		}
	}
	return out
}

// phasesAsDrawn is the phase runs at a series' level of detail: each column takes the phase
// with the most events in it (ColumnPhases), and neighbouring columns of one phase make one run.
func phasesAsDrawn(runs []TimelinePhase, s *TimelineSeries) []TimelinePhase {
	first, last := make([]int, len(s.Columns)), make([]int, len(s.Columns))
	for k, c := range s.Columns {
		first[k], last[k] = c.First, max(c.Last, c.First)
	}
	names := ColumnPhases(runs, first, last)
	out := []TimelinePhase{}
	for k, name := range names {
		if name == "" {
			continue
		}
		if m := len(out); m > 0 && out[m-1].Name == name && k > 0 && names[k-1] == name {
			out[m-1].EndEvent = last[k]
			continue
		}
		out = append(out, TimelinePhase{Name: name, StartEvent: first[k], EndEvent: last[k]})
	}
	return out
}
