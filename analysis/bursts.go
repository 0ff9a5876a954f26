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
	FirstEvent int `json:"first_event"`
	LastEvent  int `json:"last_event"`
	// Site / UserSite: for empty_cache, the code that called empty_cache() (the frame outside
	// torch/cuda/memory.py); for malloc_retry, the allocation whose cudaMalloc failed (the
	// retried request), when its stack was recorded.
	Site     string `json:"site"`
	UserSite string `json:"user_site"`
	Advice   string `json:"advice"`
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
	// lastSegAlloc: index of the last segment_alloc / segment_map event (for re-reservation).
	lastSegAlloc := -1
	for i := len(evs) - 1; i >= 0; i-- {
		if a := evs[i].Action; a == snapshot.ActionSegmentAlloc || a == snapshot.ActionSegmentMap {
			lastSegAlloc = i
			break
		}
	}
	for i := 0; i < len(evs); {
		if !isReleaseEvent(evs[i].Action) {
			i++
			continue
		}
		j := i
		var bytes int64
		explicit := snapshot.NoStack
		for j < len(evs) && isReleaseEvent(evs[j].Action) {
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
		if id.Site != "" {
			g.sites[id.Site]++
			if _, ok := g.ids[id.Site]; !ok {
				g.ids[id.Site] = id
			}
		}
		i = j
	}
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
		b.Advice = burstAdvice(b, len(streams))
		out = append(out, *b)
	}
	slices.SortStableFunc(out, func(x, y SegmentBurst) int { return largestFirst(x.Bytes, y.Bytes, x.Kind, y.Kind) })
	return out
}

func burstAdvice(b *SegmentBurst, streams int) string {
	switch b.Kind {
	case BurstEmptyCache:
		at := b.Site
		if b.UserSite != "" {
			at = b.UserSite
		}
		if at == "" {
			at = "its caller"
		}
		s := fmt.Sprintf("%d explicit torch.cuda.empty_cache() calls from %s released %s in %d cudaFree calls",
			b.Bursts, at, FormatBytes(b.Bytes), b.Events)
		if b.Bursts == 1 {
			s = fmt.Sprintf("an explicit torch.cuda.empty_cache() call from %s released %s in %d cudaFree calls", at, FormatBytes(b.Bytes), b.Events)
		}
		if b.ReReserved > 0 {
			return s + fmt.Sprintf("; after %d of them the memory was cudaMalloc'd again, so releasing it bought nothing: remove the empty_cache() at %s (or call it once at the end); PyTorch reuses its cache by itself, and each call adds synchronizing cudaFree/cudaMalloc calls",
				b.ReReserved, at)
		}
		return s + "; nothing was reserved again afterwards: it helps only if another process needs the memory"
	case BurstMallocRetry:
		s := fmt.Sprintf("%d times a cudaMalloc failed and the allocator freed every cached unused segment (%d segment frees, %s in all) and retried",
			b.Bursts, b.Events, FormatBytes(b.Bytes))
		switch {
		case b.FollowedByOOM > 0 && b.FollowedBySegmentAlloc > 0:
			s += fmt.Sprintf(" (%d retries got a new segment, %d ended in an OOM)", b.FollowedBySegmentAlloc, b.FollowedByOOM)
		case b.FollowedByOOM > 0:
			s += " (the retry failed: OOM)"
		}
		if b.Site != "" {
			s += fmt.Sprintf("; the failing cudaMalloc was most often for %s", b.Site)
		}
		s += ": the device is at its limit. Calling empty_cache() would not help (the allocator already does it on every failed cudaMalloc); lower the peak instead, and each retry costs a synchronizing cudaFree of the cache"
		if streams > 1 {
			s += fmt.Sprintf("; the trace allocates on %d streams and cached blocks are per stream: blocks cached on one stream cannot serve another, so fewer streams (or preallocated per-stream buffers) keep less cache idle", streams)
		}
		return s
	}
	return fmt.Sprintf("%s of segment frees (%s) with no empty_cache frame in their stacks and no new segment right after: an empty_cache() call recorded without free stacks, or the allocator releasing cache (garbage_collection_threshold)",
		count(b.Bursts, "burst"), FormatBytes(b.Bytes))
}

// writeSegmentBursts renders segment-release bursts, one line per kind.
func writeSegmentBursts(b *strings.Builder, bursts []SegmentBurst) {
	for _, s := range bursts {
		fmt.Fprintf(b, "  segment release bursts (%s): %s, %d events, %s released", s.Kind, count(s.Bursts, "burst"), s.Events, FormatBytes(s.Bytes))
		if s.Site != "" {
			fmt.Fprintf(b, " at %s", s.Site)
		}
		fmt.Fprintf(b, ": %s\n", s.Advice)
	}
}
