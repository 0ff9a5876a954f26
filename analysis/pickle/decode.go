// Package pickle is memsnap's purpose-built pickle decoder for CUDA memory snapshots. It walks
// the opcodes once, never executes anything (the only global it accepts is the TorchScript
// writer's torch.jit._pickle.restore_type_tag, treated as the identity), and reduces the hot
// parts of a snapshot as they stream past: frame dicts become interned frame ids, frames lists
// become interned stack ids, trace event dicts become typed snapshot.Event values (EventList)
// and block dicts typed blocks (Block). The memo is a fast path: a frames list referenced again
// is resolved to its stack id without re-reading. Everything else (segments, settings,
// annotations) comes out as a plain value tree (map[string]any, []any, string, int64, uint64,
// *big.Int, float64, bool, nil) for the loader.
package pickle

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/big"
	"unsafe"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// Error is a decoding failure at a byte offset of the (decompressed) pickle stream.
type Error struct {
	Offset int64
	Msg    string
}

func (e *Error) Error() string { return fmt.Sprintf("%s (at byte %d)", e.Msg, e.Offset) }

// Result is what Decode returns: the plain value tree plus the interned frames and stacks that
// the reduced parts of the tree (snapshot.StackID leaves, []snapshot.Event lists) refer to.
type Result struct {
	Root     any
	Interner *snapshot.Interner
	Extras   []snapshot.EventExtra
	Protocol int
	TypeTag  bool // the restore_type_tag global was used
}

// Options bound the decoder.
type Options struct {
	// Progress, when set, is called about every 16 MiB of input with the bytes consumed so far.
	Progress func(done int64)
	// MaxEvents, when positive, keeps only the newest MaxEvents events of each trace list
	// while decoding, so memory stays bounded whatever the trace length.
	MaxEvents int
	// SizeHint, when positive, is the input's size in bytes. Event lists are then sized up
	// front for the most events such an input can hold: capacity that is never written costs
	// no resident memory, and growing a list of millions of events by copying costs seconds
	// of page faults.
	SizeHint int64
}

// EventList is a decoded device trace: the kept events, oldest first, and how many older
// events a MaxEvents bound dropped.
type EventList struct {
	Events  []snapshot.Event
	Dropped int64
}

type kind uint8

const (
	kNone kind = iota
	kBool
	kInt   // x holds the int64
	kUint  // x holds a uint64 above MaxInt64
	kBig   // x indexes d.strs: the decimal string of a larger integer
	kFloat // x holds the float64 bits
	kStr
	kBytes
	kList  // x indexes d.objs
	kTuple // x indexes d.objs
	kDict  // x indexes d.objs
	kStack // x holds a snapshot.StackID (a reduced frames list)
	kFrame // x holds a snapshot.FrameID (a reduced frame dict)
	kEvent // x: the event list object << 32 | the event's index in it
	kBlock // x indexes d.blocks: a reduced block dict
	kGlobal
	kMark // only on the mark stack bookkeeping, never a value
)

// val is one Python value on the stack or in the memo: 16 bytes and no pointers, so the memo
// (millions of slots) is cheap to fill and invisible to the garbage collector. Containers live
// in d.objs and strings in d.strs; x indexes them.
type val struct {
	k kind
	x uint64
}

// object is a list, tuple or dict under construction. Dict items alternate key, value.
// Once a frame dict, frames list, event dict or block dict is reduced, items is released and
// red holds the reduction; every later reference (memo or a value still on the stack)
// resolves to it.
//
// Most reduced objects are recycled instead: an object that was never read back from the memo
// (nor DUPed, nor put in a tuple) can have no reference left but its one memo slot, which is
// rewritten to the reduction. Only the containers still under construction stay allocated,
// so memory follows the snapshot's size, not the number of dicts in the file.
type object struct {
	items  []val
	frames []snapshot.FrameID // a list holding only frames, before it is reduced to a stack
	// framesHash is snapshot.StackHash(frames) when hashedN == len(frames) (kept up to date
	// while a traceback is read, so interning it needs no second pass).
	framesHash uint64
	hashedN    int
	ev         *eventList // a list of reduced trace events
	red        uint64     // the reduction's payload (see redKind)
	redKind    kind       // kNone until reduced; then kStack, kFrame, kEvent or kBlock
	shared     bool       // more references may exist than the one memo slot
	memoSlot   int32      // the memo slot holding this object, -1 if none
}

type eventList struct {
	events  []snapshot.Event
	dropped int64 // events dropped from the front by Options.MaxEvents
}

const (
	maxDepth      = 256
	bufSize       = 1 << 20
	progressEvery = 16 << 20
)

type decoder struct {
	src      io.Reader
	buf      []byte // buf[pos:end] is read but not yet decoded
	pos, end int
	base     int64 // input offset of buf[0]
	srcDone  bool  // src returned EOF or an error
	opAt     int64 // offset of the opcode being executed
	stack    []val
	marks    []int
	memo     memoTable
	memoHi   map[uint64]val
	objs     []object
	strs     []string
	keys     []keyCode // key code of each string in strs
	blocks   blockStore
	// lastEvents is the trace list being filled, the only one holding spare capacity.
	lastEvents *eventList
	// Recycled object indexes, dicts apart from lists so that a reused object's item
	// capacity fits its next use (frames lists are long, event dicts short).
	freeLists, freeDicts []uint32
	in                   *snapshot.Interner
	extras               []snapshot.EventExtra
	extraID              map[snapshot.EventExtra]uint32
	proto                int
	typeTag              bool
	ctx                  context.Context
	opt                  Options
	nextProgress         int64
	frameBuf             []snapshot.FrameID
}

// Decode decodes one pickle from r. Bytes after STOP are ignored.
func Decode(ctx context.Context, r io.Reader, opt Options) (*Result, error) {
	d := &decoder{
		src:          r,
		buf:          make([]byte, bufSize),
		in:           snapshot.NewInterner(),
		extras:       []snapshot.EventExtra{{}},
		extraID:      map[snapshot.EventExtra]uint32{{}: 0},
		ctx:          ctx,
		opt:          opt,
		nextProgress: progressEvery,
	}
	defer d.memo.release()
	root, err := d.run()
	if err != nil {
		return nil, err
	}
	tree, err := d.toTree(root, 0)
	if err != nil {
		return nil, err
	}
	return &Result{Root: tree, Interner: d.in, Extras: d.extras, Protocol: d.proto, TypeTag: d.typeTag}, nil
}

func (d *decoder) fail(off int64, format string, args ...any) error {
	return &Error{Offset: off, Msg: fmt.Sprintf(format, args...)}
}

// offset is the input offset of the next unread byte.
func (d *decoder) offset() int64 { return d.base + int64(d.pos) }

// fill makes at least n (<= bufSize) bytes available unless the input ends first.
func (d *decoder) fill(n int) bool {
	if d.end-d.pos >= n {
		return true
	}
	copy(d.buf, d.buf[d.pos:d.end])
	d.base += int64(d.pos)
	d.end -= d.pos
	d.pos = 0
	for d.end < n && !d.srcDone {
		m, err := d.src.Read(d.buf[d.end:])
		d.end += m
		if err != nil {
			d.srcDone = true
		}
	}
	return d.end >= n
}

// read returns the next n bytes. The slice is valid until the next read.
func (d *decoder) read(n int) ([]byte, error) {
	if d.end-d.pos >= n {
		b := d.buf[d.pos : d.pos+n]
		d.pos += n
		return b, nil
	}
	if n > bufSize {
		return d.readLong(n)
	}
	if !d.fill(n) {
		if n > 64 {
			return nil, d.fail(d.opAt, "truncated: declared length %d, input ends after %d bytes", n, d.end-d.pos)
		}
		return nil, d.fail(d.offset(), "truncated: needed %d more bytes", n)
	}
	b := d.buf[d.pos : d.pos+n]
	d.pos += n
	return b, nil
}

// readLong reads n bytes that do not fit the buffer, growing the destination only as data
// arrives, so a declared length larger than the input costs no more than the input.
func (d *decoder) readLong(n int) ([]byte, error) {
	out := make([]byte, 0, bufSize)
	for len(out) < n {
		if d.pos == d.end && !d.fill(1) {
			return nil, d.fail(d.opAt, "truncated: declared length %d, input ends after %d bytes", n, len(out))
		}
		take := min(n-len(out), d.end-d.pos)
		out = append(out, d.buf[d.pos:d.pos+take]...)
		d.pos += take
	}
	return out, nil
}

func (d *decoder) byte1() (byte, error) {
	if d.pos < d.end || d.fill(1) {
		c := d.buf[d.pos]
		d.pos++
		return c, nil
	}
	return 0, d.fail(d.offset(), "truncated: no STOP opcode")
}

func (d *decoder) push(v val) { d.stack = append(d.stack, v) }

func (d *decoder) pop(at int64, op string) (val, error) {
	lo := 0
	if len(d.marks) > 0 {
		lo = d.marks[len(d.marks)-1]
	}
	if len(d.stack) <= lo {
		return val{}, d.fail(at, "stack underflow in %s", op)
	}
	v := d.stack[len(d.stack)-1]
	d.stack = d.stack[:len(d.stack)-1]
	return v, nil
}

func (d *decoder) top(at int64, op string) (*val, error) {
	lo := 0
	if len(d.marks) > 0 {
		lo = d.marks[len(d.marks)-1]
	}
	if len(d.stack) <= lo {
		return nil, d.fail(at, "stack underflow in %s", op)
	}
	return &d.stack[len(d.stack)-1], nil
}

// popMark returns the items above the topmost mark and removes them and the mark.
func (d *decoder) popMark(at int64, op string) ([]val, error) {
	if len(d.marks) == 0 {
		return nil, d.fail(at, "%s without MARK", op)
	}
	m := d.marks[len(d.marks)-1]
	d.marks = d.marks[:len(d.marks)-1]
	items := d.stack[m:]
	d.stack = d.stack[:m]
	return items, nil
}

func (d *decoder) newObj(k kind, items []val) val {
	free := &d.freeLists
	if k == kDict {
		free = &d.freeDicts
	}
	if n := len(*free); n > 0 {
		i := (*free)[n-1]
		*free = (*free)[:n-1]
		o := &d.objs[i]
		if items == nil {
			items = o.items[:0]
		}
		*o = object{items: items, frames: o.frames[:0], memoSlot: -1, framesHash: snapshot.StackHashSeed}
		return val{k: k, x: uint64(i)}
	}
	d.objs = append(d.objs, object{items: items, memoSlot: -1, framesHash: snapshot.StackHashSeed})
	return val{k: k, x: uint64(len(d.objs) - 1)}
}

// share marks a container as possibly referenced from more than one place.
func (d *decoder) share(v val) {
	if v.k == kList || v.k == kDict || v.k == kTuple {
		d.objs[v.x].shared = true
	}
}

func (d *decoder) memoize(idx uint64, v val) {
	if v.k == kList || v.k == kDict || v.k == kTuple {
		if o := &d.objs[v.x]; o.memoSlot == -1 && idx < d.memo.n+4096 && idx < 1<<31 {
			o.memoSlot = int32(idx)
		} else {
			o.shared = true
		}
	}
	// Dense slots grow the table only near its end: a far index (a hostile LONG_BINPUT) goes
	// to the map, so the memo never costs more than the input.
	if idx < d.memo.n+4096 {
		d.memo.set(idx, v)
		return
	}
	if d.memoHi == nil {
		d.memoHi = map[uint64]val{}
	}
	d.memoHi[idx] = v
}

func (d *decoder) memoGet(at int64, idx uint64) (val, error) {
	if p := d.memo.at(idx); p != nil && p.k != kMark {
		v := d.resolved(*p)
		d.share(v)
		return v, nil
	}
	if v, ok := d.memoHi[idx]; ok {
		v = d.resolved(v)
		d.share(v)
		return v, nil
	}
	return val{}, d.fail(at, "memo slot %d read before it was set", idx)
}

func (d *decoder) length(b []byte) int { return int(binary.LittleEndian.Uint32(b)) }

// run executes opcodes until STOP and returns the value left on the stack.
func (d *decoder) run() (val, error) {
	for {
		at := d.offset()
		d.opAt = at
		if at >= d.nextProgress {
			d.nextProgress += progressEvery
			if err := d.ctx.Err(); err != nil {
				return val{}, err
			}
			if d.opt.Progress != nil {
				d.opt.Progress(at)
			}
		}
		if d.end-d.pos >= fastWindow {
			if d.fastOps(); d.offset() != at {
				continue // took some opcodes: back to the bookkeeping above
			}
		}
		op, err := d.byte1()
		if err != nil {
			if at == 0 {
				return val{}, d.fail(0, "empty input")
			}
			return val{}, err
		}
		switch op {
		case 0x80: // PROTO
			b, err := d.read(1)
			if err != nil {
				return val{}, err
			}
			if b[0] > 5 {
				return val{}, d.fail(at, "unsupported pickle protocol %d", b[0])
			}
			d.proto = int(b[0])
		case 0x95: // FRAME: a length hint only
			if _, err := d.read(8); err != nil {
				return val{}, err
			}
		case '}': // EMPTY_DICT
			d.push(d.newObj(kDict, nil))
		case ']': // EMPTY_LIST
			d.push(d.newObj(kList, nil))
		case ')': // EMPTY_TUPLE
			d.push(d.newObj(kTuple, nil))
		case '(': // MARK
			if len(d.marks) >= maxDepth*64 {
				return val{}, d.fail(at, "too many nested MARKs")
			}
			d.marks = append(d.marks, len(d.stack))
			if n := len(d.stack); n > 0 && d.stack[n-1].k == kList {
				d.frameRun()
			}
		case 0x94: // MEMOIZE
			t, err := d.top(at, "MEMOIZE")
			if err != nil {
				return val{}, err
			}
			d.memoize(d.memo.n, *t)
		case 'q': // BINPUT
			b, err := d.read(1)
			if err != nil {
				return val{}, err
			}
			t, err := d.top(at, "BINPUT")
			if err != nil {
				return val{}, err
			}
			d.memoize(uint64(b[0]), *t)
		case 'r': // LONG_BINPUT
			b, err := d.read(4)
			if err != nil {
				return val{}, err
			}
			t, err := d.top(at, "LONG_BINPUT")
			if err != nil {
				return val{}, err
			}
			d.memoize(uint64(binary.LittleEndian.Uint32(b)), *t)
		case 'h': // BINGET
			b, err := d.read(1)
			if err != nil {
				return val{}, err
			}
			v, err := d.memoGet(at, uint64(b[0]))
			if err != nil {
				return val{}, err
			}
			d.push(v)
		case 'j': // LONG_BINGET
			b, err := d.read(4)
			if err != nil {
				return val{}, err
			}
			v, err := d.memoGet(at, uint64(binary.LittleEndian.Uint32(b)))
			if err != nil {
				return val{}, err
			}
			d.push(v)
		case 0x8c: // SHORT_BINUNICODE
			b, err := d.read(1)
			if err != nil {
				return val{}, err
			}
			s, err := d.read(int(b[0]))
			if err != nil {
				return val{}, err
			}
			d.push(d.newStr(kStr, string(s)))
		case 'X', 'B', 'C', 0x8d, 0x8e, 0x96: // BINUNICODE, BINBYTES, SHORT_BINBYTES, BINUNICODE8, BINBYTES8, BYTEARRAY8
			var n uint64
			switch op {
			case 'X', 'B':
				b, err := d.read(4)
				if err != nil {
					return val{}, err
				}
				n = uint64(binary.LittleEndian.Uint32(b))
			case 'C':
				b, err := d.read(1)
				if err != nil {
					return val{}, err
				}
				n = uint64(b[0])
			default:
				b, err := d.read(8)
				if err != nil {
					return val{}, err
				}
				n = binary.LittleEndian.Uint64(b)
			}
			if n > math.MaxInt32 {
				return val{}, d.fail(at, "string length %d is larger than any snapshot", n)
			}
			s, err := d.read(int(n))
			if err != nil {
				return val{}, err
			}
			if op == 'X' || op == 0x8d {
				d.push(d.newStr(kStr, string(s)))
			} else {
				d.push(d.newStr(kBytes, string(s)))
			}
		case 'K': // BININT1
			b, err := d.read(1)
			if err != nil {
				return val{}, err
			}
			d.push(val{k: kInt, x: uint64(b[0])})
		case 'M': // BININT2
			b, err := d.read(2)
			if err != nil {
				return val{}, err
			}
			d.push(val{k: kInt, x: uint64(binary.LittleEndian.Uint16(b))})
		case 'J': // BININT
			b, err := d.read(4)
			if err != nil {
				return val{}, err
			}
			d.push(val{k: kInt, x: uint64(int64(int32(binary.LittleEndian.Uint32(b))))})
		case 0x8a: // LONG1
			b, err := d.read(1)
			if err != nil {
				return val{}, err
			}
			raw, err := d.read(int(b[0]))
			if err != nil {
				return val{}, err
			}
			d.push(d.long(raw))
		case 0x8b: // LONG4
			b, err := d.read(4)
			if err != nil {
				return val{}, err
			}
			n := binary.LittleEndian.Uint32(b)
			if n > 1<<16 {
				return val{}, d.fail(at, "integer of %d bytes is larger than any snapshot value", n)
			}
			raw, err := d.read(int(n))
			if err != nil {
				return val{}, err
			}
			d.push(d.long(raw))
		case 'G': // BINFLOAT (big-endian)
			b, err := d.read(8)
			if err != nil {
				return val{}, err
			}
			d.push(val{k: kFloat, x: binary.BigEndian.Uint64(b)})
		case 0x88: // NEWTRUE
			d.push(val{k: kBool, x: 1})
		case 0x89: // NEWFALSE
			d.push(val{k: kBool})
		case 'N': // NONE
			d.push(val{k: kNone})
		case 0x85, 0x86, 0x87: // TUPLE1, TUPLE2, TUPLE3
			n := int(op - 0x84)
			lo := 0
			if len(d.marks) > 0 {
				lo = d.marks[len(d.marks)-1]
			}
			if len(d.stack)-lo < n {
				return val{}, d.fail(at, "stack underflow in TUPLE%d", n)
			}
			items := append([]val(nil), d.stack[len(d.stack)-n:]...)
			d.stack = d.stack[:len(d.stack)-n]
			for _, it := range items {
				d.share(it)
			}
			d.push(d.newObj(kTuple, items))
		case 't': // TUPLE
			items, err := d.popMark(at, "TUPLE")
			if err != nil {
				return val{}, err
			}
			for _, it := range items {
				d.share(it)
			}
			d.push(d.newObj(kTuple, append([]val(nil), items...)))
		case 'l': // LIST
			items, err := d.popMark(at, "LIST")
			if err != nil {
				return val{}, err
			}
			v := d.newObj(kList, nil)
			if err := d.appendItems(at, v, items); err != nil {
				return val{}, err
			}
			d.push(v)
		case 'd': // DICT
			items, err := d.popMark(at, "DICT")
			if err != nil {
				return val{}, err
			}
			v := d.newObj(kDict, nil)
			if err := d.setItems(at, v, items); err != nil {
				return val{}, err
			}
			d.push(v)
		case 'a': // APPEND
			item, err := d.pop(at, "APPEND")
			if err != nil {
				return val{}, err
			}
			t, err := d.top(at, "APPEND")
			if err != nil {
				return val{}, err
			}
			if err := d.appendItems(at, *t, []val{item}); err != nil {
				return val{}, err
			}
		case 'e': // APPENDS
			items, err := d.popMark(at, "APPENDS")
			if err != nil {
				return val{}, err
			}
			t, err := d.top(at, "APPENDS")
			if err != nil {
				return val{}, err
			}
			if err := d.appendItems(at, *t, items); err != nil {
				return val{}, err
			}
		case 's': // SETITEM
			if len(d.stack) < 3 {
				return val{}, d.fail(at, "stack underflow in SETITEM")
			}
			v, _ := d.pop(at, "SETITEM")
			k, err := d.pop(at, "SETITEM")
			if err != nil {
				return val{}, err
			}
			t, err := d.top(at, "SETITEM")
			if err != nil {
				return val{}, err
			}
			if err := d.setItems(at, *t, []val{k, v}); err != nil {
				return val{}, err
			}
		case 'u': // SETITEMS
			items, err := d.popMark(at, "SETITEMS")
			if err != nil {
				return val{}, err
			}
			if len(items)%2 != 0 {
				return val{}, d.fail(at, "SETITEMS with an odd number of items")
			}
			t, err := d.top(at, "SETITEMS")
			if err != nil {
				return val{}, err
			}
			if err := d.setItems(at, *t, items); err != nil {
				return val{}, err
			}
		case 'c': // GLOBAL "module\nname\n"
			mod, err := d.readLine(at)
			if err != nil {
				return val{}, err
			}
			name, err := d.readLine(at)
			if err != nil {
				return val{}, err
			}
			if err := d.global(at, mod, name); err != nil {
				return val{}, err
			}
		case 0x93: // STACK_GLOBAL
			name, err := d.pop(at, "STACK_GLOBAL")
			if err != nil {
				return val{}, err
			}
			mod, err := d.pop(at, "STACK_GLOBAL")
			if err != nil {
				return val{}, err
			}
			if mod.k != kStr || name.k != kStr {
				return val{}, d.fail(at, "STACK_GLOBAL needs two strings")
			}
			if err := d.global(at, d.str(mod), d.str(name)); err != nil {
				return val{}, err
			}
		case 'R': // REDUCE: only restore_type_tag(obj, type_str) → obj
			args, err := d.pop(at, "REDUCE")
			if err != nil {
				return val{}, err
			}
			fn, err := d.pop(at, "REDUCE")
			if err != nil {
				return val{}, err
			}
			if fn.k != kGlobal {
				return val{}, d.fail(at, "REDUCE of something that is not restore_type_tag: refusing to call it")
			}
			if args.k != kTuple || len(d.objs[args.x].items) == 0 {
				return val{}, d.fail(at, "restore_type_tag needs a tuple argument")
			}
			obj := d.objs[args.x].items[0]
			d.share(obj)
			d.push(obj)
		case '0': // POP
			if _, err := d.pop(at, "POP"); err != nil {
				return val{}, err
			}
		case '1': // POP_MARK
			if _, err := d.popMark(at, "POP_MARK"); err != nil {
				return val{}, err
			}
		case '2': // DUP
			t, err := d.top(at, "DUP")
			if err != nil {
				return val{}, err
			}
			d.share(*t)
			d.push(*t)
		case '.': // STOP
			if len(d.marks) != 0 || len(d.stack) != 1 {
				return val{}, d.fail(at, "STOP with %d values on the stack (want 1)", len(d.stack))
			}
			return d.stack[0], nil
		default:
			return val{}, d.fail(at, "unsupported or invalid opcode 0x%02x", op)
		}
	}
}

func (d *decoder) readLine(at int64) (string, error) {
	var out []byte
	for len(out) < 256 {
		c, err := d.byte1()
		if err != nil {
			return "", err
		}
		if c == '\n' {
			return string(out), nil
		}
		out = append(out, c)
	}
	return "", d.fail(at, "GLOBAL name too long")
}

func (d *decoder) global(at int64, mod, name string) error {
	if mod == "torch.jit._pickle" && name == "restore_type_tag" {
		d.typeTag = true
		d.push(val{k: kGlobal})
		return nil
	}
	return d.fail(at, "refusing global %s.%s: a snapshot holds only plain data", mod, name)
}

// decodeLong decodes a little-endian two's-complement integer.
func (d *decoder) long(raw []byte) val {
	v, big := decodeLong(raw)
	if v.k == kBig {
		return d.newStr(kBig, big)
	}
	return v
}

// decodeLong decodes a little-endian two's-complement integer; integers beyond 64 bits come
// back as kBig with their decimal string.
func decodeLong(raw []byte) (val, string) {
	n := len(raw)
	if n == 0 {
		return val{k: kInt}, ""
	}
	if n <= 8 {
		var u uint64
		for i := n - 1; i >= 0; i-- {
			u = u<<8 | uint64(raw[i])
		}
		if raw[n-1]&0x80 != 0 && n < 8 { // sign-extend
			u |= ^uint64(0) << (8 * n)
		}
		return val{k: kInt, x: u}, ""
	}
	if n == 9 && raw[8] == 0 {
		u := binary.LittleEndian.Uint64(raw)
		if u > math.MaxInt64 {
			return val{k: kUint, x: u}, ""
		}
		return val{k: kInt, x: u}, ""
	}
	be := make([]byte, n)
	for i := range raw {
		be[n-1-i] = raw[i]
	}
	b := new(big.Int).SetBytes(be)
	if raw[n-1]&0x80 != 0 {
		b.Sub(b, new(big.Int).Lsh(big.NewInt(1), uint(8*n)))
	}
	return val{k: kBig}, b.String()
}

// memoTable is the dense part of the memo, in fixed pages so that growing it never copies.
type memoTable struct {
	pages  [][]val
	raw    [][]byte // the pages' memory, to release
	mapped []bool   // raw[i] is an anonymous mapping (else heap memory)
	n      uint64   // slots 0..n-1 exist (unset ones hold kMark); pages beyond n are zero
}

const memoPageBits = 17 // 4 MiB pages: each holds at least one aligned huge page

// release returns the pages; the table is empty afterwards.
func (m *memoTable) release() {
	for i, r := range m.raw {
		unmapScratch(r, m.mapped[i])
	}
	*m = memoTable{}
}

func (m *memoTable) at(i uint64) *val {
	if i >= m.n {
		return nil
	}
	return m.slot(i)
}

func (m *memoTable) set(i uint64, v val) {
	for m.n <= i {
		if m.n>>memoPageBits == uint64(len(m.pages)) {
			// Memo pages hold no pointers, so they can live outside the Go heap for the
			// decode's duration: no GC accounting, huge pages, returned at once afterwards.
			raw, mapped := mapScratch((1 << memoPageBits) * int(unsafe.Sizeof(val{})))
			m.raw = append(m.raw, raw)
			m.mapped = append(m.mapped, mapped)
			m.pages = append(m.pages, unsafe.Slice((*val)(unsafe.Pointer(unsafe.SliceData(raw))), 1<<memoPageBits))
		}
		if m.n < i { // a slot skipped by BINPUT stays unset
			*m.slot(m.n) = val{k: kMark}
		}
		m.n++
	}
	*m.slot(i) = v
}

func (m *memoTable) slot(i uint64) *val {
	return &m.pages[i>>memoPageBits][i&(1<<memoPageBits-1)]
}

// frameRun is the hot path of a snapshot: a traceback written as EMPTY_LIST MARK, then one
// BINGET or LONG_BINGET per (already reduced) frame, then APPENDS. Right after the MARK it
// appends such a run of frame references straight to the list below the mark, without
// pushing them; if the run does not end in APPENDS, the frames go back on the stack as if
// nothing had been skipped, and decoding continues generically.
func (d *decoder) frameRun() {
	lst := &d.objs[d.stack[len(d.stack)-1].x]
	if lst.ev != nil || len(lst.items) > 0 || lst.redKind != kNone {
		return
	}
	start := len(lst.frames)
	h := lst.framesHash
	if lst.hashedN != start {
		h = snapshot.StackHash(lst.frames)
	}
	frames := lst.frames
	for d.fill(5) {
		// Decode from a local window while five bytes (the longest reference) remain.
		buf, pos := d.buf[:d.end], d.pos
		for pos+5 <= len(buf) {
			var idx uint64
			var width int
			switch buf[pos] {
			case 'h':
				idx, width = uint64(buf[pos+1]), 2
			case 'j':
				idx, width = uint64(binary.LittleEndian.Uint32(buf[pos+1:])), 5
			}
			var p *val
			if width > 0 {
				p = d.memo.at(idx)
			}
			if p == nil || p.k != kFrame {
				d.pos, lst.frames = pos, frames
				if buf[pos] == 'e' || len(frames) == start {
					lst.framesHash, lst.hashedN = h, len(frames)
					return // APPENDS takes the run as it stands (or there was none)
				}
				d.unrun(lst, start)
				return
			}
			frames = append(frames, snapshot.FrameID(p.x))
			h = snapshot.HashFrame(h, snapshot.FrameID(p.x))
			pos += width
		}
		d.pos = pos
	}
	lst.frames = frames
	d.unrun(lst, start)
}

// unrun puts the frames a frameRun took back on the stack.
func (d *decoder) unrun(lst *object, start int) {
	for _, f := range lst.frames[start:] {
		d.push(val{k: kFrame, x: uint64(f)})
	}
	lst.frames = lst.frames[:start]
	lst.hashedN = -1
}

// newStr stores a string and returns its value; the snapshot's own key names also get a
// key code, so that dict fields are matched by a byte compare, not a string compare.
func (d *decoder) newStr(k kind, s string) val {
	d.strs = append(d.strs, s)
	code := keyNone
	if k == kStr && len(s) <= len("internal_metadata") {
		code = keyCodes[s]
	}
	d.keys = append(d.keys, code)
	return val{k: k, x: uint64(len(d.strs) - 1)}
}

// key is the key code of a value (keyNone for anything but a known key string).
func (d *decoder) key(v val) keyCode {
	if v.k != kStr {
		return keyNone
	}
	return d.keys[v.x]
}

type keyCode uint8

const (
	keyNone keyCode = iota
	keyFrames
	keyFilename
	keyLine
	keyName
	keyAction
	keyAddr
	keySize
	keyStream
	keyTimeUS
	keyDeviceFree
	keyCompileContext
	keyUserMetadata
	keyCategory
	keyInternalMetadata
	keyPoolID
	keyForwardFrames
	keyAddress
	keyRequestedSize
	keyState
	keyHistory
)

var keyCodes = map[string]keyCode{
	"frames": keyFrames, "filename": keyFilename, "line": keyLine, "name": keyName,
	"action": keyAction, "addr": keyAddr, "size": keySize, "stream": keyStream,
	"time_us": keyTimeUS, "device_free": keyDeviceFree, "compile_context": keyCompileContext,
	"user_metadata": keyUserMetadata, "category": keyCategory,
	"internal_metadata": keyInternalMetadata, "pool_id": keyPoolID,
	"forward_frames": keyForwardFrames, "address": keyAddress,
	"requested_size": keyRequestedSize, "state": keyState, "history": keyHistory,
}

// str is the string of a kStr, kBytes or kBig value ("" for anything else).
func (d *decoder) str(v val) string {
	if v.k == kStr || v.k == kBytes || v.k == kBig {
		return d.strs[v.x]
	}
	return ""
}

// fastWindow is the most bytes one opcode handled by fastOps reads.
const fastWindow = 16

// fastOps executes the opcodes that make up most of a snapshot's trace — memo reads and
// writes, small integers, MARK and empty containers — straight from the input window, without
// the per-opcode bookkeeping of run. It stops before anything else, before anything that could
// fail (run then reports it with its offset), and every 64 Ki opcodes, so that run keeps
// checking cancellation and progress; it has the exact effect run would have had.
func (d *decoder) fastOps() {
	buf, pos := d.buf[:d.end], d.pos
	defer func() { d.pos = pos }()
	for n := 0; n < 1<<16 && pos+fastWindow <= len(buf); n++ {
		switch buf[pos] {
		case 'h', 'j': // BINGET, LONG_BINGET
			idx, width := uint64(buf[pos+1]), 2
			if buf[pos] == 'j' {
				idx, width = uint64(binary.LittleEndian.Uint32(buf[pos+1:])), 5
			}
			p := d.memo.at(idx)
			if p == nil || p.k == kMark {
				return
			}
			v := d.resolved(*p)
			d.share(v)
			d.push(v)
			pos += width
		case 0x94: // MEMOIZE
			if len(d.stack) == 0 || (len(d.marks) > 0 && len(d.stack) <= d.marks[len(d.marks)-1]) {
				return
			}
			d.memoize(d.memo.n, d.stack[len(d.stack)-1])
			pos++
		case 'K': // BININT1
			d.push(val{k: kInt, x: uint64(buf[pos+1])})
			pos += 2
		case 'M': // BININT2
			d.push(val{k: kInt, x: uint64(binary.LittleEndian.Uint16(buf[pos+1:]))})
			pos += 3
		case 'J': // BININT
			d.push(val{k: kInt, x: uint64(int64(int32(binary.LittleEndian.Uint32(buf[pos+1:]))))})
			pos += 5
		case 0x8a: // LONG1 of at most 8 bytes
			n := int(buf[pos+1])
			if n > 8 {
				return
			}
			v, _ := decodeLong(buf[pos+2 : pos+2+n])
			d.push(v)
			pos += 2 + n
		case 0x88: // NEWTRUE
			d.push(val{k: kBool, x: 1})
			pos++
		case 0x89: // NEWFALSE
			d.push(val{k: kBool})
			pos++
		case 'N': // NONE
			d.push(val{k: kNone})
			pos++
		case '}': // EMPTY_DICT
			d.push(d.newObj(kDict, nil))
			pos++
		case ']': // EMPTY_LIST
			d.push(d.newObj(kList, nil))
			pos++
		case '(': // MARK
			if len(d.marks) >= maxDepth*64 {
				return
			}
			d.marks = append(d.marks, len(d.stack))
			pos++
			if n := len(d.stack); n > 0 && d.stack[n-1].k == kList {
				d.pos = pos
				d.frameRun()
				buf, pos = d.buf[:d.end], d.pos
			}
		default:
			return
		}
	}
}
