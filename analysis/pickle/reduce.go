package pickle

import (
	"encoding/binary"
	"math"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"github.com/memsnap/memsnap/analysis/internal/hugepage"
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
	// The memo slot now holds the reduction itself (every read of it resolves to that anyway),
	// so a frame dict named twice in its first traceback still reads as a frame in frameRun.
	if slot := o.memoSlot; slot >= 0 {
		if p, ok := d.memo.get(uint64(slot)); ok && p == v {
			d.memo.put(uint64(slot), r)
		}
	}
	if !o.shared {
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
			if o := &d.objs[it.x]; o.shared && o.redKind == kNone {
				// A dict that stays plain is scanned again at each reference.
				if err := d.charge(at, int64(len(o.items))); err != nil {
					return err
				}
			}
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
				if err := d.addEvent(at, target, it, ev); err != nil {
					return err
				}
				continue
			}
		}
		lst := &d.objs[target.x]
		if lst.ev != nil {
			if it.k != kEvent {
				return d.fail(at, "a list mixes trace events with other values")
			}
			// An event named again (a memo reference) is copied: charge the copy.
			if err := d.charge(at, int64(unsafe.Sizeof(snapshot.Event{}))); err != nil {
				return err
			}
			lst = &d.objs[target.x]
			d.appendEvent(lst.ev, d.eventAt(it))
			continue
		}
		if it.k == kEvent && len(lst.items) == 0 && len(lst.frames) == 0 {
			lst.ev = d.newEventList([]snapshot.Event{d.eventAt(it)})
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
		if isContainer(it.k) {
			if err := d.nest(at, target.x, it); err != nil {
				return err
			}
		}
		if len(lst.items) == cap(lst.items) {
			lst.items = growItems(lst.items, 1)
		}
		lst.items = append(lst.items, it)
	}
	return nil
}

// addEvent appends the event a dict (it) converted to to the trace list target, and reduces
// the dict to it.
func (d *decoder) addEvent(at int64, target, it val, ev snapshot.Event) error {
	lst := &d.objs[target.x]
	if lst.ev == nil {
		d.startEventList(lst)
	}
	d.appendEvent(lst.ev, ev)
	pos := uint64(len(lst.ev.events) - 1)
	if pos >= 1<<32 || target.x >= 1<<32 {
		return d.fail(at, "too many trace events")
	}
	d.reduceTo(it, val{k: kEvent, x: target.x<<32 | pos})
	return nil
}

// growItems makes room for n more items, doubling: append's growth of large slices by a
// quarter would allocate five times a long list's final size over its growth.
func growItems(items []val, n int) []val {
	if cap(items)-len(items) >= n {
		return items
	}
	out := make([]val, len(items), max(2*cap(items), len(items)+n, 4))
	copy(out, items)
	return out
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
	lst.ev = d.newEventList(nil)
	lst.ev.start = d.offset()
	d.lastEvents = lst.ev
}

// appendEvent adds an event to a trace list, growing it through growEvents.
func (d *decoder) appendEvent(l *eventList, ev snapshot.Event) {
	if len(l.events) == cap(l.events) {
		d.growEvents(l)
	}
	l.events = append(l.events, ev)
	d.bound(l)
	if d.pipe != nil && len(l.events)-l.published >= indexChunk {
		d.handOver(l)
	}
}

// growEvents makes room in a full event list. The capacity follows the bytes read, never a
// declared or stat'ed size: twice the events so far, or as many events as the input read so
// far could hold, whichever is more, and no more than a MaxEvents bound needs. A new list
// starts with room for four times that many, because a snapshot's traces follow its segments,
// which are most often a small part of the file: the first list then usually never grows, and
// no copy of millions of events (and their page faults) is made. Capacity never written
// costs no resident memory; it is at most 5 bytes (40 * 4 / minEventBytes) per byte read.
// Decoding in place, a list that grows anyway gets no more than the rest of the input can
// hold at the list's density so far (eventsAtEnd): a list kept for long (the MCP server's
// cache) is then not copied again to give back the spare half of a doubling.
// maxRoomyLists is how many trace lists get room by the bytes read: more than a machine has
// devices.
const maxRoomyLists = 16

func (d *decoder) growEvents(l *eventList) {
	n := len(l.events)
	room := min(d.offset()/minEventBytes, math.MaxInt32/4)
	if n == 0 {
		room *= 4
	}
	c := max(2*n, 1024, int(room))
	if !l.grown {
		l.grown = true
		d.roomyLists++
	}
	if d.roomyLists > maxRoomyLists {
		// Only the first lists get room by the bytes read: a file of 65,536 devices with a
		// few events each would otherwise reserve (and clear) that room 65,536 times, work
		// quadratic in the file's size. The others double from a few events, linear in the
		// events they hold.
		c = max(2*n, 8)
	}
	if est, ok := d.eventsAtEnd(l); ok {
		// To the estimate in one step: each step copies the list and leaves the old array
		// to the collector (on a 1 GB real-shaped file, stopping at 3 or 8 times the list
		// took one more copy of 40% of the final list, and memory grew faster than the
		// file). The estimate is at most about the input's bytes over minEventBytes, and
		// room the list does not fill is never written, so it costs no resident memory.
		c = est
	}
	if m := d.opt.MaxEvents; m > 0 {
		c = max(min(c, 2*m), n+1)
	}
	evs := hugepage.Make[snapshot.Event](n, c)
	copy(evs, l.events)
	l.events = evs
}

// eventsAtEnd estimates, in an in-place decode, the events list l will hold when the input
// ends: those so far, and as many more as the rest of the input holds at the list's density
// so far, with 3% to spare. At least an eighth more than now, so that an estimate that falls
// short (denser events later) costs a few more copies, not one each time. Only for a list of
// some length (the density of a few events says little).
func (d *decoder) eventsAtEnd(l *eventList) (int, bool) {
	n := len(l.events)
	read := d.offset() - l.start
	if !d.inPlace || n < 1<<16 || read <= 0 {
		return 0, false
	}
	rest := int64(len(d.buf)) - d.offset()
	est := float64(n)*(1+float64(max(rest, 0))/float64(read))*1.03 + 1024
	return max(int(min(est, math.MaxInt32)), n+n/8), true
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
	dict.items = growItems(dict.items, len(items))
	for i := 0; i+1 < len(items); i += 2 {
		k, v := d.resolved(items[i]), d.resolved(items[i+1])
		if isContainer(v.k) || isContainer(k.k) {
			var err error
			if v, err = d.setContainer(at, target.x, k, v); err != nil {
				return err
			}
		}
		o := &d.objs[target.x]
		o.items = append(o.items, k, v)
	}
	return nil
}

// setContainer is setItems for a pair holding a container: a frames list becomes its stack
// id; anything else nests in the dict (up to maxDepth).
func (d *decoder) setContainer(at int64, dict uint64, k, v val) (val, error) {
	if d.key(k) == keyFrames {
		switch v.k {
		case kList:
			if st, ok := d.stackOf(v); ok {
				d.reduceTo(v, st)
				return st, nil
			}
		case kEmptyList:
			return val{k: kStack, x: uint64(snapshot.EmptyStack)}, nil
		}
	}
	if err := d.nest(at, dict, v); err != nil {
		return v, err
	}
	return v, d.nest(at, dict, k)
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
		if o.knownN > 0 && int(o.knownN) == len(o.frames) {
			return val{k: kStack, x: uint64(o.known)}, true
		}
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

// Block is a segment's block dict, typed while decoding (the tree holds a *Block, shared by
// every reference to the dict, and read only). HasAddress is false for PyTorch 2.0
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
		if h.k == kEmptyList {
			b.Legacy = true
			return val{k: kBlock, x: d.blocks.add(b)}, true
		}
		if h.k != kList {
			return val{}, false
		}
		b.Legacy = true
		if hist := d.objs[h.x].items; len(hist) > 0 {
			first := d.resolved(hist[0])
			if first.k != kDict {
				return val{}, false
			}
			// A history entry has three keys; a larger dict (which a shared history list
			// would make this scan again for every block) is left to the loader.
			fi := d.objs[first.x].items
			if len(fi) > 32 {
				return val{}, false
			}
			for i := 0; i+1 < len(fi); i += 2 {
				if d.key(fi[i]) == keyFrames {
					switch fi[i+1].k {
					case kStack:
						b.Stack = snapshot.StackID(fi[i+1].x)
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

// extraRef identifies an event's optional fields by the identity of their values: string
// indexes and the forward_frames sequence id, each plus one (0: absent), and the pool id. Real
// traces repeat a few memoized strings across millions of events; looking them up by
// identity hashes a long shared string once, not once per event.
type extraRef struct {
	action, compile, user, category, internal, forward uint64
	pool                                               snapshot.PoolID
}

// maxExtraRefs bounds extraByRef, the identities of the extras met.
const maxExtraRefs = 1 << 14

// maxEventExtras bounds the event extras a decode makes (a variable for tests).
var maxEventExtras = snapshot.MaxEventExtras

// event converts an event dict's items to a typed event. Unknown keys are ignored.
func (d *decoder) event(at int64, items []val) (snapshot.Event, error) {
	ev := snapshot.Event{Stack: snapshot.NoStack}
	var devFree int64 // an oom event's, kept in its Addr once the action is known
	var ref extraRef
	for i := 0; i+1 < len(items); i += 2 {
		k, x := items[i], items[i+1]
		if k.k != kStr {
			continue
		}
		var err error
		switch d.key(k) {
		case keyAction:
			ev.Action = d.action(x)
			if ev.Action == snapshot.ActionOther {
				ref.action = strRef(x)
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
			devFree, err = d.intField(at, "device_free", x)
		case keyFrames:
			switch x.k {
			case kStack:
				ev.Stack = snapshot.StackID(x.x)
			case kNone:
			default:
				return ev, d.fail(at, "trace event frames is a %s, not a list of frames", x.k)
			}
		case keyCompileContext:
			ref.compile = strRef(x)
		case keyUserMetadata:
			ref.user = strRef(x)
		case keyCategory:
			ref.category = strRef(x)
		case keyInternalMetadata:
			ref.internal = strRef(x)
		case keyPoolID:
			ref.pool = snapshot.PoolID{}
			if x.k == kTuple || x.k == kList {
				if items := d.objs[x.x].items; len(items) == 2 && items[0].k == kInt && items[1].k == kInt {
					ref.pool = snapshot.PoolID{int64(items[0].x), int64(items[1].x)}
				}
			}
		case keyForwardFrames:
			ref.forward = 0
			if x.k == kList {
				ref.forward, err = d.forwardFrames(at, d.objs[x.x].items)
			}
		}
		if err != nil {
			return ev, err
		}
	}
	ev = ev.WithDeviceFree(devFree)
	if ref != (extraRef{}) {
		id, ok := d.lastExtra.id, d.lastExtra.ok && d.lastExtra.ref == ref
		if !ok {
			id, ok = d.extraByRef[ref]
		}
		if !ok {
			var err error
			if id, err = d.extraOf(at, ref); err != nil {
				return ev, err
			}
		}
		ev.Extra = snapshot.MakeExtraID(id)
		d.lastExtra.ref, d.lastExtra.id, d.lastExtra.ok = ref, id, true
	}
	return ev, nil
}

// action is the Action a trace event's action value names, cached per string (a trace names
// the same few memoized strings millions of times).
func (d *decoder) action(x val) snapshot.Action {
	if x.k != kStr {
		return snapshot.ParseAction(d.str(x))
	}
	if x.x >= uint64(len(d.actions)) {
		d.actions = append(d.actions, make([]uint8, int(x.x)+1-len(d.actions))...)
	}
	if a := d.actions[x.x]; a != 0 {
		return snapshot.Action(a - 1)
	}
	a := snapshot.ParseAction(d.strs[x.x])
	d.actions[x.x] = uint8(a) + 1
	return a
}

// strRef is a string's identity in an extraRef: its index plus one (0 for anything else).
func strRef(x val) uint64 {
	if x.k == kStr {
		return x.x + 1
	}
	return 0
}

// extraOf finds (or adds) the extra an identity key stands for, by content.
func (d *decoder) extraOf(at int64, ref extraRef) (uint32, error) {
	str := func(r uint64) string {
		if r == 0 {
			return ""
		}
		return d.strs[r-1]
	}
	extra := snapshot.EventExtra{
		ActionName: str(ref.action), CompileContext: str(ref.compile), UserMetadata: str(ref.user),
		Category: str(ref.category), InternalMetadata: str(ref.internal), PoolID: ref.pool,
	}
	if ref.forward != 0 {
		extra.ForwardFrames = d.fwdLines[ref.forward-1]
	}
	// Each new combination hashes its strings once: charge them, so that combining a few long
	// strings in many ways cannot multiply the work.
	if err := d.charge(at, int64(len(extra.ActionName)+len(extra.CompileContext)+len(extra.UserMetadata)+
		len(extra.Category)+len(extra.InternalMetadata)+len(extra.ForwardFrames))); err != nil {
		return 0, err
	}
	id, ok := d.extraID[extra]
	if !ok {
		if len(d.extras) >= maxEventExtras {
			return 0, d.failLimit(at, "%s", snapshot.TooManyExtras(maxEventExtras))
		}
		id = uint32(len(d.extras))
		d.extras = append(d.extras, extra)
		d.extraID[extra] = id
	}
	if d.extraByRef == nil {
		d.extraByRef = map[extraRef]uint32{}
	}
	if len(d.extraByRef) >= maxExtraRefs {
		// A writer that makes new string objects per event gives every event a new identity:
		// a cache, not a record, so it starts again rather than grow with the trace (the
		// extras themselves are found by content, in extraID).
		clear(d.extraByRef)
	}
	d.extraByRef[ref] = id
	return id, nil
}

// forwardFrames interns a forward_frames list (its string items joined by newlines) by the
// identities of its strings, and returns its id plus one (0 for no lines).
func (d *decoder) forwardFrames(at int64, items []val) (uint64, error) {
	if err := d.charge(at, int64(len(items))); err != nil {
		return 0, err
	}
	key := d.keyBuf[:0]
	for _, it := range items {
		if it.k == kStr {
			key = binary.LittleEndian.AppendUint64(key, it.x)
		}
	}
	d.keyBuf = key
	if len(key) == 0 {
		return 0, nil
	}
	if id, ok := d.fwdSeq[string(key)]; ok {
		return uint64(id) + 1, nil
	}
	lines := make([]string, 0, len(key)/8)
	for _, it := range items {
		if it.k == kStr {
			lines = append(lines, d.strs[it.x])
		}
	}
	joined := strings.Join(lines, "\n")
	if err := d.charge(at, int64(len(joined))); err != nil {
		return 0, err
	}
	if d.fwdSeq == nil {
		d.fwdSeq = map[string]uint32{}
	}
	d.fwdSeq[string(key)] = uint32(len(d.fwdLines))
	d.fwdLines = append(d.fwdLines, joined)
	return uint64(len(d.fwdLines)), nil
}

// charge counts work done on values reached through shared references (strings joined or
// hashed, dicts scanned again) and refuses the input once it exceeds what its size can
// justify: 16 bytes per byte read plus 64 MiB, far above any real snapshot's.
func (d *decoder) charge(at int64, n int64) error {
	d.produced += n
	if d.produced > 16*d.offset()+64<<20 {
		return d.failLimit(at, "shared references repeat %d bytes of values from %d bytes of pickle: no snapshot does this", d.produced, d.offset())
	}
	return nil
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
	case kList, kEmptyList:
		return "list"
	case kTuple, kEmptyTuple:
		return "tuple"
	case kDict, kEmptyDict:
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

// Every empty container that has no object converts to one shared value (the tree is
// read-only: shared containers are returned by reference anyway).
var (
	emptyList any = []any{}
	emptyDict any = map[string]any{}
)

// building marks a shared container whose conversion is under way: meeting it again means
// the value contains itself.
var building = new(byte)

// toTree converts the final value to the plain tree the loader reads. A container referenced
// from several places (memo, DUP, a tuple) is converted once and the same Go value is returned
// for every reference, so the tree is a DAG no larger than the pickle, however the references
// fan out; so are frames, blocks, events and big integers. Values counts what it produced.
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
		d.values++
		return int64(v.x), nil
	case kUint:
		d.values++
		return v.x, nil
	case kBig:
		d.values++
		return d.bigs[v.x], nil // shared by every reference; the loader only reads it
	case kFloat:
		d.values++
		return math.Float64frombits(v.x), nil
	case kStr, kBytes:
		d.values++
		return d.strs[v.x], nil
	case kStack:
		d.values++
		return snapshot.StackID(v.x), nil
	case kEmptyList, kEmptyTuple:
		d.values++
		return emptyList, nil
	case kEmptyDict:
		d.values++
		return emptyDict, nil
	case kBlock:
		// Blocks are many and nearly always named once: a slice, not a map, converts each
		// once even when a shared block dict is named again.
		if d.blockTree == nil {
			d.blockTree = make([]any, d.blocks.n)
		}
		if t := d.blockTree[v.x]; t != nil {
			return t, nil
		}
		d.values++
		t := any(d.blocks.at(v.x)) // a pointer: no copy of the block on the heap
		d.blockTree[v.x] = t
		return t, nil
	case kFrame, kEvent:
		if t, ok := d.leafCache[v]; ok {
			return t, nil
		}
		d.values++
		var t any
		switch v.k {
		case kFrame:
			f := d.in.Frames[v.x]
			t = map[string]any{"filename": f.Filename, "line": f.Line, "name": f.Name}
		default:
			t = d.eventAt(v)
		}
		if d.leafCache == nil {
			d.leafCache = map[val]any{}
		}
		d.leafCache[v] = t
		return t, nil
	case kList, kTuple, kDict:
		o := &d.objs[v.x]
		if o.redKind != kNone {
			return d.toTree(d.resolved(v), depth)
		}
		if !o.shared {
			return d.containerTree(v, depth)
		}
		if t, ok := d.treeCache[v.x]; ok {
			if p, _ := t.(*byte); p == building {
				return nil, d.fail(d.offset(), "a %s contains itself: a snapshot holds no cycles", v.k)
			}
			return t, nil
		}
		if d.treeCache == nil {
			d.treeCache = map[uint64]any{}
		}
		d.treeCache[v.x] = building
		t, err := d.containerTree(v, depth)
		if err != nil {
			return nil, err
		}
		d.treeCache[v.x] = t
		return t, nil
	case kGlobal:
		return nil, d.fail(d.offset(), "a restore_type_tag global left uncalled in the data")
	}
	return nil, d.fail(d.offset(), "invalid value")
}

// containerTree converts one list, tuple or dict object.
func (d *decoder) containerTree(v val, depth int) (any, error) {
	d.values++
	o := &d.objs[v.x]
	if v.k != kDict {
		if o.ev != nil {
			evs, dropped := o.ev.events, o.ev.dropped
			if n := d.opt.MaxEvents; n > 0 && len(evs) > n {
				dropped += int64(len(evs) - n)
				evs = append([]snapshot.Event(nil), evs[len(evs)-n:]...)
			}
			d.values += int64(len(evs))
			return EventList{Events: evs, Dropped: dropped, Index: d.indexOf(o.ev, evs)}, nil
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
	}
	items := o.items
	out := make(map[string]any, len(items)/2)
	for i := 0; i+1 < len(items); i += 2 {
		k := items[i]
		var key string
		switch k.k {
		case kStr:
			key = d.strs[k.x]
		case kInt:
			key = strconv.FormatInt(int64(k.x), 10)
		default:
			return nil, d.fail(d.offset(), "dict key is a %s; a snapshot has string keys", k.k)
		}
		t, err := d.toTree(items[i+1], depth+1)
		if err != nil {
			return nil, err
		}
		out[key] = t // the last duplicate wins, as in Python
	}
	return out, nil
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

// at returns block i in place (chunks never move: each is made at its full capacity).
func (s *blockStore) at(i uint64) *Block { return &s.chunks[i/blockChunk][i%blockChunk] }
