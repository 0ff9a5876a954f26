package analysis

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// SummaryOptions select what Summarize reports.
type SummaryOptions struct {
	// Device restricts the answer to one device when non-nil.
	Device *int
	// MaxPools bounds each device's pool list (0 = all); the rest are counted in PoolsOmitted.
	MaxPools int
}

// MemoryTotals are the allocator's byte counts over a set of segments.
type MemoryTotals struct {
	ReservedBytes      int64 `json:"reserved_bytes"`
	AllocatedBytes     int64 `json:"allocated_bytes"`
	PendingFreeBytes   int64 `json:"pending_free_bytes"`
	InactiveBytes      int64 `json:"inactive_bytes"`
	RequestedBytes     int64 `json:"requested_bytes"`
	RoundingWasteBytes int64 `json:"rounding_waste_bytes"`
	Segments           int   `json:"segments"`
	Blocks             int   `json:"blocks"`
}

func (t *MemoryTotals) add(o MemoryTotals) {
	t.ReservedBytes += o.ReservedBytes
	t.AllocatedBytes += o.AllocatedBytes
	t.PendingFreeBytes += o.PendingFreeBytes
	t.InactiveBytes += o.InactiveBytes
	t.RequestedBytes += o.RequestedBytes
	t.RoundingWasteBytes += o.RoundingWasteBytes
	t.Segments += o.Segments
	t.Blocks += o.Blocks
}

func (t *MemoryTotals) addSegment(seg *snapshot.Segment) {
	t.Segments++
	t.ReservedBytes += seg.TotalSize
	t.Blocks += len(seg.Blocks)
	sums := seg.Sums()
	t.AllocatedBytes += sums.Allocated
	t.RequestedBytes += sums.RequestedAllocated
	t.RoundingWasteBytes += sums.Allocated - sums.RequestedAllocated
	t.PendingFreeBytes += sums.PendingFree
	t.InactiveBytes += sums.Inactive
}

// PoolSummary is one (pool, stream, segment type) group of segments.
type PoolSummary struct {
	Pool        string `json:"pool"`
	Stream      uint64 `json:"stream"`
	SegmentType string `json:"segment_type"`
	Expandable  bool   `json:"expandable"`
	MemoryTotals
	LargestInactiveBlockBytes int64 `json:"largest_inactive_block_bytes"`
}

// TraceSummary describes a device's recorded trace.
type TraceSummary struct {
	Events             int           `json:"events"`
	DroppedEvents      int64         `json:"dropped_events"`
	ByAction           []ActionCount `json:"by_action"`
	FirstTimeUS        int64         `json:"first_time_us"`
	LastTimeUS         int64         `json:"last_time_us"`
	DurationUS         int64         `json:"duration_us"`
	PeakAllocatedBytes int64         `json:"peak_allocated_bytes"`
	PeakReservedBytes  int64         `json:"peak_reserved_bytes"`
	Incomplete         bool          `json:"incomplete"`
	// SizesAreRequested: the trace records requested sizes, so peak_allocated_bytes sums
	// requested bytes, below the rounded block sizes allocated_bytes counts (it can read
	// lower than the final allocated of a run that ends at its peak).
	SizesAreRequested bool `json:"sizes_are_requested"`
	// PeakAllocatedBasis: "requested" or "rounded", the bytes peak_allocated_bytes counts.
	PeakAllocatedBasis string `json:"peak_allocated_basis"`
	// PeaksAreFinalState: the file has no trace (state only, or history events without
	// allocations), so the peaks are the final state's allocated and reserved bytes, not a
	// peak over time.
	PeaksAreFinalState bool `json:"peaks_are_final_state"`
	// LandsOnFinalState: replaying the trace ends on the file's final allocated blocks (false:
	// events are missing or the state was taken elsewhere; replay names the difference).
	LandsOnFinalState bool `json:"lands_on_final_state"`
}

// DeviceSummary is one device's memory.
type DeviceSummary struct {
	Device int `json:"device"`
	MemoryTotals
	Pools        []PoolSummary `json:"pools"`
	PoolsOmitted int           `json:"pools_omitted"`
	Trace        TraceSummary  `json:"trace"`
	OOMs         int           `json:"ooms"`
	Workload     string        `json:"workload"`
	// WorkloadEvidence names the frames and counts the workload comes from; "guess" marks a guess.
	WorkloadEvidence string `json:"workload_evidence"`
}

// RankSummary is one rank file of a directory.
type RankSummary struct {
	Rank   int          `json:"rank"`
	File   string       `json:"file"`
	Totals MemoryTotals `json:"totals"`
}

// FileSummary is one file of a directory: what it can answer on its own, or why it could not
// be read.
type FileSummary struct {
	File string `json:"file"`
	// Rank is the file's rank (from its name, or its sorted position).
	Rank int `json:"rank"`
	// Capabilities are the file's own (nil when it could not be read).
	Capabilities *snapshot.Capabilities `json:"capabilities,omitempty"`
	// Error is why the file could not be read; the other files are summarized without it.
	Error string `json:"error,omitempty"`
}

// Summary answers "what is in this snapshot": memory per device and in total, pools, trace
// coverage, OOM count, and what the file cannot answer.
type Summary struct {
	Path    string          `json:"path"`
	Format  snapshot.Format `json:"format"`
	Devices []DeviceSummary `json:"devices"`
	// Totals is nil across files that are not the ranks of one job (TotalsNote says so).
	Totals *MemoryTotals `json:"totals" jsonschema:"oneof_type=object;null"`
	Ranks  []RankSummary `json:"ranks,omitempty"`
	// TotalsNote says why Totals is nil.
	TotalsNote string `json:"totals_note,omitempty"`
	// Files are a directory's files, each with its own capabilities or its error.
	Files []FileSummary `json:"files,omitempty"`
	// LayoutNote, for a directory, says how its files are taken (ranks of one job or not, and
	// why); it is also the first note.
	LayoutNote string `json:"layout_note,omitempty"`
	// SeparateFiles: a directory of files that are not the ranks of one job; each was
	// summarized on its own and ranks[].rank is only a sorted position.
	SeparateFiles     bool                       `json:"separate_files,omitempty"`
	OOMs              int                        `json:"ooms"`
	Annotations       int                        `json:"annotations"`
	AllocatorSettings snapshot.AllocatorSettings `json:"allocator_settings"`
	Capabilities      snapshot.Capabilities      `json:"capabilities"`
	// VisibleDevices is how many devices the file lists a trace for (device_traces has one
	// list per device the process could see, used or not); 0 where the format has none.
	VisibleDevices int `json:"visible_devices"`
	// DeviceBalance puts the devices of the file side by side (nil with fewer than two
	// devices holding memory, or for one device asked for).
	DeviceBalance *DeviceBalance `json:"device_balance,omitempty"`
	// DevicesOmitted counts the devices left out of devices (at most MaxListedDevices listed).
	DevicesOmitted int      `json:"devices_omitted"`
	CannotAnswer   string   `json:"cannot_answer"`
	Notes          []string `json:"notes"`
	rankDevices    []int    // rank of each Devices entry, for the text
}

// Summarize computes the summary of one snapshot.
func Summarize(ctx context.Context, snap *snapshot.Snapshot, opt SummaryOptions) (*Summary, error) {
	s := &Summary{Path: snap.Path, Format: snap.Format, Devices: []DeviceSummary{}, Notes: []string{}, Totals: &MemoryTotals{},
		AllocatorSettings: snap.Settings, Capabilities: snap.Caps, Annotations: len(snap.Annotations)}
	s.AllocatorSettings.Raw = nil // kept for read-raw-section; too long for a summary
	devs := snap.Devices()
	roles := rolesWith(snap, DefaultAttributor())
	if opt.Device != nil {
		if !slices.Contains(devs, *opt.Device) {
			return nil, fmt.Errorf("%s: no device %d (the file has devices %v)", snap.Path, *opt.Device, devs)
		}
		devs = []int{*opt.Device}
	}
	for _, d := range devs {
		// The role pass (for the workload) and the device's own passes (pools, action
		// counts, peaks) read the trace independently: one runs on another core.
		var (
			workload, evidence string
			ds                 DeviceSummary
		)
		alongside(func() { workload, evidence = roles.Workload(d) },
			func() { ds = summarizeDevice(snap, d, opt) })
		ds.Workload, ds.WorkloadEvidence = workload, evidence
		s.Devices = append(s.Devices, ds)
		s.Totals.add(ds.MemoryTotals)
		s.OOMs += ds.OOMs
	}
	s.VisibleDevices = len(snap.DeviceTraces)
	s.CannotAnswer = cannotAnswer(snap.Caps, snap.Format)
	for _, d := range s.Devices {
		if !d.Trace.LandsOnFinalState {
			s.CannotAnswer = strings.Replace(s.CannotAnswer, "nothing notable: full trace with stacks on allocations and frees", "cannot tell: the trace does not land on the file's final state", 1)
			if !strings.Contains(s.CannotAnswer, "does not land") {
				s.CannotAnswer += "; the trace does not land on the file's final state"
			}
			s.CannotAnswer += fmt.Sprintf(" (device %d: replay names the difference)", d.Device)
			break
		}
	}
	if n := emptySnapshot(snap); n != "" {
		s.Notes = append(s.Notes, n)
	}
	if n := segmentStackHint(snap, roles); n != "" {
		s.Notes = append(s.Notes, n)
	}
	if opt.Device == nil {
		if b := deviceBalance(snap, roles); b != nil {
			s.DeviceBalance = b
			if b.Outlier >= 0 {
				s.Notes = append(s.Notes, b.Evidence+" (these are the devices one process saw, not DDP ranks; torch.nn.DataParallel gathers every replica's outputs on device 0)")
			}
		} else {
			// One device holds it all (the others listed, empty).
			s.Notes = append(s.Notes, deviceImbalance(s.Devices)...)
		}
	}
	keep := listedDevices(len(s.Devices), func(i int) deviceRank {
		d := &s.Devices[i]
		return deviceRank{oom: d.OOMs > 0, peak: max(d.ReservedBytes, d.Trace.PeakReservedBytes)}
	}, MaxListedDevices)
	if n := len(s.Devices) - len(keep); n > 0 {
		s.Devices, s.DevicesOmitted = keepListed(s.Devices, keep), n
		s.Notes = append(s.Notes, devicesOmittedNote(n, n+len(keep), "an OOM"))
	}
	return s, nil
}

// emptySnapshot says what a file with no segment and no trace event can mean, so that its
// zeros are not read as a healthy run, and its device_traces lists not as the ranks of a job
// (answer key #8: four empty lists from one process).
func emptySnapshot(snap *snapshot.Snapshot) string {
	if len(snap.Devices()) > 0 {
		return ""
	}
	lists := ""
	if n := len(snap.DeviceTraces); n > 0 {
		lists = fmt.Sprintf(" it lists %s (one trace list per device this process could see: not ranks of a job), all empty;", count(n, "visible device"))
	}
	return "note: nothing to diagnose: no memory was reserved on any device and no allocation was recorded;" + lists +
		" the snapshot was taken before the first CUDA allocation, after everything was freed and released, or by a process that did not use these GPUs, so it says nothing about leaks, peaks or health"
}

// deviceImbalance calls out one device holding far more than the others of one process (a
// model placed on one GPU, or work that was meant to be spread).
func deviceImbalance(devs []DeviceSummary) []string {
	if len(devs) < 2 {
		return nil
	}
	var top, second int64
	topDev := -1
	for _, d := range devs {
		switch {
		case d.ReservedBytes > top:
			second, top, topDev = top, d.ReservedBytes, d.Device
		case d.ReservedBytes > second:
			second = d.ReservedBytes
		}
	}
	if top < 256*mib || top < 4*second {
		return nil
	}
	return []string{fmt.Sprintf("device %d holds %s reserved, far more than any other device in this file (next: %s): the work sits on one GPU (these are the devices one process saw, not DDP ranks)",
		topDev, FormatBytes(top), FormatBytes(second))}
}

func summarizeDevice(snap *snapshot.Snapshot, dev int, opt SummaryOptions) DeviceSummary {
	ds := DeviceSummary{Device: dev, Pools: []PoolSummary{}}
	type key struct {
		pool   snapshot.PoolID
		stream uint64
		typ    string
	}
	pools := map[key]*PoolSummary{}
	for _, i := range snap.SegmentsOn(dev) {
		seg := &snap.Segments[i]
		if seg.Device != dev {
			continue
		}
		ds.MemoryTotals.addSegment(seg)
		k := key{seg.PoolID, seg.Stream, seg.SegmentType}
		p := pools[k]
		if p == nil {
			p = &PoolSummary{Pool: poolName(seg.PoolID), Stream: seg.Stream, SegmentType: seg.SegmentType}
			pools[k] = p
		}
		p.Expandable = p.Expandable || seg.IsExpandable
		p.MemoryTotals.addSegment(seg)
		for _, b := range seg.Blocks {
			if b.State == snapshot.StateInactive {
				p.LargestInactiveBlockBytes = max(p.LargestInactiveBlockBytes, b.Size)
			}
		}
	}
	for _, p := range pools {
		ds.Pools = append(ds.Pools, *p)
	}
	slices.SortFunc(ds.Pools, func(a, b PoolSummary) int {
		if c := cmp.Compare(b.ReservedBytes, a.ReservedBytes); c != 0 {
			return c
		}
		return cmp.Or(strings.Compare(a.Pool, b.Pool), cmp.Compare(a.Stream, b.Stream), strings.Compare(a.SegmentType, b.SegmentType))
	})
	if opt.MaxPools > 0 && len(ds.Pools) > opt.MaxPools {
		ds.PoolsOmitted = len(ds.Pools) - opt.MaxPools
		ds.Pools = ds.Pools[:opt.MaxPools]
	}
	ds.Trace.ByAction = []ActionCount{}
	if dev >= 0 && dev < len(snap.DeviceTraces) {
		evs := snap.DeviceTraces[dev]
		ds.Trace.Events = len(evs)
		if dev < len(snap.DroppedEvents) {
			ds.Trace.DroppedEvents = snap.DroppedEvents[dev]
		}
		counts := &snap.TraceIndex(dev).Tally.Actions
		other := map[string]int64{}
		if counts[snapshot.ActionOther] > 0 {
			for _, e := range evs {
				if e.Action == snapshot.ActionOther {
					other[snap.EventExtras[e.Extra.Index()].ActionName]++
				}
			}
		}
		for _, a := range snapshot.Actions() {
			if counts[a] > 0 {
				ds.Trace.ByAction = append(ds.Trace.ByAction, ActionCount{Action: a.String(), Count: counts[a]})
			}
		}
		for _, name := range sortedKeys(other) {
			ds.Trace.ByAction = append(ds.Trace.ByAction, ActionCount{Action: name, Count: other[name]})
		}
		ds.OOMs = int(counts[snapshot.ActionOOM])
		if len(evs) > 0 {
			ds.Trace.FirstTimeUS, ds.Trace.LastTimeUS = evs[0].TimeUS, evs[len(evs)-1].TimeUS
			if ds.Trace.FirstTimeUS > 0 {
				ds.Trace.DurationUS = ds.Trace.LastTimeUS - ds.Trace.FirstTimeUS
			}
		}
	}
	ds.Trace.Incomplete = snap.Caps.TraceIncomplete
	peaks := replayPeaks(snap, dev)
	ds.Trace.PeakAllocatedBytes, ds.Trace.PeakReservedBytes = peaks.allocated, peaks.reserved
	ds.Trace.SizesAreRequested = peaks.requested && ds.Trace.Events > 0
	ds.Trace.PeakAllocatedBasis = sizeBasis(ds.Trace.SizesAreRequested)
	ds.Trace.PeaksAreFinalState = dev >= len(snap.DeviceTraces) || !snapshot.IsHistory(snap.DeviceTraces[dev])
	ds.Trace.LandsOnFinalState = ds.Trace.PeaksAreFinalState || traceLandsOnFinal(snap, dev)
	return ds
}

// traceLandsOnFinal reports, from the trace's tally, whether the blocks the trace leaves
// allocated are the file's final allocated blocks: every final block the trace touches is one
// it left allocated, and their bytes (in the trace's own sizes) add up to what it left.
func traceLandsOnFinal(snap *snapshot.Snapshot, dev int) bool {
	x := snap.TraceIndex(dev)
	t := &x.Tally
	_, before, _, _ := t.Peaks()
	var inTrace int64
	for si := range snap.Segments {
		seg := &snap.Segments[si]
		if seg.Device != dev {
			continue
		}
		for _, b := range seg.Blocks {
			if b.State != snapshot.StateActiveAllocated {
				continue
			}
			id, ok := x.Block(b.Address)
			if !ok {
				continue // alive before the trace and untouched by it
			}
			size, live := t.LastAlloc(id)
			if !live {
				return false
			}
			inTrace += size
		}
	}
	return inTrace == before+t.Running()
}

func sortedKeys(m map[string]int64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func poolName(p snapshot.PoolID) string {
	if p == (snapshot.PoolID{}) {
		return "default"
	}
	return fmt.Sprintf("private(%d,%d)", p[0], p[1])
}

// cannotAnswer says in one line what the file cannot tell.
func cannotAnswer(c snapshot.Capabilities, f snapshot.Format) string {
	var gaps []string
	switch {
	case !c.HasTrace:
		gaps = append(gaps, "no allocation trace (state only: no history over time, no peaks, no steps, no OOM events: call torch.cuda.memory._record_memory_history() before the model is built and dump at the peak or on OOM)")
	case c.TraceStart == "ring_buffer":
		gaps = append(gaps, ringBufferWrapped(c)+": the oldest events are lost")
	case c.TraceIncomplete:
		gaps = append(gaps, "the trace starts late (recording was switched on after the first allocations: the event count is not a round max_entries and no early event frees an unknown block): blocks allocated before it have no alloc event or frames")
	}
	if !c.FramesOnBlocks && !c.FramesOnAllocs {
		gaps = append(gaps, "no stack frames (history recorded without context, or off when these blocks were allocated: record with context=\"all\")")
	} else {
		if c.HasTrace && !c.FramesOnFrees {
			gaps = append(gaps, "no frames on frees")
		}
		if c.PythonOnly {
			gaps = append(gaps, "Python stacks only (backward-pass allocations have no frames)")
		}
	}
	if f.LegacyHistory {
		gaps = append(gaps, "PyTorch 2.0 format (block addresses derived from segment order)")
	}
	if len(gaps) == 0 {
		return "nothing notable: full trace with stacks on allocations and frees"
	}
	return "cannot tell: " + strings.Join(gaps, "; ")
}

// SummarizeRanks summarises a directory of rank snapshots: devices of every rank, each rank's
// totals, totals summed over ranks, and a note on a rank far from the others.
func SummarizeRanks(ctx context.Context, dir string, ranks []snapshot.Rank, opt SummaryOptions) (*Summary, error) {
	out := &Summary{Path: dir, Devices: []DeviceSummary{}, Ranks: []RankSummary{}, Notes: []string{}, Totals: &MemoryTotals{}}
	var caps []snapshot.Capabilities
	if opt.Device != nil { // ranks usually sit on different devices: keep those that have it
		var keep []snapshot.Rank
		for _, r := range ranks {
			if slices.Contains(r.Snap.Devices(), *opt.Device) {
				keep = append(keep, r)
			}
		}
		if len(keep) == 0 {
			return nil, fmt.Errorf("%s: no rank has device %d", dir, *opt.Device)
		}
		ranks = keep
	}
	for i, r := range ranks {
		s, err := Summarize(ctx, r.Snap, opt)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			out.Format, out.AllocatorSettings = s.Format, s.AllocatorSettings
		}
		out.Devices = append(out.Devices, s.Devices...)
		for range s.Devices {
			out.rankDevices = append(out.rankDevices, r.Rank)
		}
		out.Ranks = append(out.Ranks, RankSummary{Rank: r.Rank, File: r.File, Totals: *s.Totals})
		out.Totals.add(*s.Totals)
		out.OOMs += s.OOMs
		out.Annotations += s.Annotations
		caps = append(caps, s.Capabilities)
	}
	if len(caps) > 0 {
		out.Capabilities = caps[0]
		for _, c := range caps[1:] { // some rank has a trace; what every rank can answer
			out.Capabilities.HasTrace = out.Capabilities.HasTrace || c.HasTrace
			out.Capabilities.FramesOnBlocks = out.Capabilities.FramesOnBlocks && c.FramesOnBlocks
			out.Capabilities.FramesOnAllocs = out.Capabilities.FramesOnAllocs && c.FramesOnAllocs
			out.Capabilities.FramesOnFrees = out.Capabilities.FramesOnFrees && c.FramesOnFrees
			out.Capabilities.TraceIncomplete = out.Capabilities.TraceIncomplete || c.TraceIncomplete
		}
	}
	out.CannotAnswer = cannotAnswer(out.Capabilities, out.Format)
	out.Notes = append(out.Notes, rankOutliers(out.Ranks)...)
	replication, err := ReplicationNotes(ctx, ranks, ReplicationOptions{})
	if err != nil {
		return nil, err
	}
	out.Notes = append(out.Notes, replication...)
	return out, nil
}

// rankOutliers names ranks whose reserved or allocated memory is far (>25% and >256 MiB) above
// the median of the ranks: uneven sharding, a rank doing extra work (logging, eval), or a leak.
func rankOutliers(ranks []RankSummary) []string {
	if len(ranks) < 3 {
		return nil
	}
	var notes []string
	for _, metric := range []struct {
		name string
		get  func(MemoryTotals) int64
	}{{"allocated", func(t MemoryTotals) int64 { return t.AllocatedBytes }}, {"reserved", func(t MemoryTotals) int64 { return t.ReservedBytes }}} {
		vals := make([]int64, len(ranks))
		for i, r := range ranks {
			vals[i] = metric.get(r.Totals)
		}
		sorted := slices.Clone(vals)
		slices.Sort(sorted)
		median := sorted[len(sorted)/2]
		for i, r := range ranks {
			if diff := vals[i] - median; diff > 256<<20 && float64(diff) > 0.25*float64(median) {
				notes = append(notes, fmt.Sprintf("rank %d is an outlier: %s %s vs median %s across %d ranks (+%s) — check what only this rank does (uneven shards, logging/eval on rank 0, a leak)",
					r.Rank, metric.name, FormatBytes(vals[i]), FormatBytes(median), len(ranks), FormatBytes(diff)))
			}
		}
	}
	return notes
}

// Text renders the summary for a person or an agent: short, human-readable sizes.
func (s *Summary) Text() string {
	var b strings.Builder
	enc := s.Format.Encoding
	if s.Format.Encoding == "pickle" {
		enc += fmt.Sprintf(" protocol %d", s.Format.Protocol)
	}
	if s.Format.Gzip {
		enc += ", gzip"
	}
	fmt.Fprintf(&b, "%s (%s)\n", filepath.Base(s.Path), enc)
	if s.LayoutNote != "" {
		b.WriteString(s.LayoutNote + "\n")
	}
	for _, f := range s.Files {
		if f.Error != "" {
			fmt.Fprintf(&b, "not read: %s\n", f.Error)
		}
	}
	if t := s.Totals; t != nil {
		fmt.Fprintf(&b, "total: reserved %s, allocated %s (requested %s, rounding waste %s), pending free %s, inactive %s; %s, %s\n",
			FormatBytes(t.ReservedBytes), FormatBytes(t.AllocatedBytes), FormatBytes(t.RequestedBytes), FormatBytes(t.RoundingWasteBytes),
			FormatBytes(t.PendingFreeBytes), FormatBytes(t.InactiveBytes), count(t.Segments, "segment"), count(t.Blocks, "block"))
	} else if s.TotalsNote != "" {
		b.WriteString("total: " + s.TotalsNote + "\n")
	}
	unit := "rank"
	if s.SeparateFiles {
		unit = "file"
	}
	for _, r := range s.Ranks {
		fmt.Fprintf(&b, "%s %d (%s): reserved %s, allocated %s\n", unit, r.Rank, filepath.Base(r.File), FormatBytes(r.Totals.ReservedBytes), FormatBytes(r.Totals.AllocatedBytes))
	}
	for i, d := range s.Devices {
		label := fmt.Sprintf("device %d", d.Device)
		if i < len(s.rankDevices) {
			label = fmt.Sprintf("%s %d device %d", unit, s.rankDevices[i], d.Device)
		}
		fmt.Fprintf(&b, "%s: reserved %s, allocated %s, pending free %s, inactive %s; %s, %s\n", label,
			FormatBytes(d.ReservedBytes), FormatBytes(d.AllocatedBytes), FormatBytes(d.PendingFreeBytes), FormatBytes(d.InactiveBytes), count(d.Segments, "segment"), count(d.Blocks, "block"))
		for _, p := range d.Pools {
			stream := "default stream"
			if p.Stream != 0 {
				stream = fmt.Sprintf("stream %#x", p.Stream)
			}
			exp := ""
			if p.Expandable {
				exp = ", expandable"
			}
			fmt.Fprintf(&b, "  %s pool, %s, %s%s: %s, reserved %s, allocated %s, inactive %s, largest free block %s\n",
				p.Pool, stream, p.SegmentType, exp, count(p.Segments, "segment"), FormatBytes(p.ReservedBytes), FormatBytes(p.AllocatedBytes), FormatBytes(p.InactiveBytes), FormatBytes(p.LargestInactiveBlockBytes))
		}
		if d.Workload != "" && (d.Workload != WorkloadUnknown || d.Segments > 0) {
			fmt.Fprintf(&b, "  workload: %s (%s)\n", d.Workload, d.WorkloadEvidence)
		}
		if d.PoolsOmitted > 0 {
			fmt.Fprintf(&b, "  … %d more pool groups\n", d.PoolsOmitted)
		}
		tr := d.Trace
		if tr.Events > 0 {
			var acts []string
			for _, a := range tr.ByAction {
				acts = append(acts, fmt.Sprintf("%s %d", a.Action, a.Count))
			}
			fmt.Fprintf(&b, "  trace: %s (%s)", count(tr.Events, "event"), strings.Join(acts, ", "))
			if tr.DurationUS > 0 {
				fmt.Fprintf(&b, " over %.3f s", float64(tr.DurationUS)/1e6)
			}
			if !tr.PeaksAreFinalState {
				fmt.Fprintf(&b, "; peak allocated %s", FormatBytes(tr.PeakAllocatedBytes))
				if tr.SizesAreRequested {
					b.WriteString(" (requested bytes, as the trace records them)")
				}
				fmt.Fprintf(&b, ", peak reserved %s", FormatBytes(tr.PeakReservedBytes))
			} else {
				b.WriteString("; not a trace (state only): no peak")
			}
			if tr.DroppedEvents > 0 {
				fmt.Fprintf(&b, "; %d older events dropped by --max-trace-events", tr.DroppedEvents)
			}
			b.WriteString("\n")
		}
	}
	if s.OOMs > 0 {
		fmt.Fprintf(&b, "OOM events: %d (the OOM report — `memsnap oom` / MCP `oom-report` — gives the verdict)\n", s.OOMs)
	}
	if st := s.AllocatorSettings; st.Present && st.AllocConf != "" {
		fmt.Fprintf(&b, "PYTORCH_CUDA_ALLOC_CONF=%s\n", st.AllocConf)
	}
	if s.DeviceBalance != nil {
		for _, it := range s.DeviceBalance.Advice {
			fmt.Fprintf(&b, "advice: %s\n", it.Text)
		}
	}
	for _, n := range s.Notes {
		if n != s.LayoutNote { // printed first
			b.WriteString(n + "\n")
		}
	}
	b.WriteString(s.CannotAnswer + "\n")
	return b.String()
}

// peaks are a device's peaks over its trace; requested: the trace records requested sizes
// (the allocated peak sums them).
type peaks struct {
	allocated, reserved int64
	requested           bool
	allocatedEvent      int // the event where the allocated peak is first reached (-1: none)
}

// replayPeaks gives the same peaks as the full replay (ReplayDevice) from the trace's tally
// (snapshot.TraceTally), so summarize stays cheap on multi-million-event traces. Blocks alive
// before the trace (their address's first event is a free, or they are alive at the end with
// no event) raise memory by the same amount at every point, so their sum can be added once the
// tally has found them all:
// peak = (blocks alive before the trace) + (highest running sum of the trace's own changes).
// Reserved memory works the same way from the final segments. Without a trace the peaks are
// the file's final state.
func replayPeaks(snap *snapshot.Snapshot, dev int) peaks {
	// The running sums come from the trace's tally, which the index keeps (built while the
	// loader decodes).
	x := snap.TraceIndex(dev)
	t := &x.Tally
	maxRunning, before, maxSeg, segNet := t.Peaks()
	requested := traceSizesAreRequested(snap, dev, t.OddAllocSize, func(addr uint64) (int64, bool) {
		id, ok := x.Block(addr) // a live block's entry keeps its last alloc's size
		if !ok {
			return 0, false
		}
		return t.LastAlloc(id)
	})
	var finalRes int64
	for _, si := range snap.SegmentsOn(dev) {
		seg := &snap.Segments[si]
		if seg.Device != dev {
			continue
		}
		finalRes += seg.TotalSize
		for _, b := range seg.Blocks {
			if b.State != snapshot.StateActiveAllocated {
				continue
			}
			if _, ok := x.Block(b.Address); ok {
				continue
			}
			size := b.Size
			if requested && b.RequestedSize > 0 {
				size = b.RequestedSize
			}
			before += size
		}
	}
	return peaks{allocated: before + maxRunning, reserved: finalRes - segNet + maxSeg, requested: requested, allocatedEvent: t.PeakEvent()}
}

// blocksCol is "blocks" or "block " (padded) for table columns.
func blocksCol(n int) string {
	if n == 1 {
		return "block "
	}
	return "blocks"
}

// have is "has" for one, "have" for more: "1 block has", "2 blocks have".
func have(n int) string {
	if n == 1 {
		return "has"
	}
	return "have"
}

// were is "was" for one, "were" for more.
func were(n int) string {
	if n == 1 {
		return "was"
	}
	return "were"
}

// count renders "1 segment", "3 segments".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// ringBufferWrapped words a ring-buffer trace: a fact when the file says so (overflowed, or
// exactly its max_entries events), else read from a round event count that opens on frees of
// blocks it never allocated, which a file cut to its last events (memsnap trim) shows too.
func ringBufferWrapped(c snapshot.Capabilities) string {
	if c.RingBufferFull || c.MaxEntries > 1 {
		return "the trace ring buffer wrapped (it holds max_entries events)"
	}
	return "the trace ring buffer most likely wrapped (a round count of events opening on frees of blocks it never allocated; a file cut to its last events looks the same)"
}
