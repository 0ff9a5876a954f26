package analysis

import (
	"fmt"
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
)

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
}

// DiffPattern is a recognised growth pattern with its evidence and the concrete fix.
type DiffPattern struct {
	Name     string `json:"name"`
	Site     string `json:"site"`
	Evidence string `json:"evidence"`
	Fix      string `json:"fix"`
}

// DiffResult compares the live (allocated) memory of two snapshots of the same run by site.
type DiffResult struct {
	BeforePath  string        `json:"before_path"`
	AfterPath   string        `json:"after_path"`
	BytesBefore int64         `json:"bytes_before"`
	BytesAfter  int64         `json:"bytes_after"`
	DeltaBytes  int64         `json:"delta_bytes"`
	Sites       []DiffSite    `json:"sites"`
	TotalSites  int           `json:"total_sites"` // sites before the limit
	Patterns    []DiffPattern `json:"patterns"`
	Notes       []string      `json:"notes"`
}

type diffKey struct {
	file, fn string
	line     int64
	site     string
	category string // only for empty stacks (see gradGuesser)
}

// Diff matches allocated memory of before and after by site (file, function, line: immune to
// address reuse), sorts by growth and recognises leak patterns.
func Diff(before, after *snapshot.Snapshot, opt DiffOptions) (*DiffResult, error) {
	if before == nil || after == nil {
		return nil, fmt.Errorf("diff: need two snapshots")
	}
	if opt.Limit <= 0 {
		opt.Limit = 20
	}
	a, err := NewAttributor(opt.Attribution)
	if err != nil {
		return nil, fmt.Errorf("diff: %w", err)
	}
	r := &DiffResult{BeforePath: before.Path, AfterPath: after.Path, Sites: []DiffSite{}, Patterns: []DiffPattern{}, Notes: []string{}}
	m := map[diffKey]*DiffSite{}
	type kindSizes struct {
		sizes    [2]sizeHist // before, after
		allOther bool
	}
	ks := map[diffKey]*kindSizes{}
	add := func(snap *snapshot.Snapshot, isAfter bool) {
		roles := rolesWith(snap, a)
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
				k := diffKey{at.File, at.Function, at.Line, at.Site, ""}
				k.category = at.Category // one row per role: a site can hold activations and a workspace
				d := m[k]
				if d == nil {
					d = &DiffSite{SiteIdentity: at.SiteIdentity, Category: at.Category}
					m[k] = d
					ks[k] = &kindSizes{sizes: [2]sizeHist{{}, {}}, allOther: true}
				}
				x := ks[k]
				x.allOther = x.allOther && at.Category == CategoryOther
				if isAfter {
					x.sizes[1].add(b.Size)
				} else {
					x.sizes[0].add(b.Size)
				}
				if isAfter {
					if d.minAfter == 0 || b.Size < d.minAfter {
						d.minAfter = b.Size
					}
					d.BytesAfter += b.Size
					d.BlocksAfter++
					d.Category = at.Category
					r.BytesAfter += b.Size
				} else {
					d.BytesBefore += b.Size
					d.BlocksBefore++
					r.BytesBefore += b.Size
				}
			}
		}
	}
	add(before, false)
	add(after, true)
	r.DeltaBytes = r.BytesAfter - r.BytesBefore
	all := make([]DiffSite, 0, len(m))
	for k, d := range m {
		if x := ks[k]; x.allOther {
			h := x.sizes[1]
			if d.BlocksAfter == 0 {
				h = x.sizes[0]
			}
			if ev := containerEvidence(d.SiteIdentity, h, 2, false); ev != "" {
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
		return strings.Compare(x.Site, y.Site)
	})
	r.Patterns = diffPatterns(all, r)
	r.TotalSites = len(all)
	r.Sites = all
	if len(r.Sites) > opt.Limit {
		r.Sites = r.Sites[:opt.Limit]
	}
	for _, s := range []*snapshot.Snapshot{before, after} {
		if !s.Caps.FramesOnBlocks {
			r.Notes = append(r.Notes, fmt.Sprintf("%s has no stacks on its blocks: its memory cannot be matched to sites (record history with context before the first snapshot)", s.Path))
		}
	}
	if before.Caps.PythonOnly || after.Caps.PythonOnly {
		r.Notes = append(r.Notes, "Python-only stacks: backward-pass memory has no frame and is grouped as <no Python frame>")
	}
	if r.DeltaBytes > 0 {
		r.Notes = append(r.Notes, "two snapshots show growth, not linearity: take a third to confirm a steady leak")
	}
	return r, nil
}

func growing(d DiffSite) bool { return d.DeltaBytes > 0 && d.DeltaBlocks > 0 }

func diffPatterns(all []DiffSite, r *DiffResult) []DiffPattern {
	out := []DiffPattern{}
	var opt, acts, others []DiffSite
	for _, d := range all {
		if !growing(d) {
			continue
		}
		switch {
		case d.Category == CategoryOptimizerState && d.BlocksBefore == 0:
			opt = append(opt, d)
		case d.Category == CategoryActivation:
			acts = append(acts, d)
		default:
			others = append(others, d)
		}
	}
	if len(acts) >= 2 {
		// The per-step tensor that keeps the graph alive: a growing site outside the forward pass
		// (the loss is computed after the model returns) with the most new blocks; without one,
		// the forward site with the smallest blocks.
		loss := DiffSite{}
		for _, d := range others {
			if loss.Site == "" || d.DeltaBlocks > loss.DeltaBlocks ||
				(d.DeltaBlocks == loss.DeltaBlocks && d.DeltaBytes < loss.DeltaBytes) {
				loss = d
			}
		}
		if loss.Site == "" {
			loss = acts[0]
			for _, d := range acts[1:] {
				if d.minAfter < loss.minAfter || (d.minAfter == loss.minAfter && d.DeltaBlocks > loss.DeltaBlocks) {
					loss = d
				}
			}
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
		ev += fmt.Sprintf("; alongside %s (%s) growing by +%d blocks (about %s each), the per-step loss/output tensor that keeps each step's graph and its saved activations alive",
			loss.Site, loss.Function, loss.DeltaBlocks, FormatBytes(loss.DeltaBytes/int64(loss.DeltaBlocks)))
		out = append(out, DiffPattern{Name: PatternRetainedGraph, Site: loss.Site, Evidence: ev,
			Fix: fmt.Sprintf("at %s store loss.detach() or loss.item() instead of the tensor (e.g. losses.append(loss.item())), and remove any stray retain_graph=True", loss.Site)})
	} else if cand := append(append([]DiffSite{}, others...), acts...); len(cand) > 0 {
		best := DiffSite{}
		for _, d := range cand {
			if d.DeltaBlocks >= 2 && d.DeltaBytes > best.DeltaBytes {
				best = d
			}
		}
		if best.Site != "" {
			ev := fmt.Sprintf("%s (%s) went from %d to %d blocks (+%d, %s, about %s per block)", best.Site, best.Function,
				best.BlocksBefore, best.BlocksAfter, best.DeltaBlocks, formatDelta(best.DeltaBytes), FormatBytes(best.DeltaBytes/int64(best.DeltaBlocks)))
			if len(cand) == 1 {
				ev += "; no other site grew"
			} else {
				ev += fmt.Sprintf("; %d other sites grew less", len(cand)-1)
			}
			out = append(out, DiffPattern{Name: PatternGrowingContainer, Site: best.Site, Evidence: ev,
				Fix: fmt.Sprintf("at %s detach and move to CPU before appending (x.detach().cpu()), or bound the container (collections.deque(maxlen=N), clear it each epoch)", best.Site)})
		}
	}
	if len(opt) > 0 {
		var total int64
		blocks := 0
		for _, d := range opt {
			total += d.DeltaBytes
			blocks += d.DeltaBlocks
		}
		ev := fmt.Sprintf("%d optimizer site(s) appeared: %s in %d blocks, none before (largest %s in %s); optimizer state (e.g. Adam's exp_avg and exp_avg_sq) is created on the first optimizer.step() and then stays flat. This is expected, not a leak",
			len(opt), FormatBytes(total), blocks, opt[0].Site, opt[0].Function)
		if len(out) == 0 {
			ev += "; nothing else grew"
		}
		out = append(out, DiffPattern{Name: PatternOptimizerFirstStp, Site: opt[0].Site, Evidence: ev,
			Fix: "none needed; if it does not fit, use a smaller model or batch, a lower-memory optimizer (SGD, Adafactor, 8-bit Adam), or shard the optimizer state (ZeRO / FSDP)"})
	}
	if len(out) == 0 {
		out = append(out, noGrowth(all, r))
	}
	return out
}

// noGrowth words the no_growth pattern after the data: memory dropped, stayed or grew without
// any site gaining blocks. all is sorted by growth, largest first.
func noGrowth(all []DiffSite, r *DiffResult) DiffPattern {
	delta := r.BytesAfter - r.BytesBefore
	ev := fmt.Sprintf("no site grew in both bytes and blocks (live memory %s -> %s, %s)", FormatBytes(r.BytesBefore), FormatBytes(r.BytesAfter), formatDelta(delta))
	site := func(what string, d DiffSite) string {
		return fmt.Sprintf("; the largest %s: %s (%s) %s in %+d blocks", what, d.Site, d.Function, formatDelta(d.DeltaBytes), d.DeltaBlocks)
	}
	p := DiffPattern{Name: PatternNoGrowth}
	switch {
	case delta < 0:
		if len(all) > 0 && all[len(all)-1].DeltaBytes < 0 {
			ev += site("drop", all[len(all)-1])
		}
		p.Fix = fmt.Sprintf("none: live memory dropped by %s between these snapshots and no site grew (if you meant the other order, pass the earlier snapshot as before)", FormatBytes(-delta))
	case delta > 0:
		if len(all) > 0 && all[0].DeltaBytes > 0 {
			ev += site("growth", all[0])
		}
		p.Fix = fmt.Sprintf("none recognised: live memory grew by %s but no site grew in both bytes and blocks (existing tensors got larger, or the growth is spread thinly); compare the sites above and take a third snapshot to see whether it continues", FormatBytes(delta))
	default:
		p.Fix = "none: memory is steady between these snapshots"
	}
	p.Evidence = ev
	return p
}

// Text renders the diff: growth first, then the patterns with their fixes.
func (r *DiffResult) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "live memory %s -> %s (%s), %d sites\n", FormatBytes(r.BytesBefore), FormatBytes(r.BytesAfter), formatDelta(r.DeltaBytes), r.TotalSites)
	for _, d := range r.Sites {
		if d.DeltaBytes == 0 && d.DeltaBlocks == 0 {
			continue
		}
		fmt.Fprintf(&b, "%10s %+5d blocks  %s", formatDelta(d.DeltaBytes), d.DeltaBlocks, d.Site)
		if d.Function != "" {
			fmt.Fprintf(&b, " in %s", d.Function)
		}
		fmt.Fprintf(&b, "  (%s, %d -> %d blocks) [%s]\n", FormatBytes(d.BytesAfter), d.BlocksBefore, d.BlocksAfter, d.Category)
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
