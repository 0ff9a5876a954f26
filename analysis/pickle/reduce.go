package pickle

import (
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// resolved returns the reduction of a container that has been reduced, else v itself.
func (d *decoder) resolved(v val) val {
	if v.k == kList || v.k == kDict {
		if o := &d.objs[v.x]; o.redKind != kNone {
			return val{k: o.redKind, x: o.red}
		}
	}
	return v
}

// reduceTo records that container v now stands for r. An unshared object is recycled after
// its memo slot is rewritten; a shared one keeps the reduction for its other references.
func (d *decoder) reduceTo(v, r val) {
	o := &d.objs[v.x]
	if !o.shared {
		if slot := o.memoSlot; slot >= 0 {
			if p := d.memo.at(uint64(slot)); p != nil && p.k == v.k && p.x == v.x {
				*p = r
			}
		}
		o.items, o.frames, o.ev = o.items[:0], o.frames[:0], nil
		if v.k == kDict {
			d.freeDicts = append(d.freeDicts, uint32(v.x))
		} else {
			d.freeLists = append(d.freeLists, uint32(v.x))
		}
		return
	}
	o.red, o.redKind = r.x, r.k
	o.items, o.frames = nil, nil
}

// appendItems appends to a list, reducing frame dicts to frame ids and trace event dicts to
// typed events as they arrive.
func (d *decoder) appendItems(at int64, target val, items []val) error {
	if target.k != kList {
		return d.fail(at, "APPEND to a %s, not a list", target.k)
	}
	for _, it := range items {
		it = d.resolved(it)
		if it.k == kDict {
			var red val
			var ok bool
			switch sig := d.signature(d.objs[it.x].items); sig {
			case keyFilename:
				red, ok = d.frameOf(it)
			case keyState:
				red, ok = d.blockOf(it)
			case keyAction:
				red, ok = val{k: kEvent}, d.isEventDict(d.objs[it.x].items)
			}
			if ok && red.k != kEvent {
				d.reduceTo(it, red)
				it = red
			} else if o := &d.objs[it.x]; ok {
				lst := &d.objs[target.x]
				if len(lst.items) > 0 || len(lst.frames) > 0 {
					return d.fail(at, "a list mixes trace events with other values")
				}
				ev, err := d.event(at, o.items)
				if err != nil {
					return err
				}
				if lst.ev == nil {
					d.startEventList(lst)
				}
				lst.ev.events = append(lst.ev.events, ev)
				d.bound(lst.ev)
				pos := uint64(len(lst.ev.events) - 1)
				if pos >= 1<<32 || target.x >= 1<<32 {
					return d.fail(at, "too many trace events")
				}
				d.reduceTo(it, val{k: kEvent, x: target.x<<32 | pos})
				continue
			}
		}
		lst := &d.objs[target.x]
		if lst.ev != nil {
			if it.k != kEvent {
				return d.fail(at, "a list mixes trace events with other values")
			}
			lst.ev.events = append(lst.ev.events, d.eventAt(it))
			continue
		}
		if it.k == kEvent && len(lst.items) == 0 && len(lst.frames) == 0 {
			lst.ev = &eventList{events: []snapshot.Event{d.eventAt(it)}}
			continue
		}
		// A list of frames (the hot case: a traceback) keeps bare frame ids.
		if it.k == kFrame && len(lst.items) == 0 {
			lst.frames = append(lst.frames, snapshot.FrameID(it.x))
			continue
		}
		if len(lst.frames) > 0 { // something else joins the frames: back to plain values
			for _, f := range lst.frames {
				lst.items = append(lst.items, val{k: kFrame, x: uint64(f)})
			}
			lst.frames, lst.hashedN = lst.frames[:0], -1
		}
		lst.items = append(lst.items, it)
	}
	return nil
}

// minEventBytes is less than the smallest pickled trace event: EMPTY_DICT MEMOIZE MARK, four
// memoised keys with small values, SETITEMS, APPENDS share.
const minEventBytes = 32

// startEventList makes lst a list of trace events. Device traces are written one after the
// other, so the previous list is complete: its spare capacity is given back first, and at
// most one list holds a large reservation at a time.
func (d *decoder) startEventList(lst *object) {
	if prev := d.lastEvents; prev != nil {
		if n := len(prev.events); cap(prev.events)-n > 4096 && cap(prev.events) > 2*n {
			prev.events = slices.Clone(prev.events)
		}
	}
	lst.ev = &eventList{events: d.newEvents()}
	d.lastEvents = lst.ev
}

// newEvents returns an empty event list with room for as many events as the rest of the
// input can hold, when its size is known (bounded by Options.MaxEvents).
func (d *decoder) newEvents() []snapshot.Event {
	n := (d.opt.SizeHint - d.offset()) / minEventBytes
	if d.opt.MaxEvents > 0 {
		n = min(n, 2*int64(d.opt.MaxEvents))
	}
	if n <= 1024 {
		return nil
	}
	evs := make([]snapshot.Event, 0, n)
	adviseHuge(unsafe.Pointer(unsafe.SliceData(evs)), uintptr(n)*unsafe.Sizeof(snapshot.Event{}))
	return evs
}

// bound drops the oldest events of a list beyond Options.MaxEvents, amortised: the list is
// compacted when it reaches twice the bound.
func (d *decoder) bound(lst *eventList) {
	n := d.opt.MaxEvents
	if n <= 0 || len(lst.events) < 2*n {
		return
	}
	drop := len(lst.events) - n
	copy(lst.events, lst.events[drop:])
	lst.events = lst.events[:n]
	lst.dropped += int64(drop)
}

func (d *decoder) eventAt(v val) snapshot.Event {
	var evs []snapshot.Event
	if l := d.objs[v.x>>32].ev; l != nil {
		evs = l.events
	}
	if i := int(uint32(v.x)); i < len(evs) {
		return evs[i]
	}
	return snapshot.Event{Stack: snapshot.NoStack} // dropped by the MaxEvents bound
}

// setItems stores key/value pairs in a dict; a frames list stored under "frames" becomes its
// interned stack id.
func (d *decoder) setItems(at int64, target val, items []val) error {
	if target.k != kDict {
		return d.fail(at, "SETITEMS on a %s, not a dict", target.k)
	}
	dict := &d.objs[target.x]
	dict.items = slices.Grow(dict.items, len(items))
	for i := 0; i+1 < len(items); i += 2 {
		k, v := d.resolved(items[i]), d.resolved(items[i+1])
		if v.k == kList && d.key(k) == keyFrames {
			if st, ok := d.stackOf(v); ok {
				d.reduceTo(v, st)
				v = st
			}
		}
		o := &d.objs[target.x]
		o.items = append(o.items, k, v)
	}
	return nil
}

// frameOf reduces a dict with filename, line and name (and optional FX keys) to a frame id.
func (d *decoder) frameOf(v val) (val, bool) {
	o := &d.objs[v.x]
	items := o.items
	if len(items) < 6 {
		return val{}, false
	}
	var f snapshot.Frame
	var seen uint8
	for i := 0; i+1 < len(items); i += 2 {
		k, x := items[i], items[i+1]
		switch d.key(k) {
		case keyFilename:
			if x.k != kStr {
				return val{}, false
			}
			f.Filename, seen = d.strs[x.x], seen|1
		case keyName:
			if x.k != kStr {
				return val{}, false
			}
			f.Name, seen = d.strs[x.x], seen|2
		case keyLine:
			switch x.k {
			case kInt:
				f.Line = int64(x.x)
			case kUint, kBig:
				f.Line = snapshot.LineUnknown
			default:
				return val{}, false
			}
			seen |= 4
		}
	}
	if seen != 7 {
		return val{}, false
	}
	return val{k: kFrame, x: uint64(d.in.Frame(f))}, true
}

// stackOf reduces a list of frames to an interned stack id.
func (d *decoder) stackOf(v val) (val, bool) {
	o := &d.objs[v.x]
	if o.ev != nil {
		return val{}, false
	}
	if len(o.items) == 0 {
		if o.hashedN == len(o.frames) {
			return val{k: kStack, x: uint64(d.in.StackWithHash(o.frames, o.framesHash))}, true
		}
		return val{k: kStack, x: uint64(d.in.Stack(o.frames))}, true
	}
	ids := d.frameBuf[:0]
	for _, it := range o.items {
		it = d.resolved(it)
		if it.k != kFrame {
			return val{}, false
		}
		ids = append(ids, snapshot.FrameID(it.x))
	}
	d.frameBuf = ids
	return val{k: kStack, x: uint64(d.in.Stack(ids))}, true
}

// Block is a segment's block dict, typed while decoding. HasAddress is false for PyTorch 2.0
// blocks (the loader places them after the previous block); Legacy says the frames came from
// the 2.0 history list.
type Block struct {
	snapshot.Block
	HasAddress bool
	Legacy     bool
}

// blockOf reduces a well-formed block dict (state, size, optional address, requested_size,
// frames or history) to a typed block. Anything unexpected is left as a plain dict, for the
// loader to report precisely.
func (d *decoder) blockOf(v val) (val, bool) {
	items := d.objs[v.x].items
	b := Block{Block: snapshot.Block{Stack: snapshot.NoStack}}
	var haveSize, haveFrames bool
	history := -1
	for i := 0; i+1 < len(items); i += 2 {
		k, x := items[i], items[i+1]
		if k.k != kStr {
			return val{}, false
		}
		switch d.key(k) {
		case keyAddress:
			if x.k != kInt && x.k != kUint {
				return val{}, false
			}
			b.Address, b.HasAddress = x.x, true
		case keySize:
			if x.k != kInt {
				return val{}, false
			}
			b.Size, haveSize = int64(x.x), true
		case keyRequestedSize:
			if x.k != kInt {
				return val{}, false
			}
			b.RequestedSize = int64(x.x)
		case keyState:
			if x.k != kStr {
				return val{}, false
			}
			if b.State = snapshot.ParseBlockState(d.strs[x.x]); b.State == snapshot.StateUnknown {
				return val{}, false
			}
		case keyFrames:
			switch x.k {
			case kStack:
				b.Stack = snapshot.StackID(x.x)
			case kNone:
				b.Stack = snapshot.EmptyStack
			default:
				return val{}, false
			}
			haveFrames = true
		case keyHistory:
			history = i + 1
		case keyAction, keyFilename:
			return val{}, false
		}
	}
	if !haveSize || b.State == snapshot.StateUnknown {
		return val{}, false
	}
	if !haveFrames && history >= 0 {
		h := items[history]
		if h.k != kList {
			return val{}, false
		}
		b.Legacy = true
		if hist := d.objs[h.x].items; len(hist) > 0 {
			first := d.resolved(hist[0])
			if first.k != kDict {
				return val{}, false
			}
			for _, fr := range d.pairs(first) {
				if d.key(fr[0]) == keyFrames {
					switch fr[1].k {
					case kStack:
						b.Stack = snapshot.StackID(fr[1].x)
					case kNone:
						b.Stack = snapshot.EmptyStack
					default:
						return val{}, false
					}
				}
			}
		}
	}
	return val{k: kBlock, x: d.blocks.add(b)}, true
}

// pairs returns a dict's key/value pairs.
func (d *decoder) pairs(v val) [][2]val {
	items := d.objs[v.x].items
	out := make([][2]val, 0, len(items)/2)
	for i := 0; i+1 < len(items); i += 2 {
		out = append(out, [2]val{items[i], items[i+1]})
	}
	return out
}

// signature tells what a dict may be from one scan of its keys: keyFilename (a frame),
// keyAction (a trace event), keyState (a block) or keyNone.
func (d *decoder) signature(items []val) keyCode {
	for i := 0; i < len(items); i += 2 {
		switch c := d.key(items[i]); c {
		case keyFilename, keyAction, keyState:
			return c
		}
	}
	return keyNone
}

func (d *decoder) isEventDict(items []val) bool {
	for i := 0; i+1 < len(items); i += 2 {
		if d.key(items[i]) == keyAction {
			return items[i+1].k == kStr
		}
	}
	return false
}

// event converts an event dict's items to a typed event. Unknown keys are ignored.
func (d *decoder) event(at int64, items []val) (snapshot.Event, error) {
	ev := snapshot.Event{Stack: snapshot.NoStack}
	var extra snapshot.EventExtra
	for i := 0; i+1 < len(items); i += 2 {
		k, x := items[i], items[i+1]
		if k.k != kStr {
			continue
		}
		var err error
		switch d.key(k) {
		case keyAction:
			ev.Action = snapshot.ParseAction(d.str(x))
			if ev.Action == snapshot.ActionOther {
				extra.ActionName = d.str(x)
			}
		case keyAddr:
			ev.Addr, err = d.uintField(at, "addr", x)
		case keySize:
			ev.Size, err = d.intField(at, "size", x)
		case keyStream:
			ev.Stream, err = d.uintField(at, "stream", x)
		case keyTimeUS:
			ev.TimeUS, err = d.intField(at, "time_us", x)
		case keyDeviceFree:
			ev.DeviceFree, err = d.intField(at, "device_free", x)
		case keyFrames:
			switch x.k {
			case kStack:
				ev.Stack = snapshot.StackID(x.x)
			case kNone:
			default:
				return ev, d.fail(at, "trace event frames is a %s, not a list of frames", x.k)
			}
		case keyCompileContext:
			if x.k == kStr {
				extra.CompileContext = d.strs[x.x]
			}
		case keyUserMetadata:
			if x.k == kStr {
				extra.UserMetadata = d.strs[x.x]
			}
		case keyCategory:
			if x.k == kStr {
				extra.Category = d.strs[x.x]
			}
		case keyInternalMetadata:
			if x.k == kStr {
				extra.InternalMetadata = d.strs[x.x]
			}
		case keyPoolID:
			if x.k == kTuple || x.k == kList {
				if items := d.objs[x.x].items; len(items) == 2 && items[0].k == kInt && items[1].k == kInt {
					extra.PoolID = snapshot.PoolID{int64(items[0].x), int64(items[1].x)}
				}
			}
		case keyForwardFrames:
			if x.k == kList {
				var lines []string
				for _, it := range d.objs[x.x].items {
					if it.k == kStr {
						lines = append(lines, d.strs[it.x])
					}
				}
				extra.ForwardFrames = strings.Join(lines, "\n")
			}
		}
		if err != nil {
			return ev, err
		}
	}
	if extra != (snapshot.EventExtra{}) {
		id, ok := d.extraID[extra]
		if !ok {
			id = uint32(len(d.extras))
			d.extras = append(d.extras, extra)
			d.extraID[extra] = id
		}
		ev.Extra = id
	}
	return ev, nil
}

func (d *decoder) intField(at int64, name string, x val) (int64, error) {
	switch x.k {
	case kInt:
		return int64(x.x), nil
	case kBool:
		return int64(x.x), nil
	case kNone:
		return 0, nil
	}
	return 0, d.fail(at, "trace event %s is a %s, not an integer that fits 64 bits", name, x.k)
}

func (d *decoder) uintField(at int64, name string, x val) (uint64, error) {
	switch x.k {
	case kInt, kUint:
		return x.x, nil
	case kNone:
		return 0, nil
	}
	return 0, d.fail(at, "trace event %s is a %s, not an integer that fits 64 bits", name, x.k)
}

func (k kind) String() string {
	switch k {
	case kNone:
		return "None"
	case kBool:
		return "bool"
	case kInt, kUint, kBig:
		return "int"
	case kFloat:
		return "float"
	case kStr:
		return "str"
	case kBytes:
		return "bytes"
	case kList:
		return "list"
	case kTuple:
		return "tuple"
	case kDict:
		return "dict"
	case kStack:
		return "frames list"
	case kFrame:
		return "frame"
	case kEvent:
		return "trace event"
	case kBlock:
		return "block"
	case kGlobal:
		return "global"
	}
	return "mark"
}

// toTree converts the final value to the plain tree the loader reads.
func (d *decoder) toTree(v val, depth int) (any, error) {
	if depth > maxDepth {
		return nil, d.fail(d.offset(), "values nested more than %d deep", maxDepth)
	}
	switch v.k {
	case kNone:
		return nil, nil
	case kBool:
		return v.x != 0, nil
	case kInt:
		return int64(v.x), nil
	case kUint:
		return v.x, nil
	case kBig:
		b, _ := new(big.Int).SetString(d.strs[v.x], 10)
		return b, nil
	case kFloat:
		return math.Float64frombits(v.x), nil
	case kStr, kBytes:
		return d.strs[v.x], nil
	case kStack:
		return snapshot.StackID(v.x), nil
	case kFrame:
		f := d.in.Frames[v.x]
		return map[string]any{"filename": f.Filename, "line": f.Line, "name": f.Name}, nil
	case kEvent:
		return d.eventAt(v), nil
	case kBlock:
		return d.blocks.at(v.x), nil
	case kList, kTuple:
		o := &d.objs[v.x]
		if o.redKind != kNone {
			return d.toTree(d.resolved(v), depth)
		}
		if o.ev != nil {
			evs, dropped := o.ev.events, o.ev.dropped
			if n := d.opt.MaxEvents; n > 0 && len(evs) > n {
				dropped += int64(len(evs) - n)
				evs = append([]snapshot.Event(nil), evs[len(evs)-n:]...)
			}
			return EventList{Events: evs, Dropped: dropped}, nil
		}
		items := o.items
		if len(items) == 0 && len(o.frames) > 0 {
			for _, f := range o.frames {
				items = append(items, val{k: kFrame, x: uint64(f)})
			}
		}
		out := make([]any, len(items))
		for i, it := range items {
			t, err := d.toTree(it, depth+1)
			if err != nil {
				return nil, err
			}
			out[i] = t
		}
		return out, nil
	case kDict:
		o := &d.objs[v.x]
		if o.redKind != kNone {
			return d.toTree(d.resolved(v), depth)
		}
		out := make(map[string]any, len(o.items)/2)
		for i := 0; i+1 < len(o.items); i += 2 {
			k := o.items[i]
			var key string
			switch k.k {
			case kStr:
				key = d.strs[k.x]
			case kInt:
				key = strconv.FormatInt(int64(k.x), 10)
			default:
				return nil, d.fail(d.offset(), "dict key is a %s; a snapshot has string keys", k.k)
			}
			t, err := d.toTree(o.items[i+1], depth+1)
			if err != nil {
				return nil, err
			}
			out[key] = t // the last duplicate wins, as in Python
		}
		return out, nil
	case kGlobal:
		return nil, d.fail(d.offset(), "a restore_type_tag global left uncalled in the data")
	}
	return nil, d.fail(d.offset(), "invalid value")
}

// blockStore keeps typed blocks in fixed chunks: a growing slice of a hundred thousand blocks
// would be copied again and again into fresh memory, each copy paying its page faults.
type blockStore struct {
	chunks [][]Block
	n      uint64
}

const blockChunk = 1 << 14

func (s *blockStore) add(b Block) uint64 {
	if s.n%blockChunk == 0 {
		s.chunks = append(s.chunks, make([]Block, 0, blockChunk))
	}
	last := &s.chunks[len(s.chunks)-1]
	*last = append(*last, b)
	s.n++
	return s.n - 1
}

func (s *blockStore) at(i uint64) Block { return s.chunks[i/blockChunk][i%blockChunk] }
