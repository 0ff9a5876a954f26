// Package writer writes Python pickles of plain data (dict, list, tuple, str, int, float, bool,
// None) the way CPython's C pickler does for protocols 2 to 5 — same opcode choices, memo
// (MEMOIZE/BINPUT) and FRAME placement — or, optionally, the way PyTorch's TorchScript C++
// pickler does (protocol 2, strings memoised by value, optional restore_type_tag wrapping).
// Encode writes a typed snapshot.Snapshot back out as the file PyTorch would have written,
// including frame dicts and frames lists shared through the memo. It exists to build test
// inputs and benchmarks for the loaders; the analyses never use it.
package writer

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"math/bits"
	"unicode/utf8"
	"unsafe"
)

// Pickle opcodes used by this writer (names as in CPython's pickletools).
const (
	OpMark           byte = '('
	OpStop           byte = '.'
	OpBinFloat       byte = 'G'
	OpBinInt         byte = 'J'
	OpBinInt1        byte = 'K'
	OpBinInt2        byte = 'M'
	OpNone           byte = 'N'
	OpReduce         byte = 'R'
	OpBinUnicode     byte = 'X'
	OpAppend         byte = 'a'
	OpGlobal         byte = 'c'
	OpEmptyDict      byte = '}'
	OpAppends        byte = 'e'
	OpBinGet         byte = 'h'
	OpLongBinGet     byte = 'j'
	OpEmptyList      byte = ']'
	OpBinPut         byte = 'q'
	OpLongBinPut     byte = 'r'
	OpSetItem        byte = 's'
	OpTuple          byte = 't'
	OpEmptyTuple     byte = ')'
	OpSetItems       byte = 'u'
	OpProto          byte = 0x80
	OpTuple1         byte = 0x85
	OpTuple2         byte = 0x86
	OpTuple3         byte = 0x87
	OpNewTrue        byte = 0x88
	OpNewFalse       byte = 0x89
	OpLong1          byte = 0x8a
	OpLong4          byte = 0x8b
	OpShortBinUnicod byte = 0x8c
	OpBinUnicode8    byte = 0x8d
	OpMemoize        byte = 0x94
	OpFrame          byte = 0x95
)

const (
	frameTarget = 64 * 1024 // CPython's _FRAME_SIZE_TARGET
	frameMin    = 4         // CPython's FRAME_SIZE_MIN: smaller frames get no FRAME header
	frameHeader = 9
	batchSize   = 1000 // CPython's BATCHSIZE for APPENDS/SETITEMS
)

// Config selects the pickler to imitate.
type Config struct {
	// Protocol is 2, 3, 4 or 5 (0 means 4, CPython's default).
	Protocol int
	// Cpp imitates PyTorch's TorchScript C++ pickler (torch/csrc/jit/serialization/pickler.cpp):
	// protocol 2 only, every string memoised by value, containers memoised (BINPUT after the
	// whole container) only when given a handle, no APPENDS/SETITEMS batching, 8-byte LONG1.
	Cpp bool
	// TypeTag (with Cpp) wraps every dict and list as
	// GLOBAL 'torch.jit._pickle restore_type_tag' (container, "Dict[Any, Any]") REDUCE.
	TypeTag bool
}

type container struct {
	kind byte // 'd', 'l', 't'
	h    any
	n    int // declared length
	done int // finished items (Next calls)
}

// Writer streams one pickle. Values are written in the order the pickler would save them;
// containers are opened with StartDict/StartList/StartTuple (declaring their length, which
// decides the opcodes), each element (or key+value pair) is followed by Next, and the container
// is closed with the matching End call. Handles (any comparable Go value) give objects an
// identity: Ref(h) writes a memo GET for an object already written with handle h.
// The first error is kept and returned by Finish; later calls do nothing.
type Writer struct {
	out       *bufio.Writer
	cfg       Config
	framing   bool
	frameOpen bool
	buf       []byte // current frame, header placeholder included
	tmp       []byte // what write passes on outside frames
	memo      map[any]uint32
	frameMemo []uint32 // memo index + 1 by frameKey (0: not written)
	stackMemo []uint32 // by stackKey
	strMemo   map[string]uint32
	strCache  [1 << strCacheBits]strCacheEntry
	globals   map[string]uint32
	next      uint32
	stack     []container
	err       error
	begun     bool
}

// NewWriter returns a Writer that writes to w. Call Begin, write one value, then Finish.
func NewWriter(w io.Writer, cfg Config) *Writer {
	wr := &Writer{
		out:     bufio.NewWriterSize(w, 1<<20),
		cfg:     cfg,
		memo:    map[any]uint32{},
		strMemo: map[string]uint32{},
		globals: map[string]uint32{},
	}
	if wr.cfg.Protocol == 0 {
		wr.cfg.Protocol = 4
	}
	if wr.cfg.TypeTag {
		wr.cfg.Cpp = true
	}
	switch {
	case wr.cfg.Protocol < 2 || wr.cfg.Protocol > 5:
		wr.err = fmt.Errorf("pickle writer: protocol %d not supported (2..5)", wr.cfg.Protocol)
	case wr.cfg.Cpp && wr.cfg.Protocol != 2:
		wr.err = fmt.Errorf("pickle writer: the C++ pickler writes protocol 2, not %d", wr.cfg.Protocol)
	}
	return wr
}

// Err returns the first error seen so far.
func (w *Writer) Err() error { return w.err }

func (w *Writer) fail(format string, args ...any) {
	if w.err == nil {
		w.err = fmt.Errorf("pickle writer: "+format, args...)
	}
}

// Begin writes the PROTO opcode and starts framing for protocol 4 and 5.
func (w *Writer) Begin() {
	if w.err != nil {
		return
	}
	if w.begun {
		w.fail("Begin called twice")
		return
	}
	w.begun = true
	w.direct([]byte{OpProto, byte(w.cfg.Protocol)})
	w.framing = w.cfg.Protocol >= 4 && !w.cfg.Cpp
}

// Finish writes STOP, commits the last frame and flushes. It returns the first error.
func (w *Writer) Finish() error {
	if w.err == nil && len(w.stack) != 0 {
		w.fail("Finish with %d containers still open", len(w.stack))
	}
	w.write(OpStop)
	w.commitFrame()
	w.framing = false
	if w.err == nil {
		if err := w.out.Flush(); err != nil {
			w.err = fmt.Errorf("pickle writer: flush: %w", err)
		}
	}
	return w.err
}

// direct writes bytes outside any frame.
func (w *Writer) direct(b []byte) {
	if w.err != nil {
		return
	}
	if _, err := w.out.Write(b); err != nil {
		w.err = fmt.Errorf("pickle writer: write: %w", err)
	}
}

// write appends bytes to the current frame (opening one if needed) or writes them through.
func (w *Writer) write(b ...byte) {
	if w.frameOpen && w.err == nil { // the usual case, small enough to inline
		w.buf = append(w.buf, b...)
		return
	}
	w.writeSlow(b)
}

func (w *Writer) writeSlow(b []byte) {
	if w.err != nil {
		return
	}
	if !w.framing {
		// Through a buffer of the writer's own: b handed to the io.Writer would escape, and
		// every opcode written would cost an allocation.
		w.tmp = append(w.tmp[:0], b...)
		w.direct(w.tmp)
		return
	}
	if !w.frameOpen {
		w.buf = append(w.buf[:0], make([]byte, frameHeader)...)
		w.frameOpen = true
	}
	w.buf = append(w.buf, b...)
}

func (w *Writer) commitFrame() {
	if !w.framing || !w.frameOpen || w.err != nil {
		return
	}
	n := len(w.buf) - frameHeader
	if n >= frameMin {
		w.buf[0] = OpFrame
		binary.LittleEndian.PutUint64(w.buf[1:frameHeader], uint64(n))
		w.direct(w.buf)
	} else {
		w.direct(w.buf[frameHeader:])
	}
	w.buf = w.buf[:0]
	w.frameOpen = false
}

// beginSave is CPython's check at the start of every save(): commit a frame that reached the
// target size.
func (w *Writer) beginSave() {
	if w.framing && w.frameOpen && len(w.buf)-frameHeader >= frameTarget {
		w.commitFrame()
	}
}

// Raw writes arbitrary bytes into the stream (inside the current frame for protocol 4/5), for
// building malformed or unusual pickles in tests.
func (w *Writer) Raw(b ...byte) { w.write(b...) }

// RawDirect writes arbitrary bytes outside any frame (it commits the current frame first).
func (w *Writer) RawDirect(b ...byte) {
	w.commitFrame()
	w.direct(b)
}

func (w *Writer) memoize(h any) {
	if w.err != nil {
		return
	}
	idx := w.next
	if w.cfg.Protocol >= 4 && !w.cfg.Cpp {
		w.write(OpMemoize)
	} else if idx < 256 {
		w.write(OpBinPut, byte(idx))
	} else {
		w.write(OpLongBinPut, byte(idx), byte(idx>>8), byte(idx>>16), byte(idx>>24))
	}
	if w.next == math.MaxUint32 {
		w.fail("memo full")
		return
	}
	w.next++
	if h != nil {
		w.remember(h, idx)
	}
}

// The handles of a snapshot's frames and stacks (frameKey, stackKey: numbered densely) keep
// their memo indexes in slices: a lookup in the map, hashing and comparing the handle as an
// interface, was most of the cost of writing a large snapshot (one per trace event).

// remember records that handle h names memo index idx.
func (w *Writer) remember(h any, idx uint32) {
	switch k := h.(type) {
	case frameKey:
		if k >= 0 {
			w.frameMemo = setDense(w.frameMemo, int(k), idx)
			return
		}
	case stackKey:
		if k >= 0 {
			w.stackMemo = setDense(w.stackMemo, int(k), idx)
			return
		}
	}
	w.memo[h] = idx
}

// lookup returns the memo index of handle h.
func (w *Writer) lookup(h any) (uint32, bool) {
	switch k := h.(type) {
	case frameKey:
		if k >= 0 {
			return getDense(w.frameMemo, int(k))
		}
	case stackKey:
		if k >= 0 {
			return getDense(w.stackMemo, int(k))
		}
	}
	idx, ok := w.memo[h]
	return idx, ok
}

// setDense stores idx+1 at i (0: not written), growing m as needed.
func setDense(m []uint32, i int, idx uint32) []uint32 {
	if i >= len(m) {
		m = append(m, make([]uint32, i+1-len(m))...)
		m = m[:cap(m)]
	}
	m[i] = idx + 1
	return m
}

func getDense(m []uint32, i int) (uint32, bool) {
	if i < len(m) && m[i] != 0 {
		return m[i] - 1, true
	}
	return 0, false
}

func (w *Writer) get(idx uint32) {
	if w.frameOpen && w.err == nil {
		w.buf = appendGet(w.buf, idx)
		return
	}
	var b [5]byte
	w.writeSlow(appendGet(b[:0], idx))
}

// Ref writes a memo GET and returns true if an object with handle h was already written;
// otherwise it writes nothing and returns false. Ref(nil) is always false.
func (w *Writer) Ref(h any) bool {
	if h == nil || w.err != nil {
		return false
	}
	w.beginSave()
	if idx, ok := w.lookup(h); ok {
		w.get(idx)
		return true
	}
	return false
}

// Memoized reports whether handle h has been written.
func (w *Writer) Memoized(h any) bool {
	_, ok := w.lookup(h)
	return ok
}

// None writes None.
func (w *Writer) None() {
	w.beginSave()
	w.write(OpNone)
}

// Bool writes True or False.
func (w *Writer) Bool(b bool) {
	w.beginSave()
	if b {
		w.write(OpNewTrue)
	} else {
		w.write(OpNewFalse)
	}
}

// Int writes an integer with CPython's (or, in Cpp mode, the C++ pickler's) opcode choice.
func (w *Writer) Int(v int64) {
	w.beginSave()
	if w.cfg.Cpp && (v < math.MinInt32 || v > math.MaxInt32) {
		b := make([]byte, 10)
		b[0], b[1] = OpLong1, 8
		binary.LittleEndian.PutUint64(b[2:], uint64(v))
		w.write(b...)
		return
	}
	if w.frameOpen && w.err == nil {
		w.buf = appendInt(w.buf, v)
		return
	}
	var b [10]byte
	w.writeSlow(appendInt(b[:0], v))
}

// appendInt appends CPython's pickle of v: BININT1, BININT2, BININT, or LONG1 with the
// shortest two's complement.
func appendInt(b []byte, v int64) []byte {
	if uint64(v)+1<<31 < 1<<32 { // an int32: addresses and times never are, sizes often
		switch {
		case v >= 0 && v <= 0xff:
			return append(b, OpBinInt1, byte(v))
		case v >= 0 && v <= 0xffff:
			return append(b, OpBinInt2, byte(v), byte(v>>8))
		}
		return append(b, OpBinInt, byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
	}
	// LONG1 with the shortest two's complement: the bytes that hold the value's bits and a
	// sign bit (what trimTwos leaves of the eight), counted instead of trimmed byte by byte.
	u := uint64(v)
	if v < 0 {
		u = ^u
	}
	n := bits.Len64(u)/8 + 1
	b = binary.LittleEndian.AppendUint64(append(b, OpLong1, byte(n)), uint64(v))
	return b[:len(b)-8+n]
}

// appendUint appends CPython's pickle of a non-negative integer (above 2^63-1: LONG1 of 9
// bytes).
func appendUint(b []byte, v uint64) []byte {
	if v <= math.MaxInt64 {
		return appendInt(b, int64(v))
	}
	var le [9]byte
	binary.LittleEndian.PutUint64(le[:8], v)
	return append(append(b, OpLong1, 9), le[:]...)
}

// appendGet appends a memo GET of idx.
func appendGet(b []byte, idx uint32) []byte {
	if idx < 256 {
		return append(b, OpBinGet, byte(idx))
	}
	return append(b, OpLongBinGet, byte(idx), byte(idx>>8), byte(idx>>16), byte(idx>>24))
}

// Uint writes a non-negative integer; values above 2^63-1 need LONG1 with 9 bytes (in Cpp mode
// they wrap to int64, as the C++ writer's int64 does: 2^64-1 becomes -1).
func (w *Writer) Uint(v uint64) {
	if v <= math.MaxInt64 || w.cfg.Cpp {
		w.Int(int64(v))
		return
	}
	w.beginSave()
	var b [11]byte
	w.write(appendUint(b[:0], v)...)
}

// BigInt writes an arbitrary integer (LONG1, or LONG4 beyond 255 bytes).
func (w *Writer) BigInt(v *big.Int) {
	if v == nil {
		w.fail("nil *big.Int")
		return
	}
	if v.IsInt64() {
		w.Int(v.Int64())
		return
	}
	if w.cfg.Cpp {
		w.fail("the C++ pickler cannot write %s (beyond int64)", v)
		return
	}
	w.beginSave()
	w.long(bigTwos(v))
}

func (w *Writer) long(le []byte) {
	if len(le) < 256 {
		w.write(OpLong1, byte(len(le)))
	} else {
		n := uint32(len(le))
		w.write(OpLong4, byte(n), byte(n>>8), byte(n>>16), byte(n>>24))
	}
	w.write(le...)
}

// trimTwos trims a little-endian two's complement number to its minimal length.
func trimTwos(le []byte) []byte {
	for len(le) > 1 {
		last, prev := le[len(le)-1], le[len(le)-2]
		if (last == 0 && prev&0x80 == 0) || (last == 0xff && prev&0x80 != 0) {
			le = le[:len(le)-1]
			continue
		}
		break
	}
	return le
}

// bigTwos returns the minimal little-endian two's complement bytes of v.
func bigTwos(v *big.Int) []byte {
	n := (v.BitLen()+8)/8 + 1
	var x big.Int
	if v.Sign() < 0 {
		// 2^(8n) + v
		x.Lsh(big.NewInt(1), uint(8*n))
		x.Add(&x, v)
	} else {
		x.Set(v)
	}
	be := x.FillBytes(make([]byte, n))
	le := make([]byte, n)
	for i := range be {
		le[i] = be[n-1-i]
	}
	return trimTwos(le)
}

// Float writes a BINFLOAT.
func (w *Writer) Float(f float64) {
	w.beginSave()
	var b [9]byte
	b[0] = OpBinFloat
	binary.BigEndian.PutUint64(b[1:], math.Float64bits(f))
	w.write(b[:]...)
}

// cachedStr reports whether CPython keeps s as a singleton (the empty string and one-character
// Latin-1 strings), so every occurrence is the same object.
func cachedStr(s string) bool {
	if s == "" {
		return true
	}
	r, n := utf8.DecodeRuneInString(s)
	return n == len(s) && r != utf8.RuneError && r < 256
}

// Str writes a new str object (memoised, as CPython memoises every str). The empty string and
// one-character Latin-1 strings are CPython singletons and are shared like SharedStr. In Cpp
// mode every string is shared by value.
func (w *Writer) Str(s string) {
	if w.cfg.Cpp || cachedStr(s) {
		w.SharedStr(s)
		return
	}
	w.beginSave()
	w.strBody(s)
	w.memoize(nil)
}

// SharedStr writes s once and a memo GET for every later SharedStr with the same value
// (interned strings such as dict keys).
func (w *Writer) SharedStr(s string) {
	w.beginSave()
	// Most shared strings are dict keys written from the same few string constants millions
	// of times: a string with the same bytes in memory (data pointer and length) is the same
	// string, and a small cache by pointer answers before the map hashes it.
	p := unsafe.StringData(s)
	c := &w.strCache[(uint64(uintptr(unsafe.Pointer(p)))*0x9e3779b97f4a7c15)>>(64-strCacheBits)]
	if c.p == p && c.n == len(s) && p != nil {
		w.get(c.idx)
		return
	}
	idx, ok := w.strMemo[s]
	if !ok {
		w.strBody(s)
		if w.err != nil {
			return
		}
		idx = w.next
		w.strMemo[s] = idx
		w.memoize(nil)
	} else {
		w.get(idx)
	}
	*c = strCacheEntry{p, len(s), idx}
}

const strCacheBits = 7

// strCacheEntry is a shared string's memo index, by the string's data pointer and length.
type strCacheEntry struct {
	p   *byte
	n   int
	idx uint32
}

// StrAs writes a new str object with handle h (so Ref(h) can refer to it later).
func (w *Writer) StrAs(h any, s string) {
	w.beginSave()
	w.strBody(s)
	w.memoize(h)
}

func (w *Writer) strBody(s string) {
	var hdr []byte
	n := len(s)
	switch {
	case w.cfg.Protocol >= 4 && !w.cfg.Cpp && n < 256:
		hdr = []byte{OpShortBinUnicod, byte(n)}
	case uint64(n) <= math.MaxUint32:
		hdr = []byte{OpBinUnicode, byte(n), byte(n >> 8), byte(n >> 16), byte(n >> 24)}
	case w.cfg.Protocol >= 4:
		hdr = make([]byte, 9)
		hdr[0] = OpBinUnicode8
		binary.LittleEndian.PutUint64(hdr[1:], uint64(n))
	default:
		w.fail("string of %d bytes needs protocol 4", n)
		return
	}
	if w.framing && n >= frameTarget {
		// CPython writes large payloads outside frames.
		w.commitFrame()
		w.direct(hdr)
		w.direct([]byte(s))
		return
	}
	w.write(hdr...)
	w.write([]byte(s)...)
}

func (w *Writer) global(module, name string) {
	key := module + "\n" + name + "\n"
	if idx, ok := w.globals[key]; ok {
		w.get(idx)
		return
	}
	w.write(OpGlobal)
	w.write([]byte(key)...)
	if w.err == nil {
		w.globals[key] = w.next
	}
	w.memoize(nil)
}

func (w *Writer) push(kind byte, h any, n int) {
	if n < 0 {
		w.fail("negative container length %d", n)
	}
	w.stack = append(w.stack, container{kind: kind, h: h, n: n})
}

// StartDict opens a dict of n items with handle h (nil: no later references).
func (w *Writer) StartDict(h any, n int) { w.startMutable('d', OpEmptyDict, h, n) }

// StartList opens a list of n items with handle h.
func (w *Writer) StartList(h any, n int) { w.startMutable('l', OpEmptyList, h, n) }

// startMutable opens a dict or list: the empty container, then its items in MARK batches
// (CPython), or the C++ writer's optional type tag and a single MARK.
func (w *Writer) startMutable(kind, emptyOp byte, h any, n int) {
	w.beginSave()
	if w.cfg.Cpp {
		if w.cfg.TypeTag {
			w.global("torch.jit._pickle", "restore_type_tag")
		}
		w.write(emptyOp, OpMark)
	} else {
		w.write(emptyOp)
		w.memoize(h)
		if n >= 2 {
			w.write(OpMark)
		}
	}
	w.push(kind, h, n)
}

// StartTuple opens a tuple of n items with handle h.
func (w *Writer) StartTuple(h any, n int) {
	w.beginSave()
	if n > 3 {
		w.write(OpMark)
	}
	w.push('t', h, n)
}

// Next ends one element of the open list or tuple, or one key+value pair of the open dict.
func (w *Writer) Next() {
	if w.err != nil {
		return
	}
	if len(w.stack) == 0 {
		w.fail("Next with no open container")
		return
	}
	c := &w.stack[len(w.stack)-1]
	c.done++
	if c.done > c.n {
		w.fail("container declared with %d items got more", c.n)
		return
	}
	if w.cfg.Cpp || c.kind == 't' || c.n < 2 || c.done%batchSize != 0 || c.done == c.n {
		return
	}
	if c.kind == 'l' {
		w.write(OpAppends, OpMark)
	} else {
		w.write(OpSetItems, OpMark)
	}
}

func (w *Writer) pop(kind byte) (container, bool) {
	if w.err != nil {
		return container{}, false
	}
	if len(w.stack) == 0 || w.stack[len(w.stack)-1].kind != kind {
		w.fail("End%c without matching Start", kind)
		return container{}, false
	}
	c := w.stack[len(w.stack)-1]
	w.stack = w.stack[:len(w.stack)-1]
	if c.done != c.n {
		w.fail("container declared with %d items got %d", c.n, c.done)
		return container{}, false
	}
	return c, true
}

func (w *Writer) endTag(annotation string, h any) {
	if w.cfg.TypeTag {
		w.SharedStr(annotation)
		w.write(OpTuple2, OpReduce)
	}
	if h != nil {
		w.memoize(h)
	}
}

// EndDict closes the open dict.
func (w *Writer) EndDict() {
	c, ok := w.pop('d')
	if !ok {
		return
	}
	if w.cfg.Cpp {
		w.write(OpSetItems)
		w.endTag("Dict[Any, Any]", c.h)
		return
	}
	switch {
	case c.n == 1:
		w.write(OpSetItem)
	case c.n >= 2:
		w.write(OpSetItems)
		if c.n%batchSize == 0 {
			// CPython's batch_dict_exact writes one more, empty batch when the length is a
			// multiple of the batch size.
			w.write(OpMark, OpSetItems)
		}
	}
}

// EndList closes the open list.
func (w *Writer) EndList() {
	c, ok := w.pop('l')
	if !ok {
		return
	}
	if w.cfg.Cpp {
		w.write(OpAppends)
		w.endTag("List[Any]", c.h)
		return
	}
	switch {
	case c.n == 1:
		w.write(OpAppend)
	case c.n >= 2:
		w.write(OpAppends)
	}
}

// EndTuple closes the open tuple.
func (w *Writer) EndTuple() {
	c, ok := w.pop('t')
	if !ok {
		return
	}
	switch c.n {
	case 0:
		w.write(OpEmptyTuple)
		return // CPython does not memoise the empty tuple
	case 1:
		w.write(OpTuple1)
	case 2:
		w.write(OpTuple2)
	case 3:
		w.write(OpTuple3)
	default:
		w.write(OpTuple)
	}
	if w.cfg.Cpp {
		if c.h != nil {
			w.memoize(c.h)
		}
		return
	}
	w.memoize(c.h)
}

// errUnsupported is returned for Go values Value cannot write.
var errUnsupported = errors.New("unsupported value type")
