package analysis

import (
	"fmt"
	"slices"
	"strings"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// FragOptions selects what Fragmentation looks at.
type FragOptions struct {
	Device int `json:"device"` // AllDevices (-1) or one device
	Limit  int `json:"limit"`  // groups returned; 0 means 50
	// DeviceTotalBytes is the GPU's memory when known (the file does not record it): reserved
	// near it means the device is at its limit. 0: only the trace can tell (oom events,
	// cudaMalloc retries).
	DeviceTotalBytes int64 `json:"device_total_bytes"`
}

// Expandable-segment page sizes: empty_cache() unmaps only whole free pages.
const (
	smallPageBytes = 2 << 20  // kSmallBuffer
	largePageBytes = 20 << 20 // kLargeBuffer
)

// FragGroup is the cache of one device, pool, stream and segment type.
type FragGroup struct {
	Device      int    `json:"device"`
	Pool        string `json:"pool"` // "0,0" is the default pool; others are private (CUDA graph) pools
	Stream      string `json:"stream"`
	SegmentType string `json:"segment_type"`
	Expandable  bool   `json:"expandable"`
	// PageBytes: expandable segments map memory in pages of this size (2 MiB small, 20 MiB
	// large) and empty_cache() unmaps only whole free pages; 0 for ordinary segments.
	PageBytes int64 `json:"page_bytes"`
	Segments  int   `json:"segments"`
	// FullyFreeSegments: segments (or expandable mapped ranges) without any live block.
	FullyFreeSegments int `json:"fully_free_segments"`
	// ReservedBytes is the segments' total size; AllocatedBytes the allocated blocks; PendingBytes
	// blocks freed but awaiting another stream; InactiveBytes the free blocks (external free).
	ReservedBytes  int64 `json:"reserved_bytes"`
	AllocatedBytes int64 `json:"allocated_bytes"`
	PendingBytes   int64 `json:"pending_bytes"`
	InactiveBytes  int64 `json:"inactive_bytes"`
	// LargestFreeBlockBytes is the largest inactive block: the largest request this cache can
	// serve without a new cudaMalloc.
	LargestFreeBlockBytes int64 `json:"largest_free_block_bytes"`
	FreeBlocks            int   `json:"free_blocks"`
	// MostlyFreeSegments have at least half their bytes inactive but some block in use.
	MostlyFreeSegments int `json:"mostly_free_segments"`
	// InternalWasteBytes is size - requested of allocated blocks (rounding and unsplit remainders).
	InternalWasteBytes int64 `json:"internal_waste_bytes"`
	// ReleasableBytes: what torch.cuda.empty_cache() gives back: fully inactive segments, or for
	// expandable segments the whole free pages.
	ReleasableBytes int64 `json:"releasable_bytes"`
	// PrivatePoolFreeBytes: fully inactive segments of private (CUDA graph) pools: empty_cache()
	// frees them only once the graph and its pool are released, which the file cannot tell.
	PrivatePoolFreeBytes int64 `json:"private_pool_free_bytes"`
	// StrandedBytes: inactive bytes empty_cache() cannot give back: free space in segments that
	// still hold a live block (for expandable segments, only the parts of pages shared with a live
	// block: page granularity).
	StrandedBytes int64 `json:"stranded_bytes"`
	// FragmentationPercent is 100 × (1 − largest free block / inactive bytes).
	FragmentationPercent float64 `json:"fragmentation_percent"`
}

// FragmentationResult describes how the cached memory is split.
type FragmentationResult struct {
	Path               string `json:"path"`
	ReservedBytes      int64  `json:"reserved_bytes"`
	AllocatedBytes     int64  `json:"allocated_bytes"`
	InactiveBytes      int64  `json:"inactive_bytes"`
	InternalWasteBytes int64  `json:"internal_waste_bytes"`
	ReleasableBytes    int64  `json:"releasable_bytes"`
	// PrivatePoolFreeBytes: see FragGroup.
	PrivatePoolFreeBytes int64 `json:"private_pool_free_bytes"`
	StrandedBytes        int64 `json:"stranded_bytes"`
	// FullyFreeSegments: segments without a live block in the default pool (what empty_cache()
	// releases whole).
	FullyFreeSegments int `json:"fully_free_segments"`
	// Expandable: some segment is expandable (expandable_segments:True).
	Expandable bool `json:"expandable"`
	// LargestBlockBytes: the largest block in any state (decides whether max_split_size matters).
	LargestBlockBytes int64 `json:"largest_block_bytes"`
	// DeviceAtLimit: the device reached its memory limit: the trace has oom events or cudaMalloc
	// retries, or reserved is within 10% of the given device size.
	DeviceAtLimit bool `json:"device_at_limit"`
	// Verdict is the one-line answer: empty, little_free, cache, small, fragmented or
	// page_granularity, with Summary saying it in words.
	Verdict string `json:"verdict"`
	Summary string `json:"summary"`
	// SegmentBursts: runs of segment_free / segment_unmap events in the trace (explicit
	// empty_cache() calls, cudaMalloc-failure retries).
	SegmentBursts []SegmentBurst `json:"segment_bursts"`
	Groups        []FragGroup    `json:"groups"`
	TotalGroups   int            `json:"total_groups"`
	Advice        []string       `json:"advice"`
	// TracePeakAllocatedBytes: the trace's allocated peak as replay counts it (0 without a
	// trace), at TracePeakEvent on TracePeakDevice; TracePeakAllocatedBasis says whether it
	// counts requested or rounded bytes.
	TracePeakAllocatedBytes int64  `json:"trace_peak_allocated_bytes"`
	TracePeakAllocatedBasis string `json:"trace_peak_allocated_basis"`
	TracePeakEvent          int    `json:"trace_peak_event"`
	TracePeakDevice         int    `json:"trace_peak_device"`
	// AdviceItems: Advice with the rule of the advice table (advice.go) that gave each.
	AdviceItems []AdviceItem `json:"advice_items"`
	Notes       []string     `json:"notes"`
	// largestStranded: the largest free block in a segment that still holds a live block.
	largestStranded int64
}

// Fragmentation verdicts.
const (
	FragEmpty           = "empty"
	FragLittleFree      = "little_free"
	FragCache           = "cache"
	FragSmall           = "small"
	FragFragmented      = "fragmented"
	FragPageGranularity = "page_granularity"
)

func poolString(p snapshot.PoolID) string { return fmt.Sprintf("%d,%d", p[0], p[1]) }

// wholePages is the part of the free range [off, off+size) covering whole pages of page bytes
// (offsets from the start of the mapped range).
func wholePages(off, size, page int64) int64 {
	first := (off + page - 1) / page * page
	last := (off + size) / page * page
	if last > first {
		return last - first
	}
	return 0
}

// Fragmentation measures the final state's cache per device, pool, stream and segment type.
func Fragmentation(snap *snapshot.Snapshot, opt FragOptions) (*FragmentationResult, error) {
	if snap == nil {
		return nil, fmt.Errorf("fragmentation: no snapshot")
	}
	if opt.Limit <= 0 {
		opt.Limit = 50
	}
	r := &FragmentationResult{Path: snap.Path, Groups: []FragGroup{}, Advice: []string{}, Notes: []string{}, SegmentBursts: []SegmentBurst{}}
	type key struct {
		dev    int
		pool   snapshot.PoolID
		stream uint64
		typ    string
		exp    bool
	}
	m := map[key]*FragGroup{}
	for si := range snap.Segments {
		s := &snap.Segments[si]
		if opt.Device >= 0 && s.Device != opt.Device {
			continue
		}
		k := key{s.Device, s.PoolID, s.Stream, s.SegmentType, s.IsExpandable}
		g := m[k]
		if g == nil {
			g = &FragGroup{Device: s.Device, Pool: poolString(s.PoolID), Stream: fmt.Sprintf("0x%x", s.Stream), SegmentType: s.SegmentType, Expandable: s.IsExpandable}
			if s.IsExpandable {
				g.PageBytes = largePageBytes
				if s.SegmentType == "small" {
					g.PageBytes = smallPageBytes
				}
			}
			m[k] = g
		}
		g.Segments++
		g.ReservedBytes += s.TotalSize
		var inactive, pages int64
		live := false
		for _, b := range s.Blocks {
			r.LargestBlockBytes = max(r.LargestBlockBytes, b.Size)
			switch b.State {
			case snapshot.StateActiveAllocated:
				g.AllocatedBytes += b.Size
				if b.RequestedSize > 0 && b.RequestedSize <= b.Size {
					g.InternalWasteBytes += b.Size - b.RequestedSize
				}
				live = true
			case snapshot.StateActivePendingFree:
				g.PendingBytes += b.Size
				live = true
			case snapshot.StateInactive:
				inactive += b.Size
				g.FreeBlocks++
				g.LargestFreeBlockBytes = max(g.LargestFreeBlockBytes, b.Size)
				if s.IsExpandable && b.Address >= s.Address {
					pages += wholePages(int64(b.Address-s.Address), b.Size, g.PageBytes)
				}
			}
		}
		g.InactiveBytes += inactive
		if !live {
			g.FullyFreeSegments++
		}
		switch {
		case s.IsExpandable:
			// Expandable segments: empty_cache() unmaps every whole free page, inside holes too;
			// only the parts of pages shared with a live block stay mapped.
			if s.PoolID != (snapshot.PoolID{}) {
				g.PrivatePoolFreeBytes += pages
			} else {
				g.ReleasableBytes += pages
			}
			g.StrandedBytes += inactive - pages
			if live && inactive*2 >= s.TotalSize {
				g.MostlyFreeSegments++
			}
		case !live && s.PoolID != (snapshot.PoolID{}):
			g.PrivatePoolFreeBytes += s.TotalSize
		case !live:
			g.ReleasableBytes += s.TotalSize
		default:
			g.StrandedBytes += inactive
			if inactive*2 >= s.TotalSize {
				g.MostlyFreeSegments++
			}
			for _, b := range s.Blocks {
				if b.State == snapshot.StateInactive {
					r.largestStranded = max(r.largestStranded, b.Size)
				}
			}
		}
	}
	for _, g := range m {
		if g.InactiveBytes > 0 {
			g.FragmentationPercent = 100 - pct(g.LargestFreeBlockBytes, g.InactiveBytes)
		}
		r.ReservedBytes += g.ReservedBytes
		r.AllocatedBytes += g.AllocatedBytes
		r.InactiveBytes += g.InactiveBytes
		r.InternalWasteBytes += g.InternalWasteBytes
		r.ReleasableBytes += g.ReleasableBytes
		r.PrivatePoolFreeBytes += g.PrivatePoolFreeBytes
		r.StrandedBytes += g.StrandedBytes
		r.Expandable = r.Expandable || g.Expandable
		if g.Pool == poolString(snapshot.PoolID{}) {
			r.FullyFreeSegments += g.FullyFreeSegments
		}
		r.Groups = append(r.Groups, *g)
	}
	slices.SortFunc(r.Groups, func(a, b FragGroup) int {
		if a.InactiveBytes != b.InactiveBytes {
			if a.InactiveBytes > b.InactiveBytes {
				return -1
			}
			return 1
		}
		if a.ReservedBytes != b.ReservedBytes {
			if a.ReservedBytes > b.ReservedBytes {
				return -1
			}
			return 1
		}
		return strings.Compare(fmt.Sprint(a.Device, a.Pool, a.Stream, a.SegmentType), fmt.Sprint(b.Device, b.Pool, b.Stream, b.SegmentType))
	})
	r.TotalGroups = len(r.Groups)
	tr := fragTrace(snap, opt)
	r.SegmentBursts = tr.bursts
	if tr.peakAlloc > 0 {
		r.TracePeakAllocatedBytes, r.TracePeakAllocatedBasis, r.TracePeakEvent, r.TracePeakDevice = tr.peakAlloc, sizeBasis(tr.peakRequested), tr.peakEvent, tr.peakDev
	}
	r.DeviceAtLimit = tr.oom || tr.retries > 0 || (opt.DeviceTotalBytes > 0 && r.ReservedBytes*10 >= opt.DeviceTotalBytes*9)
	r.Verdict, r.Summary, r.AdviceItems = fragAdvice(snap, r, tr, opt)
	r.Advice = adviceTexts(r.AdviceItems)
	if len(r.Groups) > opt.Limit {
		r.Groups = r.Groups[:opt.Limit]
	}
	if len(snap.Segments) == 0 {
		r.Notes = append(r.Notes, "the file has no segments: nothing was reserved when it was written")
	}
	r.Notes = append(r.Notes, "this is the cache when the file was written; fragmentation at an earlier peak or OOM needs the trace: run the OOM report (`memsnap oom` / MCP `oom-report`)")
	if snap.Format.LegacyHistory {
		r.Notes = append(r.Notes, "PyTorch 2.0 file: block addresses are derived by walking each segment")
	}
	if r.PrivatePoolFreeBytes > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%s sits in fully free segments of private (CUDA graph) pools: empty_cache() returns it only after the graphs using those pools are deleted", FormatBytes(r.PrivatePoolFreeBytes)))
	}
	return r, nil
}

// fragTraceInfo is what the trace adds to the final state's cache.
type fragTraceInfo struct {
	hasTrace      bool
	peakAlloc     int64 // highest allocated bytes over the trace (largest device), 0 without allocs
	peakDev       int
	peakEvent     int
	peakRequested bool // peakAlloc counts requested bytes (the trace records them), not rounded
	oom           bool
	retries       int // cudaMalloc-failure retry bursts
	bursts        []SegmentBurst
	deviceCount   int
}

// fragTrace reads the traces of the devices asked for: the allocated peak (as replay counts it),
// oom events and segment-release bursts.
func fragTrace(snap *snapshot.Snapshot, opt FragOptions) fragTraceInfo {
	var t fragTraceInfo
	var roles *Roles
	for dev, evs := range snap.DeviceTraces {
		if (opt.Device >= 0 && dev != opt.Device) || len(evs) == 0 {
			continue
		}
		t.deviceCount++
		segFrees := 0
		for _, ev := range evs {
			switch ev.Action {
			case snapshot.ActionOOM:
				t.oom = true
			case snapshot.ActionSegmentFree, snapshot.ActionSegmentUnmap:
				segFrees++
			case snapshot.ActionSnapshot:
				continue
			}
			t.hasTrace = true
		}
		// The trace's peak as replay and summarize count it (one definition: replayPeaks), in
		// the trace's own bytes (requested or rounded).
		if p := replayPeaks(snap, dev); p.allocatedEvent >= 0 && p.allocated > t.peakAlloc {
			t.peakAlloc, t.peakDev, t.peakEvent, t.peakRequested = p.allocated, dev, p.allocatedEvent, p.requested
		}
		if segFrees > 0 {
			if roles == nil {
				roles, _ = NewRoles(snap, AttributionOptions{}) // the zero options cannot fail
			}
			for _, b := range segmentBursts(snap, roles, dev) {
				b.Device = dev
				if b.Kind == BurstMallocRetry {
					t.retries += b.Bursts
				}
				t.bursts = append(t.bursts, b)
			}
		}
	}
	if t.bursts == nil {
		t.bursts = []SegmentBurst{}
	}
	return t
}

// pctString formats a share with one decimal, or two below 0.1%.
func pctString(part, total int64) string {
	if total <= 0 {
		return "0%"
	}
	p := float64(part) * 100 / float64(total)
	if p > 0 && p < 0.1 {
		return fmt.Sprintf("%.2f%%", p)
	}
	return fmt.Sprintf("%.1f%%", p)
}

// fragAdvice gives the verdict and its summary, and the advice table's items for them.
func fragAdvice(snap *snapshot.Snapshot, r *FragmentationResult, tr fragTraceInfo, opt FragOptions) (string, string, []AdviceItem) {
	if r.ReservedBytes == 0 {
		r.Verdict = FragEmpty
		return FragEmpty, "nothing is reserved: empty_cache() returns 0 B", advise("fragmentation", &adviceIn{frag: r})
	}
	expandable := r.Expandable || snap.Settings.ExpandableSegments
	free, res := r.InactiveBytes, r.ReservedBytes
	rel, stranded := r.ReleasableBytes, r.StrandedBytes
	var largestFree int64
	var worstFrag float64
	for _, g := range r.Groups {
		largestFree = max(largestFree, g.LargestFreeBlockBytes)
		if g.InactiveBytes*20 >= free { // groups holding at least 5% of the free memory
			worstFrag = max(worstFrag, g.FragmentationPercent)
		}
	}
	returns := fmt.Sprintf("empty_cache() would return %s", FormatBytes(rel))
	if expandable {
		returns += " (whole free pages: expandable segments unmap free memory in 2 MiB (small) / 20 MiB (large) pages, and free space in a page that also holds a live block stays mapped)"
	} else if r.FullyFreeSegments > 0 {
		returns += fmt.Sprintf(" (%s)", count(r.FullyFreeSegments, "fully free segment"))
	}
	limit := ""
	if r.DeviceAtLimit {
		switch {
		case tr.oom:
			limit = "the trace shows the device at its limit (oom events)"
		case tr.retries > 0:
			limit = fmt.Sprintf("the trace shows the device at its limit (%d cudaMalloc-failure retries)", tr.retries)
		default:
			limit = fmt.Sprintf("reserved %s is near the device's %s", FormatBytes(res), FormatBytes(opt.DeviceTotalBytes))
		}
	}
	var verdict, summary string
	switch {
	case free*10 < res:
		verdict = FragLittleFree
		summary = fmt.Sprintf("little free memory: %s of %s reserved (%s) is free", FormatBytes(free), FormatBytes(res), pctString(free, res))
		if worstFrag >= 50 && free > 0 {
			summary += fmt.Sprintf(", split into pieces of at most %s: too little memory for the split to matter", FormatBytes(largestFree))
		}
		summary += "; " + returns
	case rel >= stranded:
		verdict = FragCache
		summary = fmt.Sprintf("cache, not fragmentation: %s of the %s free is in fully free segments", FormatBytes(rel), FormatBytes(free))
		if expandable {
			summary = fmt.Sprintf("cache, not fragmentation: %s of the %s free is in whole free pages", FormatBytes(rel), FormatBytes(free))
		}
		if tr.peakAlloc > r.AllocatedBytes {
			summary += fmt.Sprintf(", left after the trace's peak of %s allocated (event %d, %s bytes)", FormatBytes(tr.peakAlloc), tr.peakEvent, sizeBasis(tr.peakRequested))
			if tr.deviceCount > 1 {
				summary += fmt.Sprintf(" on device %d", tr.peakDev)
			}
		} else {
			summary += ", left by an earlier, higher allocation peak"
		}
		summary += "; " + returns
	case res < gib && !r.DeviceAtLimit:
		verdict = FragSmall
		summary = fmt.Sprintf("too small to matter: %s reserved, %s free; %s", FormatBytes(res), FormatBytes(free), returns)
	case expandable:
		verdict = FragPageGranularity
		summary = fmt.Sprintf("expandable segments: %s of the %s free lies in pages that also hold live blocks; %s", FormatBytes(stranded), FormatBytes(free), returns)
	case stranded*5 >= res:
		verdict = FragFragmented
		summary = fmt.Sprintf("fragmented: %s (%.0f%% of reserved) is free but stranded in segments that still hold live blocks, in pieces of at most %s; %s",
			FormatBytes(stranded), pct(stranded, res), FormatBytes(largestFree), returns)
	default:
		verdict = FragSmall
		summary = fmt.Sprintf("no fragmentation problem: %s of %s reserved is free, %s of it stranded next to live blocks (%.0f%% of reserved); %s",
			FormatBytes(free), FormatBytes(res), FormatBytes(stranded), pct(stranded, res), returns)
	}
	// The advice table reads the verdict set here. max_split_size_mb: never for expandable pools
	// (should_split ignores it there), and it only changes anything for blocks at least that large.
	r.Verdict = verdict
	in := &adviceIn{frag: r, fragExp: expandable, largestFree: largestFree, worstFrag: worstFrag, returns: returns,
		limit: limit, maxSplit: snap.Settings.MaxSplitSize}
	out := advise("fragmentation", in)
	for _, b := range tr.bursts {
		out = append(out, AdviceItem{Rule: b.AdviceRule, Text: segmentReleasesLead(b) + b.Advice})
	}
	return verdict, summary, out
}

// sizeBasis labels a byte count: "requested" (the sizes the program asked for, which newer
// traces record) or "rounded" (the allocator's block sizes).
func sizeBasis(requested bool) string {
	if requested {
		return "requested"
	}
	return "rounded"
}

// segmentReleasesLead names what a burst's advice is about: one event is a release, not a burst.
func segmentReleasesLead(b SegmentBurst) string {
	if b.Events == 1 {
		return "segment release: "
	}
	return "segment release bursts: "
}

// Text renders the fragmentation report.
func (r *FragmentationResult) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "reserved %s: allocated %s, free %s (releasable by empty_cache %s, stranded %s), internal waste %s\n",
		FormatBytes(r.ReservedBytes), FormatBytes(r.AllocatedBytes), FormatBytes(r.InactiveBytes), FormatBytes(r.ReleasableBytes), FormatBytes(r.StrandedBytes), FormatBytes(r.InternalWasteBytes))
	if r.Summary != "" {
		// The summary may open with the verdict's own word ("cache, not fragmentation: …").
		if strings.HasPrefix(r.Summary, r.Verdict) {
			fmt.Fprintf(&b, "verdict: %s\n", r.Summary)
		} else {
			fmt.Fprintf(&b, "verdict: %s: %s\n", r.Verdict, r.Summary)
		}
	}
	for _, g := range r.Groups {
		exp := ""
		if g.Expandable {
			exp = fmt.Sprintf(" expandable (%s pages)", FormatBytes(g.PageBytes))
		}
		// The largest piece's share of the free, not "N% fragmented": free memory in many
		// fully free segments is cache, and a percentage named fragmentation beside a verdict
		// saying otherwise reads as the opposite.
		largest := FormatBytes(g.LargestFreeBlockBytes)
		if g.InactiveBytes > 0 {
			largest = fmt.Sprintf("%s, %.0f%% of the free", largest, 100-g.FragmentationPercent)
		}
		fmt.Fprintf(&b, "  dev %d pool %s stream %s %s%s: %s, reserved %s, free %s in %s (largest piece %s), %d fully free, %d mostly free, releasable %s\n",
			g.Device, g.Pool, g.Stream, g.SegmentType, exp, count(g.Segments, "segment"), FormatBytes(g.ReservedBytes), FormatBytes(g.InactiveBytes), count(g.FreeBlocks, "block"),
			largest, g.FullyFreeSegments, g.MostlyFreeSegments, FormatBytes(g.ReleasableBytes))
	}
	if len(r.Groups) < r.TotalGroups {
		fmt.Fprintf(&b, "  (%d more groups)\n", r.TotalGroups-len(r.Groups))
	}
	for _, a := range r.Advice {
		fmt.Fprintf(&b, "advice: %s\n", a)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	return b.String()
}
