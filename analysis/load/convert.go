package load

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/memsnap/memsnap/analysis/pickle"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// Bounds on what a snapshot can hold: larger values are corruption, and refusing them keeps
// every total the analyses compute far from int64 overflow (a sum over 2,048 files of the
// largest totals still fits).
const (
	maxDevice = 1 << 16
	// maxBytes bounds one segment, block or allocation: 256 TiB, a thousand times the largest
	// GPU's memory.
	maxBytes = 1 << 48
	// maxTotal bounds the segments of one file together: 4 PiB.
	maxTotal = 1 << 52
	// maxTraceBytes bounds the sizes of one file's trace events together (1 EiB): a
	// ten-million-event trace of 80 GiB allocations stays under it, and any replayed total
	// (live bytes, peaks) is at most this.
	maxTraceBytes = 1 << 60
	// maxTime bounds time_us (epoch microseconds are about 2^51 today), so that any
	// difference of two times fits.
	maxTime = 1 << 62
	// valueSlack is how many more values than bytes a decoded pickle may hand the model.
	valueSlack = 1 << 16
)

// converter turns a plain value tree (from the fast pickle path, from JSON, or from a generic
// pickle decoder in tests) into the typed model. Frames lists may already be interned
// (snapshot.StackID leaves) and traces already typed (pickle.EventList); both forms are read.
type converter struct {
	in       *snapshot.Interner
	extras   []snapshot.EventExtra
	extraID  map[snapshot.EventExtra]uint32
	maxEvent int
	// budget, when positive, is how many segments, blocks, events, annotations, frames and
	// settings values the model may still take: a decoded pickle is a DAG whose shared parts
	// (one segment or block list named a thousand times) would otherwise be expanded at each
	// reference. spent counts what was taken.
	budget, spent int64
	bigText       map[*big.Int]string
	// indexes are the trace indexes the decoder built (pickle.EventList.Index).
	indexes []*snapshot.TraceIndex
	// indexByFirst finds indexes by their trace's first event (indexOf).
	indexByFirst map[*snapshot.Event]*snapshot.TraceIndex
}

func newConverter(in *snapshot.Interner, extras []snapshot.EventExtra, maxEvents int) *converter {
	if in == nil {
		in = snapshot.NewInterner()
	}
	if len(extras) == 0 {
		extras = []snapshot.EventExtra{{}}
	}
	c := &converter{in: in, extras: extras, extraID: map[snapshot.EventExtra]uint32{}, maxEvent: maxEvents}
	for i, e := range extras {
		c.extraID[e] = uint32(i)
	}
	return c
}

// FromTree builds a snapshot from a plain value tree: map[string]any, []any, string, int64,
// uint64, *big.Int, json.Number, float64, bool and nil. Tests use it to build the oracle model
// from an independent generic decoder.
func FromTree(root any, format snapshot.Format) (*snapshot.Snapshot, error) {
	return newConverter(nil, nil, 0).snapshot(root, format)
}

// errExpands is the failure for a tree whose shared references repeat more values than the
// pickle's bytes could hold.
type errExpands struct{ limit int64 }

func (e errExpands) Error() string {
	return fmt.Sprintf("shared references repeat the same segments, blocks or events beyond the file's size (more than %d values): no snapshot does this", e.limit)
}

// spend takes n values from the budget.
func (c *converter) spend(n int) error {
	c.spent += int64(n)
	if c.budget > 0 && c.spent > c.budget {
		return errExpands{c.budget}
	}
	return nil
}

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "None"
	case map[string]any:
		return "dict"
	case []any:
		return "list"
	case string:
		return "str"
	case bool:
		return "bool"
	case int64, uint64, *big.Int, json.Number, int:
		return "int"
	case float64:
		return "float"
	case snapshot.StackID:
		return "frames list"
	case pickle.EventList:
		return "trace list"
	case *pickle.Block:
		return "block dict"
	}
	return fmt.Sprintf("%T", v)
}

func (c *converter) snapshot(root any, format snapshot.Format) (*snapshot.Snapshot, error) {
	s := &snapshot.Snapshot{Format: format}
	var top map[string]any
	switch r := root.(type) {
	case []any:
		s.Format.TopLevelList = true
		top = map[string]any{"segments": r}
	case map[string]any:
		top = r
	default:
		return nil, fmt.Errorf("not a memory snapshot: the file holds a %s, not a dict with 'segments'", typeName(root))
	}
	segs, ok := top["segments"]
	if !ok {
		keys := make([]string, 0, len(top))
		for k := range top {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if len(keys) > 6 {
			keys = append(keys[:6], "…")
		}
		return nil, fmt.Errorf("not a memory snapshot: no 'segments' key (keys: %s)", strings.Join(keys, ", "))
	}
	segList, ok := segs.([]any)
	if !ok {
		return nil, fmt.Errorf("segments is a %s, not a list", typeName(segs))
	}
	if err := c.spend(len(segList)); err != nil {
		return nil, fmt.Errorf("segments: %w", err)
	}
	s.Segments = make([]snapshot.Segment, 0, len(segList))
	var total int64
	for i, sv := range segList {
		seg, err := c.segment(sv, &s.Format)
		if err != nil {
			return nil, fmt.Errorf("segments[%d]: %w", i, err)
		}
		if total += seg.TotalSize; total > maxTotal {
			return nil, fmt.Errorf("segments[%d]: the segments add up to more than %s, more device memory than any machine has", i, sizeText(maxTotal))
		}
		s.Segments = append(s.Segments, seg)
	}
	if dt, ok := top["device_traces"]; ok && dt != nil {
		lists, ok := dt.([]any)
		if !ok {
			return nil, fmt.Errorf("device_traces is a %s, not a list", typeName(dt))
		}
		s.DeviceTraces = make([][]snapshot.Event, len(lists))
		s.DroppedEvents = make([]int64, len(lists))
		var traceBytes int64
		for d, lv := range lists {
			evs, dropped, err := c.trace(lv)
			if err == nil {
				err = c.spend(len(evs))
			}
			if err == nil {
				err = c.checkTrace(evs, &traceBytes)
			}
			if err != nil {
				return nil, fmt.Errorf("device_traces[%d]: %w", d, err)
			}
			s.DeviceTraces[d], s.DroppedEvents[d] = evs, dropped
		}
	}
	if as, ok := top["allocator_settings"]; ok && as != nil {
		m, ok := as.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("allocator_settings is a %s, not a dict", typeName(as))
		}
		var err error
		if s.Settings, err = c.settings(m); err != nil {
			return nil, fmt.Errorf("allocator_settings: %w", err)
		}
	}
	if ea, ok := top["external_annotations"]; ok && ea != nil {
		list, ok := ea.([]any)
		if !ok {
			return nil, fmt.Errorf("external_annotations is a %s, not a list", typeName(ea))
		}
		if err := c.spend(len(list)); err != nil {
			return nil, fmt.Errorf("external_annotations: %w", err)
		}
		for i, av := range list {
			a, err := annotation(av)
			if err != nil {
				return nil, fmt.Errorf("external_annotations[%d]: %w", i, err)
			}
			s.Annotations = append(s.Annotations, a)
		}
	}
	for _, m := range []map[string]any{top, s.Settings.Raw} {
		if v, ok := m["trace_alloc_max_entries"]; ok {
			if n, err := toInt(v); err == nil {
				s.Caps.MaxEntries = n
			}
		}
		if v, ok := m["trace_alloc_overflowed"].(bool); ok && v {
			s.Caps.RingBufferFull = true
		}
	}
	s.Frames, s.Stacks, s.EventExtras = c.in.Frames, c.in.Stacks, c.extras
	byDev := map[int]*snapshot.TraceIndex{}
	for d, evs := range s.DeviceTraces {
		if x := c.indexOf(evs); x != nil {
			byDev[d] = x
		}
	}
	s.KeepTraceIndexes(byDev)
	computeCaps(s)
	return s, nil
}

func asMap(v any, what string) (map[string]any, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s is a %s, not a dict", what, typeName(v))
	}
	return m, nil
}

func (c *converter) segment(v any, format *snapshot.Format) (snapshot.Segment, error) {
	var seg snapshot.Segment
	m, err := asMap(v, "segment")
	if err != nil {
		return seg, err
	}
	var errs fieldErrs
	seg.Device = int(errs.int(m, "device", true))
	seg.Address = errs.uint(m, "address", true)
	seg.TotalSize = errs.int(m, "total_size", true)
	seg.Stream = errs.uint(m, "stream", false)
	if st, ok := m["segment_type"].(string); ok {
		seg.SegmentType = st
	}
	if pid, ok := m["segment_pool_id"]; ok && pid != nil {
		l, ok := pid.([]any)
		if !ok || len(l) != 2 {
			return seg, fmt.Errorf("segment_pool_id is not a pair")
		}
		a, err1 := toInt(l[0])
		b, err2 := toInt(l[1])
		if err1 != nil || err2 != nil {
			return seg, fmt.Errorf("segment_pool_id holds non-integers")
		}
		seg.PoolID = snapshot.PoolID{a, b}
	}
	if b, ok := m["is_expandable"].(bool); ok {
		seg.IsExpandable = b
	}
	if seg.Stack, err = c.stack(m["frames"], m); err != nil {
		return seg, err
	}
	if errs.err != nil {
		return seg, errs.err
	}
	if seg.Device < 0 || seg.Device > maxDevice {
		return seg, fmt.Errorf("device %d is not a CUDA device index", seg.Device)
	}
	if seg.TotalSize < 0 || seg.TotalSize > maxBytes {
		return seg, fmt.Errorf("total_size %d is not a possible segment size (0 to %s)", seg.TotalSize, sizeText(maxBytes))
	}
	if seg.Address > math.MaxUint64-uint64(seg.TotalSize) {
		return seg, fmt.Errorf("a segment of %d bytes at address %#x passes the end of the address space", seg.TotalSize, seg.Address)
	}
	blocks, _ := m["blocks"].([]any)
	if bv, ok := m["blocks"]; ok && bv != nil && blocks == nil {
		return seg, fmt.Errorf("blocks is a %s, not a list", typeName(bv))
	}
	if err := c.spend(len(blocks)); err != nil {
		return seg, fmt.Errorf("blocks: %w", err)
	}
	seg.Blocks = make([]snapshot.Block, 0, len(blocks))
	next := seg.Address
	var sum, alloc, active, requested int64
	for i, bv := range blocks {
		b, err := c.block(bv, next, format)
		if err != nil {
			return seg, fmt.Errorf("blocks[%d]: %w", i, err)
		}
		if b.Size < 0 || b.Size > maxBytes || b.RequestedSize < 0 || b.RequestedSize > maxBytes {
			return seg, fmt.Errorf("blocks[%d]: size %d / requested_size %d are not possible sizes (0 to %s)", i, b.Size, b.RequestedSize, sizeText(maxBytes))
		}
		if b.Address > math.MaxUint64-uint64(b.Size) {
			return seg, fmt.Errorf("blocks[%d]: a block of %d bytes at address %#x passes the end of the address space", i, b.Size, b.Address)
		}
		if sum += b.Size; sum > seg.TotalSize {
			return seg, fmt.Errorf("blocks[%d]: the blocks add up to more than the segment's total_size %d", i, seg.TotalSize)
		}
		next = b.Address + uint64(b.Size)
		switch b.State {
		case snapshot.StateActiveAllocated:
			alloc += b.Size
			active += b.Size
			requested += b.RequestedSize
		case snapshot.StateActivePendingFree:
			active += b.Size
		}
		seg.Blocks = append(seg.Blocks, b)
	}
	// Older files may lack the per-segment sums; they are defined by the blocks (§3).
	seg.AllocatedSize = orDefault(m, "allocated_size", alloc)
	seg.ActiveSize = orDefault(m, "active_size", active)
	seg.RequestedSize = orDefault(m, "requested_size", requested)
	// Totals over segments stay within maxTotal only if each part is within its segment.
	for _, f := range []struct {
		name string
		n    int64
	}{{"allocated_size", seg.AllocatedSize}, {"active_size", seg.ActiveSize}, {"requested_size", seg.RequestedSize}} {
		if f.n < 0 || f.n > seg.TotalSize {
			return seg, fmt.Errorf("%s %d is not within the segment's total_size %d", f.name, f.n, seg.TotalSize)
		}
	}
	return seg, nil
}

// block reads one block: already typed by the fast pickle path, or a plain dict. A block
// without an address (PyTorch 2.0) sits right after the previous one (next).
func (c *converter) block(bv any, next uint64, format *snapshot.Format) (snapshot.Block, error) {
	if pb, ok := bv.(*pickle.Block); ok {
		b := pb.Block
		if !pb.HasAddress {
			b.Address = next
		}
		if pb.Legacy {
			format.LegacyHistory = true
		}
		return b, nil
	}
	b := snapshot.Block{Stack: snapshot.NoStack}
	bm, err := asMap(bv, "block")
	if err != nil {
		return b, err
	}
	var be fieldErrs
	b.Size = be.int(bm, "size", true)
	b.RequestedSize = be.int(bm, "requested_size", false)
	if _, ok := bm["address"]; ok {
		b.Address = be.uint(bm, "address", true)
	} else {
		b.Address = next
	}
	if be.err != nil {
		return b, be.err
	}
	stateStr, ok := bm["state"].(string)
	if !ok {
		return b, fmt.Errorf("state is missing or not a string")
	}
	b.State = snapshot.ParseBlockState(stateStr)
	if b.State == snapshot.StateUnknown {
		return b, fmt.Errorf("unknown state %q", stateStr)
	}
	if fv, ok := bm["frames"]; ok {
		b.Stack, err = c.stack(fv, bm)
		return b, err
	}
	if hv, ok := bm["history"]; ok {
		format.LegacyHistory = true
		hist, _ := hv.([]any)
		if len(hist) > 0 {
			hm, err := asMap(hist[0], "history entry")
			if err != nil {
				return b, err
			}
			b.Stack, err = c.stack(hm["frames"], hm)
			return b, err
		}
	}
	return b, nil
}

func orDefault(m map[string]any, key string, def int64) int64 {
	if v, ok := m[key]; ok {
		if n, err := toInt(v); err == nil {
			return n
		}
	}
	return def
}

// stack interns a frames value: an already interned stack, a list of frame dicts, or absent.
func (c *converter) stack(v any, owner map[string]any) (snapshot.StackID, error) {
	if v == nil {
		if _, present := owner["frames"]; present {
			return snapshot.EmptyStack, nil
		}
		return snapshot.NoStack, nil
	}
	switch f := v.(type) {
	case snapshot.StackID:
		return f, nil
	case []any:
		if err := c.spend(len(f)); err != nil {
			return 0, fmt.Errorf("frames: %w", err)
		}
		ids := make([]snapshot.FrameID, 0, len(f))
		for i, fv := range f {
			fm, ok := fv.(map[string]any)
			if !ok {
				return 0, fmt.Errorf("frames[%d] is a %s, not a frame dict", i, typeName(fv))
			}
			fr, err := frame(fm)
			if err != nil {
				return 0, fmt.Errorf("frames[%d]: %w", i, err)
			}
			ids = append(ids, c.in.Frame(fr))
		}
		return c.in.Stack(ids), nil
	}
	return 0, fmt.Errorf("frames is a %s, not a list", typeName(v))
}

func frame(m map[string]any) (snapshot.Frame, error) {
	var f snapshot.Frame
	var ok1, ok2 bool
	f.Filename, ok1 = m["filename"].(string)
	f.Name, ok2 = m["name"].(string)
	if !ok1 || !ok2 {
		return f, fmt.Errorf("frame lacks a string filename or name")
	}
	lv, ok := m["line"]
	if !ok {
		return f, fmt.Errorf("frame lacks a line")
	}
	n, err := toInt(lv)
	if err != nil {
		if _, big := err.(errTooBig); !big {
			return f, fmt.Errorf("frame line: %w", err)
		}
		n = snapshot.LineUnknown
	}
	f.Line = n
	return f, nil
}

func (c *converter) trace(v any) ([]snapshot.Event, int64, error) {
	switch l := v.(type) {
	case pickle.EventList:
		if l.Index != nil {
			c.indexes = append(c.indexes, l.Index)
			if f := l.Index.First(); f != nil {
				if c.indexByFirst == nil {
					c.indexByFirst = map[*snapshot.Event]*snapshot.TraceIndex{}
				}
				c.indexByFirst[f] = l.Index
			}
		}
		return l.Events, l.Dropped, nil
	case []any:
		evs := make([]snapshot.Event, 0, len(l))
		for i, ev := range l {
			if e, ok := ev.(snapshot.Event); ok {
				evs = append(evs, e)
				continue
			}
			m, err := asMap(ev, "trace event")
			if err != nil {
				return nil, 0, fmt.Errorf("[%d]: %w", i, err)
			}
			e, err := c.event(m)
			if err != nil {
				return nil, 0, fmt.Errorf("[%d]: %w", i, err)
			}
			evs = append(evs, e)
		}
		var dropped int64
		if n := c.maxEvent; n > 0 && len(evs) > n {
			dropped = int64(len(evs) - n)
			evs = append([]snapshot.Event(nil), evs[len(evs)-n:]...)
		}
		return evs, dropped, nil
	case nil:
		return nil, 0, nil
	}
	return nil, 0, fmt.Errorf("is a %s, not a list of events", typeName(v))
}

// maxEventExtras bounds the event extras a conversion makes (a variable for tests).
var maxEventExtras = snapshot.MaxEventExtras

// event converts a trace event given as a dict: from JSON, or one the pickle decoder left as a dict.
func (c *converter) event(m map[string]any) (snapshot.Event, error) {
	ev := snapshot.Event{Stack: snapshot.NoStack}
	action, ok := m["action"].(string)
	if !ok {
		return ev, fmt.Errorf("event has no action string")
	}
	var extra snapshot.EventExtra
	ev.Action = snapshot.ParseAction(action)
	if ev.Action == snapshot.ActionOther {
		extra.ActionName = action
	}
	var errs fieldErrs
	ev.Addr = errs.uint(m, "addr", false)
	ev.Size = errs.int(m, "size", false)
	ev.Stream = errs.uint(m, "stream", false)
	ev.TimeUS = errs.int(m, "time_us", false)
	ev = ev.WithDeviceFree(errs.int(m, "device_free", false))
	if errs.err != nil {
		return ev, errs.err
	}
	if fv, ok := m["frames"]; ok && fv != nil {
		st, err := c.stack(fv, m)
		if err != nil {
			return ev, err
		}
		ev.Stack = st
	}
	extra.CompileContext, _ = m["compile_context"].(string)
	extra.UserMetadata, _ = m["user_metadata"].(string)
	extra.Category, _ = m["category"].(string)
	extra.InternalMetadata, _ = m["internal_metadata"].(string)
	if pid, ok := m["pool_id"].([]any); ok && len(pid) == 2 {
		a, err1 := toInt(pid[0])
		b, err2 := toInt(pid[1])
		if err1 == nil && err2 == nil {
			extra.PoolID = snapshot.PoolID{a, b}
		}
	}
	if ff, ok := m["forward_frames"].([]any); ok {
		var lines []string
		for _, l := range ff {
			if s, ok := l.(string); ok {
				lines = append(lines, s)
			}
		}
		extra.ForwardFrames = strings.Join(lines, "\n")
	}
	if extra != (snapshot.EventExtra{}) {
		id, ok := c.extraID[extra]
		if !ok {
			if len(c.extras) >= maxEventExtras {
				return ev, errors.New(snapshot.TooManyExtras(maxEventExtras))
			}
			id = uint32(len(c.extras))
			c.extras = append(c.extras, extra)
			c.extraID[extra] = id
		}
		ev.Extra = snapshot.MakeExtraID(id)
	}
	return ev, nil
}

func annotation(v any) (snapshot.Annotation, error) {
	var a snapshot.Annotation
	m, err := asMap(v, "annotation")
	if err != nil {
		return a, err
	}
	a.Name, _ = m["name"].(string)
	a.Stage, _ = m["stage"].(string)
	var errs fieldErrs
	a.Device = int(errs.int(m, "device", false))
	a.TimeUS = errs.int(m, "time_us", false)
	if errs.err == nil && (a.TimeUS < 0 || a.TimeUS > maxTime) {
		return a, fmt.Errorf("time_us %d is not a time", a.TimeUS)
	}
	return a, errs.err
}

// indexOf returns the decoder's index of exactly evs, or nil. The indexes are found by their
// trace's first event, so a file of many devices costs one lookup per device, not one per
// device and index.
func (c *converter) indexOf(evs []snapshot.Event) *snapshot.TraceIndex {
	if len(evs) == 0 {
		return nil
	}
	if x := c.indexByFirst[&evs[0]]; x != nil && x.Indexes(evs) {
		return x
	}
	return nil
}

// checkTrace is checkEvents from the tally of the trace's index, when the decoder built one
// (it tallies the values while it decodes); a trace the tally does not clear is checked event
// by event, for the error's place and words.
func (c *converter) checkTrace(evs []snapshot.Event, total *int64) error {
	if x := c.indexOf(evs); x != nil {
		t := &x.Tally
		if t.MinSize >= 0 && t.MaxSize <= maxBytes && t.MaxOOMSize <= maxTraceBytes &&
			t.MinDeviceFree >= 0 && t.MaxDeviceFree <= maxBytes && t.MinTimeUS >= 0 && t.MaxTimeUS <= maxTime &&
			!t.SizeSumOverflow && t.SizeSum <= maxTraceBytes-*total {
			*total += t.SizeSum
			return nil
		}
	}
	return checkEvents(evs, total)
}

// checkEvents refuses event values no allocator produces, so that no sum or difference an
// analysis computes over a trace can overflow: sizes within maxBytes, times within maxTime,
// and the file's event sizes together within maxTraceBytes (total carries that sum across
// the device traces). An OOM's request failed: it may be larger (up to maxTraceBytes), and
// is not part of the sum, since no memory was handed out.
func checkEvents(evs []snapshot.Event, total *int64) error {
	for i := range evs {
		e := &evs[i]
		limit := int64(maxBytes)
		if e.Action == snapshot.ActionOOM {
			limit = maxTraceBytes
		}
		switch {
		case e.Size < 0 || e.Size > limit:
			return fmt.Errorf("[%d]: %s size %d is not a possible size (0 to %s)", i, e.Action, e.Size, sizeText(limit))
		case e.DeviceFree() < 0 || e.DeviceFree() > maxBytes:
			return fmt.Errorf("[%d]: device_free %d is not a possible size (0 to %s)", i, e.DeviceFree(), sizeText(maxBytes))
		case e.TimeUS < 0 || e.TimeUS > maxTime:
			return fmt.Errorf("[%d]: time_us %d is not a time", i, e.TimeUS)
		case e.Action == snapshot.ActionOOM:
			continue
		}
		if *total += e.Size; *total > maxTraceBytes {
			return fmt.Errorf("[%d]: the trace's event sizes add up to more than %s", i, sizeText(maxTraceBytes))
		}
	}
	return nil
}

// sizeText writes a power-of-two byte count in binary units.
func sizeText(n int64) string {
	units := []string{"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	u := 0
	for u+1 < len(units) && n >= 1024 && n%1024 == 0 {
		n /= 1024
		u++
	}
	return fmt.Sprintf("%d %s", n, units[u])
}

// settings reads allocator_settings. Raw keeps every key as JSON-safe plain values: NaN and
// infinities (which JSON cannot hold) become the strings "NaN", "Infinity" and "-Infinity"
// (an out-of-range JSON number keeps its text), and GCThreshold is then 0.
func (c *converter) settings(m map[string]any) (snapshot.AllocatorSettings, error) {
	s := snapshot.AllocatorSettings{Present: true, MaxSplitSize: -1, Raw: map[string]any{}}
	for k, v := range m {
		p, err := c.plain(v)
		if err != nil {
			return s, fmt.Errorf("%s: %w", k, err)
		}
		s.Raw[k] = p
	}
	s.AllocConf, _ = m["PYTORCH_CUDA_ALLOC_CONF"].(string)
	if n, err := toInt(m["max_split_size"]); err == nil {
		s.MaxSplitSize = n
	}
	if f, ok := m["garbage_collection_threshold"].(float64); ok {
		s.GCThreshold = f
	} else if jn, ok := m["garbage_collection_threshold"].(json.Number); ok {
		s.GCThreshold, _ = jn.Float64()
	}
	if math.IsNaN(s.GCThreshold) || math.IsInf(s.GCThreshold, 0) {
		s.GCThreshold = 0
	}
	s.ExpandableSegments, _ = m["expandable_segments"].(bool)
	return s, nil
}

// plain converts a settings value to JSON-safe Go values, spending a budget value for each
// so that a shared container repeated through the memo cannot multiply the copy.
func (c *converter) plain(v any) (any, error) {
	if err := c.spend(1); err != nil {
		return nil, err
	}
	switch x := v.(type) {
	case *big.Int:
		// Decoded big integers are shared by all their references: format each once.
		if t, ok := c.bigText[x]; ok {
			return t, nil
		}
		if c.bigText == nil {
			c.bigText = map[*big.Int]string{}
		}
		t := x.String()
		c.bigText[x] = t
		return t, nil
	case float64:
		return jsonFloat(x), nil
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return n, nil
		}
		if f, err := x.Float64(); err == nil {
			return f, nil
		}
		return string(x), nil // out of float64's range: keep the text
	case []any:
		out := make([]any, len(x))
		for i := range x {
			p, err := c.plain(x[i])
			if err != nil {
				return nil, err
			}
			out[i] = p
		}
		return out, nil
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			p, err := c.plain(e)
			if err != nil {
				return nil, err
			}
			out[k] = p
		}
		return out, nil
	}
	return v, nil
}

// jsonFloat returns f, or for values JSON cannot hold the strings Python's json writes.
func jsonFloat(f float64) any {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	return f
}

// errTooBig is an integer that does not fit 64 bits. It keeps the value and formats it only
// when the message is wanted: a 64 KiB integer named a thousand times is not printed each time.
type errTooBig struct{ v any }

func (e errTooBig) Error() string {
	var text string
	switch x := e.v.(type) {
	case *big.Int:
		if x.BitLen() > 256 {
			text = fmt.Sprintf("an integer of %d bits", x.BitLen())
		} else {
			text = x.String()
		}
	case uint64:
		text = strconv.FormatUint(x, 10)
	case json.Number:
		text = string(x)
		if len(text) > 80 {
			text = fmt.Sprintf("an integer of %d digits", len(text))
		}
	}
	return text + " does not fit 64 bits"
}

// toInt reads any integer form as int64.
func toInt(v any) (int64, error) {
	switch x := v.(type) {
	case int64:
		return x, nil
	case int:
		return int64(x), nil
	case uint64:
		if x > math.MaxInt64 {
			return 0, errTooBig{x}
		}
		return int64(x), nil
	case bool:
		if x {
			return 1, nil
		}
		return 0, nil
	case *big.Int:
		if x.IsInt64() {
			return x.Int64(), nil
		}
		return 0, errTooBig{x}
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return n, nil
		}
		// An integer's digits (no '.', 'e'): too big for int64, without parsing a long
		// number into a big.Int (quadratic in its length).
		if t := strings.TrimPrefix(string(x), "-"); t != "" && strings.Trim(t, "0123456789") == "" {
			return 0, errTooBig{x}
		}
		// Say what was found (1.5e3, 1e999), not its type: JSON has one number type.
		return 0, fmt.Errorf("is %s, not an integer", clipNumber(string(x)))
	}
	return 0, fmt.Errorf("is a %s, not an integer", typeName(v))
}

// clipNumber cuts a number's text for an error message.
func clipNumber(s string) string {
	if len(s) <= 40 {
		return s
	}
	return s[:37] + "..."
}

// toUint reads any non-negative 64-bit integer form (addresses, streams).
func toUint(v any) (uint64, error) {
	switch x := v.(type) {
	case uint64:
		return x, nil
	case json.Number:
		if u, err := strconv.ParseUint(string(x), 10, 64); err == nil {
			return u, nil
		}
	case *big.Int:
		if x.IsUint64() {
			return x.Uint64(), nil
		}
	}
	n, err := toInt(v)
	return uint64(n), err
}

// fieldErrs collects the first field error so field reads stay one line each.
type fieldErrs struct{ err error }

func (f *fieldErrs) int(m map[string]any, key string, required bool) int64 {
	v, ok := m[key]
	if !ok || v == nil {
		if required && !ok && f.err == nil {
			f.err = fmt.Errorf("missing %q", key)
		}
		return 0
	}
	n, err := toInt(v)
	if err != nil && f.err == nil {
		f.err = fmt.Errorf("%s %w", key, err)
	}
	return n
}

func (f *fieldErrs) uint(m map[string]any, key string, required bool) uint64 {
	v, ok := m[key]
	if !ok || v == nil {
		if required && !ok && f.err == nil {
			f.err = fmt.Errorf("missing %q", key)
		}
		return 0
	}
	n, err := toUint(v)
	if err != nil && f.err == nil {
		f.err = fmt.Errorf("%s %w", key, err)
	}
	return n
}

// computeCaps fills what the file can answer from what it holds.
func computeCaps(s *snapshot.Snapshot) {
	c := &s.Caps
	cppFrame := make([]bool, len(s.Frames))
	for i, f := range s.Frames {
		cppFrame[i] = snapshot.IsCppFrame(f)
	}
	cpp, py := make([]bool, len(s.Stacks)), make([]bool, len(s.Stacks))
	for i, st := range s.Stacks {
		for _, f := range st {
			if cppFrame[f] {
				cpp[i] = true
			} else {
				py[i] = true
			}
		}
	}
	nonEmpty := func(id snapshot.StackID) bool { return id > 0 && int(id) < len(s.Stacks) }
	anyCpp, anyPy := false, false
	note := func(id snapshot.StackID) {
		if nonEmpty(id) && !(anyCpp && anyPy) {
			anyCpp = anyCpp || cpp[id]
			anyPy = anyPy || py[id]
		}
	}
	for si := range s.Segments {
		for bi := range s.Segments[si].Blocks {
			if b := &s.Segments[si].Blocks[bi]; b.State != snapshot.StateInactive {
				if nonEmpty(b.Stack) {
					c.FramesOnBlocks = true
				}
				note(b.Stack)
			}
		}
	}
	// Blocks allocated in the trace and not yet completely freed: a free of anything else, or
	// a live block at the end that is not among them, means the trace misses its beginning.
	// The trace's tally (see snapshot.TraceTally) has followed them, and the stacks events name.
	wrapped := false
	for dev, evs := range s.DeviceTraces {
		x := s.TraceIndex(dev)
		t := &x.Tally
		if snapshot.IsHistory(evs) {
			c.HasTrace = true
		}
		if ringBufferWrapped(evs, c.MaxEntries) {
			wrapped = true
		}
		c.TraceIncomplete = c.TraceIncomplete || t.FreeBeforeAlloc
		if n, complete := t.StacksNamed(); complete {
			for id := 1; id < min(n, len(s.Stacks)); id++ {
				named, alloc, free := t.StackUse(snapshot.StackID(id))
				if named {
					note(snapshot.StackID(id))
				}
				c.FramesOnAllocs = c.FramesOnAllocs || alloc
				c.FramesOnFrees = c.FramesOnFrees || free
			}
		} else { // stack ids beyond what the tally records: count them here
			for _, e := range evs {
				note(e.Stack)
				switch e.Action {
				case snapshot.ActionAlloc:
					c.FramesOnAllocs = c.FramesOnAllocs || nonEmpty(e.Stack)
				case snapshot.ActionFreeRequested, snapshot.ActionFreeCompleted:
					c.FramesOnFrees = c.FramesOnFrees || nonEmpty(e.Stack)
				}
			}
		}
		if !c.HasTrace || c.TraceIncomplete {
			continue // (once incomplete, nothing below changes it)
		}
	blocks:
		for _, si := range s.SegmentsOn(dev) {
			seg := &s.Segments[si]
			if seg.Device != dev {
				continue
			}
			for bi := range seg.Blocks {
				b := &seg.Blocks[bi]
				if b.State == snapshot.StateInactive {
					continue
				}
				if id, ok := x.Block(b.Address); !ok || !t.AllocatedInTrace(id) {
					c.TraceIncomplete = true
					break blocks
				}
			}
		}
	}
	if slices.ContainsFunc(s.DroppedEvents, func(n int64) bool { return n > 0 }) || c.RingBufferFull {
		c.TraceIncomplete = true
	}
	switch {
	case !c.HasTrace:
	case c.RingBufferFull || wrapped:
		c.TraceStart = "ring_buffer"
	case c.TraceIncomplete:
		c.TraceStart = "late_start"
	default:
		c.TraceStart = "complete"
	}
	c.CppFrames = anyCpp
	c.PythonOnly = anyPy && !anyCpp
}

// ringBufferWrapped tells a truncated ring buffer from a late start: truncation leaves exactly
// max_entries events (a round number such as 100000 when the file does not record
// max_entries), and its first events include frees of blocks whose alloc fell off the front.
func ringBufferWrapped(evs []snapshot.Event, maxEntries int64) bool {
	n := int64(len(evs))
	if maxEntries > 1 && n >= maxEntries {
		return true
	}
	if maxEntries > 1 || n < 1000 || n%1000 != 0 {
		return false
	}
	seen := map[uint64]bool{}
	for _, e := range evs[:min(len(evs), 200)] {
		switch e.Action {
		case snapshot.ActionAlloc:
			seen[e.Addr] = true
		case snapshot.ActionFreeRequested, snapshot.ActionFreeCompleted:
			if !seen[e.Addr] {
				return true
			}
		}
	}
	return false
}
