package analysis

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/memsnap/memsnap/analysis/allocator"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// WhatIfRanking is the order --recommend ranks settings in, for the CLI's help and the MCP
// tool's description.
const WhatIfRanking = "fewest OOMs, then fewest cache flushes, then lowest peak reserved, then fewest cudaMalloc calls"

// WhatIfSetting is one allocator option to change: a PYTORCH_CUDA_ALLOC_CONF key and value.
type WhatIfSetting struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// ParseWhatIfSetting reads "KEY=VALUE" (or PYTORCH_CUDA_ALLOC_CONF's "KEY:VALUE").
func ParseWhatIfSetting(s string) (WhatIfSetting, error) {
	k, v, ok := strings.Cut(s, "=")
	if !ok {
		k, v, ok = strings.Cut(s, ":")
	}
	if !ok || strings.TrimSpace(k) == "" {
		return WhatIfSetting{}, &allocator.SettingError{Msg: fmt.Sprintf("setting %q must be KEY=VALUE with KEY one of %s", s, strings.Join(allocator.Keys, ", "))}
	}
	return WhatIfSetting{Key: strings.TrimSpace(k), Value: strings.TrimSpace(v)}, nil
}

// WhatIfOptions selects what to replay.
type WhatIfOptions struct {
	// Settings change the file's own allocator settings (PYTORCH_CUDA_ALLOC_CONF keys).
	Settings []WhatIfSetting `json:"settings"`
	// DeviceMemory is the bytes PyTorch may reserve on the device when no OOM event measures
	// it (0 = unknown).
	DeviceMemory int64 `json:"device_memory"`
	// Recommend tries a small grid of settings and ranks them (WhatIfRanking).
	Recommend bool `json:"recommend"`
}

// WhatIfSettings are allocator settings as the what-if reports them.
type WhatIfSettings struct {
	ExpandableSegments         bool    `json:"expandable_segments"`
	MaxSplitSizeMB             int64   `json:"max_split_size_mb"`
	RoundupPower2Divisions     int     `json:"roundup_power2_divisions"`
	GarbageCollectionThreshold float64 `json:"garbage_collection_threshold"`
	AllocConf                  string  `json:"alloc_conf"`
}

func whatIfSettings(s allocator.Settings) WhatIfSettings {
	out := WhatIfSettings{ExpandableSegments: s.ExpandableSegments, MaxSplitSizeMB: s.MaxSplitSize / mib,
		GarbageCollectionThreshold: s.GCThreshold, AllocConf: s.AllocConf()}
	if v, ok := s.Uniform(); ok {
		out.RoundupPower2Divisions = v
	} else {
		out.RoundupPower2Divisions = -1
	}
	return out
}

// confName names settings for a person: the PYTORCH_CUDA_ALLOC_CONF value, or "the defaults".
func confName(s WhatIfSettings) string {
	if s.AllocConf == "" {
		return "the defaults"
	}
	return s.AllocConf
}

// WhatIfFidelity compares the replay of the file's own settings (the baseline) with what the
// trace recorded.
type WhatIfFidelity struct {
	RecordedSegmentAllocs   int `json:"recorded_segment_allocs"`
	ReproducedSegmentAllocs int `json:"reproduced_segment_allocs"`
	RecordedSegmentMaps     int `json:"recorded_segment_maps"`
	ReproducedSegmentMaps   int `json:"reproduced_segment_maps"`
	RecordedOOMs            int `json:"recorded_ooms"`
	ReproducedOOMs          int `json:"reproduced_ooms"`
	// ModelSegmentAllocs / ModelSegmentMaps: what the baseline did in all.
	ModelSegmentAllocs        int   `json:"model_segment_allocs"`
	ModelSegmentMaps          int   `json:"model_segment_maps"`
	RecordedPeakReservedBytes int64 `json:"recorded_peak_reserved_bytes"`
	// RecordedPeakAllocatedBytes is the trace's own peak allocated (replay's and summarize's).
	// SizesAreRequested: the trace records requested sizes, so that peak sums requested bytes
	// while the replays count rounded blocks, as PyTorch's allocated_bytes does.
	RecordedPeakAllocatedBytes int64 `json:"recorded_peak_allocated_bytes"`
	SizesAreRequested          bool  `json:"sizes_are_requested"`
	// RecordedPeakAllocatedBasis: "requested" or "rounded", the bytes that peak counts.
	RecordedPeakAllocatedBasis string `json:"recorded_peak_allocated_basis"`
	// Exact: the baseline reproduces every recorded segment event and OOM and makes no other.
	Exact bool `json:"exact"`
	// Checked: the trace holds something to compare (segment events or OOMs).
	Checked bool `json:"checked"`
	// FirstMismatchEvent is the trace event where the baseline first departs from the
	// recording (-1: nowhere).
	FirstMismatchEvent int    `json:"first_mismatch_event"`
	Reason             string `json:"reason"`
}

// WhatIfRun is what one replay did.
type WhatIfRun struct {
	PeakReservedBytes  int64 `json:"peak_reserved_bytes"`
	PeakAllocatedBytes int64 `json:"peak_allocated_bytes"`
	CudaMallocCalls    int   `json:"cuda_malloc_calls"`
	OOMCount           int   `json:"oom_count"`
	// CacheFlushes: cudaMalloc failures recovered from by freeing the whole cache and
	// retrying (each a device-wide synchronize and a cudaFree per cached segment).
	CacheFlushes int `json:"cache_flushes"`
	// CudaFreeCalls: segments freed (segment_free) plus page ranges unmapped (segment_unmap):
	// by flushes, garbage collection, max_split_size_mb releases and empty_cache() calls alike.
	CudaFreeCalls int `json:"cuda_free_calls"`
}

func whatIfRun(r *allocator.RunResult) WhatIfRun {
	return WhatIfRun{PeakReservedBytes: r.PeakReservedInTrace, PeakAllocatedBytes: r.Stats.PeakAllocated,
		CudaMallocCalls: r.Stats.SegmentAllocs + r.Stats.SegmentMaps, OOMCount: r.Stats.OOMs, CacheFlushes: r.Stats.CacheFlushes,
		CudaFreeCalls: r.Stats.SegmentFrees + r.Stats.SegmentUnmaps}
}

// WhatIfOOM is one recorded OOM under the baseline and the what-if.
type WhatIfOOM struct {
	EventIndex     int   `json:"event_index"`
	RequestedBytes int64 `json:"requested_bytes"`
	BaselineFits   bool  `json:"baseline_fits"`
	WhatIfFits     bool  `json:"whatif_fits"`
	// HeadroomBytes: capacity − reserved after serving it (≥ 0), or how far it was from fitting
	// (< 0).
	HeadroomBytes         int64 `json:"headroom_bytes"`
	BaselineHeadroomBytes int64 `json:"baseline_headroom_bytes"`
}

// WhatIfDevice is the what-if of one device.
type WhatIfDevice struct {
	Device         int    `json:"device"`
	CapacityBytes  int64  `json:"capacity_bytes"`
	CapacitySource string `json:"capacity_source" jsonschema:"enum=oom_event,enum=given,enum=malloc_retry,enum=unbounded"`
	Start          string `json:"start" jsonschema:"enum=empty,enum=reconstructed"`
	// StartReservedBytes / StartAllocatedBytes: the state the replays start from.
	StartReservedBytes  int64          `json:"start_reserved_bytes"`
	StartAllocatedBytes int64          `json:"start_allocated_bytes"`
	Fidelity            WhatIfFidelity `json:"fidelity"`
	Baseline            WhatIfRun      `json:"baseline"`
	// PeakAllocatedBasis is "rounded": the replays (baseline and whatif) count the allocator's
	// block sizes, as PyTorch's allocated_bytes does (fidelity's recorded peak may count
	// requested bytes: its own basis says).
	PeakAllocatedBasis string      `json:"peak_allocated_basis"`
	WhatIf             WhatIfRun   `json:"whatif"`
	OOMs               []WhatIfOOM `json:"ooms"`
	Notes              []string    `json:"notes"`
}

// WhatIfCandidate is one setting of the recommend grid, over every device.
type WhatIfCandidate struct {
	Rank               int            `json:"rank"`
	Settings           WhatIfSettings `json:"settings"`
	OOMCount           int            `json:"oom_count"`
	OOMsAvoided        int            `json:"ooms_avoided"`
	PeakReservedBytes  int64          `json:"peak_reserved_bytes"`
	PeakAllocatedBytes int64          `json:"peak_allocated_bytes"`
	CudaMallocCalls    int            `json:"cuda_malloc_calls"`
	CacheFlushes       int            `json:"cache_flushes"`
	CudaFreeCalls      int            `json:"cuda_free_calls"`
	Baseline           bool           `json:"baseline"`
}

// WhatIfResult answers "would other allocator settings have avoided this OOM / lowered the
// peak?": the trace's requests replayed through the allocator model with the file's own
// settings (the baseline, checked against the recording) and with other settings.
type WhatIfResult struct {
	Path             string         `json:"path"`
	Settings         WhatIfSettings `json:"settings"`
	BaselineSettings WhatIfSettings `json:"baseline_settings"`
	Recommend        bool           `json:"recommend"`
	// Recommendations: the grid, best first (recommend only).
	Recommendations []WhatIfCandidate `json:"recommendations"`
	Devices         []WhatIfDevice    `json:"devices"`
	// ChangeNeeded: the trace records an OOM, or the file's own settings meet one in the replay
	// (at the capacity given). Without either, a setting only changes how much memory the
	// cache keeps at the peak: nothing needs fixing.
	ChangeNeeded bool     `json:"change_needed"`
	Notes        []string `json:"notes"`
}

// WhatIf replays each device's trace through the allocator model with the file's own settings
// (the baseline, compared with the recording) and with the file's settings changed by
// opt.Settings (or, with opt.Recommend, with each setting of a small grid, ranked).
func WhatIf(ctx context.Context, snap *snapshot.Snapshot, device *int, opt WhatIfOptions) (*WhatIfResult, error) {
	if snap == nil {
		return nil, fmt.Errorf("whatif: no snapshot")
	}
	base := allocator.FromSnapshot(snap.Settings)
	what := base
	for _, s := range opt.Settings {
		if err := what.Set(s.Key, s.Value); err != nil {
			return nil, err
		}
	}
	if len(opt.Settings) == 0 && !opt.Recommend {
		return nil, &allocator.SettingError{Msg: fmt.Sprintf("give at least one setting to change (KEY=VALUE with KEY one of %s) or ask for recommend", strings.Join(allocator.Keys, ", "))}
	}
	var devs []int
	for d, evs := range snap.DeviceTraces {
		for _, ev := range evs {
			if ev.Action == snapshot.ActionAlloc {
				devs = append(devs, d)
				break
			}
		}
	}
	if len(devs) == 0 {
		return nil, fmt.Errorf("%s: a what-if needs the trace, and the file has none (%w; only its final state): record history with torch.cuda.memory._record_memory_history() before the run, then dump the snapshot with torch.cuda.memory._dump_snapshot()", snap.Path, allocator.ErrNoTrace)
	}
	if device != nil {
		if !slices.Contains(devs, *device) {
			return nil, fmt.Errorf("%s: device %d has no allocation events (devices with a trace: %v)", snap.Path, *device, devs)
		}
		devs = []int{*device}
	}
	out := &WhatIfResult{Path: snap.Path, Settings: whatIfSettings(what), BaselineSettings: whatIfSettings(base),
		Recommend: opt.Recommend, Recommendations: []WhatIfCandidate{}, Devices: []WhatIfDevice{}, Notes: []string{}}
	type devRuns struct {
		t     *allocator.Trace
		cap   int64
		src   string
		notes []string
		base  *allocator.RunResult
		runs  []*allocator.RunResult
	}
	all := make([]*devRuns, len(devs))
	for i, d := range devs {
		t, err := allocator.NewTrace(snap, d, base)
		if err != nil {
			return nil, fmt.Errorf("whatif: %w", err)
		}
		c, src, notes := whatIfCapacity(t, opt.DeviceMemory)
		all[i] = &devRuns{t: t, cap: c, src: src, notes: notes}
	}
	grid := []allocator.Settings{what}
	if opt.Recommend {
		bounded := false
		for _, dr := range all {
			bounded = bounded || dr.cap > 0
		}
		grid = recommendGrid(base, opt.Settings, what, bounded)
	}
	for _, dr := range all {
		dr.runs = make([]*allocator.RunResult, len(grid))
	}
	// Every replay is independent: run them on every core.
	type job struct {
		d, g int // g = -1: the baseline
	}
	var jobs []job
	for d := range all {
		jobs = append(jobs, job{d, -1})
		for g := range grid {
			if !sameAllocSettings(grid[g], base) { // the baseline's run serves the file's own settings
				jobs = append(jobs, job{d, g})
			}
		}
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		next     int
	)
	workers := min(runtime.GOMAXPROCS(0), len(jobs))
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if next >= len(jobs) || firstErr != nil {
					mu.Unlock()
					return
				}
				j := jobs[next]
				next++
				mu.Unlock()
				dr := all[j.d]
				ro := allocator.RunOptions{Settings: base, Capacity: dr.cap, Baseline: true}
				if j.g >= 0 {
					ro = allocator.RunOptions{Settings: grid[j.g], Capacity: dr.cap}
				}
				r, err := runRecovered(ctx, dr.t, ro)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = fmt.Errorf("whatif: %w", err)
				}
				if j.g < 0 {
					dr.base = r
				} else {
					dr.runs[j.g] = r
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	for _, dr := range all {
		for g := range grid {
			if sameAllocSettings(grid[g], base) {
				dr.runs[g] = dr.base
			}
		}
	}
	best := 0
	if opt.Recommend {
		cands := make([]WhatIfCandidate, len(grid))
		for g, s := range grid {
			c := WhatIfCandidate{Settings: whatIfSettings(s), Baseline: sameAllocSettings(s, base)}
			for _, dr := range all {
				r := dr.runs[g]
				c.OOMCount += r.Stats.OOMs
				c.PeakReservedBytes += r.PeakReservedInTrace
				c.PeakAllocatedBytes += r.Stats.PeakAllocated
				c.CudaMallocCalls += r.Stats.SegmentAllocs + r.Stats.SegmentMaps
				c.CacheFlushes += r.Stats.CacheFlushes
				c.CudaFreeCalls += r.Stats.SegmentFrees + r.Stats.SegmentUnmaps
				for _, o := range r.OOMs {
					if o.Fits {
						c.OOMsAvoided++
					}
				}
			}
			cands[g] = c
		}
		order := make([]int, len(grid))
		for i := range order {
			order[i] = i
		}
		// Ranked as WhatIfRanking says.
		slices.SortStableFunc(order, func(x, y int) int {
			a, b := cands[x], cands[y]
			switch {
			case a.OOMCount != b.OOMCount:
				return a.OOMCount - b.OOMCount
			case a.CacheFlushes != b.CacheFlushes:
				return a.CacheFlushes - b.CacheFlushes
			case a.PeakReservedBytes != b.PeakReservedBytes:
				return cmpInt64(a.PeakReservedBytes, b.PeakReservedBytes)
			}
			return a.CudaMallocCalls - b.CudaMallocCalls
		})
		for r, g := range order {
			cands[g].Rank = r + 1
			out.Recommendations = append(out.Recommendations, cands[g])
		}
		best = order[0]
		out.Settings = whatIfSettings(grid[best])
		if sameAllocSettings(grid[best], base) {
			out.Notes = append(out.Notes, "no setting of the grid does better than the file's own settings (fewer OOMs, then fewer cache flushes, then a lower peak reserved, then fewer cudaMalloc calls)")
		}
	} else if sameAllocSettings(what, base) {
		out.Notes = append(out.Notes, "the what-if settings are the file's own: the what-if is the baseline")
	}
	var basePeak, bestPeak int64
	for _, dr := range all {
		d := whatIfDevice(dr.t, dr.cap, dr.src, dr.notes, dr.base, dr.runs[best], grid[best], base)
		recordedAllocated(snap, &d)
		out.Devices = append(out.Devices, d)
		out.ChangeNeeded = out.ChangeNeeded || len(dr.t.OOMs) > 0 || dr.base.Stats.OOMs > 0
		basePeak += dr.base.PeakReservedInTrace
		bestPeak += dr.runs[best].PeakReservedInTrace
	}
	switch baseRun, bestRun := out.runTotals(); {
	case out.ChangeNeeded:
	case baseRun.CacheFlushes > 0:
		out.Notes = append(out.Notes, cacheFlushesNote(baseRun, bestRun, out.Settings, sameAllocSettings(grid[best], base)))
	default:
		out.Notes = append(out.Notes, noChangeNeeded(basePeak, bestPeak, confName(out.Settings), all[0].cap > 0))
	}
	return out, nil
}

// cacheFlushesNote: the file's own settings met cudaMalloc failures and recovered by freeing
// the whole cache; what the chosen setting does about it, and what removes them whatever the
// setting.
func cacheFlushesNote(base, best WhatIfRun, s WhatIfSettings, same bool) string {
	n := fmt.Sprintf("with the file's own settings the replay meets %s: cudaMalloc failed, and the allocator freed every cached segment and retried; no OOM, but each is a device-wide synchronize and a cache rebuilt from cudaMalloc calls: the device is at its limit",
		cacheFlushes(base.CacheFlushes))
	if !same {
		n += fmt.Sprintf("; %s meets %d", confName(s), best.CacheFlushes)
		if s.GarbageCollectionThreshold > 0 {
			n += " (only with torch.cuda.set_per_process_memory_fraction set: the threshold is a fraction of it)"
		}
		if best.CudaFreeCalls*10 >= base.CudaFreeCalls*8 {
			n += fmt.Sprintf(", yet frees segments about as often (%d cudaFree calls, %d with the file's own): the churn moves, it does not go", best.CudaFreeCalls, base.CudaFreeCalls)
		}
	}
	return n + "; lowering the peak (what is live at it: memsnap replay / MCP replay) removes them under any setting"
}

// noChangeNeeded says why a file without OOMs needs no setting changed, and what the best
// setting would still give back.
func noChangeNeeded(basePeak, bestPeak int64, best string, bounded bool) string {
	s := "no change needed: the trace records no OOM and the file's own settings meet none in the replay"
	if bounded {
		s += " at that capacity"
	}
	if saved := basePeak - bestPeak; saved > 0 {
		s += fmt.Sprintf("; %s lowers the peak reserved by %s (%.0f%%), memory the cache keeps for reuse, not memory lost: change it only to give that memory to something else (another process, a larger batch)",
			best, FormatBytes(saved), pct(saved, basePeak))
	}
	return s
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func sameAllocSettings(a, b allocator.Settings) bool { return a == b }

// recommendGrid is the settings the recommend mode tries, each on top of the file's settings
// (and of any setting given): the base itself, expandable segments, max_split_size_mb 128,
// 256 and 512, roundup_power2_divisions 4, garbage_collection_threshold 0.8 and 0.6 (only
// with a capacity: it is a fraction of it), and expandable segments with
// roundup_power2_divisions 4.
func recommendGrid(base allocator.Settings, given []WhatIfSetting, what allocator.Settings, bounded bool) []allocator.Settings {
	out := []allocator.Settings{base}
	add := func(s allocator.Settings) {
		for _, o := range out {
			if o == s {
				return
			}
		}
		out = append(out, s)
	}
	if len(given) > 0 {
		add(what)
	}
	vary := func(f func(*allocator.Settings)) allocator.Settings {
		s := what
		f(&s)
		return s
	}
	add(vary(func(s *allocator.Settings) { s.ExpandableSegments = !base.ExpandableSegments }))
	if !what.ExpandableSegments {
		for _, mb := range []int64{128, 256, 512} {
			add(vary(func(s *allocator.Settings) { s.MaxSplitSize = mb * mib }))
		}
	}
	if what.MaxSplitSize > 0 {
		add(vary(func(s *allocator.Settings) { s.MaxSplitSize = 0 }))
	}
	four := func(s *allocator.Settings) {
		for i := range s.RoundupPower2Divisions {
			s.RoundupPower2Divisions[i] = 4
		}
	}
	add(vary(four))
	if bounded {
		for _, g := range []float64{0.8, 0.6} {
			add(vary(func(s *allocator.Settings) { s.GCThreshold = g }))
		}
	}
	add(vary(func(s *allocator.Settings) { s.ExpandableSegments = true; four(s) }))
	return out
}

// whatIfCapacity picks the capacity of a device's replays: reserved + device_free at the first
// OOM event, else the given device memory, else (when the trace shows cudaMalloc failures the
// allocator recovered from) the recorded peak reserved, else unbounded.
func whatIfCapacity(t *allocator.Trace, given int64) (int64, string, []string) {
	var notes []string
	switch {
	case len(t.OOMs) > 0:
		i := t.OOMs[0]
		c := t.ReservedAtOOM[0] + t.Events[i].DeviceFree()
		for k := 1; k < len(t.OOMs); k++ {
			if o := t.ReservedAtOOM[k] + t.Events[t.OOMs[k]].DeviceFree(); o != c {
				notes = append(notes, fmt.Sprintf("the OOM at event %d implies a capacity of %s (reserved + device_free), not %s: memory outside PyTorch changed between the OOMs; the replays use the first",
					t.OOMs[k], FormatBytes(o), FormatBytes(c)))
				break
			}
		}
		if given > 0 && given != c {
			notes = append(notes, fmt.Sprintf("the device memory given (%s) was not used: the OOM event measures what PyTorch could reserve (%s)", FormatBytes(given), FormatBytes(c)))
		}
		if t.PeakReserved > c {
			notes = append(notes, fmt.Sprintf("the recording reserved up to %s before the OOM, more than the capacity at the OOM (%s): other memory on the device grew in between", FormatBytes(t.PeakReserved), FormatBytes(c)))
		}
		return c, "oom_event", notes
	case given > 0:
		if t.PeakReserved > given {
			notes = append(notes, fmt.Sprintf("the recording reserved up to %s, more than the device memory given (%s): the replays fail where the program did not", FormatBytes(t.PeakReserved), FormatBytes(given)))
		}
		if t.StartReserved > given {
			notes = append(notes, fmt.Sprintf("the start state alone reserves %s, more than the device memory given (%s)", FormatBytes(t.StartReserved), FormatBytes(given)))
		}
		return given, "given", notes
	case t.MallocFailures > 0:
		c := t.PeakReserved
		s := fmt.Sprintf("no OOM event and no device memory given: the capacity is the recorded peak reserved (%s), the most the device is known to hold; the trace shows %s recovered from (the cache released, then a new segment)",
			FormatBytes(c), count(t.MallocFailures, "cudaMalloc failure"))
		if t.FailureBound > c {
			lo, hi := formatApart(c, t.FailureBound)
			s += fmt.Sprintf(", so the device could not hold %s: its capacity lies between %s and that (%d and %d bytes)", hi, lo, c, t.FailureBound-1)
		} else {
			s += fmt.Sprintf("; one failed with only %s reserved + requested: memory outside PyTorch changed during the run", FormatBytes(t.FailureBound))
		}
		notes = append(notes, s+"; pass the device memory to replay another size")
		return c, "malloc_retry", notes
	}
	notes = append(notes, "no OOM event, no recorded cudaMalloc failure and no device memory given: the capacity is unbounded, so the replays compare peaks only and give no OOM verdicts (pass the device memory for them)")
	return 0, "unbounded", notes
}

// matched is how many of the recorded segment events the model reproduced in order, and the
// first event where they part (-1 when none).
func matched(rec, model []allocator.Recorded) (int, int) {
	n := 0
	for n < len(rec) && n < len(model) && rec[n].Size == model[n].Size {
		n++
	}
	switch {
	case n < len(rec) && n < len(model):
		return n, min(rec[n].Event, model[n].Event)
	case n < len(rec):
		return n, rec[n].Event
	case n < len(model):
		return n, model[n].Event
	}
	return n, -1
}

// recordedAllocated sets the trace's own peak allocated on d's fidelity, and says why the
// replays' peak allocated is above it when the trace records requested sizes: the same run
// should not read as 105 MiB here and 103 MiB in replay without a reason.
func recordedAllocated(snap *snapshot.Snapshot, d *WhatIfDevice) {
	p := replayPeaks(snap, d.Device)
	f := &d.Fidelity
	f.RecordedPeakAllocatedBytes, f.SizesAreRequested, f.RecordedPeakAllocatedBasis = p.allocated, p.requested, sizeBasis(p.requested)
	// Only where the text shows two numbers: a few KiB of rounding on 5 GiB is not a question.
	if p.requested && FormatBytes(d.Baseline.PeakAllocatedBytes) != FormatBytes(p.allocated) {
		d.Notes = append(d.Notes, fmt.Sprintf("the trace records requested sizes: its own peak allocated (replay, summarize) is %s in requested bytes; the replays count whole blocks as the allocator hands them out (rounded up, and not split when the rest is too small to split), as PyTorch's allocated_bytes does, so the baseline's peak allocated is %s, and a setting that splits differently changes it",
			FormatBytes(p.allocated), FormatBytes(d.Baseline.PeakAllocatedBytes)))
	}
}

func whatIfDevice(t *allocator.Trace, capacity int64, src string, capNotes []string, base, run *allocator.RunResult, what, baseSet allocator.Settings) WhatIfDevice {
	d := WhatIfDevice{Device: t.Device, PeakAllocatedBasis: sizeBasis(false), CapacityBytes: capacity, CapacitySource: src, Start: t.Start,
		StartReservedBytes: t.StartReserved, StartAllocatedBytes: t.StartAllocated,
		Baseline: whatIfRun(base), WhatIf: whatIfRun(run), OOMs: []WhatIfOOM{}, Notes: []string{}}
	if t.Start == "empty" {
		d.Notes = append(d.Notes, "the trace covers the allocator from its start: the replays start empty")
	} else {
		d.Notes = append(d.Notes, fmt.Sprintf("the trace starts after the allocator did (recording began late, or the ring buffer dropped the oldest events): the replays start from the state at its first event, rebuilt from the final segments and the trace (%s reserved, %s allocated)",
			FormatBytes(t.StartReserved), FormatBytes(t.StartAllocated)))
	}
	d.Notes = append(d.Notes, t.Notes...)
	d.Notes = append(d.Notes, capNotes...)
	f := &d.Fidelity
	f.RecordedSegmentAllocs, f.RecordedSegmentMaps, f.RecordedOOMs = len(t.SegmentAllocs), len(t.SegmentMaps), len(t.OOMs)
	f.ModelSegmentAllocs, f.ModelSegmentMaps = base.Stats.SegmentAllocs, base.Stats.SegmentMaps
	// Peaks are over the trace's events: a state before the first event that no event reaches
	// again (the trace opens by releasing memory) is not the run's peak, and would make every
	// setting's peak the same.
	f.RecordedPeakReservedBytes = t.PeakReservedInTrace
	if t.StartReserved > t.PeakReservedInTrace {
		d.Notes = append(d.Notes, fmt.Sprintf("the state before the trace's first event held %s reserved, more than any point of the trace reaches (%s): the trace opens by releasing memory (an empty_cache(), or the allocator's own release), so the peaks here are over the trace's events",
			FormatBytes(t.StartReserved), FormatBytes(t.PeakReservedInTrace)))
	}
	var mA, mM int
	f.ReproducedSegmentAllocs, mA = matched(t.SegmentAllocs, base.SegmentAllocs)
	f.ReproducedSegmentMaps, mM = matched(t.SegmentMaps, base.SegmentMaps)
	f.FirstMismatchEvent = -1
	for _, m := range []int{mA, mM} {
		if m >= 0 && (f.FirstMismatchEvent < 0 || m < f.FirstMismatchEvent) {
			f.FirstMismatchEvent = m
		}
	}
	for k, i := range t.OOMs {
		bo, wo := base.OOMs[k], run.OOMs[k]
		if !bo.Fits {
			f.ReproducedOOMs++
		} else if f.FirstMismatchEvent < 0 || i < f.FirstMismatchEvent {
			f.FirstMismatchEvent = i
		}
		d.OOMs = append(d.OOMs, WhatIfOOM{EventIndex: i, RequestedBytes: t.Events[i].Size, BaselineFits: bo.Fits,
			WhatIfFits: wo.Fits, HeadroomBytes: wo.Headroom, BaselineHeadroomBytes: bo.Headroom})
	}
	if base.FirstNewOOM >= 0 && (f.FirstMismatchEvent < 0 || base.FirstNewOOM < f.FirstMismatchEvent) {
		f.FirstMismatchEvent = base.FirstNewOOM
	}
	f.Checked = f.RecordedSegmentAllocs+f.RecordedSegmentMaps+f.RecordedOOMs+f.ModelSegmentAllocs+f.ModelSegmentMaps > 0
	f.Exact = f.Checked && f.ReproducedSegmentAllocs == f.RecordedSegmentAllocs && f.ModelSegmentAllocs == f.RecordedSegmentAllocs &&
		f.ReproducedSegmentMaps == f.RecordedSegmentMaps && f.ModelSegmentMaps == f.RecordedSegmentMaps &&
		f.ReproducedOOMs == f.RecordedOOMs && base.NewOOMs == 0
	switch {
	case !f.Checked:
		f.Reason = "the trace records no segment_alloc, segment_map or OOM (the cache was already warm when recording started) and the replay needed none: where blocks were placed cannot be compared with the recording"
	case !f.Exact:
		f.Reason = fidelityReason(t, base, f)
	}
	if f.Reason != "" && f.Checked {
		d.Notes = append(d.Notes, "fidelity below 100%: "+f.Reason)
	}
	if t.EmptyCacheCalls > 0 {
		d.Notes = append(d.Notes, fmt.Sprintf("%s of segment releases are explicit torch.cuda.empty_cache() calls (empty_cache in their stacks, or no new segment right after them): every replay makes them at the same points, so no setting removes the cudaFree and cudaMalloc calls they cause (most of the counts above when they are many); removing the calls does (replay / fragmentation name the code that makes them)", count(t.EmptyCacheCalls, "run")))
	}
	if len(t.OOMs) > 0 {
		d.Notes = append(d.Notes, fmt.Sprintf("what follows the first OOM (event %d) is the program's reaction to it: the replays follow the recording there too, and a request they serve at an OOM event is given back at once", t.OOMs[0]))
	}
	if run.NewOOMs > 0 {
		d.Notes = append(d.Notes, fmt.Sprintf("the what-if cannot serve %s the program made (the first at event %d): these settings would have caused an OOM the recording does not have",
			count(run.NewOOMs, "allocation"), run.FirstNewOOM))
	}
	if what.GCThreshold > 0 {
		if capacity > 0 {
			d.Notes = append(d.Notes, "garbage_collection_threshold acts only when a memory fraction is set (torch.cuda.set_per_process_memory_fraction): the replay assumes one that allows the whole capacity")
		} else {
			d.Notes = append(d.Notes, "garbage_collection_threshold is a fraction of the device's memory: with an unbounded capacity it has no effect in the replay")
		}
	}
	if what.ExpandableSegments && !baseSet.ExpandableSegments && t.Streams > 1 {
		d.Notes = append(d.Notes, fmt.Sprintf("the trace allocates on %d streams, and expandable segments keep one range per pool and stream: blocks cached on one stream still cannot serve another", t.Streams))
	}
	return d
}

// fidelityReason says where and how the baseline departs from the recording.
func fidelityReason(t *allocator.Trace, base *allocator.RunResult, f *WhatIfFidelity) string {
	var parts []string
	if f.ReproducedSegmentAllocs < f.RecordedSegmentAllocs || f.ModelSegmentAllocs != f.RecordedSegmentAllocs {
		n := f.ReproducedSegmentAllocs
		s := fmt.Sprintf("the baseline reproduces the first %d of %d recorded segment_allocs", n, f.RecordedSegmentAllocs)
		switch {
		case n < len(t.SegmentAllocs) && n < len(base.SegmentAllocs):
			s += fmt.Sprintf("; the next one (event %d) was %s in the recording and %s in the replay (at event %d)",
				t.SegmentAllocs[n].Event, FormatBytes(t.SegmentAllocs[n].Size), FormatBytes(base.SegmentAllocs[n].Size), base.SegmentAllocs[n].Event)
		case n < len(t.SegmentAllocs):
			s += fmt.Sprintf("; the replay needs no segment where the recording cudaMalloc'd %s at event %d", FormatBytes(t.SegmentAllocs[n].Size), t.SegmentAllocs[n].Event)
		case n < len(base.SegmentAllocs):
			s += fmt.Sprintf("; the replay cudaMallocs %s more (%s at event %d first)", count(len(base.SegmentAllocs)-n, "segment"), FormatBytes(base.SegmentAllocs[n].Size), base.SegmentAllocs[n].Event)
		}
		parts = append(parts, s)
	}
	if f.ReproducedSegmentMaps < f.RecordedSegmentMaps || f.ModelSegmentMaps != f.RecordedSegmentMaps {
		parts = append(parts, fmt.Sprintf("the baseline reproduces the first %d of %d recorded segment_maps (and maps %d in all)", f.ReproducedSegmentMaps, f.RecordedSegmentMaps, f.ModelSegmentMaps))
	}
	if f.ReproducedOOMs < f.RecordedOOMs {
		parts = append(parts, fmt.Sprintf("the baseline serves %d of the %d recorded OOMs (the capacity or the replayed placement differs from the device's)", f.RecordedOOMs-f.ReproducedOOMs, f.RecordedOOMs))
	}
	if base.NewOOMs > 0 {
		parts = append(parts, fmt.Sprintf("the baseline cannot serve %s the program made (first at event %d): the capacity is below what the device held then", count(base.NewOOMs, "allocation"), base.FirstNewOOM))
	}
	var why []string
	if t.ForeignSegments > 0 {
		why = append(why, fmt.Sprintf("%d of the recorded segment sizes are ones PyTorch's native caching allocator never makes (it cudaMallocs 2 MiB, 20 MiB or a multiple of 2 MiB from 10 MiB): another allocator backend (cudaMallocAsync, a custom allocator) or a synthetic file wrote this trace", t.ForeignSegments))
	}
	if t.Start == "reconstructed" {
		why = append(why, "the start state is rebuilt, and blocks freed during the trace have inferred sizes")
	}
	if len(t.SegmentAllocs) > 0 && f.RecordedOOMs == 0 && t.MallocFailures == 0 && f.ModelSegmentAllocs > f.RecordedSegmentAllocs {
		why = append(why, "the recording may have released cache that the replay kept (an empty_cache() without stacks followed at once by a new segment looks like the allocator's own retry)")
	}
	if t.MallocFailures > 0 && len(t.OOMs) == 0 {
		why = append(why, "the capacity is inferred from cudaMalloc failures, not measured")
	}
	why = append(why, "streams' frees completed inside the allocator (cross-stream events) are replayed where the trace recorded them")
	return strings.Join(parts, "; ") + " (possible causes: " + strings.Join(why, "; ") + ")"
}

// Text renders the what-if for a person or an agent.
func (r *WhatIfResult) Text() string {
	var b strings.Builder
	switch {
	case r.Recommend && !r.ChangeNeeded:
		if base, _ := r.runTotals(); base.CacheFlushes > 0 {
			fmt.Fprintf(&b, "what-if on %s: no OOM to avoid, but the file's own settings flush the whole cache %s; the best of %s tried: %s (recorded with %s)\n", r.Path, count(base.CacheFlushes, "time"), count(len(r.Recommendations), "setting"), confName(r.Settings), confName(r.BaselineSettings))
			break
		}
		fmt.Fprintf(&b, "what-if on %s: no OOM to avoid, so no setting needs changing; the lowest peak reserved of %s tried: %s (recorded with %s)\n", r.Path, count(len(r.Recommendations), "setting"), confName(r.Settings), confName(r.BaselineSettings))
	case r.Recommend:
		fmt.Fprintf(&b, "what-if on %s: best of %s tried: %s (recorded with %s)\n", r.Path, count(len(r.Recommendations), "setting"), confName(r.Settings), confName(r.BaselineSettings))
	default:
		fmt.Fprintf(&b, "what-if on %s: %s (recorded with %s)\n", r.Path, confName(r.Settings), confName(r.BaselineSettings))
	}
	for _, d := range r.Devices {
		fmt.Fprintf(&b, "device %d: ", d.Device)
		switch d.CapacitySource {
		case "oom_event":
			fmt.Fprintf(&b, "capacity %s (reserved + device_free at the first OOM)", FormatBytes(d.CapacityBytes))
		case "given":
			fmt.Fprintf(&b, "capacity %s (given)", FormatBytes(d.CapacityBytes))
		case "malloc_retry":
			fmt.Fprintf(&b, "capacity %s (the recorded peak reserved: the trace shows cudaMalloc failures)", FormatBytes(d.CapacityBytes))
		default:
			b.WriteString("capacity unbounded (peaks only)")
		}
		fmt.Fprintf(&b, ", start %s", d.Start)
		if d.Start == "reconstructed" {
			fmt.Fprintf(&b, " (%s reserved, %s allocated)", FormatBytes(d.StartReservedBytes), FormatBytes(d.StartAllocatedBytes))
		}
		b.WriteString("\n")
		f := d.Fidelity
		if f.Checked {
			fmt.Fprintf(&b, "  fidelity: the baseline (the file's own settings) reproduces %d of %d recorded segment_allocs in order", f.ReproducedSegmentAllocs, f.RecordedSegmentAllocs)
			if f.RecordedSegmentMaps > 0 || f.ModelSegmentMaps > 0 {
				fmt.Fprintf(&b, ", %d of %d segment_maps", f.ReproducedSegmentMaps, f.RecordedSegmentMaps)
			}
			if f.RecordedOOMs > 0 {
				fmt.Fprintf(&b, ", %d of %d OOMs", f.ReproducedOOMs, f.RecordedOOMs)
			}
			if f.Exact {
				b.WriteString(": exact")
			} else {
				fmt.Fprintf(&b, ": not exact from event %d", f.FirstMismatchEvent)
			}
			fmt.Fprintf(&b, " (recorded peak reserved %s", FormatBytes(f.RecordedPeakReservedBytes))
			if f.RecordedPeakAllocatedBytes > 0 {
				fmt.Fprintf(&b, ", peak allocated %s", FormatBytes(f.RecordedPeakAllocatedBytes))
				if f.SizesAreRequested {
					b.WriteString(" in requested bytes")
				}
			}
			b.WriteString(")\n")
		} else {
			fmt.Fprintf(&b, "  fidelity: cannot be checked: %s\n", f.Reason)
		}
		fmt.Fprintf(&b, "  %-18s %12s %12s\n", "", "baseline", "what-if")
		fmt.Fprintf(&b, "  %-18s %12s %12s\n", "peak reserved", FormatBytes(d.Baseline.PeakReservedBytes), FormatBytes(d.WhatIf.PeakReservedBytes))
		fmt.Fprintf(&b, "  %-18s %12s %12s\n", "peak allocated", FormatBytes(d.Baseline.PeakAllocatedBytes), FormatBytes(d.WhatIf.PeakAllocatedBytes))
		fmt.Fprintf(&b, "  %-18s %12d %12d\n", "cudaMalloc calls", d.Baseline.CudaMallocCalls, d.WhatIf.CudaMallocCalls)
		fmt.Fprintf(&b, "  %-18s %12d %12d\n", "OOMs", d.Baseline.OOMCount, d.WhatIf.OOMCount)
		if d.Baseline.CacheFlushes+d.WhatIf.CacheFlushes > 0 {
			fmt.Fprintf(&b, "  %-18s %12d %12d\n", "cache flushes", d.Baseline.CacheFlushes, d.WhatIf.CacheFlushes)
			fmt.Fprintf(&b, "  %-18s %12d %12d\n", "cudaFree calls", d.Baseline.CudaFreeCalls, d.WhatIf.CudaFreeCalls)
		}
		for _, o := range d.OOMs {
			fmt.Fprintf(&b, "  OOM at event %d (%s requested): baseline %s; what-if %s\n", o.EventIndex, FormatBytes(o.RequestedBytes),
				fitText(o.BaselineFits, o.BaselineHeadroomBytes), fitText(o.WhatIfFits, o.HeadroomBytes))
		}
		for _, n := range d.Notes {
			fmt.Fprintf(&b, "  note: %s\n", n)
		}
	}
	if len(r.Recommendations) > 0 {
		b.WriteString("settings tried, best first (fewest OOMs, then fewest cache flushes, then lowest peak reserved, then fewest cudaMalloc calls):\n")
		for _, c := range r.Recommendations {
			fmt.Fprintf(&b, "  %d. %s: %s", c.Rank, confName(c.Settings), count(c.OOMCount, "OOM"))
			if c.OOMsAvoided > 0 {
				fmt.Fprintf(&b, " (%d recorded avoided)", c.OOMsAvoided)
			}
			if c.CacheFlushes > 0 {
				fmt.Fprintf(&b, ", %s", cacheFlushes(c.CacheFlushes))
			}
			fmt.Fprintf(&b, ", peak reserved %s, %s", FormatBytes(c.PeakReservedBytes), count(c.CudaMallocCalls, "cudaMalloc call"))
			if c.Baseline {
				b.WriteString(" [the file's own]")
			}
			if c.Settings.GarbageCollectionThreshold > 0 {
				b.WriteString(" [needs torch.cuda.set_per_process_memory_fraction]")
			}
			b.WriteString("\n")
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	return b.String()
}

// cacheFlushes counts flushes: "1 cache flush", "39 cache flushes".
func cacheFlushes(n int) string {
	if n == 1 {
		return "1 cache flush"
	}
	return fmt.Sprintf("%d cache flushes", n)
}

// runTotals sums the cache flushes and cudaFree calls of the baseline and of the what-if over
// the devices.
func (r *WhatIfResult) runTotals() (base, what WhatIfRun) {
	for _, d := range r.Devices {
		base.CacheFlushes += d.Baseline.CacheFlushes
		base.CudaFreeCalls += d.Baseline.CudaFreeCalls
		what.CacheFlushes += d.WhatIf.CacheFlushes
		what.CudaFreeCalls += d.WhatIf.CudaFreeCalls
	}
	return base, what
}

func fitText(fits bool, headroom int64) string {
	if fits {
		return fmt.Sprintf("fits (%s to spare)", FormatBytes(headroom))
	}
	return fmt.Sprintf("fails (%s short)", FormatBytes(-headroom))
}

// OOMWhatIf is the replay of the trace with expandable segments, at one OOM event.
type OOMWhatIf struct {
	Setting       string `json:"setting"`
	Avoided       bool   `json:"avoided"`
	HeadroomBytes int64  `json:"headroom_bytes"`
	// BaselineReproduced: the replay with the file's own settings fails here too, as recorded.
	BaselineReproduced bool   `json:"baseline_reproduced"`
	Exact              bool   `json:"exact"`
	CapacityBytes      int64  `json:"capacity_bytes"`
	Start              string `json:"start" jsonschema:"enum=empty,enum=reconstructed"`
}

// expandableWhatIf replays device dev's trace with expandable segments on (and with the file's
// own settings, to check the replay) at the capacity of its first OOM. It returns the result
// per oom event index, or nil when the file already uses expandable segments or the replay
// cannot run. Its error is only ctx's, or a panic of the model (errModel): the OOM report then
// fails as a bare panic would have made it, instead of quietly leaving the replay out.
//
// The two replays are independent and run on two goroutines (OOMReport leaves a core idle
// otherwise); the what-if stops after the last oom event, the only outcomes it reports.
func expandableWhatIf(ctx context.Context, snap *snapshot.Snapshot, dev int) (out map[int]*OOMWhatIf, err error) {
	defer func() {
		if p := recover(); p != nil {
			out, err = nil, fmt.Errorf("%w: %v", errModel, p)
		}
	}()
	base := allocator.FromSnapshot(snap.Settings)
	if base.ExpandableSegments {
		return nil, nil
	}
	t, err := allocator.NewTrace(snap, dev, base)
	if err != nil || len(t.OOMs) == 0 {
		return nil, nil
	}
	c, _, _ := whatIfCapacity(t, 0)
	what := base
	what.ExpandableSegments = true
	// A failed replay (a start state the model cannot install) stops the other at once: the
	// answer needs both.
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		r   *allocator.RunResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := runRecovered(rctx, t, allocator.RunOptions{Settings: base, Capacity: c, Baseline: true})
		if err != nil {
			cancel()
		}
		done <- result{r, err}
	}()
	wr, werr := runRecovered(rctx, t, allocator.RunOptions{Settings: what, Capacity: c, Events: t.OOMs[len(t.OOMs)-1] + 1})
	if werr != nil {
		cancel()
	}
	b := <-done
	for _, e := range []error{werr, b.err} {
		if errors.Is(e, errModel) {
			return nil, e
		}
	}
	if werr != nil || b.err != nil {
		return nil, ctx.Err()
	}
	d := whatIfDevice(t, c, "oom_event", nil, b.r, wr, what, base)
	out = map[int]*OOMWhatIf{}
	for _, o := range d.OOMs {
		out[o.EventIndex] = &OOMWhatIf{Setting: "expandable_segments:True", Avoided: o.WhatIfFits, HeadroomBytes: o.HeadroomBytes,
			BaselineReproduced: !o.BaselineFits, Exact: d.Fidelity.Exact, CapacityBytes: c, Start: t.Start}
	}
	return out, nil
}

// applyOOMWhatIf attaches the expandable-segments replay to an OOM and cites it in the verdict.
func applyOOMWhatIf(o *OOMEvent, w *OOMWhatIf) {
	if w == nil {
		return
	}
	o.ExpandableWhatIf = w
	s := oomWhatIfSentence(w)
	// The fragmentation verdict cites the replay; other verdicts only when it contradicts them
	// (expandable segments would have served the request after all), and only a replay that
	// reproduces the recorded OOM may contradict a verdict or change a fix (the advice rules
	// oom.frag.* read it).
	if o.Verdict != VerdictFragmentation && (!w.Avoided || !w.BaselineReproduced) {
		return
	}
	o.Explanation += "; " + s
	o.advise()
}

// oomWhatIfSentence words what the expandable-segments replay found for an OOM.
func oomWhatIfSentence(w *OOMWhatIf) string {
	var s string
	if w.Avoided {
		s = fmt.Sprintf("replaying the trace with expandable_segments:True, this request fits with %s to spare", FormatBytes(w.HeadroomBytes))
	} else {
		s = fmt.Sprintf("replaying the trace with expandable_segments:True, this request still fails (%s short)", FormatBytes(-w.HeadroomBytes))
	}
	if !w.BaselineReproduced {
		s += " (indicative only: the replay with the file's own settings does not reproduce this OOM)"
	}
	return s
}

// errModel marks a panic of the allocator model turned into an error.
var errModel = errors.New("internal error in the allocator model (please report it)")

// runRecovered runs one replay on a worker goroutine, where a panic (a model bug on an unusual
// trace) would otherwise end the whole process, the MCP server included: it becomes an error
// (errModel).
func runRecovered(ctx context.Context, t *allocator.Trace, ro allocator.RunOptions) (r *allocator.RunResult, err error) {
	defer func() {
		if p := recover(); p != nil {
			r, err = nil, fmt.Errorf("%w: %v", errModel, p)
		}
	}()
	return t.Run(ctx, ro)
}
