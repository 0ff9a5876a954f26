package analysis

import (
	"cmp"
	"fmt"
	"iter"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/memsnap/memsnap/analysis/facts"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// TopStacksOptions selects and groups the blocks of TopStacks.
type TopStacksOptions struct {
	// GroupBy is "site" (default), "stack", "file", "function", "annotation" (the innermost
	// record_function range open when the block was allocated) or "compile_context".
	GroupBy string `json:"group_by"`
	// State is "allocated" (default), "pending", "inactive" or "all".
	State string `json:"state"`
	// Limit bounds the groups returned; 0 means 20.
	Limit int `json:"limit"`
	// Device restricts to one device; -1 (or AllDevices) means every device.
	Device      int                `json:"device"`
	Attribution AttributionOptions `json:"attribution"`
}

// AllDevices selects every device.
const AllDevices = -1

// TopSite is one group of memory.
type TopSite struct {
	SiteIdentity
	Bytes    int64   `json:"bytes"`
	Blocks   int     `json:"blocks"`
	Percent  float64 `json:"percent"`
	Category string  `json:"category"`
	Evidence string  `json:"evidence"`
	// RetainedGraph: the group's blocks are forward activations still alive after the backward
	// pass that followed them, with the other per-layer activations of their pass: a retained
	// autograd graph (the evidence says what holds it).
	RetainedGraph bool `json:"retained_graph,omitempty"`
	// Stack is a representative filtered stack: the user frames plus the nearest library frame.
	Stack []string `json:"stack"`
	// StackID is the snapshot stack the representative stack comes from: the largest block's
	// of the call path holding the most of the group's bytes (a block your code holds past its
	// pass first, in a site's row). Read it whole with read-raw-section stacks[ID]; -1 when no
	// stack was recorded.
	StackID int `json:"stack_id"`
	// CallPaths counts the group's paths through the user's own code (stacks that differ only
	// inside libraries, torch or generated code are one path); CallPathBytes is how much of the
	// group the representative stack's path holds. group_by stack splits a row by stack.
	CallPaths     int   `json:"call_paths"`
	CallPathBytes int64 `json:"call_path_bytes"`
	// TraceAllocs and TraceAllocBytes (group_by annotation or compile_context, with a trace):
	// every allocation the trace made in this group, freed or not.
	TraceAllocs     int   `json:"trace_allocs,omitempty"`
	TraceAllocBytes int64 `json:"trace_alloc_bytes,omitempty"`
	// WithGradients: frameless memory from before the trace, on a device whose traced backward
	// pass allocated no gradient that stays alive, so the .grad tensors were already there
	// and are most likely part of it, with the weights (a guess; the evidence says why).
	WithGradients bool `json:"with_gradients,omitempty"`
	// RoleBytes (rows of a file or function holding blocks of several roles): bytes by role;
	// category is the role holding the most.
	RoleBytes map[string]int64 `json:"role_bytes,omitempty"`
	// Devices (every device of a file with more than one) are the devices holding the
	// group's blocks: a row sums them, so a row on two devices is two GPUs' memory.
	Devices []int `json:"devices,omitempty"`
}

// Site kinds of rows grouped by label instead of by frame.
const (
	SiteKindAnnotation     = "annotation"
	SiteKindCompileContext = "compile_context"
)

// TopStacksResult is live memory grouped by site (or stack, file, function), largest first.
type TopStacksResult struct {
	Path        string    `json:"path"`
	GroupBy     string    `json:"group_by"`
	State       string    `json:"state"`
	Device      int       `json:"device"`
	TotalBytes  int64     `json:"total_bytes"`
	TotalBlocks int       `json:"total_blocks"`
	Groups      int       `json:"groups"` // groups before the limit
	Sites       []TopSite `json:"sites"`
	Notes       []string  `json:"notes"`
	// FramelessSizes reads the blocks without frames by their sizes (count × size, exact
	// vocabulary × hidden products), when such blocks hold 10% or more of the total: the
	// only evidence a file without stacks gives of what they are.
	FramelessSizes *facts.SizeStructure `json:"frameless_sizes,omitempty"`
}

func stateMatches(state string, s snapshot.BlockState) bool {
	switch state {
	case "allocated":
		return s == snapshot.StateActiveAllocated
	case "pending":
		return s == snapshot.StateActivePendingFree
	case "inactive":
		return s == snapshot.StateInactive
	case "all":
		return true
	}
	return false
}

// TopStacks groups the blocks of the final state and ranks the groups by bytes.
func TopStacks(snap *snapshot.Snapshot, opt TopStacksOptions) (*TopStacksResult, error) {
	if snap == nil {
		return nil, fmt.Errorf("top-stacks: no snapshot")
	}
	if opt.GroupBy == "" {
		opt.GroupBy = "site"
	}
	if opt.State == "" {
		opt.State = "allocated"
	}
	switch opt.GroupBy {
	case "site", "stack", "file", "function", "annotation", "compile_context":
	default:
		return nil, fmt.Errorf("top-stacks: --group-by must be site, stack, file, function, annotation or compile_context, not %q", opt.GroupBy)
	}
	switch opt.State {
	case "allocated", "pending", "inactive", "all":
	default:
		return nil, fmt.Errorf("top-stacks: --state must be allocated, pending, inactive or all, not %q", opt.State)
	}
	roles, err := NewRoles(snap, opt.Attribution)
	if err != nil {
		return nil, fmt.Errorf("top-stacks: %w", err)
	}
	return topStacks(snap, roles, opt)
}

// topStacks is TopStacks with the role table of snap made for opt.Attribution (opt's other
// fields checked, or defaults).
func topStacks(snap *snapshot.Snapshot, roles *Roles, opt TopStacksOptions) (*TopStacksResult, error) {
	if opt.GroupBy == "" {
		opt.GroupBy = "site"
	}
	if opt.State == "" {
		opt.State = "allocated"
	}
	if opt.Limit <= 0 {
		opt.Limit = 20
	}
	byLabel := opt.GroupBy == "annotation" || opt.GroupBy == "compile_context"
	r := &TopStacksResult{Path: snap.Path, GroupBy: opt.GroupBy, State: opt.State, Device: opt.Device, Sites: []TopSite{}, Notes: []string{}}
	groups := map[string]*agg{}
	var keys siteKeys
	noStack, emptyStack := 0, 0
	gradInTrace := map[int]bool{} // devices where a live gradient was allocated in the trace
	labels := map[int]eventLabels{}
	labelsOf := func(dev int) eventLabels {
		l, ok := labels[dev]
		if !ok {
			evs := roles.traceOf(dev)
			if opt.GroupBy == "annotation" {
				l = annotationLabels(snap, dev, evs)
			} else {
				l = compileLabels(snap, evs)
			}
			labels[dev] = l
		}
		return l
	}
	labelRow := func(label string, dev int) *agg {
		g := groups[label]
		if g == nil {
			kind := SiteKindAnnotation
			if opt.GroupBy == "compile_context" {
				kind = SiteKindCompileContext
			}
			g = &agg{ts: TopSite{SiteIdentity: SiteIdentity{Site: label, Kind: kind}, Stack: []string{}},
				topID: snapshot.NoStack, sizes: sizeHist{}, dev: dev, roleShares: map[string]*pathShare{}, paths: map[string]*pathShare{}}
			groups[label] = g
		}
		return g
	}
	// The blocks' roles are worked out on another goroutine, a chunk ahead of the loop that
	// groups them here: a file's every block asks for its role, and the roles are most of the
	// work. Only that goroutine reads the roles until it is done.
	infos := make(chan []blockInfo, blockInfoChunks)
	free := make(chan []blockInfo, blockInfoChunks+2)
	done := make(chan struct{})
	alongside(func() {
		defer close(infos)
		chunk := make([]blockInfo, 0, blockInfoChunk)
		for dev, b := range topBlocks(snap, opt) {
			at, allocIdx := roles.BlockInfo(dev, *b)
			if chunk = append(chunk, blockInfo{at, allocIdx}); len(chunk) < blockInfoChunk {
				continue
			}
			select {
			case infos <- chunk:
			case <-done:
				return
			}
			select {
			case chunk = <-free:
				chunk = chunk[:0]
			default:
				chunk = make([]blockInfo, 0, blockInfoChunk)
			}
		}
		if len(chunk) > 0 {
			select {
			case infos <- chunk:
			case <-done:
			}
		}
	}, func() {
		defer close(done)
		var chunk []blockInfo
		next := 0
		for dev, b := range topBlocks(snap, opt) {
			if next == len(chunk) {
				if chunk != nil {
					select {
					case free <- chunk:
					default:
					}
				}
				var ok bool
				if chunk, ok = <-infos; !ok {
					return // the other goroutine panicked: alongside raises it here
				}
				next = 0
			}
			at, allocIdx := chunk[next].at, chunk[next].allocIdx
			next++
			if b.Stack == snapshot.NoStack {
				noStack++
			} else if b.Stack == snapshot.EmptyStack {
				emptyStack++
			}
			if byLabel {
				label := labelsOf(dev).label(allocIdx)
				if b.State == snapshot.StateInactive {
					label = LabelInactive
				}
				g := labelRow(label, dev)
				addPath(g.paths, &at, b)
				if !slices.Contains(g.devs, dev) {
					g.devs = append(g.devs, dev)
				}
				g.ts.Bytes += b.Size
				g.ts.Blocks++
				addShare(g.roleShares, at.Category, &at, b)
				if b.Size > g.topSize {
					g.topSize, g.topID, g.ts.Stack, g.repPath = b.Size, b.Stack, at.Stack, at.callPath
				}
				r.TotalBytes += b.Size
				r.TotalBlocks++
				continue
			}
			var key string
			switch opt.GroupBy {
			case "site":
				key = keys.rowKey(at, b.Stack) // the site's key and the role: one row per role
			case "stack":
				key = fmt.Sprint(b.Stack)
			case "file":
				key = at.File + "\x00" + at.Kind
			case "function":
				key = at.File + "\x00" + at.Function + "\x00" + at.Kind
			}
			if (opt.GroupBy == "file" || opt.GroupBy == "function") && at.File == "" {
				// Without a file the row is a site's (<no stack recorded>, a C++ operator), and
				// its role comes from size and timing alone: one row per role, as by site, so that
				// a workspace is not counted into the weights beside it.
				key += keys.rowKey(at, b.Stack)
			}
			if opt.GroupBy == "stack" {
				key += "\x00" + keys.rowKey(at, b.Stack) // one row per role: a site can hold activations and a workspace
			}
			g := groups[key]
			if g == nil {
				g = &agg{ts: TopSite{SiteIdentity: at.SiteIdentity, Category: at.Category, Evidence: at.Evidence, RetainedGraph: at.retained, Stack: at.Stack},
					topID: b.Stack, topSize: b.Size, sizes: sizeHist{}, allOther: true, dev: dev, paths: map[string]*pathShare{}}
				if opt.GroupBy == "file" || opt.GroupBy == "function" {
					g.roleShares = map[string]*pathShare{}
				}
				switch opt.GroupBy {
				case "file":
					if at.File != "" {
						g.ts.Site, g.ts.Line, g.ts.Function = baseName(at.File), 0, ""
					}
				case "function":
					if at.File != "" {
						g.ts.Site, g.ts.Line = baseName(at.File)+":"+at.Function, 0
					}
				}
				groups[key] = g
			}
			if !slices.Contains(g.devs, dev) {
				g.devs = append(g.devs, dev)
			}
			g.ts.Bytes += b.Size
			g.ts.Blocks++
			g.sizes.add(b.Size)
			addPath(g.paths, &at, b)
			if g.roleShares != nil {
				addShare(g.roleShares, at.Category, &at, b)
			}
			g.allOther = g.allOther && (at.Category == CategoryOther || at.Category == CategoryUserContainer)
			if allocIdx >= 0 {
				g.allocs = append(g.allocs, allocIdx)
				if at.Category == CategoryGradient {
					gradInTrace[dev] = true
				}
			}
			if g.rep.take(at.Category, b.Size, b.Stack, b.Address) {
				g.topSize, g.topID, g.repPath = b.Size, b.Stack, at.callPath
				g.ts.Stack, g.ts.Category, g.ts.Evidence, g.ts.RetainedGraph = at.Stack, at.Category, at.Evidence, at.retained
			}
			r.TotalBytes += b.Size
			r.TotalBlocks++
		}
	})
	if byLabel {
		traced := false
		for dev, evs := range snap.DeviceTraces {
			if (opt.Device >= 0 && dev != opt.Device) || !roles.device(dev).hasTrace {
				continue
			}
			traced = true
			l := labelsOf(dev)
			for i, ev := range evs {
				if ev.Action == snapshot.ActionAlloc {
					g := labelRow(l.label(i), dev)
					g.ts.TraceAllocs++
					g.ts.TraceAllocBytes += ev.Size
				}
			}
		}
		for _, dev := range slices.Sorted(maps.Keys(labels)) {
			r.Notes = append(r.Notes, labels[dev].notes...)
		}
		if !traced {
			r.Notes = append(r.Notes, "the file has no trace: blocks cannot be placed in the range or compile context that allocated them ("+LabelPreTrace+")")
		}
	}
	var retainedBytes int64 // groups of a retained graph
	retainedGroups := 0
	// The devices holding the rows' blocks: a file's other devices (a trace list with an
	// event or two and no segment, as in a state-only file) do not split anything.
	var devices []int
	for _, g := range groups {
		for _, d := range g.devs {
			if !slices.Contains(devices, d) {
				devices = append(devices, d)
			}
		}
	}
	slices.Sort(devices)
	multiDevice := opt.Device < 0 && len(devices) > 1
	for _, g := range groups {
		// The call path holding the most bytes speaks for the row, unless it is a site's row
		// with a block your code holds (the row is that list).
		held := g.rep.held && (opt.GroupBy == "site" || opt.GroupBy == "stack")
		if !held && len(g.paths) > 1 {
			best := topPath(g.paths)
			p := g.paths[best]
			g.topID, g.ts.Stack, g.repPath = p.id, p.stack, best
		}
		if len(g.roleShares) > 0 && !byLabel {
			// A file's or function's row mixes sites: the role holding the most bytes speaks,
			// with its largest block's evidence (and stack, where the top path is another
			// role's); the others are listed (role_bytes).
			role := topPath(g.roleShares)
			p := g.roleShares[role]
			g.ts.Category, g.ts.Evidence, g.ts.RetainedGraph = role, p.evidence, p.retained
			if q := g.paths[g.repPath]; q == nil || q.category != role {
				g.topID, g.ts.Stack, g.repPath = p.id, p.stack, p.path
			}
			if len(g.roleShares) > 1 {
				g.ts.RoleBytes = map[string]int64{}
				for c, q := range g.roleShares {
					g.ts.RoleBytes[c] = q.bytes
				}
			}
		}
		g.ts.CallPaths = len(g.paths)
		g.ts.CallPathBytes = g.ts.Bytes
		if p, ok := g.paths[g.repPath]; ok {
			g.ts.CallPathBytes = p.bytes
		}
		if multiDevice && len(g.devs) > 0 {
			g.ts.Devices = slices.Sorted(slices.Values(g.devs))
		}
		if byLabel {
			g.ts.Category, g.ts.Evidence = dominantRole(g.roleShares, opt.GroupBy)
			g.ts.RetainedGraph = false
		}
		if (opt.GroupBy == "site" || opt.GroupBy == "stack") && opt.State != "inactive" && g.allOther {
			if ev := roles.containerGuess(g.dev, g.ts.SiteIdentity, g.sizes, g.allocs); ev != "" {
				g.ts.Category, g.ts.Evidence, g.ts.RetainedGraph = CategoryUserContainer, ev, false
			}
		}
		if !byLabel && opt.State == "allocated" && g.ts.Category == CategoryParameter && g.ts.Kind == SiteKindNone && len(g.allocs) == 0 &&
			weightsWithGradients(roles, g.devs, g.sizes, g.ts.Bytes, g.ts.Blocks, gradInTrace) {
			g.ts.WithGradients = true
			g.ts.Evidence = "guess: no frames because it was allocated before recording started, and it is still alive; the trace's backward pass computes gradients of these blocks' sizes but keeps almost none of them after the pass, so it added them into .grad tensors that were already there: most likely the weights and their gradients, up to half of it gradients (.grad kept from the previous step: no zero_grad(set_to_none=True) between steps, gradient accumulation over micro-batches, or DDP's gradient buckets); optimizer state kept from an earlier step looks the same"
		}
		if g.ts.RetainedGraph {
			retainedBytes += g.ts.Bytes
			retainedGroups++
		}
		g.ts.Percent = pct(g.ts.Bytes, r.TotalBytes)
		g.ts.StackID = max(int(g.topID), -1)
		g.ts.Stack = emptyIfNil(g.ts.Stack)
		r.Sites = append(r.Sites, g.ts)
	}
	slices.SortFunc(r.Sites, func(x, y TopSite) int {
		// group_by stack: two stacks of one site with the same bytes differ only by their id.
		return cmp.Or(siteOrder(x.Bytes, y.Bytes, x.SiteIdentity, y.SiteIdentity, x.Category, y.Category), cmp.Compare(x.StackID, y.StackID))
	})
	r.Groups = len(r.Sites)
	if len(r.Sites) > opt.Limit {
		r.Sites = r.Sites[:opt.Limit]
	}
	if retainedGroups > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("a retained autograd graph: %s of forward activations in %s (retained_graph) are still alive after the backward pass that followed them, like the per-layer activations of that pass, where backward frees what the graph saved: a reference your code keeps to the loss or the outputs holds the graph; del outputs and loss after backward and keep loss.item()",
			FormatBytes(retainedBytes), count(retainedGroups, "group")))
	}
	if multiDevice {
		r.Notes = append(r.Notes, fmt.Sprintf("the rows sum %s (%s): a row's bytes can be on more than one GPU (devices says which); pass a device for one GPU's memory",
			count(len(devices), "device"), joinInts(devices)))
	}
	r.Notes = append(r.Notes, capsNotes(snap, noStack, emptyStack)...)
	if n := segmentStackHint(snap, roles); n != "" {
		r.Notes = append(r.Notes, n)
	}
	if opt.State == "inactive" {
		r.Notes = append(r.Notes, "inactive blocks keep the stack of their last use; it says who freed-up memory belonged to, not who holds it")
	}
	r.FramelessSizes = framelessSizes(snap, opt, r.TotalBytes)
	return r, nil
}

// framelessSizes is the size structure of the blocks top-stacks counted that have no frames,
// nil when they hold less than a tenth of the total.
func framelessSizes(snap *snapshot.Snapshot, opt TopStacksOptions, total int64) *facts.SizeStructure {
	var sizes, req []int64
	var bytes int64
	for i := range snap.Segments {
		s := &snap.Segments[i]
		if opt.Device != AllDevices && s.Device != opt.Device {
			continue
		}
		for _, b := range s.Blocks {
			if !stateMatches(opt.State, b.State) || b.Stack > snapshot.EmptyStack {
				continue
			}
			sizes, req = append(sizes, b.Size), append(req, b.RequestedSize)
			bytes += b.Size
		}
	}
	if len(sizes) == 0 || bytes*10 < total {
		return nil
	}
	st := facts.Sizes(sizes, req)
	return &st
}

// weightsWithGradients: frameless blocks from before the trace (sizes, bytes in blocks)
// most likely hold gradients as well as weights when, on each of devs, the trace's backward
// passes compute gradients of their sizes and keep almost none of them (fewer than a tenth
// as many as the blocks): they added them into .grad tensors that were already there. After
// zero_grad(set_to_none=True) backward hands each to its .grad instead, which outlives the
// pass; a gradient alive at the end, or an alloc accumulating into a leaf's .grad, says the
// same. Per pass, allocations of those sizes (each size counted up to its blocks) must cover
// a quarter to three quarters of the bytes: with weights and gradients alike, one gradient
// per weight is half; frozen weights get none, unless the gradients of activations happen to
// have their sizes, and then as many as the weights (all of the bytes).
func weightsWithGradients(roles *Roles, devs []int, sizes sizeHist, bytes int64, blocks int, gradInTrace map[int]bool) bool {
	for _, dev := range devs {
		d := roles.device(dev)
		if !d.hasTrace || d.allocs[phaseBackward] == 0 || gradInTrace[dev] {
			return false
		}
		made, handedOff, passes := d.backwardSizes()
		var computed int64
		kept := 0
		for size, n := range sizes {
			computed += size * int64(min(made[size]/max(passes, 1), n))
			kept += min(handedOff[size], n)
		}
		if computed*4 < bytes || computed*4 > bytes*3 || kept*10 >= blocks {
			return false
		}
		for k, n := range d.allocsByStack {
			if n > 0 && roles.attr(snapshot.StackID(k-1)).ctx == ctxGradient {
				return false
			}
		}
	}
	return len(devs) > 0
}

// agg is one row of top-stacks while its blocks are summed.
type agg struct {
	ts       TopSite
	topID    snapshot.StackID
	topSize  int64
	sizes    sizeHist
	allOther bool  // every block's category is "other" (container candidates)
	allocs   []int // trace events that allocated the group's live blocks
	dev      int
	devs     []int // the devices holding the group's blocks
	// paths: the group's blocks by call path (a row's blocks can come from several: the
	// one holding the most speaks); repPath is the representative block's
	paths   map[string]*pathShare
	repPath string
	// roleShares (rows of a file, a function or a label): the blocks by role, keyed by it:
	// such a row mixes sites, and its role is the one holding the most bytes
	roleShares map[string]*pathShare
	rep        representative
}

// pathShare is one part of a row (a call path's, or a role's): its bytes and blocks, and its
// largest block's stack (the lowest stack id on ties) with that block's role and call path.
type pathShare struct {
	blocks             int
	bytes, size        int64
	id                 snapshot.StackID
	stack              []string
	category, evidence string
	retained           bool
	path               string
}

// addPath counts block b, whose stack's attribution is at, in its call path's share.
func addPath(paths map[string]*pathShare, at *Attribution, b *snapshot.Block) {
	addShare(paths, at.callPath, at, b)
}

// addShare counts block b, whose stack's attribution is at, in the share named key.
func addShare(shares map[string]*pathShare, key string, at *Attribution, b *snapshot.Block) {
	p := shares[key]
	if p == nil {
		p = &pathShare{}
		shares[key] = p
	}
	p.bytes += b.Size
	p.blocks++
	if p.stack == nil || b.Size > p.size || (b.Size == p.size && b.Stack < p.id) {
		p.size, p.id, p.stack, p.path = b.Size, b.Stack, at.Stack, at.callPath
		p.category, p.evidence, p.retained = at.Category, at.Evidence, at.retained
	}
}

// topPath is the call path holding the most bytes (the first in order on ties).
func topPath(paths map[string]*pathShare) string {
	best, first := "", true
	for k, p := range paths {
		if q := paths[best]; first || p.bytes > q.bytes || (p.bytes == q.bytes && k < best) {
			best, first = k, false
		}
	}
	return best
}

// joinInts lists numbers as "0, 1, 2".
func joinInts(ns []int) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ", ")
}

// blockInfo is a block's role and the trace event that allocated it (Roles.BlockInfo).
type blockInfo struct {
	at       Attribution
	allocIdx int
}

// The block roles TopStacks works out ahead go in chunks of blockInfoChunk, at most
// blockInfoChunks of them ahead of the loop that reads them.
const (
	blockInfoChunk  = 512
	blockInfoChunks = 4
)

// topBlocks yields the device and block of each block top-stacks reads, in the file's order:
// those of opt.Device (all for -1) in opt.State.
func topBlocks(snap *snapshot.Snapshot, opt TopStacksOptions) iter.Seq2[int, *snapshot.Block] {
	return func(yield func(int, *snapshot.Block) bool) {
		for si := range snap.Segments {
			seg := &snap.Segments[si]
			if opt.Device >= 0 && seg.Device != opt.Device {
				continue
			}
			for bi := range seg.Blocks {
				if b := &seg.Blocks[bi]; stateMatches(opt.State, b.State) && !yield(seg.Device, b) {
					return
				}
			}
		}
	}
}

// dominantRole is the role holding the most bytes of a label group, with the breakdown.
func dominantRole(roles map[string]*pathShare, groupBy string) (string, string) {
	cats := slices.Collect(maps.Keys(roles))
	slices.SortFunc(cats, func(a, b string) int {
		return cmp.Or(cmp.Compare(roles[b].bytes, roles[a].bytes), strings.Compare(a, b))
	})
	if len(cats) == 0 {
		return CategoryOther, "no live block was allocated here; see trace_allocs for what the trace allocated"
	}
	parts := make([]string, 0, len(cats))
	for _, c := range cats {
		parts = append(parts, fmt.Sprintf("%s %s", FormatBytes(roles[c].bytes), c))
	}
	what := "the innermost record_function range open when each block was allocated"
	if groupBy == "compile_context" {
		what = "the compile_context (torch.compile frame and graph) of each block's allocation"
	}
	return cats[0], "grouped by " + what + "; roles: " + strings.Join(parts, ", ")
}

// segmentStackHint: where blocks carry no stacks, a segment can still carry the stack of the
// request that created it (history was on then, and off, or without context, when its blocks
// were allocated). The largest such segment's site is a lead for what the file holds, never a
// fact about its blocks: a block can be allocated into a segment by any later request.
func segmentStackHint(snap *snapshot.Snapshot, roles *Roles) string {
	if snap.Caps.FramesOnBlocks {
		return ""
	}
	n := 0
	var best *snapshot.Segment
	for si := range snap.Segments {
		seg := &snap.Segments[si]
		if seg.Stack < 0 || int(seg.Stack) >= len(snap.Stacks) || len(snap.Stacks[seg.Stack]) == 0 {
			continue
		}
		n++
		if best == nil || seg.TotalSize > best.TotalSize {
			best = seg
		}
	}
	if best == nil {
		return ""
	}
	at := roles.Stack(best.Device, best.Stack)
	if at.Site == "" || len(at.Stack) == 0 {
		return ""
	}
	which := "it"
	if n > 1 {
		which = fmt.Sprintf("the largest (%s)", FormatBytes(best.TotalSize))
	}
	carry := "carry"
	if n == 1 {
		carry = "carries"
	}
	return fmt.Sprintf("%s of %d %s the stack of the request that created it (history was on then): %s was created at %s; the blocks carry none, so the code their memory belongs to can only be guessed from it (a guess: any later request can reuse a segment)",
		count(n, "segment"), len(snap.Segments), carry, which, strings.Join(at.Stack, " <- "))
}

// capsNotes says what a file's stacks cannot tell.
func capsNotes(snap *snapshot.Snapshot, noStack, emptyStack int) []string {
	out := []string{}
	c := snap.Caps
	switch {
	case !c.FramesOnBlocks && c.FramesOnAllocs:
		// The trace's allocations carry frames, so history was recorded with context: the live
		// blocks were allocated before it started.
		out = append(out, "the file has no stacks on its live blocks (they were allocated before recording started; the trace's allocations carry frames): their sites are unknown")
	case !c.FramesOnBlocks:
		out = append(out, "the file has no stacks on its blocks (history was not recorded with context): sites are unknown")
	default:
		if noStack > 0 {
			out = append(out, fmt.Sprintf("%s %s no recorded stack", count(noStack, "block"), have(noStack)))
		}
		if emptyStack > 0 {
			why := "allocated before recording started"
			if c.PythonOnly {
				why += ", or (stacks=\"python\") by the autograd engine in backward, which has no Python frame"
			}
			out = append(out, fmt.Sprintf("%s %s empty stacks: %s; their roles are guesses from size and timing (see each group's evidence)", count(emptyStack, "block"), have(emptyStack), why))
		}
	}
	if c.PythonOnly {
		out = append(out, "stacks are Python-only: no C++ frames to name operators")
	}
	if snap.Format.LegacyHistory {
		out = append(out, "PyTorch 2.0 file: block stacks come from each block's first history entry")
	}
	return out
}

// Text renders the ranking.
func (r *TopStacksResult) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s memory by %s", r.State, r.GroupBy)
	if r.Device >= 0 {
		fmt.Fprintf(&b, " on device %d", r.Device)
	}
	fmt.Fprintf(&b, ": %s in %s, %s\n", FormatBytes(r.TotalBytes), count(r.TotalBlocks, "block"), count(r.Groups, "group"))
	explained := map[string]string{} // a "why" already printed → the row it was printed for
	for _, s := range r.Sites {
		fmt.Fprintf(&b, "%9s %5.1f%% %5d %s  %s", FormatBytes(s.Bytes), s.Percent, s.Blocks, blocksCol(s.Blocks), s.Site)
		if s.Function != "" && r.GroupBy != "function" && s.Kind != SiteKindNone {
			fmt.Fprintf(&b, " in %s", s.Function)
		}
		if s.Blocks > 0 || s.TraceAllocs == 0 {
			fmt.Fprintf(&b, "  [%s", s.Category)
			if len(s.RoleBytes) > 1 {
				others := slices.Collect(maps.Keys(s.RoleBytes))
				slices.SortFunc(others, func(x, y string) int {
					return cmp.Or(cmp.Compare(s.RoleBytes[y], s.RoleBytes[x]), strings.Compare(x, y))
				})
				parts := []string{}
				for _, c := range others {
					if c != s.Category && len(parts) < 3 {
						parts = append(parts, fmt.Sprintf("%s %s", c, FormatBytes(s.RoleBytes[c])))
					}
				}
				fmt.Fprintf(&b, " %s; also %s", FormatBytes(s.RoleBytes[s.Category]), strings.Join(parts, ", "))
			}
			b.WriteString("]")
		}
		switch len(s.Devices) {
		case 0:
		case 1:
			fmt.Fprintf(&b, "  on device %d", s.Devices[0])
		default:
			fmt.Fprintf(&b, "  on devices %s", joinInts(s.Devices))
		}
		if s.TraceAllocs > 0 {
			fmt.Fprintf(&b, "  (trace: %s, %s in all", count(s.TraceAllocs, "allocation"), FormatBytes(s.TraceAllocBytes))
			if s.Blocks == 0 {
				b.WriteString(", all freed")
			}
			b.WriteString(")")
		}
		b.WriteString("\n")
		if (s.RetainedGraph || s.WithGradients || s.Category == CategoryUserContainer || strings.HasPrefix(s.Evidence, "guess")) && s.Percent >= 1 {
			// A role from how the blocks outlived their pass, or guessed from sizes and timing:
			// the reason is the finding, or says it is a guess (of rows that hold enough to matter).
			// Rows that share one reason (several sites of one retained call) get it once.
			if first, ok := explained[s.Evidence]; ok {
				fmt.Fprintf(&b, "      why: as for %s above\n", first)
			} else {
				explained[s.Evidence] = s.Site
				fmt.Fprintf(&b, "      why: %s\n", s.Evidence)
			}
		}
		for _, f := range s.Stack {
			fmt.Fprintf(&b, "      %s\n", f)
		}
		if s.CallPaths > 1 && len(s.Stack) > 0 && r.GroupBy != "stack" {
			fmt.Fprintf(&b, "      (this call path holds %s of the row's %s: 1 of %s; group by stack to see each)\n", FormatBytes(s.CallPathBytes), FormatBytes(s.Bytes), count(s.CallPaths, "call path"))
		}
	}
	if len(r.Sites) < r.Groups {
		fmt.Fprintf(&b, "(%d more groups)\n", r.Groups-len(r.Sites))
	}
	if fs := r.FramelessSizes; fs != nil {
		parts := make([]string, len(fs.Groups))
		for i, g := range fs.Groups {
			parts[i] = fmt.Sprintf("%d × %s", g.Count, FormatBytes(g.Size))
		}
		more := ""
		if fs.GroupsTotal > len(fs.Groups) {
			more = fmt.Sprintf(", … (%d sizes in all)", fs.GroupsTotal)
		}
		fmt.Fprintf(&b, "without frames, by block size: %s in %s: %s%s\n", FormatBytes(fs.Bytes), count(fs.Blocks, "block"), strings.Join(parts, ", "), more)
		for _, g := range fs.Groups {
			if g.Product != "" {
				fmt.Fprintf(&b, "  %s = %s: %s\n", FormatBytes(g.Size), g.Product, g.Guess)
			}
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	return b.String()
}
