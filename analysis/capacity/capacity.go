// Package capacity answers "what is the largest batch (or sequence length) that fits this
// device, and what is the peak at another size?" from a run's own traces: each allocation's
// size is fitted across snapshots of one workload recorded at different sizes (the exact
// method, two_points), or scaled from its role when there is one snapshot (the estimate,
// roles); the trace of the peak step at a new size is replayed through the allocator model, so
// that rounding, caching and fragmentation count.
//
// It may know analysis/allocator (the replay), analysis/snapshot (the traces) and the analysis
// package's role API (roles, sites, steps, byte formatting). It never imports tools, MCP or
// anything that prints: the CLI, --json and the MCP tool render its one result struct.
package capacity

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"github.com/memsnap/memsnap/analysis"
	"github.com/memsnap/memsnap/analysis/allocator"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// Methods.
const (
	MethodTwoPoints = "two_points"
	MethodRoles     = "roles"
)

// Dimensions.
const (
	DimensionBatch = "batch"
	DimensionSeq   = "seq"
)

// Sources of the device's capacity.
const (
	SourceCapacity     = "capacity"
	SourceDeviceMemory = "device_memory"
	SourceOOMEvent     = "oom_event"
	SourceUnknown      = "unknown"
)

// Answer bounds.
const (
	// MaxPredictions bounds the predictions of one device (the recorded sizes, the sizes asked
	// for, the largest that fits and the next).
	MaxPredictions = 24
	// MaxUnmatched bounds the unmatched rows of one device (unmatched_total counts them all).
	MaxUnmatched = 12
	// maxSearchSize is the largest size the search tries.
	maxSearchSize = 1 << 24
)

// File is one snapshot of the workload and its size (batch size or sequence length).
type File struct {
	Snap *snapshot.Snapshot
	Size int64
}

// Options select what to answer.
type Options struct {
	// Dimension is what the sizes count: "batch" (default) or "seq".
	Dimension string
	// Device, when set, answers only that device.
	Device *int
	// Capacity is what PyTorch may reserve on the device (0: not given); DeviceMemory the
	// GPU's total memory (0: not given). At most one.
	Capacity     int64
	DeviceMemory int64
	// Predict are more sizes to predict.
	Predict []int64
}

// FileInfo names a file and its size.
type FileInfo struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
}

// Prediction is the replay of the predicted trace at one size.
type Prediction struct {
	Size               int64 `json:"size"`
	PeakAllocatedBytes int64 `json:"peak_allocated_bytes"`
	PeakReservedBytes  int64 `json:"peak_reserved_bytes"`
	// Fits is null when the capacity is unknown.
	Fits *bool `json:"fits" jsonschema:"oneof_type=boolean;null"`
	// FirstOOMSite / FirstOOMRole / FirstOOMBytes: the allocation that would fail first
	// (empty when it fits). The peaks of a size that fails are what its step would need on a
	// device without limit.
	FirstOOMSite  string `json:"first_oom_site"`
	FirstOOMRole  string `json:"first_oom_role,omitempty"`
	FirstOOMBytes int64  `json:"first_oom_bytes,omitempty"`
	// Recorded: a file was recorded at this size.
	Recorded bool `json:"recorded"`
}

// Fidelity compares a recorded file's own peak with the prediction at its size.
type Fidelity struct {
	File               string `json:"file"`
	RecordedSize       int64  `json:"recorded_size"`
	RecordedPeakBytes  int64  `json:"recorded_peak_bytes"`
	PredictedPeakBytes int64  `json:"predicted_peak_bytes"`
	// ErrorPercent is (predicted − recorded) / recorded × 100.
	ErrorPercent float64 `json:"error_percent"`
	// RecordedOOM: the file's trace ends in an OOM: its recorded peak is the peak before it,
	// and error_percent is not computed (0); PredictedFits says whether the replay at its size
	// fails too (null: capacity unknown).
	RecordedOOM   bool  `json:"recorded_oom"`
	PredictedFits *bool `json:"predicted_fits" jsonschema:"oneof_type=boolean;null"`
}

// Unmatched is a group of allocations (one site) found in some files only.
type Unmatched struct {
	Site  string `json:"site"`
	File  string `json:"file"`
	Count int    `json:"count"`
	Bytes int64  `json:"bytes"`
	// LargestBytes is the largest of them (the allocations need not be alive together).
	LargestBytes int64  `json:"largest_bytes"`
	Reason       string `json:"reason"`
}

// DeviceAnswer is the capacity answer for one device.
type DeviceAnswer struct {
	Device    int    `json:"device"`
	Method    string `json:"method" jsonschema:"enum=two_points,enum=roles"`
	Dimension string `json:"dimension" jsonschema:"enum=batch,enum=seq"`
	// FixedBytes + PerUnitBytes × size approximates the peak allocated (the predictions come
	// from the replay).
	FixedBytes   int64        `json:"fixed_bytes"`
	PerUnitBytes int64        `json:"per_unit_bytes"`
	Predictions  []Prediction `json:"predictions"`
	// MaxSize is the largest size whose replay completes within DeviceBytes (null when the
	// capacity is unknown; MaxSizeNote says what to pass).
	MaxSize           *int64 `json:"max_size" jsonschema:"oneof_type=integer;null"`
	MaxSizeNote       string `json:"max_size_note,omitempty"`
	DeviceBytes       int64  `json:"device_bytes"`
	DeviceBytesSource string `json:"device_bytes_source" jsonschema:"enum=capacity,enum=device_memory,enum=oom_event,enum=unknown"`
	// Headline is the one line to act on.
	Headline       string      `json:"headline"`
	Fidelity       []Fidelity  `json:"fidelity"`
	Unmatched      []Unmatched `json:"unmatched"`
	UnmatchedTotal int         `json:"unmatched_total"`
	Assumptions    []string    `json:"assumptions"`
	// ReferenceFile is the file whose peak step is replayed at the predicted sizes;
	// PeakStepEvents its first and last+1 trace events.
	ReferenceFile  string   `json:"reference_file"`
	PeakStepEvents [2]int   `json:"peak_step_events"`
	Fits           FitCount `json:"fit_counts"`
}

// FitCount counts the replayed allocations by how their size was predicted.
type FitCount struct {
	Fixed     int `json:"fixed"`
	Linear    int `json:"linear"`
	Quadratic int `json:"quadratic"`
	// Scaled: roles method, allocations scaled with the size.
	Scaled int `json:"scaled"`
}

// Answer is the capacity answer.
type Answer struct {
	Files     []FileInfo     `json:"files"`
	Dimension string         `json:"dimension" jsonschema:"enum=batch,enum=seq"`
	Devices   []DeviceAnswer `json:"devices"`
	Notes     []string       `json:"notes"`
}

// ErrNoTrace: a file has no allocation events.
var ErrNoTrace = allocator.ErrNoTrace

// Analyze answers the capacity question for files (one workload at the sizes given).
func Analyze(ctx context.Context, files []File, opt Options) (*Answer, error) {
	if len(files) == 0 {
		return nil, errors.New("capacity: give at least one snapshot and its size")
	}
	switch opt.Dimension {
	case "":
		opt.Dimension = DimensionBatch
	case DimensionBatch, DimensionSeq:
	default:
		return nil, fmt.Errorf("dimension %q: want batch or seq", opt.Dimension)
	}
	if opt.Capacity > 0 && opt.DeviceMemory > 0 {
		return nil, errors.New("give the capacity (what PyTorch may reserve) or the device memory (the GPU's total), not both")
	}
	seen := map[int64]string{}
	res := &Answer{Dimension: opt.Dimension, Devices: []DeviceAnswer{}, Notes: []string{}}
	for _, f := range files {
		if f.Size <= 0 {
			return nil, fmt.Errorf("%s: size %d: a %s must be positive", f.Snap.Path, f.Size, unitName(opt.Dimension))
		}
		if p, ok := seen[f.Size]; ok {
			return nil, fmt.Errorf("%s and %s have the same size %d: each file must be recorded at a different %s", p, f.Snap.Path, f.Size, unitName(opt.Dimension))
		}
		seen[f.Size] = f.Snap.Path
		res.Files = append(res.Files, FileInfo{Path: f.Snap.Path, Size: f.Size})
	}
	for _, k := range opt.Predict {
		if k <= 0 || k > maxSearchSize {
			return nil, fmt.Errorf("predict %d: a %s between 1 and %d", k, unitName(opt.Dimension), maxSearchSize)
		}
	}
	// The devices every file traces.
	var devs []int
	for d := range files[0].Snap.DeviceTraces {
		all := true
		for _, f := range files {
			all = all && hasAllocs(f.Snap, d)
		}
		if all {
			devs = append(devs, d)
		} else if hasAllocs(files[0].Snap, d) {
			res.Notes = append(res.Notes, fmt.Sprintf("device %d is traced in some files only: not answered", d))
		}
	}
	for _, f := range files {
		any := false
		for d := range f.Snap.DeviceTraces {
			any = any || hasAllocs(f.Snap, d)
		}
		if !any {
			return nil, fmt.Errorf("%s: capacity planning needs the trace, and the file has none (%w; only its final state): record history with torch.cuda.memory._record_memory_history() before the run, then dump the snapshot with torch.cuda.memory._dump_snapshot()", f.Snap.Path, ErrNoTrace)
		}
	}
	if opt.Device != nil {
		if !slices.Contains(devs, *opt.Device) {
			return nil, fmt.Errorf("device %d has no allocation events in every file (devices traced in all: %v)", *opt.Device, devs)
		}
		devs = []int{*opt.Device}
	}
	if len(devs) == 0 {
		return nil, errors.New("no device is traced in every file: the files must come from the same workload")
	}
	roles := make([]*analysis.Roles, len(files))
	rolesOf := func(i int) (*analysis.Roles, error) {
		if roles[i] == nil {
			r, err := analysis.NewRoles(files[i].Snap, analysis.AttributionOptions{})
			if err != nil {
				return nil, err
			}
			roles[i] = r
		}
		return roles[i], nil
	}
	for _, d := range devs {
		dv, err := analyzeDevice(ctx, files, d, opt, rolesOf)
		if err != nil {
			return nil, err
		}
		res.Devices = append(res.Devices, *dv)
	}
	return res, nil
}

func unitName(dim string) string {
	if dim == DimensionSeq {
		return "sequence length"
	}
	return "batch size"
}

// shortUnit is the word before a size in sentences: "batch 24", "seq 4096".
func shortUnit(dim string) string {
	if dim == DimensionSeq {
		return "seq"
	}
	return "batch"
}

// model predicts the reference trace's allocation sizes at any size.
type model struct {
	ref   *devTrace
	fits  []fit // per rec of ref
	count FitCount
}

func (m *model) sizesAt(k int64) []int64 {
	out := make([]int64, len(m.fits))
	for i, f := range m.fits {
		out[i] = f.sizeAt(float64(k))
	}
	return out
}

// siteNamer renders allocation sites.
type siteNamer struct {
	rolesOf func(int) (*analysis.Roles, error)
}

// name is the site ("model.py:58") and role of rec r of t.
func (s siteNamer) name(t *devTrace, r rec) (string, string) {
	if r.at < 0 {
		return analysis.SitePreTrace, ""
	}
	ro, err := s.rolesOf(t.file)
	if err != nil {
		return "?", ""
	}
	at := ro.Live(t.dev, r.stack, r.addr, r.size, r.at, r.at)
	return shortSite(at), at.Category
}

func shortSite(at analysis.Attribution) string {
	if at.File != "" && at.Line > 0 {
		return fmt.Sprintf("%s:%d", filepath.Base(filepath.FromSlash(strings.ReplaceAll(at.File, "\\", "/"))), at.Line)
	}
	return at.Site
}

func analyzeDevice(ctx context.Context, files []File, dev int, opt Options, rolesOf func(int) (*analysis.Roles, error)) (*DeviceAnswer, error) {
	traces := make([]*devTrace, len(files))
	for i, f := range files {
		traces[i] = readTrace(f.Snap, dev, i, f.Size)
	}
	// The reference: the largest size whose trace does not end in an OOM (else the largest).
	ref := -1
	for i, t := range traces {
		if ref < 0 || (t.oom < 0 && traces[ref].oom >= 0) || ((t.oom < 0) == (traces[ref].oom < 0) && t.size > traces[ref].size) {
			ref = i
		}
	}
	rt := traces[ref]
	out := &DeviceAnswer{Device: dev, Dimension: opt.Dimension, Predictions: []Prediction{}, Fidelity: []Fidelity{}, Unmatched: []Unmatched{},
		Assumptions: []string{}, ReferenceFile: rt.path}
	names := siteNamer{rolesOf}
	var m *model
	var unmatched []Unmatched
	var err error
	if len(files) >= 2 {
		out.Method = MethodTwoPoints
		// Positions in the step: with step starts in every file, occurrences count per step.
		// The steps must be found the same way in every file (annotations, phases, …).
		starts := make([][]int, len(traces))
		all, source := true, ""
		for i := range traces {
			if ro, err := rolesOf(i); err == nil {
				st := ro.Steps(dev)
				starts[i] = st.Starts
				if i == 0 {
					source = st.Source
				}
				all = all && st.Source == source
			}
			all = all && len(starts[i]) > 0
		}
		if all {
			for i, t := range traces {
				t.numberSteps(starts[i])
			}
		}
		m, unmatched = fitTwoPoints(traces, ref, names)
		out.Assumptions = append(out.Assumptions, twoPointAssumptions(traces, ref, m)...)
	} else {
		out.Method = MethodRoles
		if m, err = fitRoles(rt, rolesOf, opt.Dimension, &out.Assumptions); err != nil {
			return nil, err
		}
	}
	out.Fits = m.count
	slices.SortFunc(unmatched, func(a, b Unmatched) int { return cmp.Compare(b.Bytes, a.Bytes) })
	out.UnmatchedTotal = len(unmatched)
	out.Unmatched = append(out.Unmatched, unmatched[:min(len(unmatched), MaxUnmatched)]...)

	// Each file's own peak: its recorded allocations replayed, unbounded. The reference's
	// says where its peak step is.
	own := make([]outcome, len(traces))
	for i, t := range traces {
		sizes := make([]int64, len(t.recs))
		for j, r := range t.recs {
			sizes[j] = r.size
		}
		if own[i], err = replay(ctx, t, newProgram(t, 0, t.events), sizes, t.set, 0); err != nil {
			return nil, err
		}
	}
	// The peak step, and the step before it: that one rebuilds the cache the peak step
	// starts with (the segments earlier steps left, their holes), at the predicted size.
	from, to := 0, rt.events
	warm := false // a complete step before the peak step is replayed
	if ro, err := rolesOf(ref); err == nil && own[ref].peakEvent >= 0 {
		starts := ro.Steps(dev).Starts
		j := -1
		for k, s := range starts {
			if s <= own[ref].peakEvent {
				j = k
			}
		}
		if j >= 0 && j+1 < len(starts) {
			to = min(starts[j+1], rt.events)
		}
		if j >= 1 {
			from, warm = starts[j-1], true
		} else if j == 0 && rt.partial() {
			// Before the first step start the trace holds part of a step (a ring buffer,
			// recording switched on mid-step) whose earlier allocations it never saw: start at
			// the step boundary, with what is alive there.
			from = starts[0]
		}
	}
	out.PeakStepEvents = [2]int{from, to}
	prog := newProgram(rt, from, to)
	switch {
	case warm && (from > 0 || to < rt.events):
		out.Assumptions = append(out.Assumptions, fmt.Sprintf("only the peak step and the step before it are replayed (trace events %d to %d of %s): they start from the %d allocations alive at their start, packed into fresh segments; the step before rebuilds the cache the peak step meets",
			from, to-1, filepath.Base(rt.path), prog.seeds))
	case from > 0:
		out.Assumptions = append(out.Assumptions, fmt.Sprintf("no complete step precedes the peak step in %s's trace: the replay starts at the peak step (trace events %d to %d) from the %d allocations alive there, packed into fresh segments, so the cache earlier steps leave behind is missing and the peak reserved may be low (record one more step for it)",
			filepath.Base(rt.path), from, to-1, prog.seeds))
	case to < rt.events:
		out.Assumptions = append(out.Assumptions, fmt.Sprintf("the trace of %s is replayed up to the end of its peak step (trace event %d)", filepath.Base(rt.path), to-1))
	}
	out.Assumptions = append(out.Assumptions, fmt.Sprintf("replayed with %s's allocator settings (%s), every allocation in the default pool", filepath.Base(rt.path), confName(rt.set)))

	capBytes, src, capNote, err := deviceBytes(traces, dev, opt)
	if err != nil {
		return nil, err
	}
	out.DeviceBytes, out.DeviceBytesSource = capBytes, src
	if capNote != "" {
		out.Assumptions = append(out.Assumptions, capNote)
	}
	predict := func(k int64) (Prediction, error) {
		o, err := replay(ctx, rt, prog, m.sizesAt(k), rt.set, capBytes)
		if err != nil {
			return Prediction{}, err
		}
		p := Prediction{Size: k, PeakAllocatedBytes: o.peakAllocated, PeakReservedBytes: o.peakReserved}
		if capBytes > 0 {
			fits := o.failed < 0
			p.Fits = &fits
			if !fits {
				p.FirstOOMSite, p.FirstOOMRole = names.name(rt, rt.recs[o.failed])
				p.FirstOOMBytes = o.failedBytes
			}
		}
		return p, nil
	}
	cache := map[int64]Prediction{}
	at := func(k int64) (Prediction, error) {
		if p, ok := cache[k]; ok {
			return p, nil
		}
		p, err := predict(k)
		if err == nil {
			cache[k] = p
		}
		return p, err
	}

	// full is the prediction at k with, when k fails, the peaks its step would need.
	full := func(k int64) (Prediction, error) {
		p, err := at(k)
		if err != nil || p.Fits == nil || *p.Fits {
			return p, err
		}
		o, err := replay(ctx, rt, prog, m.sizesAt(k), rt.set, 0)
		p.PeakAllocatedBytes, p.PeakReservedBytes = o.peakAllocated, o.peakReserved
		return p, err
	}

	// Fidelity: each recorded size predicted, against the file's own peak.
	for i, t := range traces {
		p, err := full(t.size)
		if err != nil {
			return nil, err
		}
		f := Fidelity{File: t.path, RecordedSize: t.size, RecordedPeakBytes: own[i].peakAllocated, PredictedPeakBytes: p.PeakAllocatedBytes, RecordedOOM: t.oom >= 0, PredictedFits: p.Fits}
		if f.RecordedPeakBytes > 0 && !f.RecordedOOM {
			f.ErrorPercent = math.Round(float64(f.PredictedPeakBytes-f.RecordedPeakBytes)/float64(f.RecordedPeakBytes)*1000) / 10
		}
		out.Fidelity = append(out.Fidelity, f)
	}

	// The linear summary, from the replays at two sizes.
	x1, x2 := traces[0].size, traces[0].size
	for _, t := range traces {
		x1, x2 = min(x1, t.size), max(x2, t.size)
	}
	if x1 == x2 {
		x2 = 2 * x1
	}
	p1, err := full(x1)
	if err != nil {
		return nil, err
	}
	p2, err := full(x2)
	if err != nil {
		return nil, err
	}
	out.PerUnitBytes = int64(math.Round(float64(p2.PeakAllocatedBytes-p1.PeakAllocatedBytes) / float64(x2-x1)))
	out.FixedBytes = p1.PeakAllocatedBytes - out.PerUnitBytes*x1

	// The largest size that fits: a search with the replay.
	want := []int64{}
	for _, t := range traces {
		want = append(want, t.size)
	}
	want = append(want, opt.Predict...)
	if capBytes > 0 {
		fits := func(k int64) (bool, error) {
			p, err := at(k)
			return p.Fits != nil && *p.Fits, err
		}
		g, err := refineGuess(p1, p2, capBytes, func(k int64) (int64, error) {
			p, err := full(k)
			return p.PeakReservedBytes, err
		})
		if err != nil {
			return nil, err
		}
		best, err := search(g, fits)
		if err != nil {
			return nil, err
		}
		if lower, err := firstFailureBelow(best, fits); err != nil {
			return nil, err
		} else if lower < best {
			out.Assumptions = append(out.Assumptions, fmt.Sprintf("the sizes that fit are not one range: %s %d fits, but a smaller one fails (fragmentation: the blocks land differently at each size); max_size is the largest below the first failure found", shortUnit(opt.Dimension), best))
			best = lower
		}
		out.MaxSize = &best
		if best > 0 {
			want = append(want, best)
		}
		if best < maxSearchSize {
			want = append(want, best+1)
		}
	} else {
		out.MaxSizeNote = fmt.Sprintf("no capacity known (no OOM event in the files and none given), so no largest %s: pass what PyTorch may reserve (CLI --capacity, MCP capacity) or the GPU's memory (CLI --device-memory, MCP device_memory)", unitName(opt.Dimension))
	}
	slices.Sort(want)
	want = slices.Compact(want)
	if len(want) > MaxPredictions {
		want = want[:MaxPredictions]
		out.Assumptions = append(out.Assumptions, fmt.Sprintf("predictions limited to %d sizes", MaxPredictions))
	}
	for _, k := range want {
		p, err := full(k)
		if err != nil {
			return nil, err
		}
		p.Recorded = seenSize(traces, k)
		out.Predictions = append(out.Predictions, p)
	}
	out.Headline = headline(out, cache)
	return out, nil
}

func seenSize(traces []*devTrace, k int64) bool {
	for _, t := range traces {
		if t.size == k {
			return true
		}
	}
	return false
}

// search finds the largest size that fits, starting from a guess (refineGuess): it gallops
// away from the guess, by steps doubling from 1, until the answer is
// bracketed between a size that fits and one that fails, then halves the gap. Every probe is a
// replay, so that rounding and fragmentation decide, not the line. 0 when size 1 fails.
func search(guess int64, fits func(int64) (bool, error)) (int64, error) {
	g := min(max(guess, 1), maxSearchSize)
	step := int64(1)
	ok, err := fits(g)
	if err != nil {
		return 0, err
	}
	lo, hi := int64(0), int64(0) // lo fits (0: none known), hi fails
	if ok {
		lo = g
		for {
			if lo >= maxSearchSize {
				return maxSearchSize, nil
			}
			k := min(lo+step, maxSearchSize)
			ok, err := fits(k)
			if err != nil {
				return 0, err
			}
			if !ok {
				hi = k
				break
			}
			lo, step = k, 2*step
		}
	} else {
		hi = g
		for hi > 1 {
			k := max(hi-step, 1)
			ok, err := fits(k)
			if err != nil {
				return 0, err
			}
			if ok {
				lo = k
				break
			}
			hi, step = k, 2*step
		}
		if lo == 0 {
			return 0, nil
		}
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		ok, err := fits(mid)
		if err != nil {
			return 0, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, nil
}

// firstFailureBelow checks the few sizes below best (a size that fits): when one fails, the
// answer is the largest size below it that fits, checked again the same way. It returns best
// when the sizes below it fit.
func firstFailureBelow(best int64, fits func(int64) (bool, error)) (int64, error) {
	const window = 2
	for probes := 0; best > 0 && probes < 64; {
		failed := int64(0)
		for k := best - 1; k >= max(1, best-window); k-- {
			probes++
			ok, err := fits(k)
			if err != nil {
				return 0, err
			}
			if !ok {
				failed = k
				break
			}
		}
		if failed == 0 {
			return best, nil
		}
		best = failed - 1
		for best > 0 && probes < 64 {
			probes++
			ok, err := fits(best)
			if err != nil {
				return 0, err
			}
			if ok {
				break
			}
			best--
		}
	}
	return best, nil
}

// refineGuess improves the linear guess by the secant method on the peak reserved the step
// needs (reserved(k), a replay without a capacity): where that curve meets the capacity is
// within a size or two of where the replays start failing, so the exact search that follows
// takes few steps. At most three replays.
func refineGuess(p1, p2 Prediction, c int64, reserved func(int64) (int64, error)) (int64, error) {
	g := guessSize(p1, p2, c)
	xa, ra := p2.Size, p2.PeakReservedBytes
	for range 3 {
		if g == xa {
			return g, nil
		}
		rg, err := reserved(g)
		if err != nil {
			return 0, err
		}
		next := guessSize(Prediction{Size: xa, PeakReservedBytes: ra}, Prediction{Size: g, PeakReservedBytes: rg}, c)
		if xa > g {
			next = guessSize(Prediction{Size: g, PeakReservedBytes: rg}, Prediction{Size: xa, PeakReservedBytes: ra}, c)
		}
		if next >= g-1 && next <= g+1 {
			return next, nil
		}
		xa, ra, g = g, rg, next
	}
	return g, nil
}

// guessSize is where the line through two predictions' peak reserved reaches the capacity.
func guessSize(p1, p2 Prediction, c int64) int64 {
	dx := float64(p2.Size - p1.Size)
	slope := float64(p2.PeakReservedBytes-p1.PeakReservedBytes) / dx
	if dx <= 0 || slope <= 0 {
		return p2.Size
	}
	g := float64(p1.Size) + float64(c-p1.PeakReservedBytes)/slope
	return int64(min(max(g, 1), maxSearchSize))
}

func confName(s allocator.Settings) string {
	if c := s.AllocConf(); c != "" {
		return c
	}
	return "the defaults"
}

// deviceBytes is the capacity of device dev's replays: the capacity given; else the device
// memory given less the memory outside PyTorch an OOM event shows; else reserved + device_free
// at the first OOM event; else unknown (0).
func deviceBytes(traces []*devTrace, dev int, opt Options) (int64, string, string, error) {
	var oomCap int64
	var oomFile string
	for _, t := range traces {
		if t.oom < 0 {
			continue
		}
		at, err := allocator.NewTrace(t.snap, dev, t.set)
		if err != nil || len(at.OOMs) == 0 {
			continue
		}
		oomCap = at.ReservedAtOOM[0] + at.Events[at.OOMs[0]].DeviceFree()
		oomFile = filepath.Base(t.path)
		break
	}
	switch {
	case opt.Capacity > 0:
		return opt.Capacity, SourceCapacity, "", nil
	case opt.DeviceMemory > 0 && oomCap > 0:
		outside := max(opt.DeviceMemory-oomCap, 0)
		c := opt.DeviceMemory - outside
		return c, SourceDeviceMemory, fmt.Sprintf("the capacity is the device memory given (%s) less the %s held outside PyTorch at the OOM in %s (device memory − reserved − free there)",
			analysis.FormatBytes(opt.DeviceMemory), analysis.FormatBytes(outside), oomFile), nil
	case opt.DeviceMemory > 0:
		return opt.DeviceMemory, SourceDeviceMemory, fmt.Sprintf("the capacity is the whole device memory given (%s): no OOM event shows the memory outside PyTorch (CUDA context, other processes), so nothing is subtracted; pass the capacity instead to be exact",
			analysis.FormatBytes(opt.DeviceMemory)), nil
	case oomCap > 0:
		return oomCap, SourceOOMEvent, fmt.Sprintf("the capacity is what PyTorch could reserve at the OOM in %s (reserved + device_free: %s)", oomFile, analysis.FormatBytes(oomCap)), nil
	}
	return 0, SourceUnknown, "", nil
}

// FailedAt names the allocation a prediction fails at: "model.py:58 (activation, 160 MiB)".
func FailedAt(p Prediction) string {
	s := p.FirstOOMSite
	var in []string
	if p.FirstOOMRole != "" {
		in = append(in, p.FirstOOMRole)
	}
	if p.FirstOOMBytes > 0 {
		in = append(in, analysis.FormatBytes(p.FirstOOMBytes))
	}
	if len(in) > 0 {
		s += " (" + strings.Join(in, ", ") + ")"
	}
	return s
}

// headline is the line to act on.
func headline(d *DeviceAnswer, cache map[int64]Prediction) string {
	u := shortUnit(d.Dimension)
	if d.MaxSize == nil {
		p := d.Predictions[len(d.Predictions)-1]
		return fmt.Sprintf("%s %d peaks at %s reserved (%s allocated); %s", u, p.Size, analysis.FormatBytes(p.PeakReservedBytes), analysis.FormatBytes(p.PeakAllocatedBytes), d.MaxSizeNote)
	}
	k := *d.MaxSize
	fail := func(p Prediction) string { return "fails at " + FailedAt(p) }
	switch {
	case k == 0:
		return fmt.Sprintf("even %s 1 does not fit %s: it %s", u, analysis.FormatBytes(d.DeviceBytes), fail(cache[1]))
	case k >= maxSearchSize:
		return fmt.Sprintf("%s %d, the search's limit, still fits %s (peak reserved %s)", u, k, analysis.FormatBytes(d.DeviceBytes), analysis.FormatBytes(cache[k].PeakReservedBytes))
	}
	return fmt.Sprintf("%s %d is the largest that fits %s (peak reserved %s); %s %d %s", u, k, analysis.FormatBytes(d.DeviceBytes),
		analysis.FormatBytes(cache[k].PeakReservedBytes), u, k+1, fail(cache[k+1]))
}
