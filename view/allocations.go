package view

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/memsnap/memsnap/analysis"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// Bounds of one /api/allocations answer: at most maxAllocations allocations are listed (the
// largest), so the answer stays under 2 MB; the rest are counted and summed per column.
const (
	maxAllocations = 6000
	defaultHeight  = 400
)

// AllocationJSON is one allocation of the per-allocation view (memory_viz's Active Memory
// Timeline): AllocEvent is null when it was alive before the trace, FreeEvent null when never
// freed.
type AllocationJSON struct {
	Addr       string `json:"addr"`
	Size       int64  `json:"size"`
	AllocEvent *int   `json:"alloc_event"`
	FreeEvent  *int   `json:"free_event"`
	Site       string `json:"site"`
	Role       string `json:"role"`
	StackID    int    `json:"stack_id"`
}

// Allocations is the per-allocation view of a window: the columns (as /api/timeline cuts them),
// the allocations alive in the window at least a pixel high (in allocation order: memory_viz
// stacks them so), and what is left: how many allocations were too small (or past the bound)
// and their bytes per column.
type Allocations struct {
	Start    int     `json:"start"`
	End      int     `json:"end"`
	First    []int   `json:"first"`
	Last     []int   `json:"last"`
	MaxEvent []int   `json:"max_event"`
	AllocMax []int64 `json:"alloc_max"`
	// Allocations listed; MinBytes the smallest size listed (a pixel of the view's height at
	// the window's peak, or larger when the bound cut the list).
	Allocations []AllocationJSON `json:"allocations"`
	MinBytes    int64            `json:"min_bytes"`
	// Aggregated counts the allocations alive in the window that are not listed;
	// AggregatedBytes[c] is what they hold after column c's MaxEvent.
	Aggregated      int     `json:"aggregated"`
	AggregatedBytes []int64 `json:"aggregated_bytes"`
	PeakBytes       int64   `json:"peak_bytes"`
}

// AllocationsIn answers /api/allocations: events [start, end) of device dev in cols columns of a
// view height pixels high.
func (s *Server) AllocationsIn(ctx context.Context, dev, start, end, cols, height int) (*Allocations, error) {
	d := s.device(ctx, dev)
	if d.err != nil {
		return nil, d.err
	}
	if height <= 0 {
		height = defaultHeight
	}
	c, err := s.Zoom(ctx, dev, start, end, cols)
	if err != nil {
		return nil, err
	}
	out := &Allocations{Start: c.Start, End: c.End, First: c.First, Last: c.Last, MaxEvent: c.MaxEvent, AllocMax: c.AllocMax,
		Allocations: []AllocationJSON{}, PeakBytes: c.PeakBytes, AggregatedBytes: make([]int64, len(c.First))}
	all := d.x.Allocations()
	// Allocations are in allocation order (those alive before the trace first): the ones
	// allocated before the window's end are a prefix.
	n := sort.Search(len(all), func(i int) bool { return int(all[i].AllocEvent) >= c.End })
	minBytes := max(c.PeakBytes/int64(height), 1)
	var alive []int32
	for i := range n {
		a := &all[i]
		if a.FreeEvent >= 0 && int(a.FreeEvent) <= c.Start {
			continue
		}
		alive = append(alive, int32(i))
	}
	listed := make([]int32, 0, min(len(alive), maxAllocations))
	for _, i := range alive {
		if all[i].Size >= minBytes {
			listed = append(listed, i)
		}
	}
	if len(listed) > maxAllocations {
		bySize := slices.Clone(listed)
		slices.SortStableFunc(bySize, func(a, b int32) int { return int(min(max(all[b].Size-all[a].Size, -1), 1)) })
		minBytes = all[bySize[maxAllocations-1]].Size
		listed = listed[:0]
		for _, i := range alive {
			if all[i].Size > minBytes || (all[i].Size == minBytes && len(listed) < maxAllocations) {
				listed = append(listed, i)
			}
		}
		listed = listed[:min(len(listed), maxAllocations)]
	}
	out.MinBytes = minBytes
	out.Aggregated = len(alive) - len(listed)
	// What the listed allocations hold after each column's MaxEvent, by a difference array over
	// the columns (MaxEvent increases with the column).
	diff := make([]int64, len(c.First)+1)
	for _, i := range listed {
		a := &all[i]
		from := sort.SearchInts(c.MaxEvent, int(a.AllocEvent)) // first column with MaxEvent >= alloc
		to := len(c.MaxEvent)
		if a.FreeEvent >= 0 {
			to = sort.SearchInts(c.MaxEvent, int(a.FreeEvent)) // first column with MaxEvent >= free
		}
		if from < to {
			diff[from] += a.Size
			diff[to] -= a.Size
		}
	}
	var acc int64
	for k := range c.First {
		acc += diff[k]
		out.AggregatedBytes[k] = max(c.AllocMax[k]-acc, 0)
	}
	for _, i := range listed {
		a := &all[i]
		j := AllocationJSON{Addr: fmt.Sprintf("0x%x", a.Addr), Size: a.Size, Site: siteLabel(d.x.AllocationSite(a)),
			Role: d.x.AllocationRole(a).Category, StackID: int(a.Stack)}
		if a.AllocEvent >= 0 {
			v := int(a.AllocEvent)
			j.AllocEvent = &v
		}
		if a.FreeEvent >= 0 {
			v := int(a.FreeEvent)
			j.FreeEvent = &v
		}
		out.Allocations = append(out.Allocations, j)
	}
	return out, nil
}

func (s *Server) allocations(w http.ResponseWriter, r *http.Request) {
	var vals [5]int
	for i, p := range []struct {
		name string
		def  int
	}{{"device", 0}, {"start", 0}, {"end", 0}, {"cols", 1000}, {"height", defaultHeight}} {
		v, err := intParam(r, p.name, p.def)
		if err != nil {
			fail(w, http.StatusBadRequest, "%v", err)
			return
		}
		vals[i] = v
	}
	a, err := s.AllocationsIn(r.Context(), vals[0], vals[1], vals[2], vals[3], vals[4])
	if err != nil {
		fail(w, http.StatusBadRequest, "%v", err)
		return
	}
	writeJSON(w, a)
}

// StackJSON is one snapshot stack: its site and role, the filtered stack and every frame.
type StackJSON struct {
	ID int `json:"id"`
	analysis.SiteIdentity
	Category string   `json:"category"`
	Evidence string   `json:"evidence"`
	Stack    []string `json:"stack"`
	Frames   []string `json:"frames"`
}

func (s *Server) stack(w http.ResponseWriter, r *http.Request) {
	id, err := intParam(r, "id", -2)
	if err != nil || id < 0 || id >= len(s.snap.Stacks) {
		fail(w, http.StatusBadRequest, "id=%q: give a stack id 0 to %d", r.URL.Query().Get("id"), len(s.snap.Stacks)-1)
		return
	}
	dev, err := intParam(r, "device", s.defaultDevice())
	if err != nil {
		fail(w, http.StatusBadRequest, "%v", err)
		return
	}
	d := s.device(r.Context(), dev)
	if d.err != nil {
		fail(w, http.StatusBadRequest, "%v", d.err)
		return
	}
	at, frames := d.x.StackFrames(snapshot.StackID(id))
	st := at.Stack
	if st == nil {
		st = []string{}
	}
	writeJSON(w, StackJSON{ID: id, SiteIdentity: at.SiteIdentity, Category: at.Category, Evidence: at.Evidence, Stack: st, Frames: frames})
}

// oomReport is the file's oom-report, worked out once, when first asked.
type oomReport struct {
	once sync.Once
	r    *analysis.OOMResult
	err  error
}

// OOMs is the /api/oom answer: one oom-report entry per oom event of the device.
type OOMs struct {
	OOMs []analysis.OOMEvent `json:"ooms"`
}

// OOMsOf is the oom-report entries of device dev.
func (s *Server) OOMsOf(ctx context.Context, dev int) (*OOMs, error) {
	s.oom.once.Do(func() {
		s.oom.r, s.oom.err = analysis.OOMReport(context.WithoutCancel(ctx), s.snap, analysis.OOMOptions{Attribution: s.opt.Attribution})
	})
	if s.oom.err != nil {
		return nil, s.oom.err
	}
	out := &OOMs{OOMs: []analysis.OOMEvent{}}
	for _, o := range s.oom.r.OOMs {
		if o.Device == dev {
			out.OOMs = append(out.OOMs, o)
		}
	}
	return out, nil
}

func (s *Server) ooms(w http.ResponseWriter, r *http.Request) {
	dev, err := intParam(r, "device", s.defaultDevice())
	if err != nil {
		fail(w, http.StatusBadRequest, "%v", err)
		return
	}
	o, err := s.OOMsOf(r.Context(), dev)
	if err != nil {
		fail(w, http.StatusInternalServerError, "%v", err)
		return
	}
	writeJSON(w, o)
}

// siteLabel is a site as the page names it: "model.py:41 forward".
func siteLabel(id analysis.SiteIdentity) string {
	if id.Function != "" && !strings.Contains(id.Site, id.Function) {
		return id.Site + " " + id.Function
	}
	return id.Site
}
