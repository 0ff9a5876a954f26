package pickle

import (
	"encoding/binary"
	"errors"
	"math"
	"unsafe"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// fastEvent is fastDict for a trace event met inside its trace list's APPENDS batch, the
// commonest thing in a snapshot: instead of building the dict, keeping it on the stack and
// converting it when APPENDS stores it (newObj, memoize, signature, event, addEvent,
// reduceTo), it reads the pairs straight into a snapshot.Event, appends that to the list and
// leaves the memo as the batch's APPENDS would: the dict's slot holding the event, each
// inline frames list's slot holding its stack. Values of the batch waiting on the stack (event
// dicts the slow path built) are stored first, as that APPENDS would store them, so the list
// keeps the input's order.
//
// The stack then lacks what the input pushed, and the memo holds events where dicts would
// still be, until the batch's APPENDS. Snapshot writers never look back within a batch, but
// any input may: from the first commit the batch is "open" (d.open), and an opcode that could
// see the difference (see openSafe) makes the decode start again without this path
// (errRedo), so that the result is always exactly the slow path's.
//
// It commits nothing unless the whole dict is of the forms below, and returns the position
// after its SETITEMS, or -1.
func (d *decoder) fastEvent(buf []byte, pos int) int {
	if d.opt.noFastEvents || pos+3 > len(buf) || buf[pos+1] != 0x94 || buf[pos+2] != '(' || len(d.marks) == 0 || len(d.marks) >= maxDepth*64 {
		return -1
	}
	if d.open != 0 && d.open != len(d.marks) {
		return -1 // inside something else within an open batch: the slow path
	}
	m := d.marks[len(d.marks)-1]
	if m == 0 {
		return -1
	}
	target := d.stack[m-1]
	if target.k != kList || target.x >= 1<<32 {
		return -1
	}
	if o := &d.objs[target.x]; o.ev == nil || o.redKind != kNone || len(o.items) > 0 || len(o.frames) > 0 {
		return -1
	}
	ev := snapshot.Event{Stack: snapshot.NoStack}
	var devFree int64 // an oom event's, kept in its Addr once the action is known
	var ref extraRef
	// The values the dict makes, in input order: each takes the next memo slot (strings only
	// when MEMOIZE follows them). News strings get the next string indexes, from base.
	made := &d.made // scratch: entries are written before they are read
	nm, newStrs, sameStrs, base := 0, 0, 0, uint64(len(d.strs))
	n, action := 0, false
	// The frames list whose run the cache lacks: where its run starts, how long it is.
	missPos, missLen := -1, 0
	p := pos + 3
	for {
		if p+16 > len(buf) {
			return -1
		}
		c := buf[p]
		if c == 'u' {
			break
		}
		if n == maxFastPairs {
			return -1
		}
		n++
		var idx uint64
		switch c {
		case 'h':
			idx, p = uint64(buf[p+1]), p+2
		case 'j':
			idx, p = uint64(binary.LittleEndian.Uint32(buf[p+1:])), p+5
		default:
			return -1
		}
		var code keyCode
		if t := &d.keyTmpl[n-1]; t.idx == idx+1 {
			code = t.code
		} else {
			k, _ := d.memo.get(idx)
			if k.k != kStr {
				return -1
			}
			code = d.keys[k.x]
			t.idx, t.code = idx+1, code
		}
		// The key and the plain values read as in fastDict, written out again on purpose:
		// shared through calls (neither inlines) the load of the benchmark file took 8% longer.
		var v val
		switch buf[p] {
		case 'K': // BININT1
			v, p = val{k: kInt, x: uint64(buf[p+1])}, p+2
		case 'M': // BININT2
			v, p = val{k: kInt, x: uint64(binary.LittleEndian.Uint16(buf[p+1:]))}, p+3
		case 'J': // BININT
			v, p = val{k: kInt, x: uint64(int64(int32(binary.LittleEndian.Uint32(buf[p+1:]))))}, p+5
		case 0x8a: // LONG1 of at most 8 bytes
			w := int(buf[p+1])
			if w > 8 {
				return -1
			}
			v = decodeLong8(buf[p+2:], w) // the window holds its 8 bytes
			p += 2 + w
		case 'N':
			v, p = val{k: kNone}, p+1
		case 0x88:
			v, p = val{k: kBool, x: 1}, p+1
		case 0x89:
			v, p = val{k: kBool}, p+1
		case 'h', 'j':
			var vi uint64
			if buf[p] == 'h' {
				vi, p = uint64(buf[p+1]), p+2
			} else {
				vi, p = uint64(binary.LittleEndian.Uint32(buf[p+1:])), p+5
			}
			s, ok := d.memo.get(vi)
			if !ok {
				return -1
			}
			switch v = d.resolved(s); v.k {
			case kStr, kInt, kUint, kFloat, kBool, kNone, kStack:
			default:
				return -1
			}
		case 0x8c: // SHORT_BINUNICODE: writers that make a new string per event (each
			// event's action and compile context), memoized or not
			w := int(buf[p+1])
			if p+2+w+1+16 > len(buf) {
				return -1
			}
			mv := madeValue{str: true, off: p + 2, n: int32(w), code: code}
			if x, ok := d.sameStr(code, buf[p+2:p+2+w]); ok {
				// Another object of a string an earlier event had (CPython's dump makes a
				// new 'N/A' compile context per event): its earlier value, so that the
				// event's extra is known by identity and no string is made per event.
				mv.same, mv.x = true, x
				v = val{k: kStr, x: x}
				sameStrs++
			} else {
				v = val{k: kStr, x: base + uint64(newStrs)}
				newStrs++
			}
			p += 2 + w
			if buf[p] == 0x94 {
				mv.memo = true
				p++
			}
			made[nm] = mv
			nm++
		case ']': // a frames list
			if code != keyFrames || buf[p+1] != 0x94 {
				return -1
			}
			if buf[p+2] != '(' { // EMPTY_LIST MEMOIZE: an empty traceback
				v, p = val{k: kStack, x: uint64(snapshot.EmptyStack)}, p+2
			} else {
				id, w, ok := d.lookupRunAt(buf, p+3)
				if !ok {
					// A traceback not seen before (or not cacheable): its frames, if all are
					// known, are interned at the commit (one per dict: enough for events).
					if missPos >= 0 {
						return -1
					}
					if w, ok = d.missedRun(buf[p+3:]); !ok {
						return -1
					}
					missPos, missLen, id = p+3, w, missStack
				}
				v, p = val{k: kStack, x: uint64(id)}, p+3+w+1 // past the APPENDS
			}
			made[nm] = madeValue{stack: snapshot.StackID(v.x)}
			nm++
		default:
			return -1
		}
		// The fields as event reads them; anything it would refuse goes the slow way, which
		// reports it.
		switch code {
		case keyAction:
			if v.k != kStr {
				return -1
			}
			action = true
			if v.x >= base {
				mv := made[nm-1]
				ev.Action = snapshot.ParseAction(unsafe.String(&buf[mv.off], int(mv.n)))
			} else if v.x < uint64(len(d.actions)) && d.actions[v.x] != 0 {
				ev.Action = snapshot.Action(d.actions[v.x] - 1) // d.action's, without the call
			} else {
				ev.Action = d.action(v)
			}
			if ev.Action == snapshot.ActionOther {
				ref.action = strRef(v)
			}
		case keyFilename, keyState, keyPoolID, keyForwardFrames:
			return -1 // another kind of dict, or a field built from containers
		case keyAddr, keyStream:
			var x uint64
			switch v.k {
			case kInt, kUint:
				x = v.x
			case kNone:
			default:
				return -1
			}
			if code == keyAddr {
				ev.Addr = x
			} else {
				ev.Stream = x
			}
		case keySize, keyTimeUS, keyDeviceFree:
			var x int64
			switch v.k {
			case kInt, kBool:
				x = int64(v.x)
			case kNone:
			default:
				return -1
			}
			switch code {
			case keySize:
				ev.Size = x
			case keyTimeUS:
				ev.TimeUS = x
			default:
				devFree = x
			}
		case keyFrames:
			switch v.k {
			case kStack:
				ev.Stack = snapshot.StackID(v.x)
			case kNone:
			default:
				return -1
			}
		case keyCompileContext:
			ref.compile = strRef(v)
		case keyUserMetadata:
			ref.user = strRef(v)
		case keyCategory:
			ref.category = strRef(v)
		case keyInternalMetadata:
			ref.internal = strRef(v)
		}
	}
	if !action {
		return -1
	}
	if ev.Action == snapshot.ActionOOM {
		ev.Addr = uint64(devFree) // where an oom event keeps it (snapshot.Event.Addr)
	}
	var extra uint32
	knownExtra := true
	if ref != (extraRef{}) {
		if d.lastExtra.ok && d.lastExtra.ref == ref {
			extra = d.lastExtra.id
		} else if extra, knownExtra = d.extraByRef[ref]; !knownExtra && newStrs == 0 && sameStrs == 0 {
			return -1 // a new combination of old strings: the slow path makes (and charges) it
		}
	}
	l := d.objs[target.x].ev
	if uint64(len(l.events)+len(d.stack)-m) >= 1<<32-1 {
		return -1 // the slow path refuses it
	}
	// Commit. First what the batch left on the stack, as its APPENDS would store it.
	d.open = len(d.marks)
	if len(d.stack) > m {
		if err := d.appendItems(d.offset(), target, d.stack[m:]); err != nil {
			d.redo = true // the APPENDS will report it, at its own offset
			return -1
		}
		d.stack = d.stack[:m]
	}
	// The dict's memo slot comes first; it holds the event once it is stored.
	d.memo.reserve(uint64(1 + nm))
	slot := d.memo.push(val{k: kNone})
	for _, mv := range made[:nm] {
		switch {
		case mv.str:
			s := val{k: kStr, x: mv.x}
			if !mv.same {
				s = d.newStr(kStr, string(buf[mv.off:mv.off+int(mv.n)]))
				d.noteStr(mv.code, s.x)
			}
			if mv.memo {
				d.memo.push(s)
			}
		case mv.stack == missStack:
			id := d.in.StackWithHash(d.frameBuf, snapshot.StackHash(d.frameBuf))
			d.runs.put(buf[missPos:], missLen, id)
			d.memo.push(val{k: kStack, x: uint64(id)})
			if ev.Stack == missStack {
				ev.Stack = id
			}
		default:
			d.memo.push(val{k: kStack, x: uint64(mv.stack)})
		}
	}
	if !knownExtra {
		// New strings: the extra is found by their content, as event finds it.
		id, err := d.extraOf(d.offset(), ref)
		if err != nil {
			d.redo = true
			return -1
		}
		extra = id
	}
	if ref != (extraRef{}) {
		ev.Extra = snapshot.MakeExtraID(extra)
		d.lastExtra.ref, d.lastExtra.id, d.lastExtra.ok = ref, extra, true
	}
	if len(l.events) < cap(l.events) && d.opt.MaxEvents <= 0 {
		// appendEvent's common case, inline: room in the list, no bound to keep.
		l.events = append(l.events, ev)
		if d.pipe != nil && len(l.events)-l.published >= indexChunk {
			d.handOver(l)
		}
	} else {
		d.appendEvent(l, ev)
	}
	d.fastEvents++
	// put, with its common case inline (put itself is too large to inline).
	if stored := (val{k: kEvent, x: target.x<<32 | uint64(len(l.events)-1)}); fits(stored) {
		d.memo.putPacked(slot, stored)
	} else {
		d.memo.put(slot, stored)
	}
	d.memoAhead()
	return p + 1
}

// madeValue is a value a trace event dict makes as it is read: a new string (its bytes in
// the input, and whether MEMOIZE follows) or a frames list's stack.
type madeValue struct {
	off   int
	x     uint64 // the string's index, when same
	n     int32
	stack snapshot.StackID
	code  keyCode // the key of a string
	str   bool
	memo  bool
	same  bool // the string is one an earlier event made (sameStr)
}

// sameStr finds, for the value of an event's optional string field (compile_context,
// user_metadata, category, internal_metadata), a string with the same bytes that an earlier
// event's field made (the four used last, per field): its index. A writer that makes a new object
// per event (CPython pickling the 'N/A' compile context of every event of PyTorch 2.5 on)
// would otherwise cost a string, a memo-sized string table entry and a new extra identity per
// event, which grew the identity map without bound.
func (d *decoder) sameStr(code keyCode, b []byte) (uint64, bool) {
	i := uint(code - keyCompileContext)
	if i >= uint(len(d.fresh)) {
		return 0, false
	}
	f := &d.fresh[i]
	for j, x := range f {
		if x != 0 && d.strs[x-1] == string(b) {
			copy(f[1:j+1], f[:j]) // to the front
			f[0] = x
			return x - 1, true
		}
	}
	return 0, false
}

// noteStr remembers string x as the newest value of an optional string field (sameStr).
func (d *decoder) noteStr(code keyCode, x uint64) {
	if i := uint(code - keyCompileContext); i < uint(len(d.fresh)) {
		f := &d.fresh[i]
		copy(f[1:], f[:len(f)-1])
		f[0] = x + 1
	}
}

// missStack stands for the stack of a run fastEvent interns at its commit.
const missStack snapshot.StackID = math.MinInt32

// missedRun reads a run of references to known frames ending in APPENDS at the start of buf
// into d.frameBuf, as frameRun and APPENDS would: its length, or false for anything else.
func (d *decoder) missedRun(buf []byte) (int, bool) {
	ids := d.frameBuf[:0]
	for p := 0; p+5 <= len(buf); {
		var idx uint64
		switch buf[p] {
		case 'h':
			idx, p = uint64(buf[p+1]), p+2
		case 'j':
			idx, p = uint64(binary.LittleEndian.Uint32(buf[p+1:])), p+5
		case 'e':
			d.frameBuf = ids
			return p, len(ids) > 0
		default:
			return 0, false
		}
		f, ok := d.memo.get(idx)
		if !ok {
			return 0, false
		}
		// A frame dict shared before it was reduced keeps its object in the memo: APPENDS
		// would resolve it, as here.
		fv := d.resolved(f)
		if fv.k != kFrame {
			return 0, false
		}
		ids = append(ids, snapshot.FrameID(fv.x))
	}
	return 0, false
}

// errRedo ends a decode whose open batch met an opcode that could see what fastEvent changed
// (see fastEvent): the input is decoded again without it.
var errRedo = errors.New("pickle: decode again without the event fast path")

// openSafe reports whether opcode op may run while a trace batch is open (d.open != 0):
// anything that only pushes, reads the memo (BINGET checks for events itself), or works
// above a mark of its own; at the batch's own level MARK and MEMOIZE only with something of
// the batch's on the stack, and APPENDS, which closes the batch.
func (d *decoder) openSafe(op byte) bool {
	switch op {
	case 0x80, 0x95, // PROTO, FRAME
		'}', ']', ')', 'K', 'M', 'J', 0x8a, 0x8b, 'I', 'L', 'F', 'S', 'V', 'G', 'N', 0x88, 0x89,
		0x8c, 'X', 'B', 'C', 0x8d, 0x8e, 0x96, 'T', 'U', 'h', 'j', 'g':
		return true
	case '(', 0x94, 'q', 'r', 'p': // MARK, MEMOIZE, BINPUT, LONG_BINPUT, PUT
		return len(d.marks) > d.open || len(d.stack) > d.marks[len(d.marks)-1]
	case 'e':
		return true
	case 'u', 'a', 's', 't', 'l', 'd', 0x85, 0x86, 0x87: // they take only what their mark holds
		return len(d.marks) > d.open
	}
	return false
}
