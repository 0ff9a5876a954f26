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
}

// FragGroup is the cache of one device, pool, stream and segment type.
type FragGroup struct {
	Device      int    `json:"device"`
	Pool        string `json:"pool"` // "0,0" is the default pool; others are private (CUDA graph) pools
	Stream      string `json:"stream"`
	SegmentType string `json:"segment_type"`
	Expandable  bool   `json:"expandable"`
	Segments    int    `json:"segments"`
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
	// ReleasableBytes: fully inactive segments, what torch.cuda.empty_cache() gives back.
	ReleasableBytes int64 `json:"releasable_bytes"`
	// PrivatePoolFreeBytes: fully inactive segments of private (CUDA graph) pools: empty_cache()
	// frees them only once the graph and its pool are released, which the file cannot tell.
	PrivatePoolFreeBytes int64 `json:"private_pool_free_bytes"`
	// StrandedBytes: inactive bytes in segments that still hold a live block; empty_cache() cannot
	// give them back.
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
	PrivatePoolFreeBytes int64       `json:"private_pool_free_bytes"`
	StrandedBytes        int64       `json:"stranded_bytes"`
	Groups               []FragGroup `json:"groups"`
	TotalGroups          int         `json:"total_groups"`
	Advice               []string    `json:"advice"`
	Notes                []string    `json:"notes"`
}

func poolString(p snapshot.PoolID) string { return fmt.Sprintf("%d,%d", p[0], p[1]) }

// Fragmentation measures the final state's cache per device, pool, stream and segment type.
func Fragmentation(snap *snapshot.Snapshot, opt FragOptions) (*FragmentationResult, error) {
	if snap == nil {
		return nil, fmt.Errorf("fragmentation: no snapshot")
	}
	if opt.Limit <= 0 {
		opt.Limit = 50
	}
	r := &FragmentationResult{Path: snap.Path, Groups: []FragGroup{}, Advice: []string{}, Notes: []string{}}
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
			m[k] = g
		}
		g.Segments++
		g.ReservedBytes += s.TotalSize
		var inactive int64
		live := false
		for _, b := range s.Blocks {
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
			}
		}
		g.InactiveBytes += inactive
		switch {
		case !live && s.PoolID != (snapshot.PoolID{}):
			g.PrivatePoolFreeBytes += s.TotalSize
		case !live:
			g.ReleasableBytes += s.TotalSize
		default:
			g.StrandedBytes += inactive
			if inactive*2 >= s.TotalSize {
				g.MostlyFreeSegments++
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
	r.Advice = fragAdvice(snap, r)
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

func fragAdvice(snap *snapshot.Snapshot, r *FragmentationResult) []string {
	out := []string{}
	if r.ReservedBytes == 0 {
		return out
	}
	anyExp := false
	var largeStranded, largeInactive int64
	mostly := 0
	for _, g := range r.Groups {
		anyExp = anyExp || g.Expandable
		if g.SegmentType == "large" {
			largeStranded += g.StrandedBytes
			largeInactive += g.InactiveBytes
			mostly += g.MostlyFreeSegments
		}
	}
	if r.StrandedBytes*5 >= r.ReservedBytes && r.StrandedBytes > 0 {
		if !anyExp && !snap.Settings.ExpandableSegments {
			out = append(out, fmt.Sprintf("%s (%.0f%% of reserved) is free but stranded in segments that still hold live blocks: set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True so free neighbours always merge",
				FormatBytes(r.StrandedBytes), pct(r.StrandedBytes, r.ReservedBytes)))
		} else {
			out = append(out, fmt.Sprintf("%s is free but stranded between live blocks even with expandable segments: long-lived tensors are interleaved with short-lived ones; allocate long-lived buffers (caches, static inputs) first or preallocate them", FormatBytes(r.StrandedBytes)))
		}
		if mostly > 0 && snap.Settings.MaxSplitSize <= 0 {
			out = append(out, fmt.Sprintf("%d large segments are mostly free: max_split_size_mb (e.g. PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128) keeps big cached blocks whole for big requests", mostly))
		}
	}
	if r.ReleasableBytes > 0 {
		out = append(out, fmt.Sprintf("torch.cuda.empty_cache() would give back %s (fully free segments); it cannot give back the %s stranded in partly used segments, and PyTorch reuses cached memory anyway: it only helps other processes on the GPU",
			FormatBytes(r.ReleasableBytes), FormatBytes(r.StrandedBytes)))
	}
	if r.InternalWasteBytes*10 >= r.AllocatedBytes && r.InternalWasteBytes > 0 {
		out = append(out, fmt.Sprintf("%s of allocated blocks is rounding and unsplit remainders (size - requested): many odd-sized tensors; roundup_power2_divisions or padding sizes can reduce it", FormatBytes(r.InternalWasteBytes)))
	}
	if len(out) == 0 {
		out = append(out, fmt.Sprintf("little fragmentation: %s of %s reserved is free, largest piece per group shown", FormatBytes(r.InactiveBytes), FormatBytes(r.ReservedBytes)))
	}
	return out
}

// Text renders the fragmentation report.
func (r *FragmentationResult) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "reserved %s: allocated %s, free %s (releasable by empty_cache %s, stranded %s), internal waste %s\n",
		FormatBytes(r.ReservedBytes), FormatBytes(r.AllocatedBytes), FormatBytes(r.InactiveBytes), FormatBytes(r.ReleasableBytes), FormatBytes(r.StrandedBytes), FormatBytes(r.InternalWasteBytes))
	for _, g := range r.Groups {
		exp := ""
		if g.Expandable {
			exp = " expandable"
		}
		fmt.Fprintf(&b, "  dev %d pool %s stream %s %s%s: %d segments, reserved %s, free %s in %d blocks (largest %s, %.0f%% fragmented), %d mostly free, releasable %s\n",
			g.Device, g.Pool, g.Stream, g.SegmentType, exp, g.Segments, FormatBytes(g.ReservedBytes), FormatBytes(g.InactiveBytes), g.FreeBlocks,
			FormatBytes(g.LargestFreeBlockBytes), g.FragmentationPercent, g.MostlyFreeSegments, FormatBytes(g.ReleasableBytes))
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
