package analysis

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// OOMOptions tunes OOMReport.
type OOMOptions struct {
	Limit int `json:"limit"` // live sites per OOM; 0 means 10
	// DeviceTotalBytes is the device's memory when known (the file does not record it); 0 means
	// estimate it as the smallest common GPU size holding reserved + device_free.
	DeviceTotalBytes int64              `json:"device_total_bytes"`
	Attribution      AttributionOptions `json:"attribution"`
}

// OOM verdicts.
const (
	VerdictCapacity       = "capacity"
	VerdictFragmentation  = "fragmentation"
	VerdictOutsidePyTorch = "outside_pytorch"
)

// OOMSite is a site holding memory just before an OOM.
type OOMSite struct {
	SiteIdentity
	Category string `json:"category"`
	Bytes    int64  `json:"bytes"`
	Blocks   int    `json:"blocks"`
	// Evidence is set when the category comes from the blocks themselves (user_container).
	Evidence string `json:"evidence,omitempty"`
	// StackID is the stack of the site's largest live block (read-raw-section stacks[ID]); -1
	// when none was recorded.
	StackID int `json:"stack_id"`
	sizes   sizeHist
	allocs  []int
	topSize int64
	rep     representative
}

// OOMEvent explains one oom event.
type OOMEvent struct {
	Device          int    `json:"device"`
	EventIndex      int    `json:"event_index"`
	TimeUS          int64  `json:"time_us"`
	RequestedBytes  int64  `json:"requested_bytes"`
	DeviceFreeBytes int64  `json:"device_free_bytes"`
	Stream          string `json:"stream"`
	SiteIdentity
	Stack []string `json:"stack"`
	// StateSource says where the memory figures come from: "replay" (the trace replayed up to
	// the OOM) or "final_state" (the file's segments: no trace, or nothing changed after the OOM).
	StateSource    string `json:"state_source"`
	AllocatedBytes int64  `json:"allocated_bytes"`
	ReservedBytes  int64  `json:"reserved_bytes"`
	InactiveBytes  int64  `json:"inactive_bytes"`
	// LargestFreeBlockBytes is the largest cached free block of the request's pool (small/large)
	// and stream: what could have served it without cudaMalloc. LargestFreeAnyBytes ignores pool
	// and stream.
	LargestFreeBlockBytes int64 `json:"largest_free_block_bytes"`
	LargestFreeAnyBytes   int64 `json:"largest_free_any_bytes"`
	// Expandable: the device uses expandable segments. The free block at the end of a mapped range
	// can then grow by mapping more pages while the device has free memory, so the largest free
	// block is not the largest request that could be served: up to ExpandableTailFreeBytes +
	// device_free could be at the end of the request's range.
	Expandable              bool  `json:"expandable"`
	ExpandableTailFreeBytes int64 `json:"expandable_tail_free_bytes"`
	// LargestFreeBlockUnknown: the state was replayed and the replay cannot rebuild expandable
	// mapped ranges, so the largest-free-block figures are unknown (reported as 0).
	LargestFreeBlockUnknown bool `json:"largest_free_block_unknown"`
	// DeviceTotalBytes is the device size used for the verdict; DeviceTotalSource is "option"
	// or "estimate".
	DeviceTotalBytes  int64  `json:"device_total_bytes"`
	DeviceTotalSource string `json:"device_total_source"`
	// OutsidePyTorchBytes (outside_pytorch verdicts) is device total − reserved − device free:
	// memory held by other processes, the CUDA context or other libraries. When the device size
	// was estimated it is only a lower bound (the smallest plausible device): OutsidePyTorchLowerBound.
	OutsidePyTorchBytes      int64 `json:"outside_pytorch_bytes"`
	OutsidePyTorchLowerBound bool  `json:"outside_pytorch_lower_bound"`
	// Workload is the device's workload (training, inference, unknown) and HasBackward whether
	// its trace or live blocks show a backward pass: they decide which fixes apply.
	Workload    string `json:"workload"`
	HasBackward bool   `json:"has_backward"`
	// GradMode is the device's grad mode read from lifetimes (on, off, unknown) and Frameworks
	// the frameworks the file's frames show: the advice's gates read both.
	GradMode   string      `json:"grad_mode"`
	Frameworks []Framework `json:"frameworks"`
	// Unwound: the file was written after the OOM and the pass unwound (the exception freed its
	// tensors): UnwoundBlocks / UnwoundBytes were freed between the OOM event and the end of the
	// trace (or the next OOM).
	Unwound       bool  `json:"unwound"`
	UnwoundBlocks int   `json:"unwound_blocks"`
	UnwoundBytes  int64 `json:"unwound_bytes"`
	// PassUnwound: the unwinding freed the pass, i.e. UnwoundBytes are at least half the
	// activations and temporaries live at the OOM. When it did not, those tensors are still
	// live at the end: a kept traceback (sys.last_traceback, a logger, an except block holding
	// the exception) pins the frames that reference them. StillLiveBytes is what the device
	// holds allocated in the file's final state.
	PassUnwound    bool      `json:"pass_unwound"`
	StillLiveBytes int64     `json:"still_live_bytes"`
	LiveSites      []OOMSite `json:"live_sites"`
	// Dominant is the category holding the most live memory (for capacity OOMs).
	Dominant      string   `json:"dominant"`
	DominantBytes int64    `json:"dominant_bytes"`
	Verdict       string   `json:"verdict"`
	Explanation   string   `json:"explanation"`
	Fixes         []string `json:"fixes"`
	// Advice: the fixes with the rule of the advice table (advice.go) that gave each.
	Advice []AdviceItem `json:"advice"`
	// RoleBytes: live bytes per role at the OOM, over every site (the advice rules' gates read it).
	RoleBytes map[string]int64 `json:"role_bytes"`
	adv       *adviceIn
	// ExpandableWhatIf: the trace replayed with expandable segments at this OOM (whatif.go);
	// absent when the file already uses them or has no trace to replay.
	ExpandableWhatIf *OOMWhatIf `json:"expandable_what_if,omitempty"`
}

// OOMResult lists every oom event of a file.
type OOMResult struct {
	Path  string     `json:"path"`
	OOMs  []OOMEvent `json:"ooms"`
	Notes []string   `json:"notes"`
}

var commonGPUGiB = []int64{1, 2, 3, 4, 6, 8, 10, 11, 12, 16, 20, 24, 32, 40, 48, 64, 80, 94, 96, 128, 141, 144, 180, 192, 256, 288}

// estimateDeviceTotal is the smallest common GPU memory size holding n bytes.
func estimateDeviceTotal(n int64) int64 {
	for _, g := range commonGPUGiB {
		if g*gib >= n {
			return g * gib
		}
	}
	return n
}

// freeState is what the cache held at one moment: per request kind, the largest free block.
type freeState struct {
	allocated, reserved, active int64
	largestSame, largestAny     int64
	tailSame                    int64 // free bytes at the end of the request's expandable range
	sites                       []OOMSite
	// byCat: live bytes per role over every site (before the limit); attnBytes: live bytes of
	// sites whose stacks show attention code; largestSeg: the largest segment.
	byCat      map[string]int64
	attnBytes  int64
	attnSite   string
	largestSeg int64
}

func isStateEvent(a snapshot.Action) bool {
	switch a {
	case snapshot.ActionAlloc, snapshot.ActionFreeRequested, snapshot.ActionFreeCompleted,
		snapshot.ActionSegmentAlloc, snapshot.ActionSegmentFree, snapshot.ActionSegmentMap, snapshot.ActionSegmentUnmap:
		return true
	}
	return false
}

// finalFreeState reads the state from the file's segments of device dev.
func finalFreeState(snap *snapshot.Snapshot, roles *Roles, dev int, small bool, stream uint64, limit int) freeState {
	var fs freeState
	rows := newOOMRows(snap)
	for _, si := range snap.SegmentsOn(dev) {
		s := &snap.Segments[si]
		if s.Device != dev {
			continue
		}
		fs.reserved += s.TotalSize
		fs.largestSeg = max(fs.largestSeg, s.TotalSize)
		segSmall := s.SegmentType == "small"
		sums := s.Sums()
		fs.allocated += sums.Allocated
		fs.active += sums.Active()
		for _, b := range s.Blocks {
			switch b.State {
			case snapshot.StateActiveAllocated:
				at, idx := roles.BlockInfo(dev, b)
				rows.add(at, b.Address, b.Size, b.Stack, idx)
			case snapshot.StateInactive:
				fs.largestAny = max(fs.largestAny, b.Size)
				if segSmall == small && s.Stream == stream {
					fs.largestSame = max(fs.largestSame, b.Size)
					if s.IsExpandable && b.Address+uint64(b.Size) == s.Address+uint64(s.TotalSize) {
						fs.tailSame = max(fs.tailSame, b.Size)
					}
				}
			}
		}
	}
	fs.sites, fs.byCat, fs.attnBytes, fs.attnSite = sortOOMSites(roles, dev, rows.m, limit)
	return fs
}

// oomRows groups live blocks into rows by rowKey: one row per role, since a site can hold
// activations and a workspace. Blocks of one stack mostly fall in the same row, so each
// stack's last row is kept (last, by stack id + 1) and the key is built only when a block's
// site or role differs from it: building it (strings and a number formatted) per block is most
// of the cost of a state with many blocks.
type oomRows struct {
	m    map[string]*OOMSite
	last []oomStackRow
}

type oomStackRow struct {
	id  SiteIdentity
	cat string // the category as rowKey counts it
	row *OOMSite
}

func newOOMRows(snap *snapshot.Snapshot) *oomRows {
	return &oomRows{m: map[string]*OOMSite{}, last: make([]oomStackRow, len(snap.Stacks)+1)}
}

func (r *oomRows) add(at Attribution, addr uint64, size int64, stack snapshot.StackID, allocIdx int) {
	cat := at.Category
	if cat == CategoryUserContainer {
		cat = CategoryOther // as rowKey
	}
	var s *OOMSite
	k := int(stack) + 1
	if k >= 0 && k < len(r.last) && r.last[k].row != nil && r.last[k].cat == cat && r.last[k].id == at.SiteIdentity {
		s = r.last[k].row
	} else {
		key := at.rowKey()
		if s = r.m[key]; s == nil {
			s = &OOMSite{SiteIdentity: at.SiteIdentity, Category: at.Category, sizes: sizeHist{}}
			r.m[key] = s
		}
		if k >= 0 && k < len(r.last) {
			r.last[k] = oomStackRow{at.SiteIdentity, cat, s}
		}
	}
	if allocIdx >= 0 {
		s.allocs = append(s.allocs, allocIdx)
	}
	if s.rep.take(at.Category, size, stack, addr) {
		s.topSize, s.StackID = size, max(int(stack), -1)
		s.Category, s.Evidence = at.Category, at.Evidence
	}
	s.Bytes += size
	s.Blocks++
	s.sizes.add(size)
}

// sortOOMSites settles container roles, sorts the sites largest first and cuts them to limit;
// it also returns the live bytes per role and of attention sites over every site.
func sortOOMSites(roles *Roles, dev int, m map[string]*OOMSite, limit int) ([]OOMSite, map[string]int64, int64, string) {
	out := make([]OOMSite, 0, len(m))
	byCat := map[string]int64{}
	var attn, attnTop int64
	attnSite := ""
	for _, s := range m {
		if s.Category == CategoryOther || s.Category == CategoryUserContainer {
			if ev := roles.containerGuess(dev, s.SiteIdentity, s.sizes, s.allocs); ev != "" {
				s.Category, s.Evidence = CategoryUserContainer, ev
			}
		}
		s.sizes, s.allocs = nil, nil
		byCat[s.Category] += s.Bytes
		if attentionSite(roles.snap, s) {
			attn += s.Bytes
			if s.Bytes > attnTop || (s.Bytes == attnTop && s.Site < attnSite) {
				attnTop, attnSite = s.Bytes, s.Site
			}
		}
		out = append(out, *s)
	}
	slices.SortFunc(out, func(x, y OOMSite) int {
		return siteOrder(x.Bytes, y.Bytes, x.SiteIdentity, y.SiteIdentity, x.Category, y.Category)
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, byCat, attn, attnSite
}

// isAttentionName: a function or file name of attention code (scaled_dot_product_attention,
// attention modules, softmax over scores).
func isAttentionName(s string) bool {
	s = strings.ToLower(s)
	return containsAny(s, "scaled_dot_product_attention", "attention", "softmax", "attn")
}

// attentionSite: the site's own frame, its user frame or a Python frame of its stack is
// attention code.
func attentionSite(snap *snapshot.Snapshot, s *OOMSite) bool {
	base := func(p string) string {
		p = strings.ReplaceAll(p, "\\", "/")
		return p[strings.LastIndex(p, "/")+1:]
	}
	for _, n := range []string{s.Function, base(s.File), s.UserFunction, base(s.UserFile)} {
		if n != "" && isAttentionName(n) {
			return true
		}
	}
	if snap == nil || s.StackID < 0 {
		return false
	}
	for _, f := range snap.StackFrames(snapshot.StackID(s.StackID)) {
		if !strings.HasSuffix(f.Filename, ".py") {
			continue // C++ kernels (an SDPA backend is attention already fused)
		}
		if isAttentionName(f.Name) || isAttentionName(base(f.Filename)) {
			return true
		}
	}
	return false
}

// replayFreeState reads the state from a replay stopped at the OOM: free blocks are the parts
// of known segments not covered by live blocks. When the trace records requested sizes, each
// live block's real size is rebuilt from the layout: rounded up to 512 B, plus the rest up to
// the next block when that rest is too small to split off (<= 1 MiB in the large pool).
func replayFreeState(e *engine, roles *Roles, dev int, small bool, stream uint64, limit int) freeState {
	var fs freeState
	type span struct {
		addr, end uint64
		b         *liveBlk
	}
	spans := make([]span, 0, len(e.live))
	for addr, b := range e.live {
		spans = append(spans, span{addr, addr + uint64(b.size), b})
	}
	slices.SortFunc(spans, func(x, y span) int {
		if x.addr < y.addr {
			return -1
		}
		if x.addr > y.addr {
			return 1
		}
		return 0
	})
	segAddrs := make([]uint64, 0, len(e.segs))
	for addr := range e.segs {
		segAddrs = append(segAddrs, addr)
		fs.reserved += e.segs[addr].size
		fs.largestSeg = max(fs.largestSeg, e.segs[addr].size)
	}
	slices.Sort(segAddrs)
	if e.reserved != fs.reserved {
		fs.reserved = e.reserved // expandable or unknown segments: trust the running total
	}
	for _, addr := range segAddrs {
		s := e.segs[addr]
		end := addr + uint64(s.size)
		cur := addr
		i, _ := slices.BinarySearchFunc(spans, addr, func(x span, t uint64) int {
			if x.addr < t {
				return -1
			}
			if x.addr > t {
				return 1
			}
			return 0
		})
		var largest int64
		for ; i < len(spans) && spans[i].addr < end; i++ {
			sp := &spans[i]
			if e.requested {
				next := end
				if i+1 < len(spans) && spans[i+1].addr < end {
					next = spans[i+1].addr
				}
				real := sp.addr + uint64((sp.b.size+511)/512*512)
				if s.size != 2*mib && next > real && next-real <= uint64(mib) {
					real = next
				}
				sp.end = min(max(real, sp.end), next)
			}
			if sp.addr > cur {
				largest = max(largest, int64(sp.addr-cur))
			}
			cur = max(cur, sp.end)
		}
		if end > cur {
			largest = max(largest, int64(end-cur))
		}
		fs.largestAny = max(fs.largestAny, largest)
		if (s.size == 2*mib) == small && s.stream == stream {
			fs.largestSame = max(fs.largestSame, largest)
		}
	}
	rows := newOOMRows(roles.snap)
	for _, sp := range spans {
		size := int64(sp.end - sp.addr)
		fs.active += size
		if sp.b.pending {
			continue
		}
		fs.allocated += size
		at := roles.Live(dev, sp.b.stack, sp.addr, size, int(sp.b.allocIdx), e.next-1)
		rows.add(at, sp.addr, size, sp.b.stack, int(sp.b.allocIdx))
	}
	fs.sites, fs.byCat, fs.attnBytes, fs.attnSite = sortOOMSites(roles, dev, rows.m, limit)
	return fs
}

// OOMReport explains every oom event in the file's traces.
func OOMReport(ctx context.Context, snap *snapshot.Snapshot, opt OOMOptions) (*OOMResult, error) {
	if snap == nil {
		return nil, fmt.Errorf("oom: no snapshot")
	}
	if opt.Limit <= 0 {
		opt.Limit = 10
	}
	// The expandable-segments replays are most of the work: they start first and run beside
	// the rest of the report, which waits for them only where it cites them. Returning stops
	// them and waits, so that nothing outlives the call.
	ctx, cancel := context.WithCancel(ctx)
	whatIfs := startOOMWhatIfs(ctx, snap)
	defer whatIfs.stop(cancel)
	roles, err := NewRoles(snap, opt.Attribution)
	if err != nil {
		return nil, fmt.Errorf("oom: %w", err)
	}
	r := &OOMResult{Path: snap.Path, OOMs: []OOMEvent{}, Notes: []string{}}
	anyTrace := false
	for dev, evs := range snap.DeviceTraces {
		if len(evs) > 0 {
			anyTrace = true
		}
		lastState := -1
		var ooms []int
		for i := range evs {
			switch a := evs[i].Action; {
			case a == snapshot.ActionOOM:
				ooms = append(ooms, i)
			case isStateEvent(a):
				lastState = i
			}
		}
		if len(ooms) == 0 {
			continue
		}
		expandable := usesExpandable(snap, dev)
		var e *engine
		for _, idx := range ooms {
			ev := evs[idx]
			o := OOMEvent{Device: dev, EventIndex: idx, TimeUS: ev.TimeUS, RequestedBytes: ev.Size, DeviceFreeBytes: ev.DeviceFree(),
				Stream: fmt.Sprintf("0x%x", ev.Stream), LiveSites: []OOMSite{}, Fixes: []string{}, StateSource: "replay"}
			at := roles.Stack(dev, ev.Stack)
			o.SiteIdentity, o.Stack = at.SiteIdentity, emptyIfNil(at.Stack)
			small := ev.Size <= mib
			var fs freeState
			if idx > lastState {
				// Nothing changed after the OOM: the file's segments are the state at the OOM (exact
				// block sizes and pools).
				fs = finalFreeState(snap, roles, dev, small, ev.Stream, opt.Limit)
				o.StateSource = "final_state"
			} else {
				if e == nil || e.next > idx {
					e = newEngine(snap, dev)
				}
				if err := e.run(ctx, idx); err != nil {
					return nil, fmt.Errorf("oom: %w", err)
				}
				fs = replayFreeState(e, roles, dev, small, ev.Stream, opt.Limit)
			}
			o.AllocatedBytes, o.ReservedBytes, o.InactiveBytes = fs.allocated, fs.reserved, fs.reserved-fs.active
			o.Expandable = expandable
			if expandable {
				if o.StateSource == "replay" {
					o.LargestFreeBlockUnknown = true
					fs.largestSame, fs.largestAny = 0, 0
				} else {
					o.ExpandableTailFreeBytes = fs.tailSame
				}
			}
			o.LargestFreeBlockBytes, o.LargestFreeAnyBytes = fs.largestSame, fs.largestAny
			o.LiveSites = emptyIfNil(fs.sites)
			if o.StateSource == "replay" {
				o.Unwound = true
				for k := idx + 1; k < len(evs) && evs[k].Action != snapshot.ActionOOM; k++ {
					if evs[k].Action == snapshot.ActionFreeCompleted {
						o.UnwoundBlocks++
						o.UnwoundBytes += evs[k].Size
					}
				}
			}
			if o.Unwound {
				for _, seg := range snap.Segments {
					if seg.Device == dev {
						o.StillLiveBytes += seg.AllocatedSize
					}
				}
			}
			o.Workload, _ = roles.Workload(dev)
			o.HasBackward = roles.HasBackward(dev)
			o.GradMode = roles.GradMode(dev).Mode
			o.Frameworks = roles.Frameworks()
			judge(&o, opt, fs, roles, snap)
			w, err := whatIfs.get(dev)
			if err != nil {
				return nil, fmt.Errorf("oom: expandable segments what-if: %w", err)
			}
			applyOOMWhatIf(&o, w[idx])
			r.OOMs = append(r.OOMs, o)
		}
	}
	if !anyTrace || !snap.Caps.HasTrace {
		r.Notes = append(r.Notes, "the file has no trace: OOM events are only recorded in the trace, so no OOM can be explained; the final state is what the fragmentation and top-stacks reports show (`memsnap fragmentation` / MCP `fragmentation`, `memsnap top-stacks` / MCP `top-stacks`)")
	} else if len(r.OOMs) == 0 {
		r.Notes = append(r.Notes, "no oom event in the trace")
		r.Notes = append(r.Notes, nearMisses(snap, roles)...)
		switch {
		case snap.Caps.RingBufferFull || snap.Caps.TraceStart == "ring_buffer":
			r.Notes = append(r.Notes, "the trace ring buffer is full: an earlier OOM may have fallen off its front")
		case snap.Caps.TraceIncomplete:
			r.Notes = append(r.Notes, "recording began after the first allocations (a late start, not ring-buffer truncation): an OOM before it is not recorded")
		}
	}
	if len(r.OOMs) > 0 && !snap.Caps.FramesOnAllocs {
		r.Notes = append(r.Notes, "alloc events carry no stacks: live sites before the OOM come from block stacks where known")
	}
	return r, nil
}

// nearMisses names, per device, the cudaMalloc failures the allocator recovered from by
// freeing its cache (segment-release bursts of kind malloc_retry): what came closest to an
// OOM in a trace without one.
func nearMisses(snap *snapshot.Snapshot, roles *Roles) []string {
	var out []string
	for dev, evs := range snap.DeviceTraces {
		if a := &snap.TraceIndex(dev).Tally.Actions; len(evs) == 0 || a[snapshot.ActionSegmentFree]+a[snapshot.ActionSegmentUnmap] == 0 {
			continue
		}
		for _, b := range segmentBursts(snap, roles, dev) {
			if b.Kind != BurstMallocRetry || b.FollowedBySegmentAlloc == 0 {
				continue
			}
			at := ""
			if b.Site != "" {
				at = fmt.Sprintf(" (most often for %s)", b.Site)
			}
			out = append(out, fmt.Sprintf("but device %d came close: %s a cudaMalloc failed%s and the allocator recovered by freeing every cached unused segment (%s in all) and retrying: the device is at its limit, and a little more memory at such a moment would have been an OOM; lower the peak (what is live at it: `memsnap replay` / MCP `replay`); `memsnap whatif --recommend` / MCP `what-if` counts these flushes per allocator setting",
				dev, count(b.FollowedBySegmentAlloc, "time"), at, FormatBytes(b.Bytes)))
		}
	}
	return out
}

// oomWhatIfs are the expandable-segments replays of every device with an oom event
// (expandableWhatIf), computed one device after the other, in device order, on a goroutine of
// their own (each device's two replays then run side by side): at most two replays hold their
// memory at once.
type oomWhatIfs struct {
	ready []chan struct{} // closed when the device's answer is in
	out   []map[int]*OOMWhatIf
	err   []error
	done  chan struct{}
}

func startOOMWhatIfs(ctx context.Context, snap *snapshot.Snapshot) *oomWhatIfs {
	n := len(snap.DeviceTraces)
	w := &oomWhatIfs{ready: make([]chan struct{}, n), out: make([]map[int]*OOMWhatIf, n), err: make([]error, n), done: make(chan struct{})}
	for d := range w.ready {
		w.ready[d] = make(chan struct{})
	}
	go func() {
		defer close(w.done)
		for dev, evs := range snap.DeviceTraces {
			if len(evs) > 0 && snap.TraceIndex(dev).Tally.Actions[snapshot.ActionOOM] > 0 {
				if err := ctx.Err(); err != nil {
					w.err[dev] = err
				} else {
					w.out[dev], w.err[dev] = expandableWhatIf(ctx, snap, dev)
				}
			}
			close(w.ready[dev])
		}
	}()
	return w
}

// get waits for device dev's replays: the result per oom event index (nil: none).
func (w *oomWhatIfs) get(dev int) (map[int]*OOMWhatIf, error) {
	<-w.ready[dev]
	return w.out[dev], w.err[dev]
}

// stop cancels the replays still running and waits for them.
func (w *oomWhatIfs) stop(cancel context.CancelFunc) {
	cancel()
	<-w.done
}

// usesExpandable reports whether device dev uses expandable segments: the settings, its
// segments or segment_map and segment_unmap events in its trace say so.
func usesExpandable(snap *snapshot.Snapshot, dev int) bool {
	if snap.Settings.ExpandableSegments {
		return true
	}
	if a := &snap.TraceIndex(dev).Tally.Actions; a[snapshot.ActionSegmentMap]+a[snapshot.ActionSegmentUnmap] > 0 {
		return true
	}
	for _, si := range snap.SegmentsOn(dev) {
		if snap.Segments[si].Device == dev && snap.Segments[si].IsExpandable {
			return true
		}
	}
	return false
}

// judge sets the verdict, explanation and fixes.
func judge(o *OOMEvent, opt OOMOptions, fs freeState, roles *Roles, snap *snapshot.Snapshot) {
	total, src := opt.DeviceTotalBytes, "option"
	ignored := ""
	if total > 0 && total < o.ReservedBytes+o.DeviceFreeBytes {
		// The given size cannot hold what PyTorch reserved plus what the driver reported free.
		ignored = fmt.Sprintf(" (the device memory given, %s, is less than reserved + free, %s: it was ignored and the size estimated)",
			FormatBytes(total), FormatBytes(o.ReservedBytes+o.DeviceFreeBytes))
		total = 0
	}
	if total <= 0 {
		total, src = estimateDeviceTotal(o.ReservedBytes+o.DeviceFreeBytes), "estimate"
	}
	o.DeviceTotalBytes, o.DeviceTotalSource = total, src
	// Dominant category among live memory (every site, not only the listed ones).
	byCat := fs.byCat
	if byCat == nil {
		byCat = map[string]int64{}
		for _, s := range fs.sites {
			byCat[s.Category] += s.Bytes
		}
	}
	for _, c := range AllCategories {
		if byCat[c] > o.DominantBytes {
			o.Dominant, o.DominantBytes = c, byCat[c]
		}
	}
	req := FormatBytes(o.RequestedBytes)
	outsideBytes := max(total-o.ReservedBytes-o.DeviceFreeBytes, 0)
	o.OutsidePyTorchBytes, o.OutsidePyTorchLowerBound = outsideBytes, src == "estimate"
	switch {
	case o.DeviceFreeBytes < o.RequestedBytes && (o.ReservedBytes+o.DeviceFreeBytes)*2 < total:
		o.Verdict = VerdictOutsidePyTorch
		if src == "option" {
			o.Explanation = fmt.Sprintf("the device had only %s free for a %s request although PyTorch reserved just %s of the %s device: %s is held outside PyTorch's allocator (device size − reserved − free)",
				FormatBytes(o.DeviceFreeBytes), req, FormatBytes(o.ReservedBytes), FormatBytes(total), FormatBytes(outsideBytes))
		} else {
			// The file does not record the device size: say only what the data proves.
			seen := o.ReservedBytes + o.DeviceFreeBytes
			o.Explanation = fmt.Sprintf("the device had only %s free for a %s request although PyTorch reserved just %s: together %s, under half of even the smallest GPU that holds them (%s), so the rest of the device is held outside PyTorch's allocator: device size − %s, at least %s; the file does not record the device size, so the exact amount is unknown (pass it: CLI --device-memory, MCP device_memory_bytes)",
				FormatBytes(o.DeviceFreeBytes), req, FormatBytes(o.ReservedBytes), FormatBytes(seen), FormatBytes(total), FormatBytes(seen), FormatBytes(outsideBytes))
		}
	case o.InactiveBytes >= o.RequestedBytes && o.LargestFreeBlockBytes < o.RequestedBytes:
		o.Verdict = VerdictFragmentation
		switch {
		case o.LargestFreeBlockUnknown:
			o.Explanation = fmt.Sprintf("%s was cached free, more than the %s request, yet it failed: the free memory lies in holes between live blocks of the expandable segments (the replay cannot rebuild the mapped ranges, so the largest hole is unknown)",
				FormatBytes(o.InactiveBytes), req)
		case o.Expandable:
			o.Explanation = fmt.Sprintf("%s was cached free, more than the %s request, but in holes between live blocks: the largest free block of its pool and stream was %s, and with expandable segments only the free end of the mapped range (%s) can grow, by mapping at most the device's free %s",
				FormatBytes(o.InactiveBytes), req, FormatBytes(o.LargestFreeBlockBytes), FormatBytes(o.ExpandableTailFreeBytes), FormatBytes(o.DeviceFreeBytes))
		default:
			o.Explanation = fmt.Sprintf("%s was cached free, more than the %s request, but the largest free block of its pool and stream was %s: the free memory is split between live blocks and segments never merge",
				FormatBytes(o.InactiveBytes), req, FormatBytes(o.LargestFreeBlockBytes))
		}
	default:
		o.Verdict = VerdictCapacity
		o.Explanation = fmt.Sprintf("live tensors hold %s of %s reserved and only %s was free on the device: the %s request does not fit",
			FormatBytes(o.AllocatedBytes), FormatBytes(o.ReservedBytes), FormatBytes(o.DeviceFreeBytes), req)
		if o.Dominant != "" {
			o.Explanation += fmt.Sprintf("; the largest role is %s (%s, %.0f%% of live memory)", strings.ReplaceAll(o.Dominant, "_", " "), FormatBytes(o.DominantBytes), pct(o.DominantBytes, o.AllocatedBytes))
		}
	}
	if src == "estimate" && o.Verdict != VerdictOutsidePyTorch {
		o.Explanation += fmt.Sprintf(" (the file does not record the device size; assumed %s, the smallest common GPU size holding reserved + free: pass the real size if it differs)", FormatBytes(total))
	}
	if o.Verdict != VerdictOutsidePyTorch && outsideBytes > 0 {
		if src == "option" {
			o.Explanation += fmt.Sprintf("; %s of the device is held outside PyTorch's allocator (device size − reserved − free: CUDA context, other processes or libraries)", FormatBytes(outsideBytes))
		} else if outsideBytes*10 >= total {
			o.Explanation += fmt.Sprintf("; at least %s of the device is held outside PyTorch's allocator (assumed size − reserved − free)", FormatBytes(outsideBytes))
		}
	}
	o.Explanation += ignored
	o.RoleBytes = byCat
	if pass := byCat[CategoryActivation] + byCat[CategoryTemporary] + byCat[CategoryBackwardTemporary]; o.Unwound {
		o.PassUnwound = o.UnwoundBytes*2 >= pass
	}
	o.adv = oomAdviceIn(o, byCat, fs, snap)
	o.advise()
}

// maxSplitSuggestion is the max_split_size the fragmentation fix suggests.
const maxSplitSuggestion = 128 * mib

// materialShare: a role is worth a fix when it holds at least this share of live memory.
const materialShare = 10

func material(b, live int64) bool { return b > 0 && live > 0 && b*100 >= live*materialShare }

// oomAdviceIn is what the advice table (advice.go) reads of an OOM: its verdict, the live
// memory by role, attention code's share and the segment sizes. max_split_size_mb only keeps
// blocks at least that large whole, and expandable pools ignore it (should_split).
func oomAdviceIn(o *OOMEvent, byCat map[string]int64, fs freeState, snap *snapshot.Snapshot) *adviceIn {
	live := o.AllocatedBytes
	for _, b := range byCat {
		live = max(live, b)
	}
	return &adviceIn{oom: o, byCat: byCat, live: live, attnBytes: fs.attnBytes, attnSite: fs.attnSite,
		largestSeg: fs.largestSeg, maxSplit: snap.Settings.MaxSplitSize}
}

// advise sets the OOM's advice from the table: again after the what-if replay is attached,
// since rules read it.
func (o *OOMEvent) advise() {
	if o.adv == nil {
		return
	}
	o.Advice = advise("oom", o.adv)
	o.Fixes = adviceTexts(o.Advice)
}

// Text renders every OOM with its verdict and fixes.
func (r *OOMResult) Text() string {
	var b strings.Builder
	if len(r.OOMs) == 0 {
		b.WriteString("no OOM events\n")
	}
	for _, o := range r.OOMs {
		fmt.Fprintf(&b, "OOM on device %d (event %d): %s requested at %s", o.Device, o.EventIndex, FormatBytes(o.RequestedBytes), o.Site)
		if o.Function != "" && o.File != "" {
			fmt.Fprintf(&b, " in %s", o.Function)
		}
		fmt.Fprintf(&b, ", device free %s\n", FormatBytes(o.DeviceFreeBytes))
		for _, f := range o.Stack {
			fmt.Fprintf(&b, "    %s\n", f)
		}
		fmt.Fprintf(&b, "  just before (%s): allocated %s, reserved %s, cached free %s, ",
			o.StateSource, FormatBytes(o.AllocatedBytes), FormatBytes(o.ReservedBytes), FormatBytes(o.InactiveBytes))
		switch {
		case o.LargestFreeBlockUnknown:
			b.WriteString("largest free block unknown (expandable segments: the replay cannot rebuild the mapped ranges)\n")
		case o.Expandable:
			fmt.Fprintf(&b, "largest free block for this request %s (any pool %s); expandable segments: the free end of the mapped range (%s) could grow by up to the device's free %s\n",
				FormatBytes(o.LargestFreeBlockBytes), FormatBytes(o.LargestFreeAnyBytes), FormatBytes(o.ExpandableTailFreeBytes), FormatBytes(o.DeviceFreeBytes))
		default:
			fmt.Fprintf(&b, "largest free block for this request %s (any pool %s)\n", FormatBytes(o.LargestFreeBlockBytes), FormatBytes(o.LargestFreeAnyBytes))
		}
		switch {
		case o.Unwound && o.PassUnwound:
			fmt.Fprintf(&b, "  the file was written after the OOM: its final state is after the exception unwound the pass (%s, %s freed after the OOM event); the live sites below come from replaying the trace up to the OOM event\n",
				count(o.UnwoundBlocks, "block"), FormatBytes(o.UnwoundBytes))
		case o.Unwound:
			fmt.Fprintf(&b, "  the file was written after the OOM, but the pass's tensors are still live at its end (%s allocated; only %s freed after the OOM event): a kept traceback or exception pins them; the live sites below come from replaying the trace up to the OOM event\n",
				FormatBytes(o.StillLiveBytes), FormatBytes(o.UnwoundBytes))
		}
		for _, s := range o.LiveSites {
			fmt.Fprintf(&b, "    %9s %5d %s  %s [%s]\n", FormatBytes(s.Bytes), s.Blocks, blocksCol(s.Blocks), s.Site, s.Category)
		}
		fmt.Fprintf(&b, "  verdict: %s: %s\n", o.Verdict, o.Explanation)
		for _, f := range o.Fixes {
			fmt.Fprintf(&b, "  fix: %s\n", f)
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	return b.String()
}
