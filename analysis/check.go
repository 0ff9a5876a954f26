package analysis

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// CheckOptions are the budgets of a memory gate; a zero budget is not checked.
type CheckOptions struct {
	MaxPeakBytes      int64 `json:"max_peak_bytes,omitempty"`
	MaxReservedBytes  int64 `json:"max_reserved_bytes,omitempty"`
	MaxAllocatedBytes int64 `json:"max_allocated_bytes,omitempty"`
	// MaxGrowthPercent bounds the growth of the peak (or, without traces, of the final allocated
	// bytes) over Baseline; negative means unset.
	MaxGrowthPercent float64            `json:"max_growth_percent,omitempty"`
	Baseline         *snapshot.Snapshot `json:"-"`
	// Device restricts the gate to one device; AllDevices checks each.
	Device      int                `json:"device"`
	Attribution AttributionOptions `json:"-"`
	// Spell writes a budget's name (max-peak, max-growth, …) as the caller's user gives it:
	// nil for the command line's --max-peak; the MCP tool passes its argument names.
	Spell func(budget string) string `json:"-"`
}

// spell writes a budget's name as the user gave it (CheckOptions.Spell).
func (o CheckOptions) spell(budget string) string {
	if o.Spell != nil {
		return o.Spell(budget)
	}
	return "--" + budget
}

// CheckBudget is one budget on one device, met or not.
type CheckBudget struct {
	// Budget is the flag: max-peak, max-reserved, max-allocated or max-growth.
	Budget string `json:"budget"`
	Device int    `json:"device"`
	// Measure names the number compared: peak_allocated (over the trace), peak_reserved,
	// final_allocated, final_reserved, or peak_growth / final_allocated_growth.
	Measure    string `json:"measure"`
	ValueBytes int64  `json:"value_bytes"`
	// ValueBasis (max-peak): "requested" or "rounded", the bytes value_bytes counts.
	ValueBasis    string  `json:"value_basis,omitempty"`
	LimitBytes    int64   `json:"limit_bytes,omitempty"`
	ValuePercent  float64 `json:"value_percent,omitempty"` // max-growth: the growth over the baseline
	LimitPercent  float64 `json:"limit_percent,omitempty"`
	BaselineBytes int64   `json:"baseline_bytes,omitempty"`
	Pass          bool    `json:"pass"`
	// TopSite is the largest site live at the measured moment (at the peak event, or in the
	// final state), with its bytes and role.
	TopSite         string `json:"top_site,omitempty"`
	TopSiteBytes    int64  `json:"top_site_bytes,omitempty"`
	TopSiteCategory string `json:"top_site_category,omitempty"`
	Message         string `json:"message"`
}

// CheckResult is the gate's answer: pass when every budget holds.
type CheckResult struct {
	Path     string        `json:"path"`
	Baseline string        `json:"baseline,omitempty"`
	Pass     bool          `json:"pass"`
	Budgets  []CheckBudget `json:"budgets"`
	// DevicesOmitted counts the devices checked whose budgets are not listed.
	DevicesOmitted int      `json:"devices_omitted,omitempty"`
	Notes          []string `json:"notes"`
}

// deviceLevels are the numbers a gate compares on one device.
type deviceLevels struct {
	hasTrace                   bool
	peakAlloc, peakRes         int64
	finalAlloc, finalRes       int64
	peakEvent                  int
	peakTop                    SiteBytes
	finalTop                   TopSite
	peakTopFound, finalTopSeen bool
	// requested: the trace records requested sizes, so the peak over it sums requested bytes,
	// below the rounded block sizes the final state counts (see Check)
	requested bool
}

func levels(ctx context.Context, snap *snapshot.Snapshot, dev int, att AttributionOptions) (deviceLevels, error) {
	// One role table for the replay and the final state's top site; and of the replay, only
	// the walk and the sites at the peak (what diff reads too): the gate needs no more.
	roles, err := NewRoles(snap, att)
	if err != nil {
		return deviceLevels{}, err
	}
	// After the walk, the sites at the peak (one goroutine, from the walk) and the final
	// state's top site (a pipeline of two, from the segments) are worked out side by side:
	// neither writes what the other reads, and the roles take locks where they fill caches
	// (as replay's two sides read them).
	rw, err := replayWalk(ctx, snap, roles, dev, false)
	if err != nil {
		return deviceLevels{}, err
	}
	var ts *TopStacksResult
	var tsErr error
	alongside(func() { err = rw.peakSites(ctx, roles, dev, 1) },
		func() { ts, tsErr = topStacks(snap, roles, TopStacksOptions{Device: dev, Limit: 1, Attribution: att}) })
	if err != nil {
		return deviceLevels{}, err
	}
	if tsErr != nil {
		return deviceLevels{}, tsErr
	}
	rp := rw.r
	l := deviceLevels{hasTrace: rp.HasTrace, finalAlloc: rp.FinalAllocatedBytes, finalRes: rp.FinalReservedBytes,
		peakAlloc: rp.PeakAllocatedBytes, peakRes: rp.PeakReservedBytes, peakEvent: rp.PeakAllocatedEvent, requested: rp.SizesAreRequested}
	if !rp.HasTrace {
		l.peakAlloc, l.peakRes = rp.FinalAllocatedBytes, rp.FinalReservedBytes
	}
	if len(rp.PeakSites) > 0 {
		l.peakTop, l.peakTopFound = rp.PeakSites[0], true
	}
	if len(ts.Sites) > 0 {
		l.finalTop, l.finalTopSeen = ts.Sites[0], true
	}
	return l, nil
}

// Check runs the memory gate on snap.
func Check(ctx context.Context, snap *snapshot.Snapshot, opt CheckOptions) (*CheckResult, error) {
	if snap == nil {
		return nil, fmt.Errorf("check: no snapshot")
	}
	if opt.MaxPeakBytes <= 0 && opt.MaxReservedBytes <= 0 && opt.MaxAllocatedBytes <= 0 && opt.Baseline == nil {
		return nil, fmt.Errorf("check: no budget given: set --max-peak, --max-reserved, --max-allocated, or --baseline with --max-growth")
	}
	if opt.Baseline != nil && opt.MaxGrowthPercent < 0 {
		return nil, fmt.Errorf("check: --baseline needs --max-growth PCT")
	}
	r := &CheckResult{Path: snap.Path, Pass: true, Budgets: []CheckBudget{}, Notes: []string{}}
	if opt.Baseline != nil {
		r.Baseline = opt.Baseline.Path
	}
	devs := snap.Devices()
	if opt.Device >= 0 {
		if !slices.Contains(devs, opt.Device) {
			return nil, fmt.Errorf("check: no device %d (the file has devices %v): a budget on a device the file does not hold would pass without checking anything", opt.Device, devs)
		}
		devs = []int{opt.Device}
	}
	if len(devs) == 0 {
		return nil, fmt.Errorf("check: the file holds no device with segments or trace events: there is nothing to gate")
	}
	for _, dev := range devs {
		l, err := levels(ctx, snap, dev, opt.Attribution)
		if err != nil {
			return nil, fmt.Errorf("check: %w", err)
		}
		peakMeasure, resMeasure := "peak_allocated", "peak_reserved"
		if !l.hasTrace {
			peakMeasure, resMeasure = "final_allocated", "final_reserved"
		}
		add := func(b CheckBudget) {
			b.Device = dev
			r.Budgets = append(r.Budgets, b)
			r.Pass = r.Pass && b.Pass
		}
		if opt.MaxPeakBytes > 0 {
			peak, atEnd := l.peakAlloc, !l.hasTrace
			switch {
			case l.hasTrace && l.requested && l.finalAlloc > peak:
				// The trace's sizes are requested bytes; the memory held at the end, in block
				// sizes, was held at a moment of the trace too: the peak is at least that.
				peak, atEnd = l.finalAlloc, true
				r.Notes = append(r.Notes, fmt.Sprintf("device %d's trace records requested sizes: its peak sums requested bytes (%s), below the %s of blocks allocated at the end (rounded sizes, what the device held); %s is checked against the larger, a lower bound of the real peak",
					dev, FormatBytes(l.peakAlloc), FormatBytes(l.finalAlloc), opt.spell("max-peak")))
			case l.hasTrace && l.requested:
				r.Notes = append(r.Notes, fmt.Sprintf("device %d's trace records requested sizes: its peak (%s) sums requested bytes, a little below the rounded blocks the device held then; leave that margin in %s",
					dev, FormatBytes(l.peakAlloc), opt.spell("max-peak")))
			}
			b := l.budget("max-peak", opt.spell("max-peak"), peakMeasure, peak, opt.MaxPeakBytes, atEnd)
			// The trace's peak counts the trace's own sizes; the final state, rounded blocks.
			b.ValueBasis = sizeBasis(l.hasTrace && l.requested && !atEnd)
			add(b)
		}
		if opt.MaxReservedBytes > 0 {
			add(l.budget("max-reserved", opt.spell("max-reserved"), resMeasure, l.peakRes, opt.MaxReservedBytes, !l.hasTrace))
		}
		if opt.MaxAllocatedBytes > 0 {
			add(l.budget("max-allocated", opt.spell("max-allocated"), "final_allocated", l.finalAlloc, opt.MaxAllocatedBytes, true))
		}
		if opt.Baseline != nil {
			b, err := growthBudget(ctx, opt, dev, l)
			if err != nil {
				return nil, err
			}
			add(b)
		}
		if !l.hasTrace && (opt.MaxPeakBytes > 0 || opt.MaxReservedBytes > 0) {
			r.Notes = append(r.Notes, fmt.Sprintf("device %d has no trace: the peak budgets are checked against the final state (record history with torch.cuda.memory._record_memory_history to gate the real peak)", dev))
		}
	}
	r.listDevices(len(devs))
	return r, nil
}

// listDevices keeps the budgets of at most MaxListedDevices devices (those failing a budget
// first, then the largest by value) and at most as many notes; pass stays the verdict over
// every device, and DevicesOmitted counts the devices left out.
func (r *CheckResult) listDevices(ndev int) {
	var order []int
	byDev := map[int][]CheckBudget{}
	for _, b := range r.Budgets {
		if _, ok := byDev[b.Device]; !ok {
			order = append(order, b.Device)
		}
		byDev[b.Device] = append(byDev[b.Device], b)
	}
	keep := listedDevices(len(order), func(i int) deviceRank {
		var k deviceRank
		for _, b := range byDev[order[i]] {
			k.oom = k.oom || !b.Pass
			k.peak = max(k.peak, b.ValueBytes)
		}
		return k
	}, MaxListedDevices)
	if n := len(order) - len(keep); n > 0 {
		r.Budgets = r.Budgets[:0:0]
		for _, i := range keep {
			r.Budgets = append(r.Budgets, byDev[order[i]]...)
		}
		r.DevicesOmitted = n
		if len(r.Notes) > MaxListedDevices {
			r.Notes = append(r.Notes[:MaxListedDevices:MaxListedDevices], fmt.Sprintf("%d more notes like these are left out", len(r.Notes)-MaxListedDevices))
		}
		r.Notes = append(r.Notes, devicesOmittedNote(n, ndev, "a failing budget"))
	}
}

// budget compares one level with its limit and names the top site at that moment; shown is the
// budget's name as the user gave it.
func (l deviceLevels) budget(name, shown, measure string, value, limit int64, final bool) CheckBudget {
	b := CheckBudget{Budget: name, Measure: measure, ValueBytes: value, LimitBytes: limit, Pass: value <= limit}
	l.topSite(&b, final)
	what := strings.ReplaceAll(measure, "_", " ")
	v, lim := formatApart(value, limit)
	if b.Pass {
		b.Message = fmt.Sprintf("%s %s is within %s %s", what, v, shown, lim)
	} else {
		b.Message = fmt.Sprintf("%s %s exceeds %s %s by %s", what, v, shown, lim, FormatBytes(value-limit))
	}
	b.Message += l.topText(b, final)
	return b
}

func (l deviceLevels) topSite(b *CheckBudget, final bool) {
	switch {
	case !final && l.peakTopFound:
		b.TopSite, b.TopSiteBytes, b.TopSiteCategory = l.peakTop.Site, l.peakTop.Bytes, l.peakTop.Category
	case final && l.finalTopSeen:
		b.TopSite, b.TopSiteBytes, b.TopSiteCategory = l.finalTop.Site, l.finalTop.Bytes, l.finalTop.Category
	}
}

func (l deviceLevels) topText(b CheckBudget, final bool) string {
	if b.TopSite == "" {
		return ""
	}
	at := "in the final state"
	switch {
	case final:
	case b.Budget == "max-reserved":
		at = fmt.Sprintf("at the allocated peak (event %d)", l.peakEvent)
	default:
		at = fmt.Sprintf("at the peak (event %d)", l.peakEvent)
	}
	return fmt.Sprintf("; top site %s: %s %s [%s]", at, b.TopSite, FormatBytes(b.TopSiteBytes), b.TopSiteCategory)
}

// growthBudget compares the device's peak (or final allocated bytes, when either file has no
// trace) with the baseline's.
func growthBudget(ctx context.Context, opt CheckOptions, dev int, l deviceLevels) (CheckBudget, error) {
	base, err := levels(ctx, opt.Baseline, dev, opt.Attribution)
	if err != nil {
		return CheckBudget{}, fmt.Errorf("check: baseline: %w", err)
	}
	measure, now, then, final := "peak_growth", l.peakAlloc, base.peakAlloc, false
	if !l.hasTrace || !base.hasTrace {
		measure, now, then, final = "final_allocated_growth", l.finalAlloc, base.finalAlloc, true
	}
	b := CheckBudget{Budget: "max-growth", Measure: measure, ValueBytes: now, BaselineBytes: then, LimitPercent: opt.MaxGrowthPercent}
	var growth float64 // compared unrounded: +5.04% exceeds 5%
	switch {
	case then > 0:
		growth = float64(now-then) / float64(then) * 100
		b.ValuePercent = math.Round(growth*10) / 10
	case now > 0:
		b.ValuePercent = 100 // from nothing: the message says a percentage cannot be given
	}
	b.Pass = then > 0 && growth <= opt.MaxGrowthPercent || then == 0 && now == 0
	l.topSite(&b, final)
	what := "peak allocated"
	if final {
		what = "final allocated"
	}
	verb := "is within"
	if !b.Pass {
		verb = "exceeds"
	}
	if then > 0 {
		b.Message = fmt.Sprintf("%s %s vs baseline %s (%+.1f%%) %s %s %s%%", what, FormatBytes(now), FormatBytes(then), b.ValuePercent, verb, opt.spell("max-growth"), strconv.FormatFloat(opt.MaxGrowthPercent, 'f', -1, 64))
	} else {
		b.Message = fmt.Sprintf("%s %s vs baseline %s: the baseline holds nothing on device %d, so growth cannot be a percentage", what, FormatBytes(now), FormatBytes(then), dev)
	}
	b.Message += l.topText(b, final)
	return b, nil
}

// Text renders one line per violated budget (or the passing ones when all hold).
func (r *CheckResult) Text() string {
	var b strings.Builder
	for _, c := range r.Budgets {
		if !c.Pass {
			fmt.Fprintf(&b, "FAIL device %d: %s\n", c.Device, c.Message)
		}
	}
	if r.Pass {
		for _, c := range r.Budgets {
			fmt.Fprintf(&b, "ok device %d: %s\n", c.Device, c.Message)
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	return b.String()
}

// ParseBytes reads a size: a plain number of bytes, or a number with a unit (B, KiB, MiB, GiB,
// TiB, or the decimal kB, MB, GB, TB), e.g. 20GiB, 512MiB, 1.5GB.
func ParseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := len(t)
	for i > 0 && (t[i-1] < '0' || t[i-1] > '9') && t[i-1] != '.' {
		i--
	}
	num, unit := strings.TrimSpace(t[:i]), strings.ToLower(strings.TrimSpace(t[i:]))
	mult := map[string]float64{"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
		"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40,
		"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12}[unit]
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || mult == 0 || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("bad size %q: want bytes or a number with a unit, e.g. 20GiB, 512MiB, 1.5GB", s)
	}
	b := v * mult
	if b >= math.MaxInt64 {
		return 0, fmt.Errorf("bad size %q: too large", s)
	}
	return int64(math.Round(b)), nil
}

// formatApart renders two byte counts that differ with as many decimals as it takes to tell
// them apart (up to three, then bytes): "16.52 GiB" and "16.45 GiB", where both read "16.5 GiB".
func formatApart(a, b int64) (string, string) {
	sa, sb := FormatBytes(a), FormatBytes(b)
	if sa != sb || a == b {
		return sa, sb
	}
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB"}
	i, v, w := -1, float64(max(a, b)), 1.0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		w *= 1024
		i++
	}
	if i < 0 {
		return sa, sb
	}
	for d := 2; d <= 3; d++ {
		sa, sb = fmt.Sprintf("%.*f %s", d, float64(a)/w, units[i]), fmt.Sprintf("%.*f %s", d, float64(b)/w, units[i])
		if sa != sb {
			return sa, sb
		}
	}
	return fmt.Sprintf("%d B", a), fmt.Sprintf("%d B", b)
}
