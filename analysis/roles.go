package analysis

import (
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/memsnap/memsnap/analysis/internal/prefetch"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// Roles computes role, site and user_site once per (snapshot, attribution options), with the
// trace context the role needs: which phase (forward, backward, optimizer step) made each
// allocation, whether it outlived that phase, and where steps begin. Every analysis reads its
// roles from here, so a block has the same role in every answer.
type Roles struct {
	snap       *snapshot.Snapshot
	a          *Attributor
	devs       map[int]*deviceRoles
	params     map[devSize]string // a live parameter site per (device, block size), once paramsOnce has run
	paramsOnce sync.Once
	ctxs       []int8 // stack id + 1 -> context + 1 (0: not yet classified)
	attrs      *attrTable
	// frameworks (see Frameworks) and Megatron's buffers (see megatronBufferLine), once
	// first asked
	frameworks []Framework
	fwOnce     sync.Once
	megatron   megatronBuffer
}

type devSize struct {
	dev  int
	size int64
}

// phase is what a device was doing at a trace event.
type phase uint8

const (
	phaseNone phase = iota
	phaseForward
	phaseBackward
	phaseOptimizer
	// phaseUnwind: after an out-of-memory error, until a new pass allocates: the exception
	// unwinding the pass and the framework's teardown (see oomPass).
	phaseUnwind
	numPhases
)

var phaseNames = [numPhases]string{"", "forward", "backward", "optimizer", "unwind"}

// lifeStats counts how a stack's allocations ended, relative to the phase run that made them.
type lifeStats struct {
	allocs     int
	sameRun    int // freed before the phase that made it ended
	inBackward int // freed during a later backward pass (the graph released it)
	later      int // freed in a later phase that is not a backward pass
	alive      int // alive at the end of the trace
	outlivedBw int // made in a backward pass and still alive after it ended
}

// deviceRoles is the trace context of one device.
type deviceRoles struct {
	dev           int
	containers    map[uint64]string // finalContainers: live blocks a user container holds
	evs           []snapshot.Event
	hasTrace      bool
	phases        []phase           // per event: the phase the device was in
	allocs        [numPhases]int    // alloc events per phase
	allocsByStack []int             // alloc events per stack id + 1 (NoStack is -1)
	firstFrame    [numPhases]string // the frame that first put the device in each phase
	// index is the trace's address index (its tally lists the oom events), nil without a
	// trace.
	index *snapshot.TraceIndex
	// The phase runs (maximal stretches of events in one phase; the first, of no phase, may
	// be empty), once runsOnce has run (see phaseRuns).
	runStarts   []int   // first event of each run
	runPhases   []phase // phase of each run
	runsOnce    sync.Once
	hasBackward bool // the trace or the live blocks show a backward pass
	steps       StepInfo
	workload    string
	evidence    string
	// bwMade and bwHandedOff (see backwardSizes), once bwSizesOnce has run
	bwMade, bwHandedOff map[int64]int
	bwPasses            int
	bwSizesOnce         sync.Once
	// lifetimes (see Roles.lifetimes), nil until first needed
	stats    []lifeStats    // by stack id + 1 (NoStack is -1)
	fates    []fate         // per alloc event: how that allocation ended
	retained map[int32]bool // forward runs whose graph outlived the backward pass after them
	// By the trace index's block id (slices, not maps keyed by address: top-stacks asks for
	// every block of the file): the alloc event of a block alive at the end (-1: none), and
	// for a block alive before the trace, the phase of its first free (preFreed says which).
	finalAlloc []int32
	preFree    []phase
	preFreed   []bool
	// refined[id+1] is refine's answer for a stack once worked out (made by refinedOnce).
	// Replay reads roles on two goroutines, each for every live block: a load, not a lock
	// whose cache line both cores take in turn. Two goroutines that miss at once compute the
	// same answer, and the first stored is kept.
	refined     []atomic.Pointer[Attribution]
	refinedOnce sync.Once
	bwRuns      []bwRun // the backward passes (see backwardRuns), once bwOnce has run
	bwOnce      sync.Once
	// nestedGradAllocs are the autograd engine's allocations given back to the forward by
	// nestedGradPass, for the call nestedGradEntry (0, "": none).
	nestedGradAllocs int
	nestedGradEntry  string
	// unwind lists the spans of events after each out-of-memory error (see oomPass).
	unwind []UnwindSpan
}

// fate is how one allocation ended, relative to the phase run that made it.
type fate uint8

const (
	fateAlive fate = iota // still alive at the end of the trace (or not an alloc event)
	fateSameRun
	fateInBackward
	fateLater
)

// StepInfo says where a device's steps start.
type StepInfo struct {
	// Source: "annotations" (ProfilerStep#N; Optimizer.step#… spans when frames show no backward
	// pass), "user_metadata" (a new metadata value), "phases" (a forward pass after a backward pass or
	// an optimizer step), "periodicity" (a repeating allocation sequence; only for traces
	// without frames, a guess) or "none".
	Source string
	Starts []int // event index of each step's start
	Period int   // periodicity only: the period in alloc events
}

// Workloads reported by summarize.
const (
	WorkloadTraining  = "training"
	WorkloadInference = "inference"
	WorkloadUnknown   = "unknown"
)

// NewRoles prepares the role table of snap; a bad attribution option is an error.
func NewRoles(snap *snapshot.Snapshot, opt AttributionOptions) (*Roles, error) {
	a, err := NewAttributor(opt)
	if err != nil {
		return nil, err
	}
	return rolesWith(snap, a), nil
}

func rolesWith(snap *snapshot.Snapshot, a *Attributor) *Roles {
	return &Roles{snap: snap, a: a, devs: map[int]*deviceRoles{}, attrs: newAttrTable(snap, a)}
}

// attr is Attributor.Attribute of a stack, from the table the helpers fill.
func (r *Roles) attr(id snapshot.StackID) Attribution { return r.attrs.get(id) }

// Stack is the role of a stack on device dev, refined by how the trace's allocations from it
// ended.
func (r *Roles) Stack(dev int, id snapshot.StackID) Attribution {
	at := r.attr(id)
	if at.ctx == ctxNone {
		return at
	}
	return r.refine(r.deviceLifetimes(dev), at, id)
}

// deviceLifetimes is device with its lifetimes computed.
func (r *Roles) deviceLifetimes(dev int) *deviceRoles {
	d := r.device(dev)
	if d.hasTrace {
		r.lifetimes(d)
	}
	return d
}

// finalAllocOf is the alloc event of the block alive at addr at the end of the trace, -1
// when the trace did not allocate it (or lifetimes were not computed: no trace).
func (d *deviceRoles) finalAllocOf(addr uint64) int {
	if d.finalAlloc == nil {
		return -1
	}
	if id, ok := d.index.Block(addr); ok {
		return int(d.finalAlloc[id])
	}
	return -1
}

// preFreePhase is the phase in which the trace first freed the block at addr that was alive
// before it, and whether it did.
func (d *deviceRoles) preFreePhase(addr uint64) (phase, bool) {
	if d.preFreed == nil {
		return phaseNone, false
	}
	if id, ok := d.index.Block(addr); ok && d.preFreed[id] {
		return d.preFree[id], true
	}
	return phaseNone, false
}

// Block is the role of a block of the file's final state on device dev.
func (r *Roles) Block(dev int, b snapshot.Block) Attribution {
	at, _ := r.BlockInfo(dev, b)
	return at
}

// BlockInfo is Block plus the trace event that allocated the block (-1: none in the trace).
// A live block of the final state that a user container holds (finalContainers) has that role
// in every command: the decision is made once here, over the site's blocks, not per report.
func (r *Roles) BlockInfo(dev int, b snapshot.Block) (Attribution, int) {
	at, idx := r.blockInfo(dev, b)
	if b.State == snapshot.StateActiveAllocated && (at.Category == CategoryOther || at.Category == CategoryUserContainer || at.Category == CategoryActivation) {
		if ev, ok := r.finalContainers(dev)[b.Address]; ok {
			at.Category, at.Evidence, at.retained = CategoryUserContainer, ev, false
		}
	}
	return at, idx
}

// finalContainers decides (once per device) which live blocks of the final state a user
// container holds: the blocks of one site (one row: site and role) whose roles are all other
// or user_container, read by containerGuess over the site's block sizes and the steps that
// allocated them. The address maps to the evidence.
func (r *Roles) finalContainers(dev int) map[uint64]string {
	d := r.device(dev)
	if d.containers != nil {
		return d.containers
	}
	d.containers = map[uint64]string{}
	type group struct {
		id       SiteIdentity
		sizes    sizeHist
		allocs   []int
		addrs    []uint64
		allOther bool
	}
	groups := map[string]*group{}
	var order []string
	for _, si := range r.snap.SegmentsOn(dev) {
		seg := &r.snap.Segments[si]
		for _, b := range seg.Blocks {
			if b.State != snapshot.StateActiveAllocated {
				continue
			}
			at, idx := r.blockInfo(dev, b)
			k := at.rowKey()
			g := groups[k]
			if g == nil {
				g = &group{id: at.SiteIdentity, sizes: sizeHist{}, allOther: true}
				groups[k] = g
				order = append(order, k)
			}
			g.sizes.add(b.Size)
			g.addrs = append(g.addrs, b.Address)
			if idx >= 0 {
				g.allocs = append(g.allocs, idx)
			}
			g.allOther = g.allOther && (at.Category == CategoryOther || at.Category == CategoryUserContainer)
		}
	}
	for _, k := range order {
		g := groups[k]
		if !g.allOther {
			continue
		}
		if ev := r.containerGuess(dev, g.id, g.sizes, g.allocs); ev != "" {
			for _, a := range g.addrs {
				d.containers[a] = ev
			}
		}
	}
	if !r.snap.Caps.HasTrace {
		r.storedOutputs(dev, d.containers)
	}
	return d.containers
}

// storedOutputs marks the activation blocks of a call path that keeps only one model site's
// outputs alive, where another call into the same model (from the same line of your code into
// it) keeps activations at several: autograd saves the inputs of many ops along a forward, so
// one op's outputs alone, in many blocks, are kept by something else: your code or a hook
// storing them (an attention store). For files without a trace only, where no lifetime tells
// who holds a block; a guess.
func (r *Roles) storedOutputs(dev int, out map[uint64]string) {
	type share struct {
		site   string
		bytes  int64
		blocks int
		addrs  []uint64
	}
	byPath := map[string]map[string]bool{} // call path -> the activation sites it holds
	shares := map[[2]string]*share{}       // (row, call path)
	var order [][2]string
	for _, si := range r.snap.SegmentsOn(dev) {
		seg := &r.snap.Segments[si]
		for _, b := range seg.Blocks {
			if b.State != snapshot.StateActiveAllocated {
				continue
			}
			at, _ := r.blockInfo(dev, b)
			if at.Category != CategoryActivation {
				continue
			}
			if at.callPath != "" {
				if byPath[at.callPath] == nil {
					byPath[at.callPath] = map[string]bool{}
				}
				byPath[at.callPath][at.Site] = true
			}
			k := [2]string{at.rowKey(), at.callPath}
			sh := shares[k]
			if sh == nil {
				sh = &share{site: at.Site}
				shares[k] = sh
				order = append(order, k)
			}
			sh.bytes += b.Size
			sh.blocks++
			sh.addrs = append(sh.addrs, b.Address)
		}
	}
	entry := func(path string) string { e, _, _ := strings.Cut(path, "\n"); return e }
	for _, key := range order {
		k, p := key[1], shares[key]
		if k == "" || len(byPath[k]) != 1 || p.blocks < 16 {
			continue
		}
		var other string // the call with the most sites (the first path on ties)
		for q, sites := range byPath {
			if q == k || entry(q) != entry(k) || len(sites) < 4 {
				continue
			}
			if n := len(byPath[other]); other == "" || len(sites) > n || (len(sites) == n && q < other) {
				other = q
			}
		}
		if other == "" {
			continue
		}
		from, _, _ := strings.Cut(strings.TrimPrefix(k, entry(k)+"\n"), "\n")
		otherFrom, _, _ := strings.Cut(strings.TrimPrefix(other, entry(other)+"\n"), "\n")
		if from == "" || otherFrom == "" {
			continue // the two calls differ only below the line that calls the model
		}
		ev := fmt.Sprintf("guess: of the model called from %s, only %s's outputs are alive (%s in %d blocks), where the call from %s keeps activations at %d sites: autograd saves the inputs of many ops along a forward, so these are kept by your code or a hook storing them (an attention store, a feature cache), not saved for backward; keep them detached (and on CPU) if you need them, or run that call under torch.no_grad() if not",
			from, p.site, FormatBytes(p.bytes), p.blocks, otherFrom, len(byPath[other]))
		for _, a := range p.addrs {
			out[a] = ev
		}
	}
}

// blockInfo is BlockInfo before the final state's container decision.
func (r *Roles) blockInfo(dev int, b snapshot.Block) (Attribution, int) {
	d := r.deviceLifetimes(dev)
	idx := -1
	if b.State != snapshot.StateInactive {
		idx = d.finalAllocOf(b.Address)
	}
	at := r.attr(b.Stack)
	if at.ctx == ctxNone && b.State == snapshot.StateInactive {
		// The roles guessed for frameless blocks (weights alive since before the trace, a
		// workspace by its size) are guesses about live memory: free memory is no one's.
		at.Category, at.Evidence = CategoryOther, "free cached memory whose last use recorded no stack"
		return at, idx
	}
	if at.ctx == ctxNone && b.State == snapshot.StateActivePendingFree {
		// Its tensor was freed; the allocator waits for the streams it was used on
		// (record_stream) before reusing it: no one's live memory, never the model's weights.
		at.Category, at.Evidence = CategoryOther, "freed by its tensor and waiting for work on another stream (record_stream) to finish before reuse: pending free, not live memory"
		return at, idx
	}
	if at.ctx == ctxNone {
		return r.frameless(dev, d, at, b.Address, b.Size, idx, true), idx
	}
	if ws, ok := r.pythonOnlyWorkspace(at, b.Size); ok {
		return ws, idx
	}
	at = r.refine(d, at, b.Stack)
	at = r.nestedGradBlock(d, at, idx)
	if b.State == snapshot.StateActiveAllocated {
		if held, ok := r.heldByCaller(d, at, b.Stack, idx, len(d.evs)); ok {
			return held, idx
		}
	}
	if at.ctx == ctxForward && d.hasTrace && d.workload == WorkloadInference && b.State == snapshot.StateActiveAllocated && at.UserSite != "" {
		at.Category = CategoryUserContainer
		at.Evidence = "a forward output still alive after the pass, held by your code (" + at.UserSite + "), e.g. the last batch's logits or a layer's output kept for the next step: if nothing later reads it, del it or keep only what you need (argmax, .item(), .cpu()); an output kept as the next call's input (layer by layer, a generation cache) is needed"
	}
	if at.ctx == ctxBackward && at.Category == CategoryBackwardTemporary && b.State == snapshot.StateActiveAllocated {
		at.Category = CategoryGradient
		at.Evidence += "; guess: made in the backward pass and still alive when the snapshot was taken (after backward returned): a gradient handed to a leaf's .grad without a copy"
	}
	return at, idx
}

// pythonOnlyWorkspace: with stacks="python" the cuBLAS workspace shows only the Python frame of
// the first matmul that needed it; its exact size gives it away (a guess).
func (r *Roles) pythonOnlyWorkspace(at Attribution, size int64) (Attribution, bool) {
	if size != cublasWorkspaceBytes || r.snap.Caps.CppFrames || (at.ctx != ctxForward && at.ctx != ctxUser) {
		return at, false
	}
	at.Category = CategoryWorkspace
	at.Evidence = "guess: 8,519,680 B is exactly one default cuBLAS workspace (one per handle: thread and stream, kept for the life of the process), made by the first matmul here (" + at.Site + "); with stacks=\"python\" the C++ frames that would show it are not recorded"
	return at, true
}

// Live is the role of a block alive at trace event now during a replay: allocated at trace
// event allocIdx (-1: before the trace) from stack, at address addr.
func (r *Roles) Live(dev int, stack snapshot.StackID, addr uint64, size int64, allocIdx, now int) Attribution {
	d := r.deviceLifetimes(dev)
	if allocIdx < 0 && stack == snapshot.NoStack {
		at := Attribution{SiteIdentity: SiteIdentity{Site: SitePreTrace, Kind: SiteKindNone}, Category: CategoryOther}
		return r.frameless(dev, d, at, addr, size, -1, false)
	}
	at := r.attr(stack)
	if at.ctx == ctxNone {
		return r.frameless(dev, d, at, addr, size, allocIdx, false)
	}
	if ws, ok := r.pythonOnlyWorkspace(at, size); ok {
		return ws
	}
	at = r.refineBlock(d, r.refine(d, at, stack), allocIdx)
	if held, ok := r.heldByCaller(d, at, stack, allocIdx, now); ok {
		return held
	}
	return at
}

// refineBlock settles, from how this one allocation ended, a role its stack leaves open: your
// code's allocations split between the backward pass and temporaries (a loss computed outside a
// module saves some of its tensors and frees others).
func (r *Roles) refineBlock(d *deviceRoles, at Attribution, allocIdx int) Attribution {
	at = r.nestedGradBlock(d, at, allocIdx)
	if at.ctx != ctxUser || at.Category != CategoryOther || allocIdx < 0 || allocIdx >= len(d.fates) || d.allocs[phaseBackward] == 0 {
		return at
	}
	switch d.fates[allocIdx] {
	case fateInBackward:
		at.Category = CategoryActivation
		at.Evidence = fmt.Sprintf("your code, and this allocation (event %d) was freed by the backward pass: saved for backward", allocIdx)
	case fateSameRun:
		at.Category = CategoryTemporary
		at.Evidence = fmt.Sprintf("your code; this allocation (event %d) was freed before the phase that made it ended", allocIdx)
	}
	return at
}

// Steps returns where device dev's steps start.
func (r *Roles) Steps(dev int) StepInfo { return r.device(dev).steps }

// Workload says whether device dev trains or serves, with the evidence.
func (r *Roles) Workload(dev int) (string, string) {
	d := r.device(dev)
	return r.processWorkload(dev, d.workload, d.evidence)
}

// HasBackward reports whether device dev's trace or live blocks show a backward pass.
func (r *Roles) HasBackward(dev int) bool { return r.device(dev).hasBackward }

func phaseOfCtx(c stackContext) phase {
	switch c {
	case ctxForward, ctxAutocast:
		return phaseForward
	case ctxBackward, ctxGradient:
		return phaseBackward
	case ctxOptimizer:
		return phaseOptimizer
	}
	return phaseNone
}

// optimizerWindows are the [start, end] times of Optimizer.step annotations on dev.
func optimizerWindows(snap *snapshot.Snapshot, dev int) [][2]int64 {
	var out [][2]int64
	open := map[string]int64{}
	for _, an := range snap.Annotations {
		if an.Device != dev && an.Device >= 0 {
			continue
		}
		if !strings.HasPrefix(an.Name, "Optimizer.step#") && !strings.HasPrefix(an.Name, "Optimizer.zero_grad#") {
			continue
		}
		switch an.Stage {
		case "START":
			open[an.Name] = an.TimeUS
		case "END":
			if t, ok := open[an.Name]; ok {
				out = append(out, [2]int64{t, an.TimeUS})
				delete(open, an.Name)
			}
		}
	}
	return out
}

// device computes (once) the trace context of dev that every answer needs: the phase of each
// event, steps and workload. How allocations ended (lifetimes) is computed on first use.
func (r *Roles) device(dev int) *deviceRoles {
	if d := r.devs[dev]; d != nil {
		return d
	}
	d := &deviceRoles{dev: dev}
	r.devs[dev] = d
	d.evs = r.traceOf(dev)
	d.hasTrace = snapshot.IsHistory(d.evs)
	if d.hasTrace {
		d.index = r.snap.TraceIndex(dev)
		r.phasePass(dev, d)
		r.nestedGradPass(d)
		r.oomPass(d)
	}
	d.steps = r.findSteps(dev, d, d.evs)
	d.workload, d.evidence = r.workload(dev, d)
	return d
}

func (r *Roles) traceOf(dev int) []snapshot.Event {
	if dev >= 0 && dev < len(r.snap.DeviceTraces) {
		return r.snap.DeviceTraces[dev]
	}
	return nil
}

// stackCtx is the context of a stack, cached in a slice (stack ids are dense).
func (r *Roles) stackCtx(id snapshot.StackID) (stackContext, string) {
	return r.stackCtxIn(r.stackCtxs(), id)
}

// stackCtxs is the role table's cache of stack contexts (see stackCtxIn), made on first use.
func (r *Roles) stackCtxs() []int8 {
	if r.ctxs == nil {
		r.ctxs = make([]int8, len(r.snap.Stacks)+1)
	}
	return r.ctxs
}

// stackCtxIn is stackCtx with the cache ctxs (by stack id + 1: context + 1, 0 when not yet
// known); the deciding frame is returned the first time only.
func (r *Roles) stackCtxIn(ctxs []int8, id snapshot.StackID) (stackContext, string) {
	i := int(id) + 1 // NoStack is -1
	if i < 0 || i >= len(ctxs) {
		at := r.attr(id)
		return at.ctx, at.frame
	}
	if ctxs[i] == 0 {
		at := r.attr(id)
		ctxs[i] = int8(at.ctx) + 1
		return at.ctx, at.frame
	}
	return stackContext(ctxs[i] - 1), ""
}

// phasePass gives every event the phase the device was in: the context of the latest
// allocation that says forward, backward or optimizer (Optimizer.step annotation windows
// override; with stacks="python" a frameless allocation is the autograd engine's). A long
// trace is done in two halves at once (every analysis waits for this pass): the second takes
// the first's last phase for its events before its own first allocation with a phase.
func (r *Roles) phasePass(dev int, d *deviceRoles) {
	d.phases = make([]phase, len(d.evs))
	d.allocsByStack = make([]int, len(r.snap.Stacks)+1)
	pp := phasePassOf{r: r, windows: optimizerWindows(r.snap, dev), pythonOnly: r.snap.Caps.PythonOnly}
	first := phasePart{byStack: d.allocsByStack, ctxs: r.stackCtxs()}
	m := len(d.evs)
	if m >= minSplitPhasePass && runtime.GOMAXPROCS(0) > 1 {
		m /= 2
	}
	if m == len(d.evs) {
		pp.run(&first, d.evs, d.phases)
	} else {
		// The second half starts from the contexts known before the pass, as the pass in one
		// piece would meet them: a stack met earlier (on another device) gives no first frame.
		second := phasePart{byStack: make([]int, len(r.snap.Stacks)+1), ctxs: slices.Clone(r.ctxs)}
		alongside(func() { pp.run(&second, d.evs[m:], d.phases[m:]) }, func() { pp.run(&first, d.evs[:m], d.phases[:m]) })
		if c := first.last; c != phaseNone {
			for i := m; i < m+second.lead; i++ {
				d.phases[i] = c
			}
			second.allocs[phaseNone] -= second.leadAllocs
			second.allocs[c] += second.leadAllocs
		}
		for p := range first.allocs {
			first.allocs[p] += second.allocs[p]
			if first.firstFrame[p] == "" {
				first.firstFrame[p] = second.firstFrame[p]
			}
		}
		if len(second.byStack) > len(first.byStack) {
			first.byStack = append(first.byStack, make([]int, len(second.byStack)-len(first.byStack))...)
		}
		for k, n := range second.byStack {
			first.byStack[k] += n
		}
		for k, c := range second.ctxs {
			if r.ctxs[k] == 0 {
				r.ctxs[k] = c
			}
		}
	}
	d.allocs, d.firstFrame, d.allocsByStack = first.allocs, first.firstFrame, first.byStack
}

// minSplitPhasePass: shorter traces take one pass (a variable for tests).
var minSplitPhasePass = 1 << 16

// phasePassOf is what every part of a phase pass reads.
type phasePassOf struct {
	r          *Roles
	windows    [][2]int64 // Optimizer.step annotations
	pythonOnly bool
}

// phasePart is one part of a phase pass: what it counted, and how its events began.
type phasePart struct {
	allocs     [numPhases]int    // alloc events per phase
	byStack    []int             // alloc events per stack id + 1 (NoStack is -1)
	firstFrame [numPhases]string // the frame that first put the part in each phase
	ctxs       []int8            // the stacks' contexts met so far (see Roles.stackCtx)
	// lead is the number of events before the part's first allocation with a phase, and
	// leadAllocs the allocations among them (counted as of no phase); last is the phase at the
	// part's end (phaseNone: no allocation of the part has one).
	lead, leadAllocs int
	last             phase
}

// run gives the events of one part their phases, as if the part began the trace.
func (pp *phasePassOf) run(part *phasePart, evs []snapshot.Event, phases []phase) {
	inWindow := func(t int64) bool {
		for _, w := range pp.windows {
			if t >= w[0] && t <= w[1] {
				return true
			}
		}
		return false
	}
	note := func(p phase, frame string) {
		if p != phaseNone && part.firstFrame[p] == "" {
			part.firstFrame[p] = frame
		}
	}
	cur := phaseNone
	part.lead = len(evs)
	for i := range evs {
		ev := &evs[i] // not a copy: millions of events
		if ev.Action == snapshot.ActionAlloc {
			c, frame := pp.r.stackCtxIn(part.ctxs, ev.Stack)
			p := phaseOfCtx(c)
			note(p, frame)
			if pp.pythonOnly && c == ctxNone && ev.Stack == snapshot.EmptyStack {
				p = phaseBackward
				note(p, "allocations without Python frames, which stacks=\"python\" records for the autograd engine")
			}
			if len(pp.windows) > 0 && ev.TimeUS > 0 && inWindow(ev.TimeUS) {
				p = phaseOptimizer
				note(p, "the Optimizer.step annotation")
			}
			if p != phaseNone {
				if cur == phaseNone && part.lead == len(evs) {
					part.lead, part.leadAllocs = i, part.allocs[phaseNone]
				}
				cur = p
			}
			part.allocs[cur]++
			if k := int(ev.Stack) + 1; k >= 0 && k < len(part.byStack) {
				part.byStack[k]++
			} else {
				part.byStack = countStack(part.byStack, ev.Stack)
			}
		}
		phases[i] = cur
	}
	if part.lead == len(evs) {
		part.leadAllocs = part.allocs[phaseNone]
	}
	part.last = cur
}

// phaseRuns lists the phase runs (once; safe on any goroutine): lifetimes and backwardRuns
// read them. A pass over the phases alone, a byte an event, is cheaper than tracking runs in
// phasePass, which every analysis waits for, or in each pass over the events.
func (d *deviceRoles) phaseRuns() {
	d.runsOnce.Do(func() {
		// Counted first: a long trace has a hundred thousand runs or more, which slices grown
		// by append would copy and leave behind several times over.
		n, prev := 1, phaseNone
		for _, p := range d.phases {
			if p != prev {
				prev = p
				n++
			}
		}
		d.runStarts, d.runPhases = make([]int, 1, n), make([]phase, 1, n)
		d.runPhases[0] = phaseNone
		prev = phaseNone
		for i, p := range d.phases {
			if p != prev {
				prev = p
				d.runStarts, d.runPhases = append(d.runStarts, i), append(d.runPhases, p)
			}
		}
	})
}

// backwardSizes counts, by block size (as recorded, and rounded up to 512 B when not a
// multiple), the allocations of the device's backward passes (made) and those of them still
// alive after their pass's last allocation (handedOff): what backward hands to a leaf's .grad
// without a copy, when the gradient did not exist yet, lives on after the pass, where the
// gradients it computes to add into existing ones are freed inside it (but for the pass's
// last). A gradient freed by zero_grad before the next phase counts as handed off: it outlived
// the pass's work, though not its phase run. Only for a device with a trace; worked out once,
// when first asked.
//
// passes counts the backward passes (the phase runs of the backward phase; recomputation
// under activation checkpointing can split one pass into several).
func (d *deviceRoles) backwardSizes() (made, handedOff map[int64]int, passes int) {
	d.bwSizesOnce.Do(func() {
		d.phaseRuns()
		x := d.index
		d.bwMade, d.bwHandedOff = map[int64]int{}, map[int64]int{}
		for _, p := range d.runPhases {
			if p == phaseBackward {
				d.bwPasses++
			}
		}
		add := func(m map[int64]int, size int64) {
			m[size]++
			if r := (size + 511) / 512 * 512; r != size {
				m[r]++
			}
		}
		lastAlloc := make([]int, len(d.runStarts))
		run := 0
		for i := range d.evs {
			for run+1 < len(d.runStarts) && d.runStarts[run+1] <= i {
				run++
			}
			if d.evs[i].Action == snapshot.ActionAlloc {
				lastAlloc[run] = i
			}
		}
		live := make([]int32, len(x.Blocks))    // 1 + the backward alloc alive at the block, 0: none
		liveRun := make([]int32, len(x.Blocks)) // its phase run
		run = 0
		for i := range d.evs {
			for run+1 < len(d.runStarts) && d.runStarts[run+1] <= i {
				run++
			}
			switch d.evs[i].Action {
			case snapshot.ActionAlloc:
				id := x.Slot[i]
				live[id] = 0
				if d.phases[i] == phaseBackward {
					live[id], liveRun[id] = int32(i)+1, int32(run)
					add(d.bwMade, d.evs[i].Size)
				}
			case snapshot.ActionFreeRequested, snapshot.ActionFreeCompleted:
				id := x.Slot[i]
				if uint(id) >= uint(len(live)) || live[id] == 0 {
					continue
				}
				if i > lastAlloc[liveRun[id]] {
					add(d.bwHandedOff, d.evs[live[id]-1].Size)
				}
				live[id] = 0
			}
		}
		for _, m := range live {
			if m > 0 {
				add(d.bwHandedOff, d.evs[m-1].Size)
			}
		}
	})
	return d.bwMade, d.bwHandedOff, d.bwPasses
}

// countStack counts an alloc event of a stack a per-stack table does not reach yet (growing
// it).
func countStack(byStack []int, id snapshot.StackID) []int {
	k := max(int(id)+1, 0)
	if k >= len(byStack) {
		byStack = append(byStack, make([]int, k+1-len(byStack))...)
	}
	byStack[k]++
	return byStack
}

// stat is the lifetime counts of a stack (ids beyond the file's stacks grow the table).
func (d *deviceRoles) stat(id snapshot.StackID) *lifeStats {
	i := max(int(id)+1, 0)
	if i >= len(d.stats) {
		d.stats = append(d.stats, make([]lifeStats, i+1-len(d.stats))...)
	}
	return &d.stats[i]
}

// readAhead is how many events ahead a pass over a trace fetches the per-block record an event
// will touch.
const readAhead = 16

// lifetimes computes (once) how each stack's allocations ended relative to the phase run that
// made them (a run: consecutive events in one phase), which blocks alive at the end were
// allocated in the trace, and in which phase blocks alive before the trace were freed.
func (r *Roles) lifetimes(d *deviceRoles) {
	if d.stats != nil {
		return
	}
	d.stats = make([]lifeStats, len(r.snap.Stacks)+1)
	d.fates = make([]fate, len(d.evs))
	// 16 bytes, so that no record straddles two cache lines: the pass misses on one
	// record per block event.
	type liveRec struct {
		stack snapshot.StackID
		run   int32
		idx   int32
		ph    phase
		freed bool
		ok    bool // an alloc made it and no free_completed ended it
	}
	// By the trace index's block id: the allocation alive at each address.
	x := d.index
	live := make([]liveRec, len(x.Blocks))
	d.finalAlloc, d.preFree, d.preFreed = make([]int32, len(x.Blocks)), make([]phase, len(x.Blocks)), make([]bool, len(x.Blocks))
	d.phaseRuns()
	run := int32(0) // the phase run of event i
	// survivors: per forward run, the stacks with allocations alive after the backward run that
	// followed it.
	survivors := map[int32][]snapshot.StackID{}
	survived := func(b liveRec, now int32) {
		if b.ph == phaseForward && now > b.run+1 && int(b.run+1) < len(d.runPhases) && d.runPhases[b.run+1] == phaseBackward {
			survivors[b.run] = append(survivors[b.run], b.stack)
		}
	}
	for i := range d.evs {
		// The record of the block an event a few on names: a long trace's records do not stay
		// in the cache, and fetched ahead their misses overlap. A segment event's slot numbers
		// segments, not blocks, and a trace may have more of those: its fetch is of some other
		// block's record, harmless only inside the table.
		if j := i + readAhead; j < len(d.evs) {
			if id := x.Slot[j]; uint(id) < uint(len(live)) {
				prefetch.Line(unsafe.Pointer(&live[id]))
			}
		}
		ev := &d.evs[i] // not a copy: millions of events
		cur := d.phases[i]
		for int(run)+1 < len(d.runStarts) && d.runStarts[run+1] <= i {
			run++
		}
		switch ev.Action {
		case snapshot.ActionAlloc:
			d.stat(ev.Stack).allocs++
			live[x.Slot[i]] = liveRec{stack: ev.Stack, run: run, ph: cur, idx: int32(i), ok: true}
		case snapshot.ActionFreeRequested, snapshot.ActionFreeCompleted:
			id := x.Slot[i]
			b := &live[id]
			if !b.ok {
				if !d.preFreed[id] {
					d.preFree[id], d.preFreed[id] = cur, true
				}
				continue
			}
			if !b.freed {
				s := d.stat(b.stack)
				switch {
				case cur == phaseUnwind && b.ph != phaseUnwind:
					// Freed by the exception unwinding the pass or by a teardown: it was alive
					// when the error struck, and how it ended says nothing of its role.
					s.alive++
				case b.run == run:
					s.sameRun++
					d.fates[b.idx] = fateSameRun
				case cur == phaseBackward:
					s.inBackward++
					d.fates[b.idx] = fateInBackward
				default:
					s.later++
					d.fates[b.idx] = fateLater
				}
				if b.ph == phaseBackward && b.run != run && cur != phaseUnwind {
					s.outlivedBw++
				}
				survived(*b, run)
				b.freed = true
			}
			if ev.Action == snapshot.ActionFreeCompleted {
				*b = liveRec{}
			}
		}
	}
	for id, b := range live {
		d.finalAlloc[id] = -1
		if !b.ok || b.freed {
			continue
		}
		survived(b, run+1) // the trace's last run ended with it
		s := d.stat(b.stack)
		s.alive++
		if b.ph == phaseBackward && b.run != run {
			s.outlivedBw++
		}
		d.finalAlloc[id] = b.idx
	}
	// A forward run whose per-layer activations (two or more blocks of one stack: the same line
	// run once per layer) outlived the backward pass kept its whole graph: retain_graph=True, or a
	// reference to the loss or outputs that holds a graph whose saved tensors backward did not
	// free. One surviving block per stack is an output the caller holds, not a graph.
	d.retained = map[int32]bool{}
	for fwd, stacks := range survivors {
		n := map[snapshot.StackID]int{}
		for _, id := range stacks {
			if n[id]++; n[id] == 2 {
				if c, _ := r.stackCtx(id); c == ctxForward || c == ctxAutocast {
					d.retained[fwd] = true
					break
				}
			}
		}
	}
}

// findSteps: annotations first, then phase transitions; periodicity only when the trace has no
// frames to tell phases apart.
func (r *Roles) findSteps(dev int, d *deviceRoles, evs []snapshot.Event) StepInfo {
	if starts, n := annotationStarts(r.snap, dev, evs); n > 0 {
		return StepInfo{Source: IterationsFromAnnotations, Starts: starts}
	}
	if !d.hasTrace {
		return StepInfo{Source: IterationsNone, Starts: []int{}}
	}
	if starts := metadataStarts(r.snap, evs); starts != nil {
		return StepInfo{Source: IterationsFromMetadata, Starts: starts}
	}
	framed := d.allocs[phaseForward]+d.allocs[phaseBackward]+d.allocs[phaseOptimizer] > 0
	if !framed || d.allocs[phaseBackward] == 0 {
		// Without frames (or without a backward pass the frames show), optimizer-step
		// annotations still mark where steps end.
		if starts := optimizerStepStarts(r.snap, dev, evs); len(starts) > 1 {
			// The span before the first step's first forward allocation is setup (the model
			// built, moved and loaded), not step 0.
			if d.hasTrace && len(d.phases) == len(evs) {
				for i := 0; i < starts[1]; i++ {
					if d.phases[i] == phaseForward {
						starts[0] = i
						break
					}
				}
			}
			return StepInfo{Source: IterationsFromAnnotations, Starts: starts}
		}
	}
	if framed {
		if d.allocs[phaseBackward]+d.allocs[phaseOptimizer] == 0 {
			return StepInfo{Source: IterationsNone, Starts: []int{}}
		}
		var starts []int
		prev, sinceStart := phaseNone, false // sinceStart: a backward/optimizer run since the last start
		for i, p := range d.phases {
			if evs[i].Action != snapshot.ActionAlloc {
				continue
			}
			if p == phaseForward && prev != phaseForward && (len(starts) == 0 || sinceStart) {
				starts = append(starts, i)
				sinceStart = false
			}
			if p == phaseBackward || p == phaseOptimizer {
				sinceStart = true
			}
			prev = p
		}
		return StepInfo{Source: IterationsFromPhases, Starts: emptyIfNil(starts)}
	}
	// No frames at all: the trace's own repetition is the only clue (a guess).
	var allocs []allocRec
	var level int64
	for i, ev := range evs {
		if ev.Action == snapshot.ActionAlloc {
			allocs = append(allocs, allocRec{idx: i, key: allocKey(ev), level: level})
			level += ev.Size
		} else if ev.Action == snapshot.ActionFreeCompleted {
			level -= ev.Size
		}
	}
	if pr, ok := detectPeriod(allocs); ok {
		starts := make([]int, len(pr.starts))
		for k, b := range pr.starts {
			starts[k] = allocs[b].idx
		}
		return StepInfo{Source: IterationsFromPeriodicity, Starts: starts, Period: pr.period}
	}
	return StepInfo{Source: IterationsNone, Starts: []int{}}
}

// workload decides training vs inference for dev from the trace's phases and the live blocks.
func (r *Roles) workload(dev int, d *deviceRoles) (string, string) {
	var fwd, fwdNoGrad, fwdGradFn, kv int
	hint, bwFrame, optFrame, gradFnFrame := "", "", "", ""
	bw, opt := d.allocs[phaseBackward], d.allocs[phaseOptimizer]
	bwFrame, optFrame = d.firstFrame[phaseBackward], d.firstFrame[phaseOptimizer]
	look := func(id snapshot.StackID, n int) {
		at := r.attr(id)
		switch at.ctx {
		case ctxForward, ctxAutocast:
			fwd += n
			if at.noGrad {
				fwdNoGrad += n
			}
			if at.gradFn {
				fwdGradFn += n
				if gradFnFrame == "" {
					gradFnFrame = at.gradFnFrame
				}
			}
		case ctxBackward, ctxGradient:
			if !d.hasTrace {
				bw += n
				if bwFrame == "" {
					bwFrame = at.frame
				}
			}
		case ctxOptimizer:
			if !d.hasTrace {
				opt += n
				if optFrame == "" {
					optFrame = at.frame
				}
			}
		case ctxKVCache:
			kv += n
		}
		if hint == "" && at.hint != "" {
			hint = at.hint
		}
	}
	for k, n := range d.allocsByStack { // in stack order: the first hint is the same every time
		if n > 0 {
			look(snapshot.StackID(k-1), n)
		}
	}
	for _, si := range r.snap.SegmentsOn(dev) {
		s := &r.snap.Segments[si]
		if s.Device != dev {
			continue
		}
		for _, b := range s.Blocks {
			if b.State == snapshot.StateActiveAllocated && b.Stack > snapshot.EmptyStack {
				look(b.Stack, 1)
			}
		}
	}
	d.hasBackward = bw > 0
	if w, ev := r.annotationWorkload(); w != "" {
		if bw > 0 {
			ev += fmt.Sprintf("; %d allocations in a backward pass (%s)", bw, bwFrame)
			if opt > 0 {
				ev += fmt.Sprintf("; %d in an optimizer step (%s)", opt, optFrame)
			}
		} else {
			ev += "; no backward pass in the trace (a step without one: zeroth-order or forward-only training, or a trace cut short)"
		}
		return w, ev
	}
	switch {
	case bw > 0 || opt > 0:
		var parts []string
		if bw > 0 {
			parts = append(parts, fmt.Sprintf("%d allocations in a backward pass (%s)", bw, bwFrame))
		}
		if opt > 0 {
			parts = append(parts, fmt.Sprintf("%d in an optimizer step (%s)", opt, optFrame))
		}
		return WorkloadTraining, strings.Join(parts, "; ")
	case kv > 0:
		return WorkloadInference, fmt.Sprintf("a KV cache and no backward pass or optimizer step (%d KV-cache allocations)", kv)
	case fwd > 0 && fwdNoGrad*2 > fwd:
		return WorkloadInference, fmt.Sprintf("%d of %d forward allocations run under a no_grad/inference_mode decorator (torch/utils/_contextlib.py decorate_context); no backward pass or optimizer step", fwdNoGrad, fwd)
	case fwdGradFn > 0 && d.hasTrace:
		return WorkloadTraining, fmt.Sprintf("guess: the forward runs with grad enabled through an autograd.Function (%s), which saves activations for a backward; this trace holds no backward pass (the forward half of a step)", gradFnFrame)
	case hint != "":
		return WorkloadInference, fmt.Sprintf("guess: no backward pass or optimizer step, and %s reads as inference (generation, sampling, evaluation)", hint)
	case fwd > 0 && d.hasTrace:
		if g := r.gradMode(d); g.Mode == GradOff {
			return WorkloadInference, fmt.Sprintf("no backward pass or optimizer step, and grad mode off: %d of %d forward allocations were freed within the forward pass that made them (no graph kept)", g.FreedInPass, g.ForwardAllocs)
		}
		return WorkloadUnknown, fmt.Sprintf("the trace holds %d forward allocations, some outliving their pass, and no backward pass or optimizer step: a forward whose graph or outputs are kept for later, or a training step cut short (an OOM in the forward pass looks the same)", fwd)
	case fwd > 0:
		return WorkloadUnknown, "forward allocations and no backward or optimizer frames, but a state-only file cannot show whether a backward pass follows"
	}
	return WorkloadUnknown, "no frame shows a forward pass, a backward pass or an optimizer step"
}

func (r *Roles) paramSizes() map[devSize]string {
	r.paramsOnce.Do(func() {
		r.params = map[devSize]string{}
		for si := range r.snap.Segments {
			s := &r.snap.Segments[si]
			for _, b := range s.Blocks {
				if b.State != snapshot.StateActiveAllocated || b.Stack <= snapshot.EmptyStack {
					continue
				}
				if at := r.attr(b.Stack); at.ctx == ctxParameter {
					k := devSize{s.Device, b.Size}
					if _, ok := r.params[k]; !ok {
						r.params[k] = at.Site
					}
				}
			}
		}
	})
	return r.params
}

func majority(n, of int) bool { return of > 0 && 2*n > of }

// refine settles the roles that depend on timing, from how the trace's allocations of the stack
// ended. at is the stack's attribution (r.attr(id)); the result is kept per device and stack.
func (r *Roles) refine(d *deviceRoles, at Attribution, id snapshot.StackID) Attribution {
	k := int(id) + 1
	if k < 0 || k >= len(r.snap.Stacks)+1 {
		return r.refineStack(d, at, id)
	}
	d.refinedOnce.Do(func() { d.refined = make([]atomic.Pointer[Attribution], len(r.snap.Stacks)+1) })
	if p := d.refined[k].Load(); p != nil {
		return *p
	}
	v := r.refineStack(d, at, id)
	if !d.refined[k].CompareAndSwap(nil, &v) {
		return *d.refined[k].Load()
	}
	return v
}

func (r *Roles) refineStack(d *deviceRoles, at Attribution, id snapshot.StackID) Attribution {
	var s *lifeStats
	if int(id)+1 < len(d.stats) && d.stats[id+1].allocs > 0 {
		s = &d.stats[id+1]
	}
	training := d.allocs[phaseBackward] > 0
	switch at.ctx {
	case ctxForward:
		switch {
		case s == nil || !d.hasTrace:
			if at.Category == CategoryActivation {
				at.Evidence += "; guess: a forward output still alive is most likely saved for backward (no trace shows its lifetime; a with torch.no_grad() block leaves no frame, so the frames cannot tell)"
			} else {
				at.Evidence += "; grad is disabled (no_grad/inference_mode decorator): nothing is saved for backward"
			}
		case majority(s.sameRun, s.allocs):
			at.Category = CategoryTemporary
			at.Evidence += fmt.Sprintf("; %d of %d allocations were freed before that forward pass ended", s.sameRun, s.allocs)
		case training:
			at.Category = CategoryActivation
			at.Evidence += fmt.Sprintf("; %d of %d allocations outlived the forward pass (%d freed by the backward pass, %d still alive): saved for backward", s.allocs-s.sameRun, s.allocs, s.inBackward, s.alive)
		case at.noGrad || d.workload == WorkloadInference:
			at.Category = CategoryTemporary
			at.Evidence += "; an inference pass (no backward): a forward output still referenced by the caller, not saved for backward"
		case at.gradFn:
			at.Category = CategoryActivation
			at.Evidence += "; it outlives the forward pass, which runs with grad enabled through an autograd.Function: saved for the backward pass (not in this trace)"
		default:
			at.Category = CategoryActivation
			at.Evidence += "; guess: it outlives the forward pass, so it is most likely saved for a backward pass the trace does not reach (or an output the caller keeps)"
		}
	case ctxUser:
		if s != nil && training {
			switch {
			case majority(s.inBackward, s.allocs):
				at.Category = CategoryActivation
				at.Evidence = fmt.Sprintf("your code, and %d of %d allocations were freed by the backward pass: saved for backward", s.inBackward, s.allocs)
			case majority(s.sameRun, s.allocs):
				at.Category = CategoryTemporary
				at.Evidence = fmt.Sprintf("your code; %d of %d allocations were freed before the phase that made them ended", s.sameRun, s.allocs)
			}
		}
	case ctxOptimizer:
		if s != nil && d.hasTrace && majority(s.sameRun, s.allocs) {
			at.Category = CategoryTemporary
			at.Evidence += fmt.Sprintf("; %d of %d allocations were freed within the optimizer step: step temporaries, not state", s.sameRun, s.allocs)
		}
	case ctxParameter:
		if line, gradLine, ok := r.megatronBufferLine(id); ok {
			if line == gradLine {
				at.Category = CategoryGradient
				at.Evidence += "; Megatron's contiguous gradient buffer (_ParamAndGradBuffer.grad_data: every parameter's main_grad is a view of it), allocated after param_data in megatron/core/distributed/param_and_grad_buffer.py"
			} else {
				at.Evidence += "; Megatron's contiguous parameter buffer (_ParamAndGradBuffer.param_data, with the distributed optimizer: every parameter is a view of it)"
			}
		}
	case ctxCommunication:
		if s != nil && d.hasTrace && majority(s.outlivedBw, s.allocs) {
			// FSDP2's foreach_reduce stages the reduce-scatter and keeps its output as the new
			// sharded gradient (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py)
			at.Category = CategoryGradient
			at.Evidence += fmt.Sprintf("; %d of %d allocations, made in a backward pass, outlived it: a reduction's output kept as the gradient, not a staging buffer", s.outlivedBw, s.allocs)
		}
	case ctxBackward:
		if s != nil && d.hasTrace && majority(s.outlivedBw, s.allocs) {
			at.Category = CategoryGradient
			at.Evidence += fmt.Sprintf("; guess: %d of %d allocations outlived the backward pass that made them: a gradient handed to a leaf's .grad without a copy", s.outlivedBw, s.allocs)
		}
	}
	return at
}

// frameless decides the role of memory without frames, from its size and timing; the evidence
// says it is a guess.
func (r *Roles) frameless(dev int, d *deviceRoles, at Attribution, addr uint64, size int64, allocIdx int, aliveAtEnd bool) Attribution {
	caps := r.snap.Caps
	if size == cublasWorkspaceBytes {
		at.Category = CategoryWorkspace
		at.Evidence = "guess: no frames, and 8,519,680 B is exactly one default cuBLAS workspace (one per handle: thread and stream, kept for the life of the process)"
		return at
	}
	if !caps.FramesOnBlocks && !caps.FramesOnAllocs {
		at.Category = CategoryOther
		at.Evidence = "the file recorded no stacks (history off, or recorded without context): the owner is unknown"
		return at
	}
	paramSite, paramSized := r.paramSizes()[devSize{dev, size}]
	freePhase, preFreed := d.preFreePhase(addr)
	preFreed = preFreed && allocIdx < 0 && !aliveAtEnd
	switch {
	case allocIdx >= 0 && allocIdx < len(d.phases) && d.phases[allocIdx] == phaseBackward:
		at.Category = CategoryBackwardTemporary
		at.Evidence = "guess: no frames (stacks=\"python\" records none for the autograd engine) and allocated during the backward pass"
		if aliveAtEnd && paramSized {
			at.Category = CategoryGradient
			at.Evidence += fmt.Sprintf(", still alive, with the size of a parameter (%s): most likely that parameter's gradient", paramSite)
		}
	case allocIdx >= 0:
		at.Category = CategoryOther
		at.Evidence = "allocated in the trace without frames"
		if allocIdx < len(d.phases) && d.phases[allocIdx] != phaseNone {
			at.Evidence += " during the " + phaseNames[d.phases[allocIdx]] + " phase"
		}
	case d.hasTrace && preFreed && freePhase == phaseOptimizer:
		at.Category = CategoryOptimizerState
		at.Evidence = "guess: allocated before the trace and freed during the optimizer step: the previous step's optimizer state being replaced"
	case d.hasTrace && preFreed && freePhase != phaseNone:
		at.Category = CategoryOther
		at.Evidence = "allocated before the trace and freed during its " + phaseNames[freePhase] + " phase (often the previous step's output or loss)"
	case d.hasTrace && preFreed:
		at.Category = CategoryOther
		at.Evidence = "allocated before the trace and freed during it"
	case d.workload == WorkloadTraining && paramSized && caps.PythonOnly && !d.hasTrace:
		at.Category = CategoryGradient
		at.Evidence = fmt.Sprintf("guess: no frames (stacks=\"python\" records none for the autograd engine), alive, with the size of a parameter (%s): most likely that parameter's gradient", paramSite)
	default:
		at.Category = CategoryParameter
		at.Evidence = "guess: no frames because it was allocated before recording started, and it is still alive: memory that lives that long is mostly the model's weights and buffers (persistent gradients or optimizer state look the same)"
	}
	return at
}

// stepOf returns the 0-based step of event i (-1 before the first step).
func stepOf(starts []int, i int) int {
	return sort.SearchInts(starts, i+1) - 1
}

// stepsSpanned counts the distinct steps of the given alloc events.
func stepsSpanned(starts []int, idxs []int) int {
	if len(starts) == 0 {
		return 0
	}
	seen := []int{}
	for _, i := range idxs {
		if s := stepOf(starts, i); s >= 0 && !slices.Contains(seen, s) {
			seen = append(seen, s)
		}
	}
	return len(seen)
}

// attrTable holds Attributor.Attribute for every stack of a snapshot. Attributing a stack
// (reading each of its frames) is the costliest step of a role, so helper goroutines fill the
// table on the cores the analysis leaves idle while the caller's goroutine works: the caller
// attributes the stacks it needs as it meets them (a trace meets them roughly in id order),
// the helpers take the others from the last id down, and each stack is attributed once, by
// whichever claims it first. attribute only reads the Attributor and the frame table, so the
// helpers never touch its cache; get records each stack there once, under mu: the analyses
// that read roles on two goroutines at once (replay's peak and steps) may both call get.
type attrTable struct {
	snap   *snapshot.Snapshot
	a      *Attributor
	frames *frameTable   // filled before the helpers start: they only read it
	vals   []Attribution // by stack id + 1; vals[k] is written once, by whoever claimed k
	// state[k]: 0 unclaimed, 1 being attributed, 2 done (vals[k] set), 3 done and recorded
	// in the Attributor's cache.
	state []atomic.Uint32
	next  atomic.Int64 // the helpers take ids from len(vals)-1 down
	mu    sync.Mutex   // guards the Attributor's cache
}

// attrHelpers is how many goroutines fill an attribution table: the cores beyond the
// caller's, at most four.
func attrHelpers() int { return min(runtime.GOMAXPROCS(0)-1, 4) }

func newAttrTable(snap *snapshot.Snapshot, a *Attributor) *attrTable {
	n := len(snap.Stacks) + 1
	frames := a.frames(snap)
	frames.fill(a, snap)
	t := &attrTable{snap: snap, a: a, frames: frames, vals: make([]Attribution, n), state: make([]atomic.Uint32, n)}
	t.next.Store(int64(n - 1))
	if n > 64 {
		for range attrHelpers() {
			go t.help()
		}
	}
	return t
}

// compute is Attributor.Attribute without the cache (and safe on any goroutine).
func (t *attrTable) compute(id snapshot.StackID) Attribution {
	return t.a.attribute(t.frames.stackInfos(t.snap, id), stackNotRecorded(t.snap, id), t.snap.Caps)
}

// claim attributes stack index k if nobody has claimed it; false if someone has.
func (t *attrTable) claim(k int) bool {
	if !t.state[k].CompareAndSwap(0, 1) {
		return false
	}
	t.vals[k] = t.compute(snapshot.StackID(k - 1))
	t.state[k].Store(2)
	return true
}

func (t *attrTable) help() {
	for {
		k := int(t.next.Add(-1) + 1)
		if k < 0 {
			return
		}
		t.claim(k)
	}
}

// get returns the attribution of stack id (safe on any goroutine).
func (t *attrTable) get(id snapshot.StackID) Attribution {
	k := int(id) + 1
	if k < 0 || k >= len(t.vals) {
		t.mu.Lock()
		defer t.mu.Unlock()
		return t.a.Attribute(t.snap, id)
	}
	if t.state[k].Load() < 2 && !t.claim(k) {
		for t.state[k].Load() < 2 { // a helper is on it: it takes as long as doing it here
			runtime.Gosched()
		}
	}
	at := t.vals[k]
	if t.state[k].Load() == 2 && t.state[k].CompareAndSwap(2, 3) {
		t.mu.Lock()
		if _, ok := t.a.cache[attrKey{t.snap, id}]; !ok {
			t.a.cache[attrKey{t.snap, id}] = at
		}
		t.mu.Unlock()
	}
	return at
}
