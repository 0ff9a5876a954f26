package analysis

import (
	"fmt"
	"slices"
	"strings"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// Segment-release burst kinds.
const (
	// BurstEmptyCache: an explicit torch.cuda.empty_cache() call (the frees' stacks hold
	// torch/cuda/memory.py empty_cache).
	BurstEmptyCache = "empty_cache"
	// BurstMallocRetry: the allocator's cudaMalloc-failure path: a cudaMalloc failed, every
	// cached unused segment was freed, and the allocation was retried (segment_alloc or oom
	// right after the frees).
	BurstMallocRetry = "malloc_retry"
	// BurstRelease: segment frees with neither mark (no frames on the frees and no new segment
	// right after them).
	BurstRelease = "release"
)

// SegmentBurst sums the runs of consecutive segment_free / segment_unmap events of one kind
// (and, for explicit empty_cache() calls, one calling site) on a device.
type SegmentBurst struct {
	Device int    `json:"device"`
	Kind   string `json:"kind"`
	Bursts int    `json:"bursts"`
	Events int    `json:"events"`
	Bytes  int64  `json:"bytes"`
	// FollowedBySegmentAlloc: bursts whose next event is a segment_alloc / segment_map;
	// FollowedByOOM: bursts whose next event is an oom event (the retry failed).
	FollowedBySegmentAlloc int `json:"followed_by_segment_alloc"`
	FollowedByOOM          int `json:"followed_by_oom"`
	// ReReserved: bursts after which the trace reserves memory again (any later segment_alloc).
	ReReserved int `json:"re_reserved"`
	// ReReservedBytes: of the bytes released, how many came back: per burst, how far reserved
	// memory rose again (at most the burst's bytes) before the next release or the trace's end.
	ReReservedBytes int64 `json:"re_reserved_bytes"`
	FirstEvent      int   `json:"first_event"`
	LastEvent       int   `json:"last_event"`
	// Site / UserSite: for empty_cache, the code that called empty_cache() (the frame outside
	// torch/cuda/memory.py); for malloc_retry, the allocation whose cudaMalloc failed (the
	// retried request), when its stack was recorded.
	Site     string `json:"site"`
	UserSite string `json:"user_site"`
	Advice   string `json:"advice"`
	// AdviceRule: the rule of the advice table (advice.go) that gave Advice.
	AdviceRule string `json:"advice_rule"`
}

func isReleaseEvent(a snapshot.Action) bool {
	return a == snapshot.ActionSegmentFree || a == snapshot.ActionSegmentUnmap
}

// isEmptyCacheStack: the stack runs through torch.cuda.empty_cache (torch/cuda/memory.py) or the
// C++ emptyCache binding.
func isEmptyCacheStack(frames []snapshot.Frame) bool {
	for _, f := range frames {
		p := strings.ReplaceAll(f.Filename, "\\", "/")
		if f.Name == "empty_cache" && strings.HasSuffix(p, "cuda/memory.py") {
			return true
		}
		if strings.Contains(f.Name, "THCPModule_emptyCache") {
			return true
		}
	}
	return false
}

// segmentBursts finds the runs of consecutive segment_free / segment_unmap events of device dev
// and names them: explicit empty_cache() calls, the allocator's cudaMalloc-failure retries, or
// plain releases. One entry per kind (and per calling site for empty_cache), most bytes first.
func segmentBursts(snap *snapshot.Snapshot, roles *Roles, dev int) []SegmentBurst {
	out := []SegmentBurst{}
	if snap == nil || dev < 0 || dev >= len(snap.DeviceTraces) {
		return out
	}
	evs := snap.DeviceTraces[dev]
	isEC := map[snapshot.StackID]bool{}
	emptyCache := func(st snapshot.StackID) bool {
		if st <= snapshot.EmptyStack {
			return false
		}
		v, ok := isEC[st]
		if !ok {
			v = isEmptyCacheStack(snap.StackFrames(st))
			isEC[st] = v
		}
		return v
	}
	type acc struct {
		b     *SegmentBurst
		sites map[string]int
		ids   map[string]SiteIdentity
	}
	groups := map[string]*acc{}
	var order []string
	// spans: each run of releases, for the bytes that came back after it.
	type span struct {
		from, to int // events [from, to)
		bytes    int64
		g        *acc
	}
	var spans []span
	// lastSegAlloc: index of the last segment_alloc / segment_map event (for re-reservation).
	lastSegAlloc := -1
	for i := len(evs) - 1; i >= 0; i-- {
		if a := evs[i].Action; a == snapshot.ActionSegmentAlloc || a == snapshot.ActionSegmentMap {
			lastSegAlloc = i
			break
		}
	}
	// Releases after an OOM are the exception unwinding and the framework's teardown (an
	// empty_cache in Lightning's _clear_cuda_memory): the unwind span names them
	// (UnwindSpan.Teardown), and they are never evidence of the user's churn.
	var unwind []UnwindSpan
	if roles != nil {
		unwind = roles.UnwindSpans(dev)
	}
	inUnwind := func(i int) bool {
		return slices.ContainsFunc(unwind, func(sp UnwindSpan) bool { return i >= sp.StartEvent && i <= sp.EndEvent })
	}
	for i := 0; i < len(evs); {
		if !isReleaseEvent(evs[i].Action) || inUnwind(i) {
			i++
			continue
		}
		j := i
		var bytes int64
		explicit := snapshot.NoStack
		for j < len(evs) && isReleaseEvent(evs[j].Action) && !inUnwind(j) {
			bytes += evs[j].Size
			if explicit == snapshot.NoStack && emptyCache(evs[j].Stack) {
				explicit = evs[j].Stack
			}
			j++
		}
		next := snapshot.ActionOther
		if j < len(evs) {
			next = evs[j].Action
		}
		kind, siteStack := BurstRelease, snapshot.NoStack
		switch {
		case explicit != snapshot.NoStack:
			kind, siteStack = BurstEmptyCache, explicit
		case next == snapshot.ActionSegmentAlloc || next == snapshot.ActionSegmentMap || next == snapshot.ActionOOM:
			kind = BurstMallocRetry
			// The retried request: the segment_alloc's stack, else the alloc (or oom) after it.
			for k := j; k < len(evs) && k <= j+1; k++ {
				if evs[k].Stack > snapshot.EmptyStack {
					siteStack = evs[k].Stack
					break
				}
			}
		}
		var id SiteIdentity
		if siteStack > snapshot.EmptyStack && roles != nil {
			id = roles.Stack(dev, siteStack).SiteIdentity
		}
		key := kind
		if kind == BurstEmptyCache {
			key += "\x00" + id.Site
		}
		g := groups[key]
		if g == nil {
			g = &acc{b: &SegmentBurst{Device: dev, Kind: kind, FirstEvent: i}, sites: map[string]int{}, ids: map[string]SiteIdentity{}}
			groups[key] = g
			order = append(order, key)
		}
		b := g.b
		b.Bursts++
		b.Events += j - i
		b.Bytes += bytes
		b.LastEvent = j - 1
		switch next {
		case snapshot.ActionSegmentAlloc, snapshot.ActionSegmentMap:
			b.FollowedBySegmentAlloc++
		case snapshot.ActionOOM:
			b.FollowedByOOM++
		}
		if lastSegAlloc >= j {
			b.ReReserved++
		}
		spans = append(spans, span{i, j, bytes, g})
		if id.Site != "" {
			g.sites[id.Site]++
			if _, ok := g.ids[id.Site]; !ok {
				g.ids[id.Site] = id
			}
		}
		i = j
	}
	// What came back: reserved memory relative to its level at the trace's start, and for each
	// run its level right after the run and the highest level before the next run.
	var level, after, high int64
	var open *span
	closeSpan := func() {
		if open != nil {
			open.g.b.ReReservedBytes += min(open.bytes, high-after)
			open = nil
		}
	}
	si := 0
	for k := range evs {
		if si < len(spans) && k == spans[si].from {
			closeSpan()
		}
		switch evs[k].Action {
		case snapshot.ActionSegmentAlloc, snapshot.ActionSegmentMap:
			level += evs[k].Size
		case snapshot.ActionSegmentFree, snapshot.ActionSegmentUnmap:
			level -= evs[k].Size
		}
		if si < len(spans) && k == spans[si].to-1 {
			open, after, high = &spans[si], level, level
			si++
		} else {
			high = max(high, level)
		}
	}
	closeSpan()
	// The streams that allocate (the advice names more than one): counted only when there is
	// a burst to advise on, which most traces lack, since it reads every event.
	streams := map[uint64]bool{}
	if len(order) > 0 {
		for i := range evs {
			if ev := &evs[i]; ev.Action == snapshot.ActionAlloc {
				streams[ev.Stream] = true
			}
		}
	}
	for _, k := range order {
		g := groups[k]
		b := g.b
		best, n := "", 0
		for s, c := range g.sites {
			if c > n || (c == n && s < best) {
				best, n = s, c
			}
		}
		if best != "" {
			id := g.ids[best]
			b.Site, b.UserSite = id.Site, id.UserSite
		}
		b.AdviceRule, b.Advice = burstAdvice(snap, b, len(streams))
		out = append(out, *b)
	}
	slices.SortStableFunc(out, func(x, y SegmentBurst) int { return largestFirst(x.Bytes, y.Bytes, x.Kind, y.Kind) })
	return out
}

// burstAdvice gives the advice table's item for a burst (advice.go).
func burstAdvice(snap *snapshot.Snapshot, b *SegmentBurst, streams int) (string, string) {
	it, _ := adviseOne("bursts", &adviceIn{burst: b, streams: streams, gcThreshold: snap.Settings.GCThreshold, settingsKnown: snap.Settings.Present})
	return it.Rule, it.Text
}

// writeSegmentBursts renders segment-release bursts, one line per kind.
func writeSegmentBursts(b *strings.Builder, bursts []SegmentBurst) {
	for _, s := range bursts {
		if s.Events == 1 {
			fmt.Fprintf(b, "  segment release (%s): 1 event, %s released", s.Kind, FormatBytes(s.Bytes))
		} else {
			fmt.Fprintf(b, "  segment release bursts (%s): %s, %d events, %s released", s.Kind, count(s.Bursts, "burst"), s.Events, FormatBytes(s.Bytes))
		}
		if s.Site != "" {
			fmt.Fprintf(b, " at %s", s.Site)
		}
		fmt.Fprintf(b, ": %s\n", s.Advice)
	}
}
