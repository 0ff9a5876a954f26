package analysis

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// DiffOptions bounds and tunes Diff.
type DiffOptions struct {
	Limit       int                `json:"limit"`  // sites returned; 0 means 20
	Device      int                `json:"device"` // AllDevices (-1) or one device
	Attribution AttributionOptions `json:"attribution"`
}

// Pattern names reported by Diff.
const (
	PatternRetainedGraph     = "retained_autograd_graph"
	PatternGrowingContainer  = "growing_container"
	PatternOptimizerFirstStp = "optimizer_state_first_step"
	PatternNoGrowth          = "no_growth"
	// PatternUnexplainedGrowth: one run, live memory grew materially, and no site pattern explains it.
	PatternUnexplainedGrowth = "unexplained_growth"
	// PatternNotComparable: the files are not (or not known to be) two points of one run, so
	// their difference cannot show growth.
	PatternNotComparable = "not_comparable"
	// PatternWithinOneStep: one run, and both snapshots were written inside one step (the
	// later trace shows no step starting after the earlier snapshot): growth is the step's own.
	PatternWithinOneStep = "within_one_step"
)

// materialGrowth is the growth from which "no growth" would mislead.
const materialGrowth = 1 << 20

// peakSitesLimit bounds peak_sites_before / peak_sites_after.
const peakSitesLimit = 5

// DiffSite is one site's live memory in both snapshots.
type DiffSite struct {
	SiteIdentity
	Category    string `json:"category"`
	BytesBefore int64  `json:"bytes_before"`
	BytesAfter  int64  `json:"bytes_after"`
	DeltaBytes  int64  `json:"delta_bytes"`
	// Evidence is set when the category comes from the blocks themselves (user_container).
	Evidence     string `json:"evidence,omitempty"`
	BlocksBefore int    `json:"blocks_before"`
	BlocksAfter  int    `json:"blocks_after"`
	DeltaBlocks  int    `json:"delta_blocks"`
	minAfter     int64  // the smallest live block after: a per-step scalar (the loss) is the smallest
	// sizes of the live blocks before and after (block size -> count)
	sizesBefore, sizesAfter sizeHist
}

// DiffRole is the live memory of one role in both snapshots.
type DiffRole struct {
	Category    string `json:"category"`
	BytesBefore int64  `json:"bytes_before"`
	BytesAfter  int64  `json:"bytes_after"`
	DeltaBytes  int64  `json:"delta_bytes"`
}

// DiffPattern is a recognised growth pattern with its evidence and the concrete fix.
type DiffPattern struct {
	Name     string `json:"name"`
	Site     string `json:"site"`
	UserSite string `json:"user_site"`
	Evidence string `json:"evidence"`
	Fix      string `json:"fix"`
	// FixRule: the rule of the advice table (advice.go) that gave Fix.
	FixRule string `json:"fix_rule"`
	moved   bool   // no_growth because memory moved between sites
}

// DiffResult compares the live (allocated) memory of two snapshots by site and role; growth
// patterns only when the two are points of one run.
type DiffResult struct {
	BeforePath string `json:"before_path"`
	AfterPath  string `json:"after_path"`
	// SameRun: true when the files are two points of one process, false when they are not,
	// null when the files cannot tell; SameRunEvidence names the facts.
	SameRun         *bool  `json:"same_run" jsonschema:"oneof_type=boolean;null"`
	SameRunEvidence string `json:"same_run_evidence"`
	// Swapped: the files were given later first; before/after now read in time order.
	Swapped     bool  `json:"swapped"`
	BytesBefore int64 `json:"bytes_before"`
	BytesAfter  int64 `json:"bytes_after"`
	DeltaBytes  int64 `json:"delta_bytes"`
	// Peaks from replaying each file's trace (null without one), and the sites live at each.
	PeakBeforeBytes *int64      `json:"peak_before_bytes" jsonschema:"oneof_type=integer;null"`
	PeakAfterBytes  *int64      `json:"peak_after_bytes" jsonschema:"oneof_type=integer;null"`
	PeakSitesBefore []SiteBytes `json:"peak_sites_before"`
	PeakSitesAfter  []SiteBytes `json:"peak_sites_after"`
	// PeakRoles: live memory by role at each trace's peak (null unless both files have a
	// trace), the largest change first: what a comparison of two runs leads with.
	PeakRoles  []DiffRole    `json:"peak_roles"`
	Roles      []DiffRole    `json:"roles"`
	Sites      []DiffSite    `json:"sites"`
	TotalSites int           `json:"total_sites"` // sites before the limit
	Patterns   []DiffPattern `json:"patterns"`
	Notes      []string      `json:"notes"`
	// Advice: every fix and note of advice, with the rule of the advice table that gave it.
	Advice []AdviceItem `json:"advice"`
	// SameStep: one run, and both snapshots were written inside one step (see the
	// within_one_step pattern): what grew is the step's own memory, not a leak.
	SameStep   bool      `json:"same_step"`
	sameStep   *sameStep // why, when SameStep
	runReasons string    // the same-run facts without the verdict, for not_comparable
}

type diffKey struct {
	file, fn string
	line     int64
	site     string
	category string
}

// Diff first decides whether before and after are two points of one run (and puts them in time
// order), then matches their allocated memory by site (file, function, line: immune to address
// reuse) and by role, compares the traces' peaks, and, for one run only, recognises leak patterns.
func Diff(before, after *snapshot.Snapshot, opt DiffOptions) (*DiffResult, error) {
	if before == nil || after == nil {
		return nil, fmt.Errorf("diff: need two snapshots")
	}
	if opt.Limit <= 0 {
		opt.Limit = 20
	}
	// Each file gets its own attributor and role table, so that all of one file's work runs on
	// one goroutine, beside the other file's: its trace's peak (the replay also readies the
	// roles' trace context) and the rows of its allocated blocks. What compares the two (same
	// run, the rows matched by site, patterns) follows. Attributions do not depend on the
	// attributor that makes them, only on its options.
	var sides [2]diffSide
	snaps := [2]*snapshot.Snapshot{before, after}
	var roles [2]*Roles
	for i, s := range snaps {
		a, err := NewAttributor(opt.Attribution)
		if err != nil {
			return nil, fmt.Errorf("diff: %w", err)
		}
		roles[i] = rolesWith(s, a)
	}
	alongside(func() { sides[1] = diffOneSide(snaps[1], roles[1], opt) },
		func() { sides[0] = diffOneSide(snaps[0], roles[0], opt) })
	for _, sd := range sides {
		if sd.err != nil {
			return nil, fmt.Errorf("diff: %w", sd.err)
		}
	}
	rb, ra := roles[0], roles[1]
	run := checkSameRun(before, after, rb, ra)
	if run.swapped {
		before, after, sides[0], sides[1] = after, before, sides[1], sides[0]
		rb, ra = ra, rb
	}
	r := &DiffResult{BeforePath: before.Path, AfterPath: after.Path, SameRun: run.same, SameRunEvidence: run.evidence,
		Swapped: run.swapped, runReasons: run.reasons, PeakSitesBefore: []SiteBytes{}, PeakSitesAfter: []SiteBytes{},
		Roles: []DiffRole{}, PeakRoles: []DiffRole{}, Sites: []DiffSite{}, Patterns: []DiffPattern{}, Notes: []string{}, Advice: []AdviceItem{}}
	if r.sameRun() && !strings.HasPrefix(run.reasons, "both are the same file") {
		if st, ok := findSameStep(before, after, ra, opt.Device); ok {
			r.SameStep, r.sameStep = true, &st
		}
	}
	all := diffSites(&sides[0], &sides[1], r)
	r.Roles = diffRoles(all)
	r.PeakBeforeBytes, r.PeakSitesBefore = sides[0].peak, sides[0].peakSites
	r.PeakAfterBytes, r.PeakSitesAfter = sides[1].peak, sides[1].peakSites
	if sides[0].peak != nil && sides[1].peak != nil {
		r.PeakRoles = peakRoleDeltas(sides[0].peakRoles, sides[1].peakRoles)
	}
	r.Patterns = diffPatterns(all, r)
	r.TotalSites = len(all)
	r.Sites = all
	if len(r.Sites) > opt.Limit {
		r.Sites = r.Sites[:opt.Limit]
	}
	r.Notes = diffNotes(before, after, r)
	r.adviseDiff()
	return r, nil
}

// peakRoleDeltas compares the live memory by role at the two peaks, the largest change first.
func peakRoleDeltas(before, after map[string]int64) []DiffRole {
	out := []DiffRole{}
	for _, c := range AllCategories {
		b, a := before[c], after[c]
		if b == 0 && a == 0 {
			continue
		}
		out = append(out, DiffRole{Category: c, BytesBefore: b, BytesAfter: a, DeltaBytes: a - b})
	}
	slices.SortStableFunc(out, func(x, y DiffRole) int {
		ax, ay := max(x.DeltaBytes, -x.DeltaBytes), max(y.DeltaBytes, -y.DeltaBytes)
		switch {
		case ax > ay:
			return -1
		case ax < ay:
			return 1
		}
		return 0
	})
	return out
}

// adviseDiff words each pattern's fix and the notes' advice from the advice table (advice.go).
func (r *DiffResult) adviseDiff() {
	r.Advice = []AdviceItem{}
	sameFile := strings.HasPrefix(r.runReasons, "both are the same file")
	for i := range r.Patterns {
		p := &r.Patterns[i]
		it, ok := adviseOne("diff", &adviceIn{diff: r, pattern: p.Name, patSite: p.Site, moved: p.moved, sameFile: sameFile})
		if !ok {
			continue
		}
		p.Fix, p.FixRule = it.Text, it.Rule
		r.Advice = append(r.Advice, it)
	}
	if it, ok := adviseOne("diff", &adviceIn{diff: r, sameFile: sameFile}); ok {
		r.Notes = append(r.Notes, it.Text)
		r.Advice = append(r.Advice, it)
	}
}

// diffSide is what Diff works out of one file alone.
type diffSide struct {
	rows  []diffRow
	bytes int64 // allocated bytes in all
	// peak: the trace's allocated peak (nil without a trace) and the sites live at it.
	peak      *int64
	peakSites []SiteBytes
	peakRoles map[string]int64 // live bytes per role at the peak
	err       error
}

// diffRow is one file's allocated blocks of one (site, role) row, in order of first appearance.
type diffRow struct {
	key diffKey
	// id and category: the row's first block's.
	id       SiteIdentity
	category string
	// ucEvidence: the evidence of the row's first block whose role is user_container, if any.
	ucEvidence string
	hasUC      bool
	bytes      int64
	blocks     int
	sizes      sizeHist // block sizes (the container test reads those of rows of role other)
	minSize    int64    // the smallest block (see DiffSite.minAfter)
}

// diffOneSide replays snap's trace for its peak and groups its allocated blocks into rows, with
// roles, which it alone uses until it returns.
func diffOneSide(snap *snapshot.Snapshot, roles *Roles, opt DiffOptions) diffSide {
	var sd diffSide
	if sd.peak, sd.peakSites, sd.peakRoles, sd.err = diffPeak(snap, roles, opt); sd.err != nil {
		return sd
	}
	index := map[diffKey]int{}
	for si := range snap.Segments {
		seg := &snap.Segments[si]
		if opt.Device >= 0 && seg.Device != opt.Device {
			continue
		}
		for _, b := range seg.Blocks {
			if b.State != snapshot.StateActiveAllocated {
				continue
			}
			at := roles.Block(seg.Device, b)
			// One row per role: a site can hold activations and a workspace. Blocks your code
			// holds past their pass share the row of the site's other blocks (see rowKey).
			rowCat := at.Category
			if rowCat == CategoryUserContainer {
				rowCat = CategoryOther
			}
			k := diffKey{at.File, at.Function, at.Line, at.Site, rowCat}
			i, ok := index[k]
			if !ok {
				i = len(sd.rows)
				index[k] = i
				sd.rows = append(sd.rows, diffRow{key: k, id: at.SiteIdentity, category: at.Category, sizes: sizeHist{}})
			}
			row := &sd.rows[i]
			if at.Category == CategoryUserContainer && !row.hasUC {
				row.hasUC, row.ucEvidence = true, at.Evidence
			}
			row.sizes.add(b.Size)
			if row.minSize == 0 || b.Size < row.minSize {
				row.minSize = b.Size
			}
			row.bytes += b.Size
			row.blocks++
			sd.bytes += b.Size
		}
	}
	return sd
}

// diffSites matches the rows of both files by (site, role), sorted by growth.
func diffSites(before, after *diffSide, r *DiffResult) []DiffSite {
	m := map[diffKey]*DiffSite{}
	type kindSizes struct {
		sizes    [2]sizeHist // before, after
		allOther bool
	}
	ks := map[diffKey]*kindSizes{}
	// Rows meet in the order their first blocks do, before's first: a row's identity and role
	// are its first block's, and the first user_container block after that one makes it a
	// user_container row with that block's evidence.
	for side, sd := range [2]*diffSide{before, after} {
		for i := range sd.rows {
			row := &sd.rows[i]
			k := row.key
			d := m[k]
			if d == nil {
				d = &DiffSite{SiteIdentity: row.id, Category: row.category}
				m[k] = d
				ks[k] = &kindSizes{allOther: k.category == CategoryOther}
			}
			if row.hasUC && d.Category != CategoryUserContainer {
				d.Category, d.Evidence = CategoryUserContainer, row.ucEvidence
			}
			ks[k].sizes[side] = row.sizes
			if side == 1 {
				d.minAfter = row.minSize
				d.BytesAfter, d.BlocksAfter, d.sizesAfter = row.bytes, row.blocks, row.sizes
			} else {
				d.BytesBefore, d.BlocksBefore, d.sizesBefore = row.bytes, row.blocks, row.sizes
			}
		}
	}
	r.BytesBefore, r.BytesAfter = before.bytes, after.bytes
	r.DeltaBytes = r.BytesAfter - r.BytesBefore
	all := make([]DiffSite, 0, len(m))
	for k, d := range m {
		if x := ks[k]; x.allOther {
			h := x.sizes[1]
			if d.BlocksAfter == 0 {
				h = x.sizes[0]
			}
			if h == nil {
				h = sizeHist{}
			}
			var across string // only growth between two points of one run shows accumulation
			if r.sameRun() && d.BlocksAfter > d.BlocksBefore {
				across = fmt.Sprintf("grew from %d to %d blocks between the two snapshots", d.BlocksBefore, d.BlocksAfter)
			}
			if ev := containerEvidence(d.SiteIdentity, h, across); ev != "" {
				d.Category, d.Evidence = CategoryUserContainer, ev
			}
		}
		d.DeltaBytes = d.BytesAfter - d.BytesBefore
		d.DeltaBlocks = d.BlocksAfter - d.BlocksBefore
		all = append(all, *d)
	}
	slices.SortFunc(all, func(x, y DiffSite) int {
		if x.DeltaBytes != y.DeltaBytes {
			if x.DeltaBytes > y.DeltaBytes {
				return -1
			}
			return 1
		}
		if x.DeltaBlocks != y.DeltaBlocks {
			return y.DeltaBlocks - x.DeltaBlocks
		}
		if c := strings.Compare(x.Site, y.Site); c != 0 {
			return c
		}
		return strings.Compare(x.Category, y.Category)
	})
	return all
}

// diffRoles sums the sites by role, largest first (by the larger of the two sides).
func diffRoles(all []DiffSite) []DiffRole {
	by := map[string]*DiffRole{}
	for _, d := range all {
		x := by[d.Category]
		if x == nil {
			x = &DiffRole{Category: d.Category}
			by[d.Category] = x
		}
		x.BytesBefore += d.BytesBefore
		x.BytesAfter += d.BytesAfter
	}
	out := []DiffRole{}
	for _, c := range AllCategories {
		if x := by[c]; x != nil {
			x.DeltaBytes = x.BytesAfter - x.BytesBefore
			out = append(out, *x)
		}
	}
	slices.SortStableFunc(out, func(x, y DiffRole) int {
		mx, my := max(x.BytesBefore, x.BytesAfter), max(y.BytesBefore, y.BytesAfter)
		switch {
		case mx > my:
			return -1
		case mx < my:
			return 1
		}
		return 0
	})
	return out
}

// diffPeak replays one file's trace (the device with the highest peak when every device is
// asked for) with its roles and keeps the peak and the sites live at it.
func diffPeak(s *snapshot.Snapshot, roles *Roles, opt DiffOptions) (*int64, []SiteBytes, map[string]int64, error) {
	if !s.Caps.HasTrace {
		return nil, []SiteBytes{}, nil, nil
	}
	devs := []int{opt.Device}
	if opt.Device < 0 {
		devs = devs[:0]
		for d, evs := range s.DeviceTraces {
			if len(evs) > 0 {
				devs = append(devs, d)
			}
		}
	}
	var best *ReplayResult
	for _, d := range devs {
		// Every site, so that the roles at the peak sum all of it; the sites are cut below.
		rr, err := replayPeak(context.Background(), s, roles, d, math.MaxInt32)
		if err != nil {
			return nil, nil, nil, err
		}
		if rr.HasTrace && rr.Events > 1 && (best == nil || rr.PeakAllocatedBytes > best.PeakAllocatedBytes) {
			best = rr
		}
	}
	if best == nil {
		return nil, []SiteBytes{}, nil, nil
	}
	p := best.PeakAllocatedBytes
	sites := best.PeakSites
	byRole := map[string]int64{}
	for _, x := range sites {
		byRole[x.Category] += x.Bytes
	}
	if len(sites) > peakSitesLimit {
		sites = sites[:peakSitesLimit]
	}
	return &p, sites, byRole, nil
}

func (r *DiffResult) sameRun() bool { return r.SameRun != nil && *r.SameRun }

// totalClause is the total live memory change, for pattern evidence.
func (r *DiffResult) totalClause() string {
	return fmt.Sprintf("live memory %s -> %s, %s", FormatBytes(r.BytesBefore), FormatBytes(r.BytesAfter), formatDelta(r.DeltaBytes))
}

func growing(d DiffSite) bool { return d.DeltaBytes > 0 && d.DeltaBlocks > 0 }

// pointable: a pattern may name this site (a frame in the user's own code).
func pointable(d DiffSite) bool {
	return d.Kind != SiteKindNone && d.UserSite != "" && !strings.HasPrefix(d.Site, "<")
}

// growth is the growing sites sorted into what the patterns look at.
type growth struct {
	optimizer []DiffSite // optimizer state that did not exist before
	acts      []DiffSite // growing activations (the loss is one: it is part of the graph)
	others    []DiffSite // every other growing site
}

func classifyGrowth(all []DiffSite) growth {
	var g growth
	for _, d := range all {
		if !growing(d) {
			continue
		}
		switch {
		case d.Category == CategoryOptimizerState && d.BlocksBefore == 0:
			g.optimizer = append(g.optimizer, d)
		case d.Category == CategoryActivation:
			g.acts = append(g.acts, d)
		default:
			g.others = append(g.others, d)
		}
	}
	return g
}

// diffPatterns names what the difference shows: for two points of one run, the leak patterns
// (or no growth); otherwise only that the files cannot show growth.
func diffPatterns(all []DiffSite, r *DiffResult) []DiffPattern {
	if !r.sameRun() {
		return []DiffPattern{notComparable(r)}
	}
	if r.sameStep != nil {
		return []DiffPattern{sameStepPattern(*r.sameStep, all, r)}
	}
	g := classifyGrowth(all)
	out := []DiffPattern{}
	if p, ok := retainedGraph(g, r); ok {
		out = append(out, p)
	} else if p, ok := growingContainer(g, r); ok {
		out = append(out, p)
	}
	if len(out) > 0 && r.DeltaBytes <= 0 && len(all) > 0 {
		// A site gained blocks, yet live memory did not grow. When other sites lost blocks of
		// the sizes it gained, the same tensors were made again elsewhere (an out-of-place
		// update replacing its state): moved, not grown. Otherwise the pattern stands, with
		// the caveat: snapshots at different points of a step can hide growth behind what a
		// pass frees.
		if d, ok := movedBySize(out[0], all); ok {
			out = []DiffPattern{movedNotGrown(d, all, r)}
		} else {
			out[0].Evidence += "; but live memory did not grow in all: if the snapshots were taken at different points of a step, other memory freed in between can hide the growth, or the growth be memory moving between sites; dump both at the same point of the loop to tell"
		}
	}
	if p, ok := optimizerFirstStep(g, len(out) == 0); ok {
		out = append(out, p)
	}
	if len(out) == 0 {
		out = append(out, noGrowth(all, r))
	}
	return out
}

// retainedGraph: several forward sites grow together with a per-step tensor that keeps each
// step's graph (and its saved activations) alive. That tensor, the loss, is the growing site
// whose smallest block is smallest: a 4-byte scalar in a 512 B block.
func retainedGraph(g growth, r *DiffResult) (DiffPattern, bool) {
	cand := append(append([]DiffSite{}, g.acts...), g.others...)
	loss, found := DiffSite{}, false
	for _, d := range cand {
		if !pointable(d) {
			continue
		}
		if !found || d.minAfter < loss.minAfter ||
			(d.minAfter == loss.minAfter && (d.DeltaBlocks > loss.DeltaBlocks || (d.DeltaBlocks == loss.DeltaBlocks && d.Site < loss.Site))) {
			loss, found = d, true
		}
	}
	if !found {
		return DiffPattern{}, false
	}
	acts := []DiffSite{}
	for _, d := range g.acts {
		if d.Site != loss.Site || d.Category != loss.Category {
			acts = append(acts, d)
		}
	}
	if len(acts) < 2 {
		return DiffPattern{}, false
	}
	var total int64
	parts := []string{}
	for i, d := range acts {
		total += d.DeltaBytes
		if i < 5 {
			parts = append(parts, fmt.Sprintf("%s %s in +%d blocks", d.Site, formatDelta(d.DeltaBytes), d.DeltaBlocks))
		}
	}
	ev := fmt.Sprintf("%d forward (activation) sites grew together by %s: %s", len(acts), formatDelta(total), strings.Join(parts, "; "))
	ev += fmt.Sprintf("; alongside %s (%s) growing by +%d blocks (its smallest block %s, about %s per block), the per-step loss/output tensor that keeps each step's graph and its saved activations alive",
		loss.Site, loss.Function, loss.DeltaBlocks, FormatBytes(loss.minAfter), FormatBytes(loss.DeltaBytes/int64(loss.DeltaBlocks)))
	ev += "; " + r.totalClause()
	return DiffPattern{Name: PatternRetainedGraph, Site: loss.Site, UserSite: loss.UserSite, Evidence: ev}, true
}

// growingContainer: one site gains many blocks: a list or dict the user appends to every step.
func growingContainer(g growth, r *DiffResult) (DiffPattern, bool) {
	cand := append(append([]DiffSite{}, g.others...), g.acts...)
	best := DiffSite{}
	for _, d := range cand {
		if pointable(d) && d.DeltaBlocks >= 2 && d.DeltaBytes > best.DeltaBytes {
			best = d
		}
	}
	if best.Site == "" {
		return DiffPattern{}, false
	}
	ev := fmt.Sprintf("%s went from %d to %d blocks (+%d, %s, about %s per block)", SiteText(best.Site, best.Function),
		best.BlocksBefore, best.BlocksAfter, best.DeltaBlocks, formatDelta(best.DeltaBytes), FormatBytes(best.DeltaBytes/int64(best.DeltaBlocks)))
	if len(cand) == 1 {
		ev += "; no other site grew"
	} else {
		ev += fmt.Sprintf("; %d other sites grew less", len(cand)-1)
	}
	ev += "; " + r.totalClause()
	if r.DeltaBytes < best.DeltaBytes {
		ev += fmt.Sprintf(" (other sites shrank by %s)", FormatBytes(best.DeltaBytes-r.DeltaBytes))
	}
	return DiffPattern{Name: PatternGrowingContainer, Site: best.Site, UserSite: best.UserSite, Evidence: ev}, true
}

// movedBySize: the pattern's site (returned) gained blocks whose sizes other sites lost (at
// least four fifths of its growth, size for size).
func movedBySize(p DiffPattern, all []DiffSite) (DiffSite, bool) {
	i := slices.IndexFunc(all, func(d DiffSite) bool { return d.Site == p.Site && growing(d) })
	if i < 0 {
		return DiffSite{}, false
	}
	d := all[i]
	shrunk := map[int64]int{}
	for j, x := range all {
		if j == i || x.DeltaBytes >= 0 {
			continue
		}
		for size, n := range x.sizesBefore {
			if lost := n - x.sizesAfter[size]; lost > 0 {
				shrunk[size] += lost
			}
		}
	}
	var matched int64
	for size, n := range d.sizesAfter {
		if gained := n - d.sizesBefore[size]; gained > 0 {
			matched += size * int64(min(gained, shrunk[size]))
		}
	}
	return d, matched*5 >= d.DeltaBytes*4
}

// movedNotGrown: site d grew in bytes and blocks while live memory did not: tensors freed at
// one line and made again at another (an out-of-place update replacing its state).
func movedNotGrown(d DiffSite, all []DiffSite, r *DiffResult) DiffPattern {
	var grew, shrank int64
	for _, x := range all {
		if x.DeltaBytes > 0 {
			grew += x.DeltaBytes
		} else {
			shrank -= x.DeltaBytes
		}
	}
	ev := fmt.Sprintf("%s went from %d to %d blocks (%s) and sites grew by %s in all, but others shrank by %s (%s): memory moved between sites (tensors freed at one line and made again at another, as an out-of-place update replaces its state, or two different points of a step), it did not accumulate",
		SiteText(d.Site, d.Function), d.BlocksBefore, d.BlocksAfter, formatDelta(d.DeltaBytes), FormatBytes(grew), FormatBytes(shrank), r.totalClause())
	return DiffPattern{Name: PatternNoGrowth, Evidence: ev, moved: true}
}

// optimizerFirstStep: optimizer state that did not exist before appears once (not a leak).
func optimizerFirstStep(g growth, alone bool) (DiffPattern, bool) {
	if len(g.optimizer) == 0 {
		return DiffPattern{}, false
	}
	var total int64
	blocks := 0
	site := DiffSite{}
	for _, d := range g.optimizer {
		total += d.DeltaBytes
		blocks += d.DeltaBlocks
		if site.Site == "" && pointable(d) {
			site = d
		}
	}
	largest := g.optimizer[0]
	ev := fmt.Sprintf("%d optimizer site(s) appeared: %s in %d blocks, none before (largest %s in %s); optimizer state (e.g. Adam's exp_avg and exp_avg_sq) is created on the first optimizer.step() and then stays flat. This is expected, not a leak",
		len(g.optimizer), FormatBytes(total), blocks, largest.Site, largest.Function)
	if alone && len(g.acts)+len(g.others) == 0 {
		ev += "; nothing else grew"
	}
	return DiffPattern{Name: PatternOptimizerFirstStp, Site: site.Site, UserSite: site.UserSite, Evidence: ev}, true
}

// noGrowth words the no-pattern case after the data: memory dropped, stayed, grew a little, or
// grew materially without any site pattern explaining it (unexplained_growth, never no_growth).
// all is sorted by growth, largest first.
func noGrowth(all []DiffSite, r *DiffResult) DiffPattern {
	delta := r.DeltaBytes
	ev := fmt.Sprintf("no site grew in both bytes and blocks (%s)", r.totalClause())
	site := func(what string, d DiffSite) string {
		return fmt.Sprintf("; the largest %s: %s %s in %+d blocks", what, SiteText(d.Site, d.Function), formatDelta(d.DeltaBytes), d.DeltaBlocks)
	}
	p := DiffPattern{Name: PatternNoGrowth}
	switch {
	case delta < 0:
		if len(all) > 0 && all[len(all)-1].DeltaBytes < 0 {
			ev += site("drop", all[len(all)-1])
		}
	case delta >= materialGrowth:
		p.Name = PatternUnexplainedGrowth
		ev = fmt.Sprintf("live memory grew by %s (%s -> %s) and no site pattern explains it: no site gained both bytes and blocks in a user frame",
			FormatBytes(delta), FormatBytes(r.BytesBefore), FormatBytes(r.BytesAfter))
		if len(all) > 0 && all[0].DeltaBytes > 0 {
			ev += site("growth", all[0])
		}
	case delta > 0:
		if len(all) > 0 && all[0].DeltaBytes > 0 {
			ev += site("growth", all[0])
		}
	}
	p.Evidence = ev
	return p
}

// notComparable says why two files that are not one run cannot show growth, and what they can
// still be compared on: memory by role and the peaks.
func notComparable(r *DiffResult) DiffPattern {
	if r.runReasons == "" {
		r.runReasons = r.SameRunEvidence
	}
	what := "these files are not two points of one run"
	if r.SameRun == nil {
		what = "nothing shows that these files are two points of one run"
	}
	between := "is between two processes, not growth"
	if r.SameRun == nil {
		between = "may be between two processes: it cannot be read as growth"
	}
	ev := fmt.Sprintf("%s (%s), so the difference (%s) %s: no leak pattern applies", what, r.runReasons, r.totalClause(), between)
	if rs := r.roleSummary(3); rs != "" {
		ev += "; like for like, by role: " + rs
	}
	if r.PeakBeforeBytes != nil && r.PeakAfterBytes != nil {
		ev += fmt.Sprintf("; trace peaks %s vs %s", FormatBytes(*r.PeakBeforeBytes), FormatBytes(*r.PeakAfterBytes))
	}
	return DiffPattern{Name: PatternNotComparable, Evidence: ev}
}

// roleSummary renders the n largest roles as "parameter 1.0 GiB -> 2.0 GiB".
func (r *DiffResult) roleSummary(n int) string {
	parts := []string{}
	for i, x := range r.Roles {
		if i == n {
			break
		}
		parts = append(parts, fmt.Sprintf("%s %s vs %s", x.Category, FormatBytes(x.BytesBefore), FormatBytes(x.BytesAfter)))
	}
	return strings.Join(parts, ", ")
}

// diffNotes: what the files cannot show, the swap, and the third-snapshot caveat.
func diffNotes(before, after *snapshot.Snapshot, r *DiffResult) []string {
	notes := []string{}
	if r.Swapped {
		notes = append(notes, fmt.Sprintf("the files were given in reverse time order: swapped, so before is %s (the earlier) and after is %s (the later)", r.BeforePath, r.AfterPath))
	}
	for _, s := range []*snapshot.Snapshot{before, after} {
		switch {
		case !s.Caps.FramesOnBlocks && s.Caps.FramesOnAllocs:
			// History was recorded with context (the trace's allocations carry frames): the
			// live blocks were allocated before recording started.
			notes = append(notes, fmt.Sprintf("%s has no stacks on its live blocks (allocated before recording started; its trace's allocations carry frames): that memory cannot be matched to sites", s.Path))
		case !s.Caps.FramesOnBlocks:
			notes = append(notes, fmt.Sprintf("%s has no stacks on its blocks: its memory cannot be matched to sites (record history with context before the first snapshot)", s.Path))
		}
	}
	if (before.Caps.PythonOnly || after.Caps.PythonOnly) && slices.ContainsFunc(r.Sites, func(d DiffSite) bool { return d.Site == SiteNoPython }) {
		notes = append(notes, "Python-only stacks: backward-pass memory has no frame and is grouped as <no Python frame>")
	}
	if r.sameRun() && !strings.HasPrefix(r.runReasons, "both are the same file") && lastEventTime(before, -1) == 0 && lastEventTime(after, -1) == 0 {
		notes = append(notes, fmt.Sprintf("neither file records trace times, so their order is the one given: %s before %s; if %s was written first, give them the other way round (growth reads as shrinking)",
			r.BeforePath, r.AfterPath, r.AfterPath))
	}
	switch {
	case !r.sameRun():
		notes = append(notes, "the sites are listed for reference: a site present in one file and not the other says which code each job ran, not what grew")
	case r.DeltaBytes > 0 && !r.SameStep:
		notes = append(notes, "two snapshots show growth, not linearity: take a third to confirm a steady leak")
	}
	return notes
}

// Text renders the diff: the verdict on the pair first, then peaks and roles, growth by site,
// the patterns with their fixes, the notes.
func (r *DiffResult) Text() string {
	var b strings.Builder
	// Two runs are a comparison: it leads with their peaks and the roles live at them.
	if !r.sameRun() && r.PeakBeforeBytes != nil && r.PeakAfterBytes != nil {
		fmt.Fprintf(&b, "peak %s -> %s (%s)", FormatBytes(*r.PeakBeforeBytes), FormatBytes(*r.PeakAfterBytes), formatDelta(*r.PeakAfterBytes-*r.PeakBeforeBytes))
		if len(r.PeakRoles) > 0 {
			parts := []string{}
			for i, x := range r.PeakRoles {
				if i == 3 || x.DeltaBytes == 0 {
					break
				}
				parts = append(parts, fmt.Sprintf("%s %s", x.Category, formatDelta(x.DeltaBytes)))
			}
			if len(parts) > 0 {
				fmt.Fprintf(&b, ", at the peaks by role: %s", strings.Join(parts, ", "))
			}
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "live memory %s -> %s (%s), %d sites", FormatBytes(r.BytesBefore), FormatBytes(r.BytesAfter), formatDelta(r.DeltaBytes), r.TotalSites)
	switch {
	case r.SameRun == nil:
		b.WriteString("; not known to be one run: the difference cannot show growth")
	case !*r.SameRun:
		b.WriteString("; two different runs: the difference is not growth")
	case r.Swapped:
		b.WriteString(" (files swapped into time order)")
	}
	b.WriteString("\n")
	verdict := "unknown"
	if r.SameRun != nil {
		verdict = fmt.Sprint(*r.SameRun)
	}
	fmt.Fprintf(&b, "same run: %s (%s)\n", verdict, r.SameRunEvidence)
	if r.PeakBeforeBytes != nil || r.PeakAfterBytes != nil {
		pk := func(p *int64) string {
			if p == nil {
				return "no trace"
			}
			return FormatBytes(*p)
		}
		fmt.Fprintf(&b, "trace peak %s -> %s", pk(r.PeakBeforeBytes), pk(r.PeakAfterBytes))
		if r.PeakBeforeBytes != nil && r.PeakAfterBytes != nil {
			fmt.Fprintf(&b, " (%s)", formatDelta(*r.PeakAfterBytes-*r.PeakBeforeBytes))
		}
		b.WriteString("\n")
		if len(r.PeakRoles) > 0 && !r.sameRun() {
			b.WriteString("by role at the peaks:\n")
			for _, x := range r.PeakRoles {
				fmt.Fprintf(&b, "%10s  %s -> %s  %s\n", formatDelta(x.DeltaBytes), FormatBytes(x.BytesBefore), FormatBytes(x.BytesAfter), x.Category)
			}
		}
		for _, side := range []struct {
			name  string
			sites []SiteBytes
		}{{"before", r.PeakSitesBefore}, {"after", r.PeakSitesAfter}} {
			if len(side.sites) == 0 {
				continue
			}
			parts := []string{}
			for _, s := range side.sites {
				parts = append(parts, fmt.Sprintf("%s %s [%s]", s.Site, FormatBytes(s.Bytes), s.Category))
			}
			fmt.Fprintf(&b, "  live at the %s peak: %s\n", side.name, strings.Join(parts, ", "))
		}
	}
	if len(r.Roles) > 0 {
		if r.sameRun() {
			b.WriteString("by role:\n")
		} else {
			b.WriteString("by role (final state):\n")
		}
		for _, x := range r.Roles {
			fmt.Fprintf(&b, "%10s  %s -> %s  %s\n", formatDelta(x.DeltaBytes), FormatBytes(x.BytesBefore), FormatBytes(x.BytesAfter), x.Category)
		}
	}
	header := len(r.Roles) > 0
	for _, d := range r.Sites {
		if d.DeltaBytes == 0 && d.DeltaBlocks == 0 {
			continue
		}
		if header {
			b.WriteString("by site:\n")
			header = false
		}
		fmt.Fprintf(&b, "%10s %+5d blocks  %s", formatDelta(d.DeltaBytes), d.DeltaBlocks, d.Site)
		if d.Function != "" {
			fmt.Fprintf(&b, " in %s", d.Function)
		}
		fmt.Fprintf(&b, "  (%s, %d -> %s) [%s]\n", FormatBytes(d.BytesAfter), d.BlocksBefore, count(d.BlocksAfter, "block"), d.Category)
	}
	for _, p := range r.Patterns {
		fmt.Fprintf(&b, "%s", p.Name)
		if p.Site != "" {
			fmt.Fprintf(&b, " at %s", p.Site)
		}
		fmt.Fprintf(&b, ": %s\n  fix: %s\n", p.Evidence, p.Fix)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	return b.String()
}
