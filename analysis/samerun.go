package analysis

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// runVerdict says whether two snapshot files are two points of one process, and in which order.
type runVerdict struct {
	same     *bool  // nil: not enough to tell
	evidence string // one sentence naming the facts
	swapped  bool   // one run, given later file first
	reasons  string // the deciding facts without the verdict
}

// runFile is what decides run identity, read from one file.
type runFile struct {
	snap        *snapshot.Snapshot
	first, last int64 // trace clock (epoch µs) of the first and last timed event; 0 = none
	devices     []int // devices with segments
	workload    string
	workloadEv  string
}

// Same-run thresholds.
const (
	runMaxGapUS       = 30 * 24 * 3600 * 1e6 // traces further apart than this are different jobs
	runSeveralSegs    = 3                    // "several" segments: zero shared (address, size) pairs then rule one run out
	runMinWindowEvent = 3                    // events of the earlier trace in the overlap needed to rule one run out
)

// checkSameRun weighs the facts that tell whether before and after come from one process:
// allocator settings and file format (one PyTorch, one PYTORCH_CUDA_ALLOC_CONF per process),
// devices, workload, the trace clocks (order, overlap and the events they share, gap) and the
// segments both hold at the same (address, size) with blocks of the same site.
func checkSameRun(before, after *snapshot.Snapshot, rb, ra *Roles) runVerdict {
	b, a := readRunFile(before, rb), readRunFile(after, ra)
	if before.Path != "" && before.Path != "-" && before.Path == after.Path {
		t := true
		return runVerdict{same: &t, evidence: "one run: both are the same file (" + before.Path + ")", reasons: "both are the same file"}
	}
	var against, support, neutral []string
	add := func(to *[]string, s string) {
		if s != "" {
			*to = append(*to, s)
		}
	}
	f, s := runFormat(b, a)
	add(&against, f)
	add(&neutral, s)
	f, s = runSettings(b, a)
	add(&against, f)
	add(&neutral, s)
	f, s = runDevices(b, a)
	add(&against, f)
	add(&neutral, s)
	f, s = runWorkload(b, a)
	add(&against, f)
	add(&neutral, s)
	clk := runClocks(b, a)
	add(&against, clk.against)
	add(&support, clk.support)
	add(&neutral, clk.neutral)
	f, sup, s := runSegments(b, a, rb, ra)
	add(&against, f)
	add(&support, sup)
	add(&neutral, s)

	v := runVerdict{}
	switch {
	case len(against) > 0:
		no := false
		v.same = &no
		v.reasons = strings.Join(against, "; ")
		if len(support) > 0 {
			v.reasons += " (although " + strings.Join(support, "; ") + ")"
		}
		v.evidence = "not one run: " + v.reasons
	case len(support) > 0:
		yes := true
		v.same = &yes
		v.reasons = strings.Join(append(support, neutral...), "; ")
		v.evidence = "one run: " + v.reasons
		if clk.reversed {
			// Word the facts in time order.
			w := checkSameRun(after, before, ra, rb)
			w.swapped = true
			return w
		}
	default:
		v.reasons = strings.Join(append(neutral, "nothing ties them to one process: no segment at the same address holding a block of the same site, no trace events in common"), "; ")
		v.evidence = "cannot tell whether these are one run: " + v.reasons
	}
	return v
}

func readRunFile(s *snapshot.Snapshot, r *Roles) runFile {
	f := runFile{snap: s, devices: []int{}}
	for _, evs := range s.DeviceTraces {
		for _, e := range evs {
			if e.TimeUS == 0 {
				continue
			}
			if f.first == 0 || e.TimeUS < f.first {
				f.first = e.TimeUS
			}
			if e.TimeUS > f.last {
				f.last = e.TimeUS
			}
		}
	}
	seen := map[int]bool{}
	for _, seg := range s.Segments {
		if !seen[seg.Device] {
			seen[seg.Device] = true
			f.devices = append(f.devices, seg.Device)
		}
	}
	slices.Sort(f.devices)
	f.workload = WorkloadUnknown
	for _, d := range s.Devices() {
		w, ev := r.Workload(d)
		if w == WorkloadTraining || (w == WorkloadInference && f.workload == WorkloadUnknown) {
			f.workload, f.workloadEv = w, ev
		}
	}
	return f
}

func (f runFile) name() string { return baseName(f.snap.Path) }

// runFormat: PyTorch 2.0's block history and the allocator_settings key (2.3+) date the writer;
// one process has one PyTorch.
func runFormat(b, a runFile) (against, neutral string) {
	lb, la := b.snap.Format.LegacyHistory, a.snap.Format.LegacyHistory
	if lb != la {
		old, other := b, a
		if la {
			old, other = a, b
		}
		return fmt.Sprintf("%s is PyTorch 2.0's format (blocks with history, no address) and %s is not: two PyTorch versions", old.name(), other.name()), ""
	}
	return "", ""
}

// settingsText renders a file's allocator settings for evidence.
func settingsText(s snapshot.AllocatorSettings) string {
	if !s.Present {
		return "no allocator_settings (PyTorch before 2.3)"
	}
	if s.AllocConf == "" {
		return "PYTORCH_CUDA_ALLOC_CONF unset"
	}
	return "PYTORCH_CUDA_ALLOC_CONF=" + s.AllocConf
}

func runSettings(b, a runFile) (against, neutral string) {
	sb, sa := b.snap.Settings, a.snap.Settings
	equal := sb.Present == sa.Present && sb.AllocConf == sa.AllocConf && sb.MaxSplitSize == sa.MaxSplitSize &&
		sb.GCThreshold == sa.GCThreshold && sb.ExpandableSegments == sa.ExpandableSegments
	if equal && sb.Present && len(sb.Raw) > 0 && len(sa.Raw) > 0 {
		equal = reflect.DeepEqual(sb.Raw, sa.Raw)
	}
	if equal {
		return "", "same allocator settings (" + settingsText(sb) + ")"
	}
	tb, ta := settingsText(sb), settingsText(sa)
	if tb == ta {
		parts := []string{}
		keys := slices.Sorted(maps.Keys(sb.Raw))
		for _, k := range slices.Sorted(maps.Keys(sa.Raw)) {
			if _, ok := sb.Raw[k]; !ok {
				keys = append(keys, k)
			}
		}
		for _, k := range keys {
			vb, okb := sb.Raw[k]
			va, oka := sa.Raw[k]
			switch {
			case !oka:
				parts = append(parts, fmt.Sprintf("only %s records %s", b.name(), k))
			case !okb:
				parts = append(parts, fmt.Sprintf("only %s records %s", a.name(), k))
			case !reflect.DeepEqual(vb, va):
				parts = append(parts, fmt.Sprintf("%s is %v in %s and %v in %s", k, vb, b.name(), va, a.name()))
			}
		}
		return fmt.Sprintf("allocator settings differ (both %s, but %s: two PyTorch versions or configurations)", tb, strings.Join(parts, ", ")), ""
	}
	return fmt.Sprintf("allocator settings differ (%s: %s; %s: %s)", b.name(), tb, a.name(), ta), ""
}

func devicesText(ds []int) string {
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = fmt.Sprint(d)
	}
	if len(ds) == 1 {
		return "device " + s[0]
	}
	return "devices " + strings.Join(s, ", ")
}

func runDevices(b, a runFile) (against, neutral string) {
	if len(b.devices) == 0 || len(a.devices) == 0 {
		return "", ""
	}
	if slices.Equal(b.devices, a.devices) {
		return "", "same " + devicesText(b.devices)
	}
	return fmt.Sprintf("segments on different devices (%s: %s; %s: %s)", b.name(), devicesText(b.devices), a.name(), devicesText(a.devices)), ""
}

func runWorkload(b, a runFile) (against, neutral string) {
	if b.workload == WorkloadUnknown || a.workload == WorkloadUnknown {
		return "", ""
	}
	if b.workload == a.workload {
		return "", "both " + b.workload
	}
	return fmt.Sprintf("different workloads (%s: %s, %s; %s: %s, %s)", b.name(), b.workload, b.workloadEv, a.name(), a.workload, a.workloadEv), ""
}

// clockFacts is what the trace clocks say.
type clockFacts struct {
	against, support, neutral string
	reversed                  bool // both clocks known and before's trace ends after after's
}

type eventKey struct {
	dev    int
	t      int64
	action snapshot.Action
	addr   uint64
	size   int64
}

func fmtTime(us int64) string {
	return time.UnixMicro(us).UTC().Format("2006-01-02 15:04:05 UTC")
}

func fmtSpan(us int64) string {
	d := time.Duration(us) * time.Microsecond
	switch {
	case d >= 48*time.Hour:
		return fmt.Sprintf("%d days", int64(d/(24*time.Hour)))
	case d >= 2*time.Hour:
		return fmt.Sprintf("%.1f hours", d.Hours())
	case d >= 2*time.Minute:
		return fmt.Sprintf("%.1f minutes", d.Minutes())
	case d >= time.Second:
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
	return fmt.Sprintf("%.1f ms", float64(us)/1000)
}

// runClocks: the trace clock is the process's wall clock (epoch µs, monotonic within a file).
// Two points of one run: the later file's trace either starts after the earlier one ends (its
// ring buffer moved on) or overlaps it and then holds the same events in the overlap.
func runClocks(b, a runFile) clockFacts {
	switch {
	case b.last == 0 && a.last == 0:
		return clockFacts{neutral: "neither file has a trace clock (time_us)"}
	case b.last == 0 || a.last == 0:
		has := b
		if a.last != 0 {
			has = a
		}
		return clockFacts{neutral: "only " + has.name() + " has a trace clock (time_us)"}
	}
	c := clockFacts{reversed: b.last > a.last}
	early, late := b, a
	if c.reversed {
		early, late = a, b
	}
	if gap := late.first - early.last; gap > 0 {
		if gap > runMaxGapUS {
			c.against = fmt.Sprintf("the traces are %s apart (%s ends %s, %s starts %s)", fmtSpan(gap), early.name(), fmtTime(early.last), late.name(), fmtTime(late.first))
			return c
		}
		if early.snap.Caps.HasTrace && late.snap.Caps.HasTrace && !late.snap.Caps.TraceIncomplete && allocatedBytes(early.snap) > 0 {
			c.against = fmt.Sprintf("%s's trace reaches back to its process's first allocation, %s after %s was written with %s live: a later process",
				late.name(), fmtSpan(gap), early.name(), FormatBytes(allocatedBytes(early.snap)))
			return c
		}
		c.neutral = fmt.Sprintf("%s's trace starts %s after %s's ends (clocks in order)", late.name(), fmtSpan(gap), early.name())
		return c
	}
	// Overlap: the later trace must hold the earlier one's events from its own start on.
	set := map[eventKey]bool{}
	for d, evs := range late.snap.DeviceTraces {
		for _, e := range evs {
			if e.TimeUS >= early.first && e.TimeUS <= early.last {
				set[eventKey{d, e.TimeUS, e.Action, e.Addr, e.Size}] = true
			}
		}
	}
	window, shared := 0, 0
	for d, evs := range early.snap.DeviceTraces {
		for _, e := range evs {
			if e.TimeUS == 0 || e.TimeUS < late.first {
				continue
			}
			window++
			if set[eventKey{d, e.TimeUS, e.Action, e.Addr, e.Size}] {
				shared++
			}
		}
	}
	switch {
	case window > 0 && shared*10 >= window*9:
		c.support = fmt.Sprintf("the traces overlap in time and %d of the %d events of %s in the overlap are also in %s (same time, action, address and size)",
			shared, window, early.name(), late.name())
	case window >= runMinWindowEvent && shared == 0:
		c.against = fmt.Sprintf("the traces overlap in time (%s to %s) but %s holds none of the %d events %s recorded then: two processes recording at once",
			fmtTime(max(early.first, late.first)), fmtTime(early.last), late.name(), window, early.name())
	case window >= runMinWindowEvent:
		// One process's later trace holds every event of the earlier one from its own start on.
		c.against = fmt.Sprintf("the traces overlap in time but %s holds only %d of the %d events %s recorded then (one process's later trace would hold them all): two processes",
			late.name(), shared, window, early.name())
	default:
		c.neutral = "the trace clocks overlap by a few events only"
	}
	return c
}

func allocatedBytes(s *snapshot.Snapshot) int64 {
	var n int64
	for _, seg := range s.Segments {
		for _, b := range seg.Blocks {
			if b.State == snapshot.StateActiveAllocated {
				n += b.Size
			}
		}
	}
	return n
}

type segKey struct {
	dev  int
	addr uint64
	size int64
}

// runSegments: a segment is a cudaMalloc (or an expandable range); one process keeps its
// segments at their addresses until empty_cache() or an OOM retry frees them, and a block that
// stays alive keeps its address, size and allocation site.
func runSegments(b, a runFile, rb, ra *Roles) (against, support, neutral string) {
	nb, na := len(b.snap.Segments), len(a.snap.Segments)
	idx := map[segKey]int{}
	for i, s := range a.snap.Segments {
		idx[segKey{s.Device, s.Address, s.TotalSize}] = i
	}
	shared, sameSite, sameBlock := 0, 0, 0
	example, exampleUser := "", false
	for _, sb := range b.snap.Segments {
		i, ok := idx[segKey{sb.Device, sb.Address, sb.TotalSize}]
		if !ok {
			continue
		}
		shared++
		sa := &a.snap.Segments[i]
		blocks := map[[2]int64]snapshot.Block{}
		for _, x := range sa.Blocks {
			if x.State == snapshot.StateActiveAllocated {
				blocks[[2]int64{int64(x.Address), x.Size}] = x
			}
		}
		site, block := false, false
		for _, x := range sb.Blocks {
			if x.State != snapshot.StateActiveAllocated {
				continue
			}
			y, ok := blocks[[2]int64{int64(x.Address), x.Size}]
			if !ok {
				continue
			}
			block = true
			atb, ata := rb.Block(sb.Device, x), ra.Block(sa.Device, y)
			if atb.Kind != SiteKindNone && atb.Site == ata.Site {
				site = true
				if example == "" || (!exampleUser && atb.Kind == SiteKindUser) {
					example, exampleUser = atb.Site, atb.Kind == SiteKindUser
				}
				break
			}
		}
		if site {
			sameSite++
		} else if block {
			sameBlock++
		}
	}
	switch {
	case nb == 0 || na == 0:
		return "", "", "one file has no segment"
	case shared == 0 && nb >= runSeveralSegs && na >= runSeveralSegs:
		return fmt.Sprintf("none of the %d and %d segments share an (address, size): every cudaMalloc is elsewhere", nb, na), "", ""
	case shared == 0:
		return "", "", fmt.Sprintf("no segment at the same (address, size) among %d and %d segments", nb, na)
	case sameSite > 0:
		return "", fmt.Sprintf("segments at the same (address, size) in both: %d (of %d and %d), %d of them holding a block of the same site at the same address (e.g. %s)",
			shared, nb, na, sameSite, example), ""
	case sameBlock > 0:
		return "", "", fmt.Sprintf("%d segments sit at the same (address, size) and %d hold a same-size block at the same address, but no block with a Python frame to compare sites", shared, sameBlock)
	}
	return "", "", fmt.Sprintf("%d segments sit at the same (address, size) but hold no common live block", shared)
}
