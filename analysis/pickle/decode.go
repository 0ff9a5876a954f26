// Package pickle is memsnap's purpose-built pickle decoder for CUDA memory snapshots. It walks
// the opcodes once, never executes anything (the only global it accepts is the TorchScript
// writer's torch.jit._pickle.restore_type_tag, treated as the identity), and reduces the hot
// parts of a snapshot as they stream past: frame dicts become interned frame ids, frames lists
// become interned stack ids, trace event dicts become typed snapshot.Event values (EventList)
// and block dicts typed blocks (*Block). The memo is a fast path: a frames list referenced again
// is resolved to its stack id without re-reading. Everything else (segments, settings,
// annotations) comes out as a plain value tree (map[string]any, []any, string, int64, uint64,
// *big.Int, float64, bool, nil) for the loader. Protocols 0 to 5 are read.
//
// Speed: a snapshot is millions of near-identical trace event dicts, each with a traceback of
// tens of frame references. fastDict reads such a dict whole, straight from the input, and
// commits it only when every part is of the expected forms; the run cache (runcache.go) knows
// a traceback by its bytes, so a repeated one costs a vectorised search, a hash and one
// compare. Anything else takes the generic opcode path, with the same result. DecodeBytes
// reads a mapped file in place (no copy); with Options.Index another goroutine numbers each
// trace's addresses (snapshot.TraceIndex) as the events are decoded and has the memory the
// decoder fills next mapped in advance.
//
// Resource bounds: whatever the input, memory stays a small multiple of the bytes read and
// time linear in them. Nothing is reserved from a declared length or a file size; the memo
// grows only as far as the bytes read can fill it; nesting is capped while containers are
// built; a container referenced many times (memo, DUP) is converted once, so the tree is a DAG
// of at most one value per container; big integers are converted once. Stats reports what a
// decode produced, for tests that hold these bounds.
package pickle

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"runtime"
	"strconv"
	"unsafe"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// The classes of decoding failure; every *Error wraps one of them, or the input's own read
// error (a corrupt gzip stream, a size limit of the reader).
var (
	// ErrCorrupt: the bytes are not a well-formed pickle.
	ErrCorrupt = errors.New("corrupt pickle")
	// ErrUnsafe: the pickle asks for a global or a call that memsnap refuses to execute.
	ErrUnsafe = errors.New("unsafe pickle")
	// ErrLimit: the pickle is well-formed but exceeds a bound no snapshot comes near (a value
	// longer or larger than any snapshot holds, shared references repeated beyond its size).
	ErrLimit = errors.New("pickle exceeds a decoding limit")
)

// Error is a decoding failure at a byte offset of the (decompressed) pickle stream. Err is
// ErrCorrupt, ErrUnsafe, ErrLimit or the input's read error; errors.Is sees through it.
type Error struct {
	Offset int64
	Msg    string
	Err    error
}

func (e *Error) Error() string { return fmt.Sprintf("%s (at byte %d)", e.Msg, e.Offset) }

// Unwrap returns the class of failure (or the input's read error).
func (e *Error) Unwrap() error { return e.Err }

// Result is what Decode returns: the plain value tree plus the interned frames and stacks that
// the reduced parts of the tree (snapshot.StackID leaves, []snapshot.Event lists) refer to.
type Result struct {
	Root     any
	Interner *snapshot.Interner
	Extras   []snapshot.EventExtra
	Protocol int  // from PROTO; without one, 1 when the first opcode is binary, else 0
	TypeTag  bool // the restore_type_tag global was used
	Stats    Stats
}

// Stats counts what a decode read and produced. Decode fills Options.Stats also when it
// fails, so tests can hold every input to the bounds.
type Stats struct {
	// Bytes is how much of the input was consumed (up to STOP, or to the failure).
	Bytes int64
	// Values is how many values the tree handed to the loader holds, each shared container,
	// frame, block and big integer counted once.
	Values int64
	// MemoBytes is the size of the dense memo, which lives outside the Go heap.
	MemoBytes int64
	// Objects is how many container objects were allocated (recycled ones count once).
	Objects int
	// FastEvents is how many trace events the event fast path stored (see fastEvent), and
	// Redone whether the decode had to start again without it.
	FastEvents int64
	Redone     bool
	// KeysAhead is how many tracebacks' run keys the run scanner had ready (see runScanner).
	KeysAhead int64
	// Strings is how many string values the decode made (shared ones once).
	Strings int
}

// Options bound the decoder.
type Options struct {
	// Progress, when set, is called about every 16 MiB of input with the bytes consumed so far.
	Progress func(done int64)
	// MaxEvents, when positive, keeps only the newest MaxEvents events of each trace list
	// while decoding, so memory stays bounded whatever the trace length.
	MaxEvents int
	// noFastEvents turns fastEvent off (a decode started again after errRedo; tests).
	noFastEvents bool
	// Stats, when set, receives the decode's counters, also when it fails.
	Stats *Stats
	// Index builds each trace list's address index (EventList.Index) on another goroutine
	// while decoding. Ignored with MaxEvents.
	Index bool
}

// EventList is a decoded device trace: the kept events, oldest first, and how many older
// events a MaxEvents bound dropped.
type EventList struct {
	Events  []snapshot.Event
	Dropped int64
	// Index is the trace's address index, built while decoding when Options.Index is set
	// (nil otherwise).
	Index *snapshot.TraceIndex
}

type kind uint8

const (
	kNone kind = iota
	kBool
	kInt   // x holds the int64
	kUint  // x holds a uint64 above MaxInt64
	kBig   // x indexes d.bigs: a larger integer, converted once
	kFloat // x holds the float64 bits
	kStr
	kBytes
	// Containers, kList to kEmptyDict (isContainer relies on the order).
	kList  // x indexes d.objs
	kTuple // x indexes d.objs
	kDict  // x indexes d.objs
	// An empty container that nothing else refers to yet has no object: one is made only when
	// it is memoized, DUPed or filled. A stream of EMPTY_LIST opcodes then costs one stack slot
	// per byte, not an object per byte.
	kEmptyList  // kList + 3, as materialize relies on
	kEmptyTuple // never gets an object: an empty tuple cannot change
	kEmptyDict  // kDict + 3
	kStack      // x holds a snapshot.StackID (a reduced frames list)
	kFrame      // x holds a snapshot.FrameID (a reduced frame dict)
	kEvent      // x: the event list object << 32 | the event's index in it
	kBlock      // x indexes d.blocks: a reduced block dict
	kGlobal
	kMark // only on the mark stack bookkeeping, never a value
	// kSpill marks a memo slot whose value is in memoTable.spill (never a value). Last: the
	// memo's packed slots hold every kind up to it in their top bits.
	kSpill
)

func isContainer(k kind) bool { return k-kList <= kEmptyDict-kList } // one unsigned compare

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
	// known is the interned stack of frames[:knownN], when knownN == len(frames) > 0 (set by
	// the run cache, which finds the stack without hashing the frames).
	known   snapshot.StackID
	knownN  int32
	ev      *eventList // a list of reduced trace events
	red     uint64     // the reduction's payload (see redKind)
	redKind kind       // kNone until reduced; then kStack, kFrame, kEvent or kBlock
	shared  bool       // more references may exist than the one memo slot
	// depth is how deeply the container nests others (1: it holds no container), kept as
	// items arrive so that nesting is refused before it costs memory. A shared container
	// filled after it was nested elsewhere can make it an underestimate; toTree's own depth
	// check catches that (its memory was already bounded by the growth checks).
	depth    uint16
	memoSlot int32 // the memo slot holding this object, -1 if none
}

type eventList struct {
	events    []snapshot.Event
	dropped   int64 // events dropped from the front by Options.MaxEvents
	published int   // events[:published] were handed to the indexer
	start     int64 // the input offset where the list began
	grown     bool  // growEvents has grown it
}

const (
	maxDepth      = 256
	bufSize       = 1 << 20
	progressEvery = 16 << 20
	// maxString bounds one string or bytes value: the longest strings of a snapshot are C++
	// frame names of a few KiB; a declared length beyond this is corruption or an attack, and
	// is refused before anything is read.
	maxString = 16 << 20
	// maxLongBytes bounds a binary integer (LONG1/LONG4); snapshots need at most 9 bytes.
	maxLongBytes = 1 << 16
	// maxTextLine bounds a protocol-0 text line holding a number or a memo index; string
	// lines (STRING, UNICODE) may be as long as an escaped maxString.
	maxTextLine = 4096
	// farMemo is how far past the memo's end (and past the bytes read) an explicit PUT index
	// may grow the dense memo; farther ones go to a map, so a hostile LONG_BINPUT cannot make
	// the memo cost more than 16 bytes per byte read.
	farMemo = 4096
)

type decoder struct {
	// roomyLists counts the trace lists growEvents gave room by the bytes read.
	roomyLists int
	src        io.Reader
	buf        []byte // buf[pos:end] is read but not yet decoded
	pos, end   int
	base       int64 // input offset of buf[0]
	srcDone    bool  // src returned EOF or an error
	inPlace    bool  // buf is the whole input, owned by the caller (DecodeBytes)
	srcErr     error // the error src returned, unless it was an end of input
	opAt       int64 // offset of the opcode being executed
	stack      []val
	marks      []int
	memo       memoTable
	memoHi     map[uint64]val
	objs       []object
	strs       []string
	keys       []keyCode // key code of each string in strs
	bigs       []*big.Int
	blocks     blockStore
	// lastEvents is the trace list being filled, the only one holding spare capacity.
	lastEvents *eventList
	// Recycled object indexes, dicts apart from lists so that a reused object's item
	// capacity fits its next use (frames lists are long, event dicts short).
	freeLists, freeDicts []uint32
	in                   *snapshot.Interner
	extras               []snapshot.EventExtra
	extraID              map[snapshot.EventExtra]uint32
	// extraByRef finds an event's extra id from the identities of its strings, so a long
	// string shared by millions of events is hashed once, not once per event.
	extraByRef map[extraRef]uint32
	lastExtra  struct {
		ref extraRef
		id  uint32
		ok  bool
	}
	// actions[i] is 1 + the Action strs[i] names, 0 until looked up.
	actions []uint8
	// fwdSeq interns forward_frames lists by their string identities (fwdLines joined).
	fwdSeq   map[string]uint32
	fwdLines []string
	keyBuf   []byte
	// produced counts bytes of strings built or hashed from shared references; held to
	// producedLimit so that references cannot multiply the work.
	produced     int64
	proto        int
	typeTag      bool
	ctx          context.Context
	opt          Options
	nextProgress int64
	// growthCheck is the stack and object count past which run checks them against the
	// bytes read (checkGrowth).
	growthCheck int
	frameBuf    []snapshot.FrameID
	runs        *runCache
	// open is the mark depth of the trace batch fastEvent has stored events of ahead of its
	// APPENDS (0: none); redo says an opcode found the difference (see errRedo).
	open       int
	redo       bool
	fastEvents int64
	made       [maxFastPairs]madeValue // fastEvent's scratch
	// fresh holds, per optional string field of an event (compile_context, user_metadata,
	// category, internal_metadata: keyCompileContext on, in order), the indexes plus one of the
	// four strings fastEvent made or found for it last, the latest first (see sameStr).
	fresh [4][4]uint64
	// keyTmpl is the memo references of the keys of the last trace event fastEvent read, by
	// position, with their key codes (idx+1; 0: none): a writer puts an event's keys in the
	// same order and the same slots every time, so a key that matches needs no memo read.
	// Dropped with the run cache whenever a memo slot is rewritten.
	keyTmpl [maxFastPairs]keyRef
	// memoNext is the memo size at which memoAhead next looks at mapping a page.
	memoNext  uint64
	scan      *runScanner // run keys worked out ahead (in-place decodes)
	keysAhead int64
	// The trace lists' indexer (Options.Index): the lists it follows and, once the decode
	// ended, what it built.
	pipe    *indexPipe
	evLists []*eventList
	indexed map[*eventList]*snapshot.TraceIndexer
	// toTree state: values produced, shared containers and leaves converted once.
	values    int64
	treeCache map[uint64]any
	leafCache map[val]any
	blockTree []any
}

// Decode decodes one pickle from r. Bytes after STOP are ignored.
func Decode(ctx context.Context, r io.Reader, opt Options) (*Result, error) {
	return decodeFrom(ctx, r, nil, opt)
}

// DecodeBytes decodes one pickle held in memory (a mapped file, read in place with no copy).
// data is only read, and nothing refers to it once DecodeBytes returns; Progress is called
// between opcodes, when no byte before the offset it reports is needed any more. Bytes after
// STOP are ignored.
func DecodeBytes(ctx context.Context, data []byte, opt Options) (*Result, error) {
	return decodeFrom(ctx, nil, data, opt)
}

func decodeFrom(ctx context.Context, r io.Reader, data []byte, opt Options) (*Result, error) {
	if r != nil {
		opt.noFastEvents = true // a stream cannot be read again (see errRedo)
	}
	res, err := decodeOnce(ctx, r, data, opt)
	if errors.Is(err, errRedo) {
		opt.noFastEvents = true
		res, err = decodeOnce(ctx, r, data, opt)
		if opt.Stats != nil {
			opt.Stats.Redone = true
		}
		if res != nil {
			res.Stats.Redone = true
		}
	}
	return res, err
}

func decodeOnce(ctx context.Context, r io.Reader, data []byte, opt Options) (*Result, error) {
	d := &decoder{
		src:          r,
		in:           snapshot.NewInterner(),
		extras:       []snapshot.EventExtra{{}},
		extraID:      map[snapshot.EventExtra]uint32{{}: 0},
		ctx:          ctx,
		opt:          opt,
		nextProgress: progressEvery,
		growthCheck:  growthSlack,
		runs:         newRunCache(),
	}
	if r != nil {
		d.buf = make([]byte, bufSize)
	} else {
		d.buf, d.end, d.srcDone, d.inPlace = data, len(data), true, true
		if len(data) >= minScanInput && !opt.noFastEvents && (runtime.GOMAXPROCS(0) > 1 || waitForScanner) {
			if d.scan = startRunScanner(data, d.runs.keys.seed); d.scan != nil {
				defer d.scan.close()
			}
		}
	}
	defer d.memo.release()
	res, err := d.decode()
	st := Stats{Bytes: d.offset(), Values: d.values, MemoBytes: int64(len(d.memo.pages)) << memoPageBits * memoSlotSize, Objects: len(d.objs), FastEvents: d.fastEvents, KeysAhead: d.keysAhead, Strings: len(d.strs)}
	if opt.Stats != nil {
		*opt.Stats = st
	}
	if err != nil {
		return nil, err
	}
	res.Stats = st
	return res, nil
}

func (d *decoder) decode() (*Result, error) {
	root, err := d.run()
	d.finishIndex(err == nil)
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
	return &Error{Offset: off, Msg: fmt.Sprintf(format, args...), Err: ErrCorrupt}
}

func (d *decoder) failUnsafe(off int64, format string, args ...any) error {
	return &Error{Offset: off, Msg: fmt.Sprintf(format, args...), Err: ErrUnsafe}
}

func (d *decoder) failLimit(off int64, format string, args ...any) error {
	return &Error{Offset: off, Msg: fmt.Sprintf(format, args...), Err: ErrLimit}
}

// short reports input that ended early: the input's own read error if it had one (a corrupt
// gzip stream, a decompression limit), else a truncation.
func (d *decoder) short(off int64, format string, args ...any) error {
	if d.srcErr != nil {
		return &Error{Offset: d.offset(), Msg: d.srcErr.Error(), Err: d.srcErr}
	}
	return d.fail(off, format, args...)
}

// offset is the input offset of the next unread byte.
func (d *decoder) offset() int64 { return d.base + int64(d.pos) }

// fill makes at least n (<= bufSize) bytes available unless the input ends first.
func (d *decoder) fill(n int) bool {
	if d.end-d.pos >= n {
		return true
	}
	if d.srcDone {
		return false // nothing more will come (and an input read in place is not ours to move)
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
			// A stream cut short (io.ErrUnexpectedEOF from gzip) reads as truncation.
			if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
				d.srcErr = err
			}
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
			return nil, d.short(d.opAt, "truncated: declared length %d, input ends after %d bytes", n, d.end-d.pos)
		}
		return nil, d.short(d.offset(), "truncated: needed %d more bytes", n)
	}
	b := d.buf[d.pos : d.pos+n]
	d.pos += n
	return b, nil
}

// readLong reads n (<= maxString) bytes that do not fit the buffer, growing the destination
// only as data arrives, so a declared length larger than the input costs no more than the
// input.
func (d *decoder) readLong(n int) ([]byte, error) {
	out := make([]byte, 0, bufSize)
	for len(out) < n {
		if d.pos == d.end && !d.fill(1) {
			return nil, d.short(d.opAt, "truncated: declared length %d, input ends after %d bytes", n, len(out))
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
	return 0, d.short(d.offset(), "truncated: no STOP opcode")
}

func (d *decoder) push(v val) { d.stack = append(d.stack, v) }

// growthSlack and growthPerByte bound the stack and the container objects: no more than one
// of each per 8 bytes read, plus 64 Ki. A snapshot's largest stack is a C++-written trace
// list, whose event dicts take 30 bytes or more each; its live containers are fewer still.
// Without the bound a run of one-byte EMPTY_LISTs (or NONEs) would cost 16 to 100 bytes per
// byte read. run compares both lengths with growthCheck once per loop (after fastOps, or one
// opcode), so the hot path pays nothing.
const (
	growthSlack   = 1 << 16
	growthPerByte = 8
)

// checkGrowth refuses a stack or a set of containers larger than the bytes read justify, and
// moves growthCheck to the bound at this offset.
func (d *decoder) checkGrowth(at int64) error {
	limit := at/growthPerByte + growthSlack
	d.growthCheck = int(limit)
	if n := int64(len(d.stack)); n > limit {
		return d.failLimit(at, "%d values wait on the stack: more than one per %d bytes read, which no snapshot needs", n, growthPerByte)
	}
	if n := int64(len(d.objs)); n > limit {
		return d.failLimit(at, "%d containers are alive: more than one per %d bytes read, which no snapshot needs", n, growthPerByte)
	}
	return nil
}

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
		*o = object{items: items, frames: o.frames[:0], memoSlot: -1, framesHash: snapshot.StackHashSeed, depth: 1}
		return val{k: k, x: uint64(i)}
	}
	d.objs = append(d.objs, object{items: items, memoSlot: -1, framesHash: snapshot.StackHashSeed, depth: 1})
	return val{k: k, x: uint64(len(d.objs) - 1)}
}

// materialize gives an empty list or dict its object, once something may refer to it twice
// or fill it (v is the stack slot holding it). Empty tuples never need one.
func (d *decoder) materialize(v *val) {
	if v.k == kEmptyList || v.k == kEmptyDict {
		*v = d.newObj(v.k-(kEmptyList-kList), nil) // kEmptyList → kList, kEmptyDict → kDict
	}
}

// share marks a container as possibly referenced from more than one place.
func (d *decoder) share(v val) {
	if v.k == kList || v.k == kDict || v.k == kTuple {
		d.objs[v.x].shared = true
	}
}

// memoize stores the stack top t in memo slot idx (MEMOIZE: the next slot).
func (d *decoder) memoize(idx uint64, t *val) {
	d.materialize(t)
	v := *t
	if v.k == kList || v.k == kDict || v.k == kTuple {
		if o := &d.objs[v.x]; o.memoSlot == -1 && idx < d.memo.n+farMemo && idx < 1<<31 {
			o.memoSlot = int32(idx)
		} else {
			o.shared = true
		}
	}
	if idx < d.memo.n {
		d.runs.invalidate()                // a slot a cached run names may change
		d.keyTmpl = [maxFastPairs]keyRef{} // and one a key names
	}
	// Dense slots grow the table only near its end: a far index goes to the map.
	if idx < d.memo.n+farMemo {
		d.memo.set(idx, v)
		d.memoAhead()
		return
	}
	d.memoFar(idx, v)
}

// put is BINPUT, LONG_BINPUT and PUT: an explicit index, which may grow the dense memo only
// as far as the bytes read could have filled it (a slot per byte), so a run of LONG_BINPUTs
// each just inside the window cannot make the memo cost more than the input.
func (d *decoder) put(at int64, idx uint64, t *val) {
	if idx < d.memo.n || (idx < d.memo.n+farMemo && idx < uint64(at)+farMemo) {
		d.memoize(idx, t)
		return
	}
	d.materialize(t)
	d.share(*t)
	d.memoFar(idx, *t)
}

func (d *decoder) memoFar(idx uint64, v val) {
	if d.memoHi == nil {
		d.memoHi = map[uint64]val{}
	}
	d.memoHi[idx] = v
}

func (d *decoder) memoGet(at int64, idx uint64) (val, error) {
	if p, ok := d.memo.get(idx); ok && p.k != kMark {
		v := d.resolved(p)
		if v.k == kEvent && d.open != 0 {
			return val{}, errRedo // an event of the open batch would still be a dict
		}
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

// bookkeeping runs between opcodes every progressEvery bytes: cancellation and progress.
func (d *decoder) bookkeeping(at int64) error {
	d.nextProgress += progressEvery
	if err := d.ctx.Err(); err != nil {
		return err
	}
	if d.opt.Progress != nil {
		d.opt.Progress(at)
	}
	return nil
}

// run executes opcodes until STOP and returns the value left on the stack.
func (d *decoder) run() (val, error) {
	if d.fill(1) {
		// No PROTO: protocol 0 writes text opcodes, protocol 1 starts with a binary one.
		switch d.buf[d.pos] {
		case '}', ']', ')', 'q', 'r', 'K', 'M', 'J', 'G', 'X', 'U', 'T':
			d.proto = 1
		}
	}
	for {
		at := d.offset()
		d.opAt = at
		if at >= d.nextProgress {
			if err := d.bookkeeping(at); err != nil {
				return val{}, err
			}
		}
		if len(d.stack) > d.growthCheck || len(d.objs) > d.growthCheck {
			if err := d.checkGrowth(at); err != nil {
				return val{}, err
			}
		}
		if d.end-d.pos >= fastWindow {
			if d.fastOps(); d.redo {
				return val{}, errRedo
			} else if d.offset() != at {
				continue // took some opcodes: back to the bookkeeping above
			}
		}
		op, err := d.byte1()
		if err != nil {
			if at == 0 && d.srcErr == nil {
				return val{}, d.fail(0, "empty input")
			}
			return val{}, err
		}
		if d.open != 0 && !d.openSafe(op) {
			return val{}, errRedo
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
			d.push(val{k: kEmptyDict})
		case ']': // EMPTY_LIST
			d.push(val{k: kEmptyList})
		case ')': // EMPTY_TUPLE
			d.push(val{k: kEmptyTuple})
		case '(': // MARK
			if len(d.marks) >= maxDepth*64 {
				return val{}, d.fail(at, "too many nested MARKs")
			}
			d.marks = append(d.marks, len(d.stack))
			if n := len(d.stack); n > 0 {
				if t := &d.stack[n-1]; t.k == kList || t.k == kEmptyList {
					d.materialize(t)
					d.frameRun()
				}
			}
		case 0x94: // MEMOIZE
			t, err := d.top(at, "MEMOIZE")
			if err != nil {
				return val{}, err
			}
			d.memoize(d.memo.n, t)
		case 'q', 'r', 'p': // BINPUT, LONG_BINPUT, PUT
			var idx uint64
			switch op {
			case 'q':
				b, err := d.read(1)
				if err != nil {
					return val{}, err
				}
				idx = uint64(b[0])
			case 'r':
				b, err := d.read(4)
				if err != nil {
					return val{}, err
				}
				idx = uint64(binary.LittleEndian.Uint32(b))
			default:
				if idx, err = d.lineIndex(at, "PUT"); err != nil {
					return val{}, err
				}
			}
			t, err := d.top(at, opName(op))
			if err != nil {
				return val{}, err
			}
			d.put(at, idx, t)
		case 'h', 'j', 'g': // BINGET, LONG_BINGET, GET
			var idx uint64
			switch op {
			case 'h':
				b, err := d.read(1)
				if err != nil {
					return val{}, err
				}
				idx = uint64(b[0])
			case 'j':
				b, err := d.read(4)
				if err != nil {
					return val{}, err
				}
				idx = uint64(binary.LittleEndian.Uint32(b))
			default:
				if idx, err = d.lineIndex(at, "GET"); err != nil {
					return val{}, err
				}
			}
			v, err := d.memoGet(at, idx)
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
		case 'X', 'B', 'C', 0x8d, 0x8e, 0x96, 'T', 'U':
			// BINUNICODE, BINBYTES, SHORT_BINBYTES, BINUNICODE8, BINBYTES8, BYTEARRAY8, and
			// protocol 1's BINSTRING and SHORT_BINSTRING (Python 2 str, read as str).
			var n uint64
			switch op {
			case 'X', 'B':
				b, err := d.read(4)
				if err != nil {
					return val{}, err
				}
				n = uint64(binary.LittleEndian.Uint32(b))
			case 'T':
				b, err := d.read(4)
				if err != nil {
					return val{}, err
				}
				l := int32(binary.LittleEndian.Uint32(b))
				if l < 0 {
					return val{}, d.fail(at, "BINSTRING with negative length %d", l)
				}
				n = uint64(l)
			case 'C', 'U':
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
			if n > maxString {
				return val{}, d.failLimit(at, "string length %d is larger than any snapshot string (the limit is %d bytes)", n, maxString)
			}
			s, err := d.read(int(n))
			if err != nil {
				return val{}, err
			}
			k := kStr
			if op == 'B' || op == 'C' || op == 0x8e || op == 0x96 {
				k = kBytes
			}
			if n > bufSize && !d.inPlace { // readLong's buffer is fresh and never reused: no second copy
				d.push(d.newStr(k, unsafe.String(unsafe.SliceData(s), len(s))))
			} else {
				d.push(d.newStr(k, string(s)))
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
		case 0x8a, 0x8b: // LONG1, LONG4
			var n uint32
			if op == 0x8a {
				b, err := d.read(1)
				if err != nil {
					return val{}, err
				}
				n = uint32(b[0])
			} else {
				b, err := d.read(4)
				if err != nil {
					return val{}, err
				}
				n = binary.LittleEndian.Uint32(b)
			}
			if n > maxLongBytes {
				return val{}, d.failLimit(at, "integer of %d bytes is larger than any snapshot value", n)
			}
			raw, err := d.read(int(n))
			if err != nil {
				return val{}, err
			}
			d.push(d.long(raw))
		case 'I', 'L': // INT, LONG (protocol 0: decimal text; "I01"/"I00" are True/False)
			line, err := d.readLine(at, maxTextLine, opName(op))
			if err != nil {
				return val{}, err
			}
			v, err := d.textInt(at, op, line)
			if err != nil {
				return val{}, err
			}
			d.push(v)
		case 'F': // FLOAT (protocol 0: repr text)
			line, err := d.readLine(at, maxTextLine, "FLOAT")
			if err != nil {
				return val{}, err
			}
			f, err := strconv.ParseFloat(string(line), 64)
			if err != nil { // "1e999" too: CPython refuses it as well (it writes "inf")
				return val{}, d.fail(at, "FLOAT %q is not a float64", truncate(line))
			}
			d.push(val{k: kFloat, x: math.Float64bits(f)})
		case 'S', 'V': // STRING (quoted, with escapes), UNICODE (raw-unicode-escape)
			line, err := d.readLine(at, 10*maxString+2, opName(op))
			if err != nil {
				return val{}, err
			}
			var s string
			if op == 'S' {
				s, err = unquoteString(line)
			} else {
				s, err = rawUnicodeEscape(line)
			}
			if err != nil {
				return val{}, d.fail(at, "%s: %v", opName(op), err)
			}
			if len(s) > maxString {
				return val{}, d.failLimit(at, "string length %d is larger than any snapshot string (the limit is %d bytes)", len(s), maxString)
			}
			d.push(d.newStr(kStr, s))
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
			v, err := d.tuple(at, d.stack[len(d.stack)-n:])
			if err != nil {
				return val{}, err
			}
			d.stack = d.stack[:len(d.stack)-n]
			d.push(v)
		case 't': // TUPLE
			items, err := d.popMark(at, "TUPLE")
			if err != nil {
				return val{}, err
			}
			v, err := d.tuple(at, items)
			if err != nil {
				return val{}, err
			}
			d.push(v)
		case 'l', 'd': // LIST, DICT
			items, err := d.popMark(at, opName(op))
			if err != nil {
				return val{}, err
			}
			if len(items) == 0 {
				if op == 'l' {
					d.push(val{k: kEmptyList})
				} else {
					d.push(val{k: kEmptyDict})
				}
				break
			}
			if op == 'l' {
				v := d.newObj(kList, nil)
				if err := d.appendItems(at, v, items); err != nil {
					return val{}, err
				}
				d.push(v)
				break
			}
			if len(items)%2 != 0 {
				return val{}, d.fail(at, "DICT with an odd number of items")
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
			d.materialize(t)
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
			if len(items) == 0 && (t.k == kEmptyList || t.k == kList) {
				if len(d.marks) < d.open {
					d.open = 0 // the open batch is stored
				}
				break // nothing to add: an empty list may stay without an object
			}
			d.materialize(t)
			if err := d.appendItems(at, *t, items); err != nil {
				return val{}, err
			}
			if len(d.marks) < d.open {
				d.open = 0 // the open batch is stored
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
			d.materialize(t)
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
			if len(items) == 0 && (t.k == kEmptyDict || t.k == kDict) {
				break
			}
			d.materialize(t)
			if err := d.setItems(at, *t, items); err != nil {
				return val{}, err
			}
		case 'c', 'i': // GLOBAL "module\nname\n"; INST (protocol 0) names a class the same way
			mod, err := d.readLine(at, 256, "GLOBAL")
			if err != nil {
				return val{}, err
			}
			smod := string(mod)
			name, err := d.readLine(at, 256, "GLOBAL")
			if err != nil {
				return val{}, err
			}
			if op == 'i' {
				return val{}, d.failUnsafe(at, "refusing unsafe global %s.%s (INST): a snapshot holds only plain data", smod, name)
			}
			if err := d.global(at, smod, string(name)); err != nil {
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
				return val{}, d.failUnsafe(at, "REDUCE of something that is not restore_type_tag: refusing to call it")
			}
			if args.k != kTuple || len(d.objs[args.x].items) == 0 {
				return val{}, d.fail(at, "restore_type_tag needs a tuple argument")
			}
			// The result is the argument itself: give it an object so both stay one value.
			obj := &d.objs[args.x].items[0]
			d.materialize(obj)
			d.share(*obj)
			d.push(*obj)
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
			d.materialize(t)
			d.share(*t)
			d.push(*t)
		case '.': // STOP
			if len(d.marks) != 0 || len(d.stack) != 1 {
				return val{}, d.fail(at, "STOP with %d values on the stack (want 1)", len(d.stack))
			}
			return d.stack[0], nil
		case 'o', 0x81, 0x92, 'b': // OBJ, NEWOBJ, NEWOBJ_EX, BUILD
			return val{}, d.failUnsafe(at, "%s builds a Python object: refusing it, a snapshot holds only plain data", opName(op))
		case 'P', 'Q', 0x82, 0x83, 0x84: // PERSID, BINPERSID, EXT1, EXT2, EXT4
			return val{}, d.failUnsafe(at, "%s refers to an object outside the pickle: refusing it, a snapshot holds only plain data", opName(op))
		case 0x8f, 0x90, 0x91, 0x97, 0x98: // EMPTY_SET, ADDITEMS, FROZENSET, NEXT_BUFFER, READONLY_BUFFER
			return val{}, d.fail(at, "unsupported opcode %s (0x%02x): a snapshot holds only dicts, lists, tuples, strings and numbers", opName(op), op)
		default:
			return val{}, d.fail(at, "unsupported or invalid opcode 0x%02x", op)
		}
	}
}

// opName names the opcodes that errors mention.
func opName(op byte) string {
	switch op {
	case 'q':
		return "BINPUT"
	case 'r':
		return "LONG_BINPUT"
	case 'p':
		return "PUT"
	case 'I':
		return "INT"
	case 'L':
		return "LONG"
	case 'S':
		return "STRING"
	case 'V':
		return "UNICODE"
	case 'l':
		return "LIST"
	case 'd':
		return "DICT"
	case 'o':
		return "OBJ"
	case 0x81:
		return "NEWOBJ"
	case 0x92:
		return "NEWOBJ_EX"
	case 'b':
		return "BUILD"
	case 'P':
		return "PERSID"
	case 'Q':
		return "BINPERSID"
	case 0x82, 0x83, 0x84:
		return "EXT" + strconv.Itoa(1<<(op-0x82))
	case 0x8f:
		return "EMPTY_SET"
	case 0x90:
		return "ADDITEMS"
	case 0x91:
		return "FROZENSET"
	case 0x97:
		return "NEXT_BUFFER"
	case 0x98:
		return "READONLY_BUFFER"
	}
	return fmt.Sprintf("opcode 0x%02x", op)
}

// tuple builds a tuple of items (copied), refusing nesting beyond maxDepth before it exists.
func (d *decoder) tuple(at int64, items []val) (val, error) {
	if len(items) == 0 {
		return val{k: kEmptyTuple}, nil
	}
	depth := uint16(1)
	for _, it := range items {
		d.share(it)
		if isContainer(it.k) {
			if h := d.height(it) + 1; h > depth {
				if h > maxDepth {
					return val{}, d.fail(at, "values nested more than %d deep", maxDepth)
				}
				depth = h
			}
		}
	}
	v := d.newObj(kTuple, append([]val(nil), items...))
	d.objs[v.x].depth = depth
	return v, nil
}

// height is how deeply v nests containers: 0 for anything else, 1 for an empty container.
func (d *decoder) height(v val) uint16 {
	switch v.k {
	case kList, kTuple, kDict:
		return d.objs[v.x].depth
	case kEmptyList, kEmptyTuple, kEmptyDict:
		return 1
	}
	return 0
}

// nest records that container parent (an object index) now holds child, refusing nesting
// beyond maxDepth while it is built rather than when the tree is converted.
func (d *decoder) nest(at int64, parent uint64, child val) error {
	h := d.height(child) + 1
	if o := &d.objs[parent]; h > o.depth {
		if h > maxDepth {
			return d.fail(at, "values nested more than %d deep", maxDepth)
		}
		o.depth = h
	}
	return nil
}

// readLine reads a protocol-0 text argument up to its newline (not included; the slice is
// valid until the next read), refusing lines longer than max.
func (d *decoder) readLine(at int64, max int, op string) ([]byte, error) {
	if i := bytes.IndexByte(d.buf[d.pos:d.end], '\n'); i >= 0 && i <= max {
		line := d.buf[d.pos : d.pos+i]
		d.pos += i + 1
		return line, nil
	}
	var out []byte
	for {
		if d.pos == d.end && !d.fill(1) {
			return nil, d.short(at, "truncated: %s argument without its newline", op)
		}
		chunk := d.buf[d.pos:d.end]
		i := bytes.IndexByte(chunk, '\n')
		if i >= 0 {
			chunk = chunk[:i]
		}
		if len(out)+len(chunk) > max {
			return nil, d.failLimit(at, "%s argument longer than %d bytes", op, max)
		}
		out = append(out, chunk...)
		d.pos += len(chunk)
		if i >= 0 {
			d.pos++
			return out, nil
		}
	}
}

// lineIndex reads the decimal memo index of PUT or GET.
func (d *decoder) lineIndex(at int64, op string) (uint64, error) {
	line, err := d.readLine(at, maxTextLine, op)
	if err != nil {
		return 0, err
	}
	idx, err := strconv.ParseUint(string(line), 10, 64)
	if err != nil {
		return 0, d.fail(at, "%s index %q is not a number", op, truncate(line))
	}
	return idx, nil
}

// textInt reads the argument of INT or LONG: decimal digits with an optional sign (LONG with
// a trailing L); INT's "01" and "00" are True and False.
func (d *decoder) textInt(at int64, op byte, line []byte) (val, error) {
	if op == 'I' {
		switch string(line) {
		case "01":
			return val{k: kBool, x: 1}, nil
		case "00":
			return val{k: kBool}, nil
		}
	} else if n := len(line); n > 0 && line[n-1] == 'L' {
		line = line[:n-1]
	}
	s := string(line)
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return val{k: kInt, x: uint64(n)}, nil
	}
	if u, err := strconv.ParseUint(s, 10, 64); err == nil {
		return val{k: kUint, x: u}, nil
	}
	b, ok := new(big.Int).SetString(s, 10)
	if !ok {
		return val{}, d.fail(at, "%s %q is not an integer", opName(op), truncate(line))
	}
	return d.bigVal(b), nil
}

// truncate shortens text quoted in an error message.
func truncate(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "…"
	}
	return string(b)
}

func (d *decoder) global(at int64, mod, name string) error {
	if mod == "torch.jit._pickle" && name == "restore_type_tag" {
		d.typeTag = true
		d.push(val{k: kGlobal})
		return nil
	}
	return d.failUnsafe(at, "refusing unsafe global %s.%s: a snapshot holds only plain data", mod, name)
}

// long decodes a LONG1/LONG4 payload; integers beyond 64 bits are converted to *big.Int once
// and shared by every reference.
func (d *decoder) long(raw []byte) val {
	v, ok := decodeLong(raw)
	if ok {
		return v
	}
	be := make([]byte, len(raw))
	for i := range raw {
		be[len(raw)-1-i] = raw[i]
	}
	b := new(big.Int).SetBytes(be)
	if raw[len(raw)-1]&0x80 != 0 {
		b.Sub(b, new(big.Int).Lsh(big.NewInt(1), uint(8*len(raw))))
	}
	return d.bigVal(b)
}

// bigVal stores an integer that may not fit 64 bits (fitting ones become kInt or kUint).
func (d *decoder) bigVal(b *big.Int) val {
	switch {
	case b.IsInt64():
		return val{k: kInt, x: uint64(b.Int64())}
	case b.IsUint64():
		return val{k: kUint, x: b.Uint64()}
	}
	d.bigs = append(d.bigs, b)
	return val{k: kBig, x: uint64(len(d.bigs) - 1)}
}

// decodeLong decodes a little-endian two's-complement integer that fits 64 bits; ok is false
// for larger ones.
func decodeLong(raw []byte) (v val, ok bool) {
	n := len(raw)
	if n == 0 {
		return val{k: kInt}, true
	}
	if n <= 8 {
		var u uint64
		for i := n - 1; i >= 0; i-- {
			u = u<<8 | uint64(raw[i])
		}
		if raw[n-1]&0x80 != 0 && n < 8 { // sign-extend
			u |= ^uint64(0) << (8 * n)
		}
		return val{k: kInt, x: u}, true
	}
	if n == 9 && raw[8] == 0 {
		u := binary.LittleEndian.Uint64(raw)
		if u > math.MaxInt64 {
			return val{k: kUint, x: u}, true
		}
		return val{k: kInt, x: u}, true
	}
	return val{}, false
}

// decodeLong8 is decodeLong for a LONG1 of n <= 8 bytes at the start of raw, which holds at
// least 8 bytes: one load, masked and sign-extended, instead of a loop over the bytes (a
// trace event has two such values, its address and time).
func decodeLong8(raw []byte, n int) val {
	u := binary.LittleEndian.Uint64(raw)
	if n < 8 {
		bits := 8 * uint(n)
		u &= 1<<bits - 1
		if n > 0 && u>>(bits-1) != 0 { // sign-extend
			u |= ^uint64(0) << bits
		}
	}
	return val{k: kInt, x: u}
}

// memoTable is the dense part of the memo, in fixed pages so that growing it never copies.
// A slot is 8 bytes, the value packed (packSlot): the memo of a large snapshot holds millions
// of slots, all fresh memory the kernel zeroes first, and all written and read while the
// trace decodes. A value that does not pack (an x of more than 59 bits: a negative or huge
// int, a float; pickle writers never memoize those, but an input may) is kept in spill and
// its slot names it.
type memoTable struct {
	// pages are arrays, not slices: an index masked to a page's size needs no bounds check,
	// and the memo is read a dozen times per trace event.
	pages  []*[1 << memoPageBits]uint64
	raw    [][]byte // the pages' memory, to release
	mapped []bool   // raw[i] is an anonymous mapping (else heap memory)
	n      uint64   // slots 0..n-1 exist (unset ones hold kMark); pages beyond n are zero
	spill  []val    // the values of kSpill slots, by the slot's x
}

const (
	memoPageBits = 18 // 2 MiB pages
	memoSlotSize = 8
	// A slot holds the kind in its top bits and x below.
	slotKindShift = 59
	slotXMask     = 1<<slotKindShift - 1
)

// Every kind must fit above a slot's x (kSpill is the last).
var _ = [1 << (64 - slotKindShift)]struct{}{}[kSpill]

// release returns the pages; the table is empty afterwards.
func (m *memoTable) release() {
	for i, r := range m.raw {
		unmapScratch(r, m.mapped[i])
	}
	*m = memoTable{}
}

// get returns slot i's value (kMark if it was never set), or false past the table's end.
func (m *memoTable) get(i uint64) (val, bool) {
	if i >= m.n {
		return val{}, false
	}
	s := m.pages[i>>memoPageBits][i&(1<<memoPageBits-1)]
	if k := kind(s >> slotKindShift); k != kSpill {
		return val{k: k, x: s & slotXMask}, true
	}
	return m.spill[s&slotXMask], true
}

// put writes slot i, which exists (or is reserved), with any value. A slot that spilled
// before keeps its spill entry (each entry belongs to one slot), so rewriting a slot again and
// again (BINPUT) does not grow the spill.
func (m *memoTable) put(i uint64, v val) {
	if !fits(v) {
		p := &m.pages[i>>memoPageBits][i&(1<<memoPageBits-1)]
		if kind(*p>>slotKindShift) == kSpill {
			m.spill[*p&slotXMask] = v
			return
		}
		*p = m.spilled(v)
		return
	}
	m.putPacked(i, v)
}

// spilled keeps v in spill and returns the slot that names it (out of line: rare, and the
// writes that may call it are on the hot path).
//
//go:noinline
func (m *memoTable) spilled(v val) uint64 {
	if len(m.spill) == cap(m.spill) {
		// Doubled, not append's quarter more for a large slice: a hand-made input can spill
		// a slot per byte, and all its growth counts toward the bytes a decode may allocate.
		m.spill = append(make([]val, 0, 2*cap(m.spill)+16), m.spill...)
	}
	m.spill = append(m.spill, v)
	return uint64(kSpill)<<slotKindShift | uint64(len(m.spill)-1)
}

func (m *memoTable) set(i uint64, v val) {
	for m.n <= i {
		if m.n>>memoPageBits == uint64(len(m.pages)) {
			m.addPage()
		}
		if m.n < i { // a slot skipped by BINPUT stays unset
			m.put(m.n, val{k: kMark})
		}
		m.n++
	}
	m.put(i, v)
}

// reserve makes sure the pages hold k more slots, so that the next k pushes may follow.
func (m *memoTable) reserve(k uint64) {
	for m.n+k > uint64(len(m.pages))<<memoPageBits {
		m.addPage()
	}
}

// push sets the next slot, the memo's first unset one, to v, which must pack (fits: a string,
// a stack, an event of a near object, kNone), and returns its index. The slot must be
// reserved (it inlines: a page to add, or a value to spill, would be a call).
func (m *memoTable) push(v val) uint64 {
	i := m.n
	m.n++
	m.putPacked(i, v)
	return i
}

// fits reports whether v packs into a slot.
func fits(v val) bool { return v.x <= slotXMask }

// putPacked writes slot i, which exists (or is reserved), with v, which must pack.
func (m *memoTable) putPacked(i uint64, v val) {
	m.pages[i>>memoPageBits][i&(1<<memoPageBits-1)] = uint64(v.k)<<slotKindShift | v.x
}

// addPage maps one more page. Memo pages hold no pointers, so they can live outside the Go
// heap for the decode's duration: no GC accounting, huge pages, returned at once afterwards.
func (m *memoTable) addPage() {
	raw, mapped := mapScratch((1 << memoPageBits) * memoSlotSize)
	m.raw = append(m.raw, raw)
	m.mapped = append(m.mapped, mapped)
	m.pages = append(m.pages, (*[1 << memoPageBits]uint64)(unsafe.Pointer(unsafe.SliceData(raw))))
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
	d.runs.pending = false
	if start == 0 && d.cachedRun(lst) {
		return
	}
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
			var p val
			if width > 0 {
				p, _ = d.memo.get(idx)
			}
			if p.k != kFrame {
				d.pos, lst.frames = pos, frames
				if buf[pos] == 'e' || len(frames) == start {
					lst.framesHash, lst.hashedN = h, len(frames)
					if start == 0 && d.runs.pending && buf[pos] == 'e' {
						d.recordRun(lst, h)
					}
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

// keyRef is a key read through the memo: the slot (idx+1; 0: none) and the key's code.
type keyRef struct {
	idx  uint64
	code keyCode
}

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

// str is the string of a kStr or kBytes value ("" for anything else).
func (d *decoder) str(v val) string {
	if v.k == kStr || v.k == kBytes {
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
			p, ok := d.memo.get(idx)
			if !ok || p.k == kMark {
				return
			}
			v := d.resolved(p)
			if v.k == kEvent && d.open != 0 {
				return // memoGet decides
			}
			d.share(v)
			d.push(v)
			pos += width
		case 0x94: // MEMOIZE
			if len(d.stack) == 0 || (len(d.marks) > 0 && len(d.stack) <= d.marks[len(d.marks)-1]) {
				return
			}
			d.memoize(d.memo.n, &d.stack[len(d.stack)-1])
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
			d.push(decodeLong8(buf[pos+2:], n)) // the window holds its 8 bytes
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
			if p := d.fastEvent(buf, pos); p >= 0 {
				pos = p
				continue
			} else if d.redo {
				return
			}
			if p := d.fastDict(buf, pos); p >= 0 {
				pos = p
				continue
			}
			d.push(val{k: kEmptyDict})
			pos++
		case ']': // EMPTY_LIST
			d.push(val{k: kEmptyList})
			pos++
		case '(': // MARK
			if len(d.marks) >= maxDepth*64 || (d.open != 0 && !d.openSafe('(')) {
				return
			}
			d.marks = append(d.marks, len(d.stack))
			pos++
			if n := len(d.stack); n > 0 {
				if t := &d.stack[n-1]; t.k == kList || t.k == kEmptyList {
					d.materialize(t)
					d.pos = pos
					d.frameRun()
					buf, pos = d.buf[:d.end], d.pos
				}
			}
		default:
			return
		}
	}
}
