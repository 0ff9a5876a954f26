package analysis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// Timeline defaults.
const (
	// DefaultTimelineTop is how many sites get a band of their own.
	DefaultTimelineTop = 8
	// DefaultTimelineColumns is how many columns (pixel columns of a picture) a timeline has.
	DefaultTimelineColumns = 1200
	// maxTimelineMarkers bounds each marker list of a TimelineResult.
	maxTimelineMarkers = 1000
	// Band totals are kept every timelineCheckpoint events; min/max per timelineBlock events.
	timelineCheckpoint = 1024
	timelineBlock      = 512
)

// X axes of a timeline.
const (
	TimelineXEvent = "event" // trace event index (as memory_viz draws it)
	TimelineXTime  = "time"  // time_us
)

// TimelineOptions chooses what a timeline draws.
type TimelineOptions struct {
	Device int `json:"device"`
	// Start and End bound the window of trace events drawn, [Start, End); End 0 means the end
	// of the trace.
	Start int `json:"start"`
	End   int `json:"end"`
	// Top is how many sites (the largest at the window's allocated peak, each holding at least
	// 0.5% of it) get a band of their own; the others share one band. 0 means
	// DefaultTimelineTop.
	Top int `json:"top"`
	// Columns is the number of columns the window is cut into (0: DefaultTimelineColumns).
	Columns int `json:"columns"`
	// X is TimelineXEvent (default) or TimelineXTime.
	X           string             `json:"x"`
	Attribution AttributionOptions `json:"attribution"`
}

// TimelineBand is one band of a timeline: a site, or (Other) every site not drawn on its own.
type TimelineBand struct {
	// Band is the band's index in TimelineColumn.Bands; bands are stacked in this order, the
	// first at the bottom.
	Band int `json:"band"`
	SiteIdentity
	Category string `json:"category"`
	Evidence string `json:"evidence,omitempty"`
	// Other: the band sums every site not drawn on its own.
	Other bool `json:"other"`
	Sites int  `json:"sites"`
	// BytesAtPeak / BlocksAtPeak: allocated bytes and blocks of the band at the window's
	// allocated peak.
	BytesAtPeak  int64   `json:"bytes_at_peak"`
	BlocksAtPeak int     `json:"blocks_at_peak"`
	Percent      float64 `json:"percent"`
	// MaxBytes is the band's highest level in the window (it may peak elsewhere).
	MaxBytes int64 `json:"max_bytes"`
	// Roles splits BytesAtPeak by role when the site's blocks have more than one.
	Roles []RoleBytes `json:"roles"`
	// Stack is the filtered stack of the band's largest block at the peak (innermost first);
	// StackID its snapshot stack (-1: none).
	Stack   []string `json:"stack"`
	StackID int      `json:"stack_id"`
}

// RoleBytes is memory of one role.
type RoleBytes struct {
	Category string `json:"category"`
	Bytes    int64  `json:"bytes"`
	Blocks   int    `json:"blocks"`
}

// TimelineOOM is an oom event drawn on a timeline.
type TimelineOOM struct {
	Event          int   `json:"event"`
	TimeUS         int64 `json:"time_us"`
	RequestedBytes int64 `json:"requested_bytes"`
	DeviceFree     int64 `json:"device_free_bytes"`
	AllocatedBytes int64 `json:"allocated_bytes"`
	ReservedBytes  int64 `json:"reserved_bytes"`
}

// TimelineBurst is a run of consecutive segment_free / segment_unmap events.
type TimelineBurst struct {
	Kind       string `json:"kind"`
	FirstEvent int    `json:"first_event"`
	LastEvent  int    `json:"last_event"`
	Bytes      int64  `json:"bytes"`
}

// TimelineSteps are the step boundaries drawn.
type TimelineSteps struct {
	Source string `json:"source"`
	Count  int    `json:"count"`
	// FirstStep is the number of the first step inside the window (0-based: the steps that
	// start before the window count).
	FirstStep int `json:"first_step"`
	// StartEvents are the first events of every step inside the window (a bounded answer keeps
	// some of them evenly spaced: Summary then says how many).
	StartEvents []int `json:"start_events"`
	// Summary stands for the step starts left out of a bounded answer (nil: every one is listed).
	Summary *TimelineStepsSummary `json:"summary,omitempty"`
}

// TimelineResult is what a timeline picture draws, as numbers: the window, the allocated peak
// and the sites there (bands), reserved memory, and the markers (OOMs, steps, segment-release
// bursts). Series holds the columns (not serialised: the picture is their rendering).
type TimelineResult struct {
	Path     string `json:"path"`
	Device   int    `json:"device"`
	Events   int    `json:"events"`
	Start    int    `json:"start"`
	End      int    `json:"end"`
	X        string `json:"x"`
	Columns  int    `json:"columns"`
	StartUS  int64  `json:"start_time_us"`
	EndUS    int64  `json:"end_time_us"`
	Reserved bool   `json:"reserved_from_trace"`
	// The allocated peak in the window (state after event PeakEvent).
	PeakAllocatedBytes int64 `json:"peak_allocated_bytes"`
	PeakEvent          int   `json:"peak_event"`
	PeakTimeUS         int64 `json:"peak_time_us"`
	PeakReservedBytes  int64 `json:"peak_reserved_bytes"`
	PeakReservedEvent  int   `json:"peak_reserved_event"`
	StartAllocated     int64 `json:"start_allocated_bytes"`
	EndAllocated       int64 `json:"end_allocated_bytes"`
	EndReserved        int64 `json:"end_reserved_bytes"`
	// Bands, in stacking order; the other band (if any) last.
	Bands []TimelineBand `json:"bands"`
	OOMs  []TimelineOOM  `json:"ooms"`
	Steps TimelineSteps  `json:"steps"`
	// Phases are the runs of setup, forward, backward, optimizer and OOM-unwinding events in the
	// window: every one, or as drawn when there are more than columns (PhasesAsDrawn).
	Phases []TimelinePhase `json:"phases"`
	// PhasesAsDrawn: the window has more phase runs than columns, so Phases lists them as
	// drawn (each column the phase with the most events in it).
	PhasesAsDrawn bool            `json:"phases_as_drawn"`
	SegmentBursts []TimelineBurst `json:"segment_bursts"`
	Notes         []string        `json:"notes"`
	// Envelope is what each column drew (Timeline fills it): the lowest and highest allocated
	// bytes after its events.
	Envelope []TimelineEnvelope `json:"envelope,omitempty"`
	// Series is the columns drawn.
	Series *TimelineSeries `json:"-"`
}

// TimelineEnvelope is one column of a timeline: events StartEvent..EndEvent (inclusive; a
// column of a time axis with no event of its own has StartEvent > EndEvent and shows the state
// after EndEvent) and the lowest and highest allocated bytes after them.
type TimelineEnvelope struct {
	StartEvent        int   `json:"start_event"`
	EndEvent          int   `json:"end_event"`
	MinAllocatedBytes int64 `json:"min_allocated_bytes"`
	MaxAllocatedBytes int64 `json:"max_allocated_bytes"`
}

// EnvelopeOf is the envelope of a series' columns.
func EnvelopeOf(s *TimelineSeries) []TimelineEnvelope {
	out := make([]TimelineEnvelope, len(s.Columns))
	for i, c := range s.Columns {
		out[i] = TimelineEnvelope{StartEvent: c.First, EndEvent: c.Last, MinAllocatedBytes: c.MinAllocated, MaxAllocatedBytes: c.MaxAllocated}
	}
	return out
}

// TimelineSeries is a window cut into columns.
type TimelineSeries struct {
	Start, End int
	X          string
	// T0, T1: the time span of a time axis.
	T0, T1  int64
	Columns []TimelineColumn
	// EventTime is the time_us of a trace event (for markers on a time axis).
	EventTime func(event int) int64
}

// TimelineColumn is one column of a timeline: the events First..Last (Last < First for a column
// with no event of its own on a time axis: it shows the state after event Last).
type TimelineColumn struct {
	First, Last int
	// MinAllocated / MaxAllocated: the lowest and highest allocated bytes after each event of
	// the column; MaxEvent is where the maximum is (-1: before the trace).
	MinAllocated, MaxAllocated int64
	MaxEvent                   int
	MinReserved, MaxReserved   int64
	// Bands: allocated bytes per band after MaxEvent (they add up to MaxAllocated).
	Bands []int64
}

// siteDelta is a change of one site's allocated bytes.
type siteDelta struct {
	site  int32
	bytes int64
}

// TimelineIndex is one device's trace replayed once and kept in a form that answers any window
// at any resolution quickly: allocated and reserved bytes after every event (with per-block
// minima and maxima), which site each event changed, and band totals every
// timelineCheckpoint events. Build it with NewTimelineIndex; it is read-only afterwards and
// safe for concurrent use.
type TimelineIndex struct {
	snap  *snapshot.Snapshot
	roles *Roles
	dev   int
	evs   []snapshot.Event
	// alloc[i] / res[i]: allocated and reserved bytes after event i.
	alloc, res           []int64
	startAlloc, startRes int64
	// site[i]: the site whose allocated bytes event i changed (-1: none; -2: two, see extra).
	site  []int32
	extra map[int]([2]siteDelta)
	// sites by id; startSite: allocated bytes per site before the first event.
	sites     []SiteIdentity
	startSite []int64
	// min/max of alloc and res per timelineBlock events.
	bMaxA, bMinA, bMaxR, bMinR []int64
	bArgA, bArgR               []int32
	hasSegEvents, timeOK       bool
	requested                  bool
	preBlocks                  int
	preBytes                   int64
	consistent                 bool
	// seed and end (the dense engine after the walk) give the allocated blocks after an event
	// late in the trace by going back from the end (engineSeed.allocatedBefore).
	seed *engineSeed
	end  *engine
	// allocs: every allocation with its alloc and free events
	allocs allocIndex
}

// NewTimelineIndex replays device opt.Device of snap once (the replay engine) and indexes it.
// A device without a trace is an error that says so.
func NewTimelineIndex(ctx context.Context, snap *snapshot.Snapshot, opt TimelineOptions) (*TimelineIndex, error) {
	if snap == nil {
		return nil, fmt.Errorf("timeline: no snapshot")
	}
	roles, err := NewRoles(snap, opt.Attribution)
	if err != nil {
		return nil, err
	}
	dev := opt.Device
	if !roles.device(dev).hasTrace {
		return nil, &NoTraceError{Path: snap.Path, Device: dev}
	}
	// The walk runs on a dense engine (blocks in slots by the trace index's block id: no map
	// lookup per event), kept afterwards: the live blocks at a band's peak are found from it.
	seed := newEngineSeed(snap, dev)
	e := seed.engine(true)
	n := len(e.evs)
	x := &TimelineIndex{snap: snap, roles: roles, dev: dev, evs: e.evs,
		alloc: make([]int64, n), res: make([]int64, n), site: make([]int32, n), extra: map[int][2]siteDelta{},
		startAlloc: e.allocated, startRes: e.reserved, requested: e.requested, preBlocks: e.preBlocks, preBytes: e.preBytes}
	siteIDs := map[string]int32{}
	stackSite := make([]int32, len(snap.Stacks)+1)
	for i := range stackSite {
		stackSite[i] = -1
	}
	idOf := func(id SiteIdentity) int32 {
		k := id.key()
		s, ok := siteIDs[k]
		if !ok {
			s = int32(len(x.sites))
			siteIDs[k] = s
			x.sites = append(x.sites, id)
		}
		return s
	}
	preTrace := int32(-1)
	siteOf := func(b *liveBlk) int32 {
		if b.allocIdx < 0 && b.stack == snapshot.NoStack {
			if preTrace < 0 {
				preTrace = idOf(SiteIdentity{Site: SitePreTrace, Kind: SiteKindNone})
			}
			return preTrace
		}
		i := int(b.stack) + 1
		if i >= 0 && i < len(stackSite) {
			if stackSite[i] < 0 {
				stackSite[i] = idOf(roles.attr(b.stack).SiteIdentity)
			}
			return stackSite[i]
		}
		return idOf(roles.attr(b.stack).SiteIdentity)
	}
	e.eachLive(func(addr uint64, b *liveBlk) {
		if !b.pending {
			s := siteOf(b)
			for int(s) >= len(x.startSite) {
				x.startSite = append(x.startSite, 0)
			}
			x.startSite[s] += b.size
			x.allocs.addPre(addr, b.size, b.stack, s)
		}
	})
	x.allocs.sortPre()
	nAllocs := 0
	for i := range x.evs {
		if x.evs[i].Action == snapshot.ActionAlloc {
			nAllocs++
		}
	}
	x.allocs.list = slices.Grow(x.allocs.list, nAllocs)
	cur := -1
	e.onFree = func(i int, b *liveBlk) {
		if i == cur {
			x.site[i] = siteOf(b)
		}
		x.allocs.freed(i, b.allocIdx, x.evs[i].Addr)
	}
	// Of the roles the walk reads only the stacks' attributions, through the table that is
	// safe on any goroutine (Roles.attr: the Attributor's own cache is not): the roles'
	// lifetimes and what the sites at the peak read later are worked out on the other core
	// meanwhile, as the replay does. A panic on either goroutine reaches the caller.
	// Whether times work as an axis reads the events alone: that core's work too, as it
	// finishes first.
	alongside(func() {
		roles.warmLive(dev)
		x.timeOK = timesIncrease(x.evs)
	}, func() { err = x.walk(ctx, e, &cur, siteOf) })
	if err != nil {
		return nil, err
	}
	e.onFree = nil
	x.seed, x.end = seed, e
	for len(x.startSite) < len(x.sites) {
		x.startSite = append(x.startSite, 0)
	}
	alongside(func() { x.consistent = e.consistent() }, x.buildBlocks)
	return x, nil
}

// timesIncrease reports whether every event has a time_us and times never decrease.
func timesIncrease(evs []snapshot.Event) bool {
	for i := range evs {
		if evs[i].TimeUS <= 0 || (i > 0 && evs[i].TimeUS < evs[i-1].TimeUS) {
			return false
		}
	}
	return len(evs) > 0
}

// walk applies every event to e and records the levels and sites of each.
func (x *TimelineIndex) walk(ctx context.Context, e *engine, cur *int, siteOf func(*liveBlk) int32) error {
	for i := range len(e.evs) {
		if i&0xffff == 0 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("timeline: %w", err)
			}
		}
		if i%touchAhead == 0 { // the coming events' block records, read together (as replay's walk)
			e.touch(i, min(i+touchAhead, len(e.evs)))
		}
		ev := &e.evs[i]
		x.site[i] = -1
		*cur = i
		var old *liveBlk
		switch ev.Action {
		case snapshot.ActionAlloc:
			if b := e.liveAt(i); b != nil && !b.pending {
				old = b
				x.extra[i] = [2]siteDelta{{siteOf(b), -b.size}, {}}
				x.allocs.freed(i, b.allocIdx, ev.Addr)
			}
		case snapshot.ActionSegmentAlloc, snapshot.ActionSegmentFree, snapshot.ActionSegmentMap, snapshot.ActionSegmentUnmap:
			x.hasSegEvents = true
		}
		e.step()
		if ev.Action == snapshot.ActionAlloc {
			s := siteOf(e.liveAt(i))
			if old != nil {
				d := x.extra[i]
				d[1] = siteDelta{s, ev.Size}
				x.extra[i] = d
				x.site[i] = -2
			} else {
				x.site[i] = s
			}
			x.allocs.list = append(x.allocs.list, Allocation{Addr: ev.Addr, Size: ev.Size, AllocEvent: int32(i), FreeEvent: -1, Stack: ev.Stack, site: s})
		}
		x.alloc[i], x.res[i] = e.allocated, e.reserved
	}
	return nil
}

// Events is the number of trace events indexed.
func (x *TimelineIndex) Events() int { return len(x.evs) }

// HasTime reports whether every event has a time_us and times never decrease (a time axis works).
func (x *TimelineIndex) HasTime() bool { return x.timeOK }

// Device is the device indexed.
func (x *TimelineIndex) Device() int { return x.dev }

// buildBlocks works out the min/max of allocated and reserved per timelineBlock events (stats
// reads them for long ranges).
func (x *TimelineIndex) buildBlocks() {
	n := len(x.alloc)
	nb := (n + timelineBlock - 1) / timelineBlock
	x.bMaxA, x.bMinA, x.bMaxR, x.bMinR = make([]int64, nb), make([]int64, nb), make([]int64, nb), make([]int64, nb)
	x.bArgA, x.bArgR = make([]int32, nb), make([]int32, nb)
	// The blocks are independent: half of them on each core.
	inParallel(2, func(half int) {
		x.buildBlockRange(half*nb/2, (half+1)*nb/2)
	})
}

// buildBlockRange fills the min/max of blocks [from, to).
func (x *TimelineIndex) buildBlockRange(from, to int) {
	n := len(x.alloc)
	for b := from; b < to; b++ {
		lo, hi := b*timelineBlock, min((b+1)*timelineBlock, n)
		x.bMaxA[b], x.bMinA[b], x.bArgA[b] = x.alloc[lo], x.alloc[lo], int32(lo)
		x.bMaxR[b], x.bMinR[b], x.bArgR[b] = x.res[lo], x.res[lo], int32(lo)
		for i := lo + 1; i < hi; i++ {
			if v := x.alloc[i]; v > x.bMaxA[b] {
				x.bMaxA[b], x.bArgA[b] = v, int32(i)
			} else if v < x.bMinA[b] {
				x.bMinA[b] = v
			}
			if v := x.res[i]; v > x.bMaxR[b] {
				x.bMaxR[b], x.bArgR[b] = v, int32(i)
			} else if v < x.bMinR[b] {
				x.bMinR[b] = v
			}
		}
	}
}

// rangeStats is the min/max of allocated and reserved after events lo..hi (inclusive, lo <= hi),
// with the first event holding each maximum.
type rangeStats struct {
	minA, maxA, minR, maxR int64
	argA, argR             int
}

func (x *TimelineIndex) stats(lo, hi int) rangeStats {
	s := rangeStats{minA: x.alloc[lo], maxA: x.alloc[lo], minR: x.res[lo], maxR: x.res[lo], argA: lo, argR: lo}
	scan := func(a, b int) {
		for i := a; i <= b; i++ {
			if v := x.alloc[i]; v > s.maxA {
				s.maxA, s.argA = v, i
			} else if v < s.minA {
				s.minA = v
			}
			if v := x.res[i]; v > s.maxR {
				s.maxR, s.argR = v, i
			} else if v < s.minR {
				s.minR = v
			}
		}
	}
	bl, bh := (lo+timelineBlock-1)/timelineBlock, (hi+1)/timelineBlock // whole blocks [bl, bh)
	if bl >= bh {
		scan(lo+1, hi)
		return s
	}
	scan(lo+1, bl*timelineBlock-1)
	for b := bl; b < bh; b++ {
		if x.bMaxA[b] > s.maxA {
			s.maxA, s.argA = x.bMaxA[b], int(x.bArgA[b])
		}
		s.minA = min(s.minA, x.bMinA[b])
		if x.bMaxR[b] > s.maxR {
			s.maxR, s.argR = x.bMaxR[b], int(x.bArgR[b])
		}
		s.minR = min(s.minR, x.bMinR[b])
	}
	scan(bh*timelineBlock, hi)
	return s
}

// TimelineBands is a choice of bands over a TimelineIndex: which site goes to which band, the
// facts about each band at the peak they were chosen at, and band totals every
// timelineCheckpoint events.
type TimelineBands struct {
	x      *TimelineIndex
	Bands  []TimelineBand
	bandOf []int16 // site id -> band
	start  []int64 // band totals before the first event
	cps    [][]int64
	// peak the bands were chosen at
	peakEvent int
}

// siteAgg is a site's blocks at a timeline's peak: bytes, blocks, roles, its largest block.
type siteAgg struct {
	id     SiteIdentity
	bytes  int64
	blocks int
	roles  []RoleBytes
	cat    string
	ev     string
	top    int64
	stack  snapshot.StackID
	rows   []int // the site's rows, in order
}

// roleRank orders bands: memory that lives long at the bottom, what comes and goes on top.
var roleRank = map[string]int{CategoryParameter: 0, CategoryOptimizerState: 1, CategoryGradient: 2,
	CategoryWorkspace: 3, CategoryKVCache: 4, CategoryCommunication: 5, CategoryUserContainer: 6,
	CategoryAutocastCache: 7, CategoryActivation: 8, CategoryBackwardTemporary: 9, CategoryTemporary: 10, CategoryOther: 11}

// ChooseBands picks the top sites at the allocated peak of events [start, end) (the whole trace
// for 0, 0) as bands and prepares the band totals.
func (x *TimelineIndex) ChooseBands(ctx context.Context, start, end, top int) (*TimelineBands, error) {
	start, end, err := x.window(start, end)
	if err != nil {
		return nil, err
	}
	if top <= 0 {
		top = DefaultTimelineTop
	}
	peak := x.stats(start, end-1).argA
	// The sites live at the peak, with their roles (the replay's own grouping).
	pe, err := x.seed.allocatedBefore(ctx, x.end, peak)
	if err != nil {
		return nil, err
	}
	rows, _ := pe.liveSites(x.roles, x.dev, 0)
	byKey := map[string]*siteAgg{}
	var order []*siteAgg
	var total int64
	for i, r := range rows {
		k := r.SiteIdentity.key()
		g := byKey[k]
		if g == nil {
			g = &siteAgg{id: r.SiteIdentity, cat: r.Category, ev: r.Evidence, stack: snapshot.NoStack}
			byKey[k] = g
			order = append(order, g)
		}
		g.rows = append(g.rows, i)
		g.bytes += r.Bytes
		g.blocks += r.Blocks
		g.roles = append(g.roles, RoleBytes{Category: r.Category, Bytes: r.Bytes, Blocks: r.Blocks})
		total += r.Bytes
	}
	for _, g := range order {
		slices.SortStableFunc(g.roles, func(a, b RoleBytes) int { return largestFirst(a.Bytes, b.Bytes, a.Category, b.Category) })
		g.cat = g.roles[0].Category
		for _, i := range g.rows {
			if rows[i].Category == g.cat {
				g.ev = rows[i].Evidence
				break
			}
		}
	}
	slices.SortStableFunc(order, func(a, b *siteAgg) int {
		return siteOrder(a.bytes, b.bytes, a.id, b.id, a.cat, b.cat)
	})
	// The top sites by their own highest level in the window (a site that peaks elsewhere, as
	// gradients and a new optimizer state do after the activations' peak, still gets its band)
	// get a band each, unless they never hold 0.5% of the window's peak (a band too thin to
	// see, and a legend line wasted): those join the other band.
	siteMax := x.siteMaxes(start, end)
	windowPeak := x.stats(start, end-1).maxA
	cands := make([]int32, 0, len(siteMax))
	for s, m := range siteMax {
		if m > 0 && m*200 >= windowPeak {
			cands = append(cands, int32(s))
		}
	}
	slices.SortStableFunc(cands, func(a, b int32) int {
		return cmp.Or(cmp.Compare(siteMax[b], siteMax[a]), strings.Compare(x.sites[a].key(), x.sites[b].key()))
	})
	if len(cands) > top {
		cands = cands[:top]
	}
	var named []*siteAgg
	var absent []*siteAgg // named sites holding nothing at the peak
	for _, sid := range cands {
		g := byKey[x.sites[sid].key()]
		if g == nil {
			g = &siteAgg{id: x.sites[sid], stack: snapshot.NoStack, roles: []RoleBytes{}}
			absent = append(absent, g)
		}
		named = append(named, g)
	}
	if len(absent) > 0 {
		x.roleOfAbsent(start, end, absent, func(g *siteAgg, a *Allocation) {
			at := x.roles.Live(x.dev, a.Stack, a.Addr, a.Size, int(a.AllocEvent), int(min(a.freeOr(end), int32(end-1))))
			g.cat, g.ev, g.top, g.stack = at.Category, at.Evidence, a.Size, a.Stack
		})
	}
	inNamed := map[*siteAgg]bool{}
	for _, g := range named {
		inNamed[g] = true
	}
	// The representative stack of each named site: its largest block at the peak.
	keyOf := map[string]int{}
	for i, g := range named {
		keyOf[g.id.key()] = i
	}
	// The named site of each stack (-1: none), looked up once per stack, not per block.
	namedOf := map[snapshot.StackID]int{}
	preTrace, ok := keyOf[SiteIdentity{Site: SitePreTrace, Kind: SiteKindNone}.key()]
	if !ok {
		preTrace = -1
	}
	pe.eachLive(func(_ uint64, b *liveBlk) {
		if b.pending {
			return
		}
		i := preTrace
		if b.allocIdx >= 0 || b.stack != snapshot.NoStack {
			var seen bool
			if i, seen = namedOf[b.stack]; !seen {
				i = -1
				if k, ok := keyOf[x.roles.attr(b.stack).SiteIdentity.key()]; ok {
					i = k
				}
				namedOf[b.stack] = i
			}
		}
		if i >= 0 {
			g := named[i]
			if b.size > g.top || (b.size == g.top && b.stack < g.stack) {
				g.top, g.stack = b.size, b.stack
			}
		}
	})
	slices.SortStableFunc(named, func(a, b *siteAgg) int {
		if c := cmp.Compare(roleRank[a.cat], roleRank[b.cat]); c != 0 {
			return c
		}
		return siteOrder(a.bytes, b.bytes, a.id, b.id, a.cat, b.cat)
	})
	tb := &TimelineBands{x: x, bandOf: make([]int16, len(x.sites)), peakEvent: peak}
	for i, g := range named {
		band := TimelineBand{Band: i, SiteIdentity: g.id, Category: g.cat, Evidence: g.ev, Sites: 1,
			BytesAtPeak: g.bytes, BlocksAtPeak: g.blocks, Percent: pct(g.bytes, total), Roles: g.roles,
			Stack: []string{}, StackID: int(g.stack)}
		if g.stack != snapshot.NoStack {
			band.Stack = emptyIfNil(x.roles.attr(g.stack).Stack)
		}
		tb.Bands = append(tb.Bands, band)
	}
	other := len(tb.Bands)
	for i := range tb.bandOf {
		tb.bandOf[i] = int16(other)
	}
	for i, b := range tb.Bands {
		if s, ok := x.siteID(b.SiteIdentity); ok {
			tb.bandOf[s] = int16(i)
		}
	}
	if rest := len(x.sites) - len(tb.Bands); rest > 0 {
		ob := TimelineBand{Band: other, SiteIdentity: SiteIdentity{Site: "other sites", Kind: SiteKindNone},
			Category: CategoryOther, Other: true, Sites: rest, Roles: []RoleBytes{}, Stack: []string{}, StackID: int(snapshot.NoStack)}
		cats := map[string]*RoleBytes{}
		for _, g := range order {
			if inNamed[g] {
				continue
			}
			ob.BytesAtPeak += g.bytes
			ob.BlocksAtPeak += g.blocks
			for _, r := range g.roles {
				c := cats[r.Category]
				if c == nil {
					c = &RoleBytes{Category: r.Category}
					cats[r.Category] = c
				}
				c.Bytes += r.Bytes
				c.Blocks += r.Blocks
			}
		}
		for _, c := range cats {
			ob.Roles = append(ob.Roles, *c)
		}
		slices.SortFunc(ob.Roles, func(a, b RoleBytes) int { return largestFirst(a.Bytes, b.Bytes, a.Category, b.Category) })
		ob.Percent = pct(ob.BytesAtPeak, total)
		tb.Bands = append(tb.Bands, ob)
	}
	nb := len(tb.Bands)
	tb.start = make([]int64, nb)
	for s, v := range x.startSite {
		if v != 0 {
			tb.start[tb.bandOf[s]] += v
		}
	}
	maxes, err := tb.sweep(ctx, start, end)
	if err != nil {
		return nil, err
	}
	for i := range tb.Bands {
		tb.Bands[i].MaxBytes = maxes[i]
	}
	return tb, nil
}

// siteID finds the id of a site (false: no event or block of the trace has it).
func (x *TimelineIndex) siteID(id SiteIdentity) (int32, bool) {
	k := id.key()
	for i, s := range x.sites {
		if s.key() == k {
			return int32(i), true
		}
	}
	return 0, false
}

// sweepSplit is the fewest events a sweep splits in two.
const sweepSplit = 1 << 16

// sweep fills the checkpoints (band totals before every timelineCheckpoint-th event) and
// returns each band's largest total over events [start, end). A total is the sum of the
// events' changes before it, so a long trace is summed in two parts at once, split at a
// checkpoint: the second from zero, then shifted by the first's totals where it ends.
func (tb *TimelineBands) sweep(ctx context.Context, start, end int) ([]int64, error) {
	n := len(tb.x.evs)
	tb.cps = make([][]int64, (n+timelineCheckpoint-1)/timelineCheckpoint)
	mid := 0
	if n >= sweepSplit {
		mid = len(tb.cps) / 2 * timelineCheckpoint
	}
	var first, second sweepPart
	alongside(func() { second = tb.sweepPart(ctx, mid, n, make([]int64, len(tb.start)), start, end) },
		func() { first = tb.sweepPart(ctx, 0, mid, slices.Clone(tb.start), start, end) })
	for _, p := range []sweepPart{first, second} {
		if p.err != nil {
			return nil, fmt.Errorf("timeline: %w", p.err)
		}
	}
	at := first.cur // the totals before event mid
	for k := mid / timelineCheckpoint; k < len(tb.cps); k++ {
		for b, v := range at {
			tb.cps[k][b] += v
		}
	}
	maxes := first.max
	if second.max != nil {
		for b, v := range at {
			second.max[b] += v
		}
		if maxes == nil {
			maxes = second.max
		} else {
			for b, v := range second.max {
				maxes[b] = max(maxes[b], v)
			}
		}
	}
	return maxes, nil
}

// sweepPart is what a sweep found over its part of the events: the totals after it, and the
// largest over the window's events in it (nil: none in it).
type sweepPart struct {
	cur, max []int64
	err      error
}

// sweepPart applies events [lo, hi) to cur, the band totals before lo, storing the
// checkpoints on the way.
func (tb *TimelineBands) sweepPart(ctx context.Context, lo, hi int, cur []int64, start, end int) sweepPart {
	p := sweepPart{cur: cur}
	from := max(start, lo) // the part's first event inside the window
	for i := lo; i < hi; i++ {
		if i%timelineCheckpoint == 0 {
			tb.cps[i/timelineCheckpoint] = slices.Clone(cur)
			if err := ctx.Err(); err != nil {
				p.err = err
				return p
			}
		}
		b := tb.apply(cur, i)
		switch {
		case i == from && i < end:
			p.max = slices.Clone(cur)
		case b >= 0 && i > from && i < end && cur[b] > p.max[b]:
			p.max[b] = cur[b]
		}
	}
	return p
}

// apply adds event i's change to band totals cur; it returns the band changed (-1: none; the
// second band when an event changed two).
func (tb *TimelineBands) apply(cur []int64, i int) int {
	x := tb.x
	switch s := x.site[i]; {
	case s >= 0:
		prev := x.startAlloc
		if i > 0 {
			prev = x.alloc[i-1]
		}
		b := int(tb.bandOf[s])
		cur[b] += x.alloc[i] - prev
		return b
	case s == -2:
		d := x.extra[i]
		cur[tb.bandOf[d[0].site]] += d[0].bytes
		b := int(tb.bandOf[d[1].site])
		cur[b] += d[1].bytes
		return b
	}
	return -1
}

// At returns the band totals after event i (-1: before the first event).
func (tb *TimelineBands) At(i int) []int64 {
	if i < 0 || len(tb.cps) == 0 {
		return slices.Clone(tb.start)
	}
	k := i / timelineCheckpoint
	cur := slices.Clone(tb.cps[k])
	for j := k * timelineCheckpoint; j <= i; j++ {
		tb.apply(cur, j)
	}
	return cur
}

// window checks and completes a window of events.
func (x *TimelineIndex) window(start, end int) (int, int, error) {
	n := len(x.evs)
	if end <= 0 {
		end = n
	}
	if start < 0 || start >= n || end > n || start >= end {
		return 0, 0, fmt.Errorf("%s: window %d:%d is outside device %d's trace (events 0:%d)", x.snap.Path, start, end, x.dev, n)
	}
	return start, end, nil
}

// Series cuts events [start, end) into columns (by event index, or by time for TimelineXTime).
// Each column keeps the minimum and maximum of allocated and reserved bytes after its events,
// and the band totals where allocated bytes are highest.
func (tb *TimelineBands) Series(start, end, columns int, xAxis string) (*TimelineSeries, error) {
	x := tb.x
	start, end, err := x.window(start, end)
	if err != nil {
		return nil, err
	}
	if columns <= 0 {
		columns = DefaultTimelineColumns
	}
	if xAxis == "" {
		xAxis = TimelineXEvent
	}
	if xAxis == TimelineXTime && !x.timeOK {
		return nil, fmt.Errorf("%s: the trace has no time_us on every event (or times go backwards): draw it by event index", x.snap.Path)
	}
	s := &TimelineSeries{Start: start, End: end, X: xAxis, EventTime: func(i int) int64 {
		if i < 0 || i >= len(x.evs) {
			return 0
		}
		return x.evs[i].TimeUS
	}}
	n := end - start
	var bounds func(c int) (int, int) // events of column c: [lo, hi)
	if xAxis == TimelineXTime {
		t0, t1 := x.evs[start].TimeUS, x.evs[end-1].TimeUS
		s.T0, s.T1 = t0, t1
		span := t1 - t0 + 1
		columns = int(min(int64(columns), span))
		at := func(c int) int { // first event at or after the column's start time
			t := t0 + span*int64(c)/int64(columns)
			return start + sort.Search(n, func(i int) bool { return x.evs[start+i].TimeUS >= t })
		}
		bounds = func(c int) (int, int) { return at(c), at(c + 1) }
	} else {
		columns = min(columns, n)
		bounds = func(c int) (int, int) {
			return start + int(int64(n)*int64(c)/int64(columns)), start + int(int64(n)*int64(c+1)/int64(columns))
		}
	}
	s.Columns = make([]TimelineColumn, columns)
	for c := range columns {
		lo, hi := bounds(c)
		col := TimelineColumn{First: lo, Last: hi - 1}
		if hi > lo {
			st := x.stats(lo, hi-1)
			col.MinAllocated, col.MaxAllocated, col.MaxEvent = st.minA, st.maxA, st.argA
			col.MinReserved, col.MaxReserved = st.minR, st.maxR
		} else { // no event in this column: the state after the last event before it
			col.MaxEvent = lo - 1
			a, r := x.after(lo - 1)
			col.MinAllocated, col.MaxAllocated, col.MinReserved, col.MaxReserved = a, a, r, r
		}
		col.Bands = tb.At(col.MaxEvent)
		s.Columns[c] = col
	}
	return s, nil
}

// after is allocated and reserved bytes after event i (-1: before the first).
func (x *TimelineIndex) after(i int) (int64, int64) {
	if i < 0 {
		return x.startAlloc, x.startRes
	}
	return x.alloc[i], x.res[i]
}

// Result is the facts of events [start, end) drawn with these bands (Series not filled).
func (tb *TimelineBands) Result(start, end int) (*TimelineResult, error) {
	x := tb.x
	start, end, err := x.window(start, end)
	if err != nil {
		return nil, err
	}
	st := x.stats(start, end-1)
	r := &TimelineResult{Path: x.snap.Path, Device: x.dev, Events: len(x.evs), Start: start, End: end, X: TimelineXEvent,
		StartUS: x.evs[start].TimeUS, EndUS: x.evs[end-1].TimeUS, Reserved: x.hasSegEvents,
		PeakAllocatedBytes: st.maxA, PeakEvent: st.argA, PeakTimeUS: x.evs[st.argA].TimeUS,
		PeakReservedBytes: st.maxR, PeakReservedEvent: st.argR,
		EndAllocated: x.alloc[end-1], EndReserved: x.res[end-1],
		Bands: slices.Clone(tb.Bands), OOMs: []TimelineOOM{}, SegmentBursts: []TimelineBurst{}, Notes: []string{}}
	r.StartAllocated, _ = x.after(start - 1)
	if tb.peakEvent != st.argA {
		// Bands chosen at another peak (a viewer zoomed in): their bytes are those at this peak.
		at := tb.At(st.argA)
		for i := range r.Bands {
			r.Bands[i].BytesAtPeak = at[i]
			r.Bands[i].Percent = pct(at[i], st.maxA)
		}
	}
	for i := start; i < end; i++ {
		if ev := x.evs[i]; ev.Action == snapshot.ActionOOM && len(r.OOMs) < maxTimelineMarkers {
			r.OOMs = append(r.OOMs, TimelineOOM{Event: i, TimeUS: ev.TimeUS, RequestedBytes: ev.Size, DeviceFree: ev.DeviceFree(),
				AllocatedBytes: x.alloc[i], ReservedBytes: x.res[i]})
		}
	}
	steps := x.roles.Steps(x.dev)
	r.Steps = TimelineSteps{Source: steps.Source, StartEvents: []int{}}
	for _, s := range steps.Starts {
		if s < start {
			r.Steps.FirstStep++
		}
		if s >= start && s < end {
			r.Steps.Count++
			r.Steps.StartEvents = append(r.Steps.StartEvents, s)
		}
	}
	if r.Steps.Source == "" {
		r.Steps.Source = IterationsNone
	}
	r.Phases = x.phases(start, end)
	bursts, more := x.bursts(start, end)
	r.SegmentBursts = bursts
	r.Notes = x.notes(r, more)
	return r, nil
}

// bursts finds the runs of segment_free / segment_unmap events inside [start, end), named like
// segmentBursts does (bursts.go); more counts the runs left out past maxTimelineMarkers.
func (x *TimelineIndex) bursts(start, end int) ([]TimelineBurst, int) {
	out := []TimelineBurst{}
	more := 0
	ec := map[snapshot.StackID]bool{}
	emptyCache := func(st snapshot.StackID) bool {
		if st <= snapshot.EmptyStack {
			return false
		}
		v, ok := ec[st]
		if !ok {
			v = isEmptyCacheStack(x.snap.StackFrames(st))
			ec[st] = v
		}
		return v
	}
	for i := start; i < end; {
		if !isReleaseEvent(x.evs[i].Action) {
			i++
			continue
		}
		j := i
		b := TimelineBurst{Kind: BurstRelease, FirstEvent: i}
		explicit := false
		for j < len(x.evs) && isReleaseEvent(x.evs[j].Action) {
			b.Bytes += x.evs[j].Size
			explicit = explicit || emptyCache(x.evs[j].Stack)
			j++
		}
		b.LastEvent = j - 1
		switch {
		case explicit:
			b.Kind = BurstEmptyCache
		case j < len(x.evs) && (x.evs[j].Action == snapshot.ActionSegmentAlloc || x.evs[j].Action == snapshot.ActionSegmentMap || x.evs[j].Action == snapshot.ActionOOM):
			b.Kind = BurstMallocRetry
		}
		if len(out) < maxTimelineMarkers {
			out = append(out, b)
		} else {
			more++
		}
		i = j
	}
	return out, more
}

func (x *TimelineIndex) notes(r *TimelineResult, moreBursts int) []string {
	notes := []string{}
	caps := x.snap.Caps
	switch {
	case caps.TraceStart == "ring_buffer":
		notes = append(notes, fmt.Sprintf("%s: %d blocks (%s) were alive before its first event and are drawn from the start", ringBufferWrapped(caps), x.preBlocks, FormatBytes(x.preBytes)))
	case x.preBlocks > 0:
		notes = append(notes, fmt.Sprintf("the trace starts late: %d blocks (%s) were alive before its first event and are drawn from the start", x.preBlocks, FormatBytes(x.preBytes)))
	}
	if !x.hasSegEvents {
		notes = append(notes, "the trace has no segment events: the reserved line is the final reserved value throughout")
	}
	if x.requested {
		notes = append(notes, "the trace records requested sizes: allocated memory over time counts requested bytes")
	}
	if !x.consistent {
		notes = append(notes, "the replay does not land exactly on the file's final state (see replay): the picture is the trace as recorded")
	}
	if d := x.dev; d < len(x.snap.DroppedEvents) && x.snap.DroppedEvents[d] > 0 {
		notes = append(notes, fmt.Sprintf("%d oldest events were dropped by the loader's event bound", x.snap.DroppedEvents[d]))
	}
	if moreBursts > 0 {
		notes = append(notes, fmt.Sprintf("%d more segment-release bursts are not listed", moreBursts))
	}
	if r.Steps.Source == IterationsFromPeriodicity {
		notes = append(notes, "guess: steps come from the trace's repeating allocation sequence (no frames say where a step starts)")
	}
	return notes
}

// Timeline draws device opt.Device's trace as numbers: the window [opt.Start, opt.End), the
// sites at its allocated peak as bands (the top opt.Top, the rest as one band), reserved
// memory, OOMs, steps and segment-release bursts, cut into opt.Columns columns that keep the
// exact minimum and maximum of their events.
func Timeline(ctx context.Context, snap *snapshot.Snapshot, opt TimelineOptions) (*TimelineResult, error) {
	x, err := NewTimelineIndex(ctx, snap, opt)
	if err != nil {
		return nil, err
	}
	tb, err := x.ChooseBands(ctx, opt.Start, opt.End, opt.Top)
	if err != nil {
		return nil, err
	}
	r, err := tb.Result(opt.Start, opt.End)
	if err != nil {
		return nil, err
	}
	s, err := tb.Series(opt.Start, opt.End, opt.Columns, opt.X)
	if err != nil {
		return nil, err
	}
	r.Series, r.X, r.Columns = s, s.X, len(s.Columns)
	r.Envelope = EnvelopeOf(s)
	if n := len(r.Phases); n > len(s.Columns) && s.X == TimelineXEvent {
		// More phase runs than columns: the runs as drawn, one phase per column.
		r.Phases, r.PhasesAsDrawn = phasesAsDrawn(r.Phases, s), true
		r.Notes = append(r.Notes, fmt.Sprintf("%d phase runs in the window, more than its %d columns: phases lists them as drawn (%s: each column takes the phase with the most events)", n, len(s.Columns), count(len(r.Phases), "run")))
	}
	return r, nil
}

// Text renders the facts of a timeline for a person or an agent.
func (r *TimelineResult) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "device %d, events %d–%d of %d: allocated peak %s after event %d", r.Device, r.Start, r.End-1, r.Events,
		FormatBytes(r.PeakAllocatedBytes), r.PeakEvent)
	if r.PeakTimeUS > 0 && r.StartUS > 0 {
		fmt.Fprintf(&b, " (%.3f s into the window)", float64(r.PeakTimeUS-r.StartUS)/1e6)
	}
	fmt.Fprintf(&b, "; reserved peak %s after event %d\n", FormatBytes(r.PeakReservedBytes), r.PeakReservedEvent)
	b.WriteString("  bands, bottom to top (the sites highest anywhere in the window; bytes at the peak):\n")
	for _, band := range r.Bands {
		name := SiteText(band.Site, band.Function)
		if band.Other {
			name = fmt.Sprintf("%d other sites", band.Sites)
		}
		fmt.Fprintf(&b, "    %9s %5.1f%%  %s [%s]", FormatBytes(band.BytesAtPeak), band.Percent, name, band.Category)
		if band.MaxBytes > band.BytesAtPeak {
			fmt.Fprintf(&b, " (up to %s elsewhere)", FormatBytes(band.MaxBytes))
		}
		b.WriteString("\n")
	}
	for _, o := range r.OOMs {
		fmt.Fprintf(&b, "  OOM at event %d: %s requested, %s free on the device, %s allocated / %s reserved\n",
			o.Event, FormatBytes(o.RequestedBytes), FormatBytes(o.DeviceFree), FormatBytes(o.AllocatedBytes), FormatBytes(o.ReservedBytes))
	}
	if r.Steps.Count > 0 {
		fmt.Fprintf(&b, "  %s (from %s)\n", count(r.Steps.Count, "step"), r.Steps.Source)
	}
	kinds := map[string]int{}
	for _, s := range r.SegmentBursts {
		kinds[s.Kind]++
	}
	for _, k := range []string{BurstEmptyCache, BurstMallocRetry, BurstRelease} {
		if kinds[k] > 0 {
			fmt.Fprintf(&b, "  %s of segment frees (%s)\n", count(kinds[k], "burst"), k)
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	return b.String()
}

// NoTraceError: a device has no trace, so nothing can be drawn over time.
type NoTraceError struct {
	Path   string
	Device int
}

func (e *NoTraceError) Error() string {
	return fmt.Sprintf("%s: device %d has no trace (history was not recorded, or the file holds the state only), so there is no timeline to draw", e.Path, e.Device)
}

// Picture kinds.
const (
	PictureTimeline = "timeline"
	PictureSegments = "segments"
)

// PictureOptions chooses a picture: its kind, device, window or moment, bands and columns.
type PictureOptions struct {
	Kind string `json:"kind"`
	// Device: nil picks the device with an OOM, else the highest allocated peak (ChooseDevice).
	Device *int `json:"device"`
	// Start, End: the timeline's window (End 0: the end of the trace).
	Start int `json:"start"`
	End   int `json:"end"`
	// At: the segment map's moment (-1: the final state).
	At          int                `json:"at"`
	Top         int                `json:"top"`
	Columns     int                `json:"columns"`
	X           string             `json:"x"`
	Attribution AttributionOptions `json:"attribution"`
}

// PictureResult is the numbers a picture draws: a timeline or a segment map.
type PictureResult struct {
	Kind string `json:"kind"`
	// Device is the device drawn; DeviceReason why (DeviceReason* constants), DeviceNote the
	// same in words with what the other devices hold; Devices every device of the file.
	Device       int                 `json:"device"`
	DeviceReason string              `json:"device_reason"`
	DeviceNote   string              `json:"device_note"`
	Devices      []PictureDeviceInfo `json:"devices"`
	Timeline     *TimelineResult     `json:"timeline,omitempty"`
	Segments     *SegmentMapResult   `json:"segments,omitempty"`
}

// Text renders the numbers of the picture.
func (p *PictureResult) Text() string {
	head := ""
	if len(p.Devices) > 1 {
		head = p.DeviceNote + "\n"
	}
	if p.Timeline != nil {
		return head + p.Timeline.Text()
	}
	if p.Segments != nil {
		return head + p.Segments.Text()
	}
	return head
}

// PictureDevice is the device a picture draws when none is given (see ChooseDevice); a device
// the file lacks is an error.
func PictureDevice(snap *snapshot.Snapshot, device *int) (int, error) {
	ch, err := ChooseDevice(snap, device)
	return ch.Device, err
}

// Picture computes the numbers of a picture of snap (see Timeline and SegmentMap).
func Picture(ctx context.Context, snap *snapshot.Snapshot, opt PictureOptions) (*PictureResult, error) {
	if snap == nil {
		return nil, errors.New("picture: no snapshot")
	}
	ch, err := ChooseDevice(snap, opt.Device)
	if err != nil {
		return nil, err
	}
	dev := ch.Device
	out := &PictureResult{Device: dev, DeviceReason: ch.Reason, DeviceNote: ch.Text, Devices: ch.Devices}
	switch opt.Kind {
	case "", PictureTimeline:
		r, err := Timeline(ctx, snap, TimelineOptions{Device: dev, Start: opt.Start, End: opt.End, Top: opt.Top, Columns: opt.Columns, X: opt.X, Attribution: opt.Attribution})
		if err != nil {
			return nil, err
		}
		out.Kind, out.Timeline = PictureTimeline, r
		return out, nil
	case PictureSegments:
		r, err := SegmentMap(ctx, snap, SegmentMapOptions{Device: dev, At: opt.At, Attribution: opt.Attribution})
		if err != nil {
			return nil, err
		}
		out.Kind, out.Segments = PictureSegments, r
		return out, nil
	}
	return nil, fmt.Errorf("picture kind %q: use timeline or segments", opt.Kind)
}

// TimelineStepsSummary stands for a long list of step starts in a bounded answer.
type TimelineStepsSummary struct {
	// Listed is how many start events StartEvents keeps (evenly spaced over the window, the
	// first and the last included); FirstStartEvent / LastStartEvent the first and last step
	// starts in the window; MedianStepEvents the median events between two step starts.
	Listed           int `json:"listed"`
	FirstStartEvent  int `json:"first_start_event"`
	LastStartEvent   int `json:"last_start_event"`
	MedianStepEvents int `json:"median_step_events"`
}

// Bounded is a copy of r for an answer of bounded size: the envelope merged into at most
// maxColumns columns (each the lowest minimum and highest maximum of the columns it merges),
// at most maxSteps step starts listed (evenly spaced; Steps.Summary says so) and at most
// maxPhases phase runs (the first ones; a note says how many are left out).
func (r *TimelineResult) Bounded(maxColumns, maxSteps, maxPhases int) *TimelineResult {
	out := *r
	if n := len(r.Envelope); n > maxColumns && maxColumns > 0 {
		env := make([]TimelineEnvelope, maxColumns)
		for k := range maxColumns {
			lo, hi := n*k/maxColumns, n*(k+1)/maxColumns
			e := r.Envelope[lo]
			for _, c := range r.Envelope[lo+1 : hi] {
				e.EndEvent = c.EndEvent
				e.MinAllocatedBytes = min(e.MinAllocatedBytes, c.MinAllocatedBytes)
				e.MaxAllocatedBytes = max(e.MaxAllocatedBytes, c.MaxAllocatedBytes)
			}
			env[k] = e
		}
		out.Envelope = env
	}
	if st := r.Steps.StartEvents; len(st) > maxSteps && maxSteps >= 2 {
		listed := make([]int, maxSteps)
		for k := range maxSteps {
			listed[k] = st[k*(len(st)-1)/(maxSteps-1)]
		}
		gaps := make([]int, len(st)-1)
		for k := range gaps {
			gaps[k] = st[k+1] - st[k]
		}
		slices.Sort(gaps)
		out.Steps.StartEvents = listed
		out.Steps.Summary = &TimelineStepsSummary{Listed: maxSteps, FirstStartEvent: st[0], LastStartEvent: st[len(st)-1], MedianStepEvents: gaps[len(gaps)/2]}
	}
	out.Notes = slices.Clone(r.Notes)
	if len(r.Phases) > maxPhases && maxPhases >= 0 {
		out.Phases = r.Phases[:maxPhases]
		out.Notes = append(out.Notes, fmt.Sprintf("%d phase runs in the window; the first %d are listed", len(r.Phases), maxPhases))
	}
	// Segment-release bursts share the phases' bound: a run of cache flushes (the llama file's
	// 39) would otherwise fill an agent-sized answer on its own.
	if len(r.SegmentBursts) > maxPhases && maxPhases >= 0 {
		out.SegmentBursts = r.SegmentBursts[:maxPhases]
		out.Notes = append(out.Notes, fmt.Sprintf("%d segment-release bursts in the window; the first %d are listed", len(r.SegmentBursts), maxPhases))
	}
	return &out
}
