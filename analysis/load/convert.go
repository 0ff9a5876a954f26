package load

import (
	"encoding/json"
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
// every total far from int64 overflow.
const (
	maxDevice = 1 << 16
	maxBytes  = 1 << 50 // 1 PiB, more than any device
)

// converter turns a plain value tree (from the fast pickle path, from JSON, or from a generic
// pickle decoder in tests) into the typed model. Frames lists may already be interned
// (snapshot.StackID leaves) and traces already typed (pickle.EventList); both forms are read.
type converter struct {
	in       *snapshot.Interner
	extras   []snapshot.EventExtra
	extraID  map[snapshot.EventExtra]uint32
	maxEvent int
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
	s.Segments = make([]snapshot.Segment, 0, len(segList))
	for i, sv := range segList {
		seg, err := c.segment(sv, &s.Format)
		if err != nil {
			return nil, fmt.Errorf("segments[%d]: %w", i, err)
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
		for d, lv := range lists {
			evs, dropped, err := c.trace(lv)
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
		s.Settings = settings(m)
	}
	if ea, ok := top["external_annotations"]; ok && ea != nil {
		list, ok := ea.([]any)
		if !ok {
			return nil, fmt.Errorf("external_annotations is a %s, not a list", typeName(ea))
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
		return seg, fmt.Errorf("total_size %d is not a possible segment size", seg.TotalSize)
	}
	blocks, _ := m["blocks"].([]any)
	if bv, ok := m["blocks"]; ok && bv != nil && blocks == nil {
		return seg, fmt.Errorf("blocks is a %s, not a list", typeName(bv))
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
			return seg, fmt.Errorf("blocks[%d]: size %d / requested_size %d are not possible sizes", i, b.Size, b.RequestedSize)
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
	return seg, nil
}

// block reads one block: already typed by the fast pickle path, or a plain dict. A block
// without an address (PyTorch 2.0) sits right after the previous one (next).
func (c *converter) block(bv any, next uint64, format *snapshot.Format) (snapshot.Block, error) {
	if pb, ok := bv.(pickle.Block); ok {
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
	ev.DeviceFree = errs.int(m, "device_free", false)
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
			id = uint32(len(c.extras))
			c.extras = append(c.extras, extra)
			c.extraID[extra] = id
		}
		ev.Extra = id
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
	return a, errs.err
}

func settings(m map[string]any) snapshot.AllocatorSettings {
	s := snapshot.AllocatorSettings{Present: true, MaxSplitSize: -1, Raw: map[string]any{}}
	for k, v := range m {
		s.Raw[k] = plain(v)
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
	s.ExpandableSegments, _ = m["expandable_segments"].(bool)
	return s
}

// plain converts a settings value to JSON-friendly Go values.
func plain(v any) any {
	switch x := v.(type) {
	case *big.Int:
		return x.String()
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return n
		}
		f, _ := x.Float64()
		return f
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = plain(x[i])
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = plain(e)
		}
		return out
	}
	return v
}

type errTooBig struct{ what string }

func (e errTooBig) Error() string { return e.what + " does not fit 64 bits" }

// toInt reads any integer form as int64.
func toInt(v any) (int64, error) {
	switch x := v.(type) {
	case int64:
		return x, nil
	case int:
		return int64(x), nil
	case uint64:
		if x > math.MaxInt64 {
			return 0, errTooBig{strconv.FormatUint(x, 10)}
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
		return 0, errTooBig{x.String()}
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return n, nil
		}
		if u, err := strconv.ParseUint(string(x), 10, 64); err == nil {
			return 0, errTooBig{strconv.FormatUint(u, 10)}
		}
		if b, ok := new(big.Int).SetString(string(x), 10); ok {
			return 0, errTooBig{b.String()}
		}
	}
	return 0, fmt.Errorf("is a %s, not an integer", typeName(v))
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
	cpp, py := make([]bool, len(s.Stacks)), make([]bool, len(s.Stacks))
	for i, st := range s.Stacks {
		for _, f := range st {
			if snapshot.IsCppFrame(s.Frames[f]) {
				cpp[i] = true
			} else {
				py[i] = true
			}
		}
	}
	nonEmpty := func(id snapshot.StackID) bool { return id > 0 && int(id) < len(s.Stacks) }
	anyCpp, anyPy := false, false
	note := func(id snapshot.StackID) {
		if nonEmpty(id) {
			anyCpp = anyCpp || cpp[id]
			anyPy = anyPy || py[id]
		}
	}
	for _, seg := range s.Segments {
		for _, b := range seg.Blocks {
			if b.State != snapshot.StateInactive {
				if nonEmpty(b.Stack) {
					c.FramesOnBlocks = true
				}
				note(b.Stack)
			}
		}
	}
	// Blocks allocated in the trace and not yet completely freed: a free of anything else, or
	// a live block at the end that is not among them, means the trace misses its beginning.
	inTrace := make(map[uint64]bool, 1<<14)
	wrapped := false
	for dev, evs := range s.DeviceTraces {
		clear(inTrace)
		// A trace is history over time: one event (the max_entries=1 "state only" pattern) is not.
		state := 0
		for _, e := range evs {
			if e.Action != snapshot.ActionSnapshot {
				state++
			}
		}
		if state >= 2 {
			c.HasTrace = true
		}
		if ringBufferWrapped(evs, c.MaxEntries) {
			wrapped = true
		}
		for _, e := range evs {
			note(e.Stack)
			switch e.Action {
			case snapshot.ActionAlloc:
				inTrace[e.Addr] = true
				c.FramesOnAllocs = c.FramesOnAllocs || nonEmpty(e.Stack)
			case snapshot.ActionFreeRequested, snapshot.ActionFreeCompleted:
				c.FramesOnFrees = c.FramesOnFrees || nonEmpty(e.Stack)
				if !inTrace[e.Addr] {
					c.TraceIncomplete = true
				}
				if e.Action == snapshot.ActionFreeCompleted {
					delete(inTrace, e.Addr)
				}
			}
		}
		if !c.HasTrace {
			continue
		}
		for _, seg := range s.Segments {
			if seg.Device != dev {
				continue
			}
			for _, b := range seg.Blocks {
				if b.State != snapshot.StateInactive && !inTrace[b.Address] {
					c.TraceIncomplete = true
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
