package writer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"

	"github.com/klauspost/compress/gzip"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// Options chooses the file form Encode writes.
type Options struct {
	// Protocol is the pickle protocol, 2..5 (0 means 4, what torch.cuda.memory._dump_snapshot
	// writes on Python 3.8–3.13).
	Protocol int
	// TypeTag writes protocol 2 like PyTorch's C++ writer with tag_aggregates: every dict and list
	// wrapped as GLOBAL 'torch.jit._pickle restore_type_tag' + REDUCE. Implies CppWriter.
	TypeTag bool
	// CppWriter writes protocol 2 like torch::cuda::_memory_snapshot_pickled() without type tags
	// (strings memoised by value, BINPUT, no batching, frame lines as int64 so 2^64-1 is -1).
	CppWriter bool
	// Legacy20 writes the PyTorch 2.0 form: blocks with history [{addr, real_size, frames}] and
	// no address/frames, segments without segment_pool_id/is_expandable/frames, and one
	// 'snapshot' event per device instead of the traces.
	Legacy20 bool
	// SegmentList writes the oldest form: the top level is a bare list of segments.
	SegmentList bool
	// JSON writes json.dumps output (tuples as lists, every shared object expanded);
	// JSONIndent uses indent=4.
	JSON       bool
	JSONIndent bool
	// Gzip compresses the output.
	Gzip bool
	// TrailingBytes appends that many NUL bytes after STOP (as _memory_viz.py's HTML embedding
	// pads the pickle), before any gzip.
	TrailingBytes int
	// ListPerTraceback writes one frames list per captured traceback, as real files do: every
	// event gets its own list object (its frame dicts still shared), except that a live block
	// shares the list of the alloc event that created it and a segment the list of its
	// segment_alloc event. Default: one list per distinct stack, shared by every record.
	ListPerTraceback bool
}

// Encode writes snap in the form opt asks for and returns the file's bytes.
func Encode(snap *snapshot.Snapshot, opt Options) ([]byte, error) {
	var buf bytes.Buffer
	if err := EncodeTo(context.Background(), &buf, snap, opt); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// EncodeTo streams the encoded snapshot to out (it never holds the whole file in memory).
func EncodeTo(ctx context.Context, out io.Writer, snap *snapshot.Snapshot, opt Options) error {
	if snap == nil {
		return fmt.Errorf("encode snapshot: nil snapshot")
	}
	if opt.TrailingBytes < 0 {
		return fmt.Errorf("encode snapshot: negative TrailingBytes %d", opt.TrailingBytes)
	}
	if !opt.Gzip {
		return encode(ctx, out, snap, opt)
	}
	gz := newGzipBehind(out)
	closed := false
	defer func() {
		if !closed { // a panic: the compressor must not wait on the pipe for ever
			gz.close(errors.New("encoder panicked"))
		}
	}()
	err := encode(ctx, gz, snap, opt)
	closed = true
	if cerr := gz.close(err); err == nil && cerr != nil {
		return fmt.Errorf("encode snapshot: gzip: %w", cerr)
	}
	return err
}

// gzipLevel is the compression of gzip output. On the 296 MB bench file's 102 MB pickle,
// klauspost/compress at level 3 took 0.45 s for 22.1 MB, where the standard library's default
// took 4.7 s for 20.7 MB (level 1: 0.36 s, 22.9 MB; its default: 0.69 s, 21.7 MB).
const gzipLevel = 3

// gzipBehind compresses on a goroutine of its own what is written to it, so that encoding and
// compressing share the two cores: the encoder's writes (1 MiB at a time, through the pickle
// writer's buffer) wait only while the previous chunk is being compressed.
type gzipBehind struct {
	pw   *io.PipeWriter
	done chan error
}

func newGzipBehind(out io.Writer) *gzipBehind {
	pr, pw := io.Pipe()
	g := &gzipBehind{pw: pw, done: make(chan error, 1)}
	go func() {
		gz, err := gzip.NewWriterLevel(out, gzipLevel)
		if err == nil {
			_, err = io.Copy(gz, pr)
			if cerr := gz.Close(); err == nil {
				err = cerr
			}
		}
		// A failed write to out fails the encoder's next write, which then stops.
		pr.CloseWithError(err)
		g.done <- err
	}()
	return g
}

func (g *gzipBehind) Write(p []byte) (int, error) { return g.pw.Write(p) }

// close ends the stream (cut short when the encoder failed: encErr) and waits for the
// compressor; it returns the compressor's error.
func (g *gzipBehind) close(encErr error) error {
	if encErr != nil {
		g.pw.CloseWithError(encErr)
	} else {
		g.pw.Close()
	}
	return <-g.done
}

// encode writes the uncompressed file to out.
func encode(ctx context.Context, out io.Writer, snap *snapshot.Snapshot, opt Options) error {
	e := &encoder{ctx: ctx, snap: snap, opt: opt}
	var err error
	if opt.JSON {
		j := newJSONWriter(out, opt.JSONIndent)
		e.s = j
		err = e.run()
		if err == nil {
			err = j.finish()
		}
	} else {
		cfg := Config{Protocol: opt.Protocol, Cpp: opt.CppWriter || opt.TypeTag, TypeTag: opt.TypeTag}
		if cfg.Cpp && cfg.Protocol == 0 {
			cfg.Protocol = 2
		}
		w := NewWriter(out, cfg)
		e.s = w
		e.cpp = cfg.Cpp
		w.Begin()
		err = e.run()
		if err == nil {
			err = w.Finish()
		}
		if err == nil && opt.TrailingBytes > 0 {
			if _, werr := out.Write(make([]byte, opt.TrailingBytes)); werr != nil {
				err = werr
			}
		}
	}
	if err != nil {
		return fmt.Errorf("encode snapshot: %w", err)
	}
	return nil
}

// Memo handles for shared objects.
type (
	frameKey  snapshot.FrameID
	stackKey  snapshot.StackID
	recordKey struct{ dev, idx int } // the list of trace event idx on device dev
)

type encoder struct {
	ctx  context.Context
	snap *snapshot.Snapshot
	opt  Options
	s    sink
	cpp  bool
	// ListPerTraceback: which block/segment shares its list with which event.
	blockShare map[[2]int]recordKey // (segment, block) -> event
	segShare   map[int]recordKey
	eventOwner [][]int32          // per device: the event whose traceback each event uses
	shared     map[recordKey]bool // tracebacks used by more than one record
	ticks      int
	// The handles of frames and stacks, by id (see boxed).
	frameHandles, stackHandles []any
	fastKeys                   fastKeys
}

func (e *encoder) check() error {
	if err := e.s.Err(); err != nil {
		return err
	}
	return e.tick()
}

// tick counts a value written and looks at the context every 4096.
func (e *encoder) tick() error {
	if e.ticks++; e.ticks&0xfff == 0 {
		return e.ctx.Err()
	}
	return nil
}

func (e *encoder) run() error {
	if err := e.validate(); err != nil {
		return err
	}
	if e.opt.ListPerTraceback && !e.opt.Legacy20 {
		e.computeShares()
	}
	if e.opt.SegmentList {
		return e.segments()
	}
	n := 2
	if e.snap.Settings.Present {
		n++
	}
	if len(e.snap.Annotations) > 0 {
		n++
	}
	e.s.StartDict(nil, n)
	e.s.SharedStr("segments")
	if err := e.segments(); err != nil {
		return err
	}
	e.s.Next()
	e.s.SharedStr("device_traces")
	if err := e.traces(); err != nil {
		return err
	}
	e.s.Next()
	if e.snap.Settings.Present {
		e.s.SharedStr("allocator_settings")
		if err := e.settings(); err != nil {
			return err
		}
		e.s.Next()
	}
	if len(e.snap.Annotations) > 0 {
		e.s.SharedStr("external_annotations")
		e.annotations()
		e.s.Next()
	}
	e.s.EndDict()
	return e.s.Err()
}

func (e *encoder) validate() error {
	nf := len(e.snap.Frames)
	for i, st := range e.snap.Stacks {
		for _, f := range st {
			if f < 0 || int(f) >= nf {
				return fmt.Errorf("stack %d refers to frame %d of %d", i, f, nf)
			}
		}
	}
	ok := func(id snapshot.StackID) bool {
		return id == snapshot.NoStack || id == snapshot.EmptyStack || (id > 0 && int(id) < len(e.snap.Stacks))
	}
	for si, seg := range e.snap.Segments {
		if !ok(seg.Stack) {
			return fmt.Errorf("segment %d refers to stack %d of %d", si, seg.Stack, len(e.snap.Stacks))
		}
		for bi, b := range seg.Blocks {
			if !ok(b.Stack) {
				return fmt.Errorf("segment %d block %d refers to stack %d of %d", si, bi, b.Stack, len(e.snap.Stacks))
			}
		}
	}
	for d, evs := range e.snap.DeviceTraces {
		for i, ev := range evs {
			if !ok(ev.Stack) {
				return fmt.Errorf("device %d event %d refers to stack %d of %d", d, i, ev.Stack, len(e.snap.Stacks))
			}
			if ev.Extra.Index() > 0 && ev.Extra.Index() >= len(e.snap.EventExtras) {
				return fmt.Errorf("device %d event %d refers to extra %d of %d", d, i, ev.Extra.Index(), len(e.snap.EventExtras))
			}
		}
	}
	return nil
}

// computeShares decides which records share one captured traceback (and so one frames list),
// following the caching allocator: free_requested reuses the block's allocation context when it
// has the same stack (context "alloc"), an alloc reuses the context of the segment_alloc it
// caused (the event just before it, same stack), free_completed reuses the free_requested context, a live
// block keeps the context of the alloc that created it (the last alloc at its address not
// followed by free_completed), and a segment that of its segment_alloc event.
func (e *encoder) computeShares() {
	e.blockShare = map[[2]int]recordKey{}
	e.segShare = map[int]recordKey{}
	e.eventOwner = make([][]int32, len(e.snap.DeviceTraces))
	e.shared = map[recordKey]bool{}
	type live struct{ blocks, segs map[uint64]int }
	per := make([]live, len(e.snap.DeviceTraces))
	for d, evs := range e.snap.DeviceTraces {
		owner := make([]int32, len(evs))
		join := func(i, j int) { // event i uses event j's traceback
			owner[i] = owner[j]
			e.shared[recordKey{d, int(owner[j])}] = true
		}
		l := live{blocks: map[uint64]int{}, segs: map[uint64]int{}}
		pending := map[uint64]int{}
		for i, ev := range evs {
			owner[i] = int32(i)
			// An empty stack equals every other empty stack, so only the free_requested ->
			// free_completed pair (one context) may share an empty list.
			captured := ev.Stack > 0
			switch ev.Action {
			case snapshot.ActionAlloc:
				l.blocks[ev.Addr] = i
				delete(pending, ev.Addr)
				// the segment_alloc (or segment_map) this allocation caused carries its context
				if i > 0 && captured && evs[i-1].Stack == ev.Stack &&
					(evs[i-1].Action == snapshot.ActionSegmentAlloc || evs[i-1].Action == snapshot.ActionSegmentMap) {
					join(i, i-1)
				}
			case snapshot.ActionFreeRequested:
				if a, ok := l.blocks[ev.Addr]; ok && captured && evs[a].Stack == ev.Stack {
					join(i, a)
				}
				pending[ev.Addr] = i
			case snapshot.ActionFreeCompleted:
				if r, ok := pending[ev.Addr]; ok && ev.Stack != snapshot.NoStack && evs[r].Stack == ev.Stack {
					join(i, r)
				} else if a, ok := l.blocks[ev.Addr]; ok && captured && evs[a].Stack == ev.Stack {
					join(i, a)
				}
				delete(l.blocks, ev.Addr)
				delete(pending, ev.Addr)
			case snapshot.ActionSegmentAlloc:
				l.segs[ev.Addr] = i
			case snapshot.ActionSegmentFree:
				delete(l.segs, ev.Addr)
			}
		}
		e.eventOwner[d] = owner
		per[d] = l
	}
	for si, seg := range e.snap.Segments {
		if seg.Device < 0 || seg.Device >= len(per) {
			continue
		}
		l := per[seg.Device]
		evs := e.snap.DeviceTraces[seg.Device]
		owner := e.eventOwner[seg.Device]
		if i, ok := l.segs[seg.Address]; ok && seg.Stack > 0 && evs[i].Stack == seg.Stack {
			k := recordKey{seg.Device, int(owner[i])}
			e.segShare[si] = k
			e.shared[k] = true
		}
		for bi, b := range seg.Blocks {
			if b.State == snapshot.StateInactive || b.Stack <= 0 {
				continue
			}
			if i, ok := l.blocks[b.Address]; ok && evs[i].Stack == b.Stack {
				k := recordKey{seg.Device, int(owner[i])}
				e.blockShare[[2]int{si, bi}] = k
				e.shared[k] = true
			}
		}
	}
}

// frames writes a frames list. h is the list's handle (nil: a list nobody else refers to).
func (e *encoder) frames(h any, id snapshot.StackID) {
	if j, ok := e.s.(*jsonWriter); ok && id >= 0 {
		// JSON has no memo: the list is written out in full for every record.
		j.repeat(int(id), func() { e.frameList(h, id) })
		return
	}
	if e.s.Ref(h) {
		return
	}
	e.frameList(h, id)
}

// frameList writes stack id's frames list (handle h).
func (e *encoder) frameList(h any, id snapshot.StackID) {
	var ids []snapshot.FrameID
	if id > 0 {
		ids = e.snap.Stacks[id]
	}
	e.s.StartList(h, len(ids))
	for _, f := range ids {
		e.frame(f)
		e.s.Next()
	}
	e.s.EndList()
}

// listHandle is the handle of a record's frames list in the default mode.
func (e *encoder) listHandle(id snapshot.StackID) any {
	return boxed(&e.stackHandles, int(id), func() any { return stackKey(id) })
}

// boxed returns the handle at i of hs, made by mk once: a handle converted to an interface at
// every use would cost an allocation per trace event.
func boxed(hs *[]any, i int, mk func() any) any {
	if i < 0 {
		return mk()
	}
	if i >= len(*hs) {
		*hs = append(*hs, make([]any, i+1-len(*hs))...)
		*hs = (*hs)[:cap(*hs)]
	}
	if (*hs)[i] == nil {
		(*hs)[i] = mk()
	}
	return (*hs)[i]
}

func (e *encoder) frame(id snapshot.FrameID) {
	h := boxed(&e.frameHandles, int(id), func() any { return frameKey(id) })
	if e.s.Ref(h) {
		return
	}
	f := e.snap.Frames[id]
	e.s.StartDict(h, 3)
	if e.opt.Legacy20 {
		e.key("filename")
		e.s.Str(f.Filename)
		e.s.Next()
		e.key("name")
		e.s.Str(f.Name)
		e.s.Next()
	} else {
		e.key("name")
		e.s.Str(f.Name)
		e.s.Next()
		e.key("filename")
		e.s.Str(f.Filename)
		e.s.Next()
	}
	e.key("line")
	if f.Line == snapshot.LineUnknown {
		e.s.Uint(math.MaxUint64) // Python 3.13 writes 2^64-1; the C++ writer's int64 makes it -1
	} else {
		e.s.Int(f.Line)
	}
	e.s.Next()
	e.s.EndDict()
}

func (e *encoder) key(k string) { e.s.SharedStr(k) }

func (e *encoder) kv(k string, f func()) {
	e.key(k)
	f()
	e.s.Next()
}

func (e *encoder) segments() error {
	e.s.StartList(nil, len(e.snap.Segments))
	for si := range e.snap.Segments {
		if err := e.check(); err != nil {
			return err
		}
		e.segment(si)
		e.s.Next()
	}
	e.s.EndList()
	return e.s.Err()
}

func (e *encoder) segment(si int) {
	seg := &e.snap.Segments[si]
	legacy := e.opt.Legacy20
	n := 9
	if !legacy {
		n += 2
		if seg.Stack != snapshot.NoStack {
			n++
		}
	}
	e.s.StartDict(nil, n)
	e.kv("device", func() { e.s.Int(int64(seg.Device)) })
	e.kv("address", func() { e.s.Uint(seg.Address) })
	e.kv("total_size", func() { e.s.Int(seg.TotalSize) })
	e.kv("allocated_size", func() { e.s.Int(seg.AllocatedSize) })
	e.kv("active_size", func() { e.s.Int(seg.ActiveSize) })
	e.kv("requested_size", func() { e.s.Int(seg.RequestedSize) })
	e.kv("stream", func() { e.s.Uint(seg.Stream) })
	e.kv("segment_type", func() { e.s.SharedStr(seg.SegmentType) })
	if !legacy {
		e.kv("segment_pool_id", func() {
			e.s.StartTuple(nil, 2)
			e.s.Int(seg.PoolID[0])
			e.s.Next()
			e.s.Int(seg.PoolID[1])
			e.s.Next()
			e.s.EndTuple()
		})
		e.kv("is_expandable", func() { e.s.Bool(seg.IsExpandable) })
	}
	segFrames := func() {
		var h any = e.listHandle(seg.Stack)
		if e.opt.ListPerTraceback && seg.Stack > 0 {
			h = nil
			if k, ok := e.segShare[si]; ok {
				h = k
			}
		}
		e.kv("frames", func() { e.frames(h, seg.Stack) })
	}
	// PyTorch inserts an empty frames list right away and a captured one after the blocks.
	if !legacy && seg.Stack == snapshot.EmptyStack {
		segFrames()
	}
	e.kv("blocks", func() {
		e.s.StartList(nil, len(seg.Blocks))
		for bi := range seg.Blocks {
			e.block(si, bi)
			e.s.Next()
		}
		e.s.EndList()
	})
	if !legacy && seg.Stack > 0 {
		segFrames()
	}
	e.s.EndDict()
}

func (e *encoder) blockHandle(si, bi int, id snapshot.StackID) any {
	if !e.opt.ListPerTraceback || id <= 0 {
		return e.listHandle(id)
	}
	if k, ok := e.blockShare[[2]int{si, bi}]; ok {
		return k
	}
	return nil
}

func (e *encoder) block(si, bi int) {
	b := &e.snap.Segments[si].Blocks[bi]
	if e.opt.Legacy20 {
		hist := b.State != snapshot.StateInactive && b.Stack != snapshot.NoStack
		n := 3
		if hist {
			n++
		}
		e.s.StartDict(nil, n)
		e.kv("size", func() { e.s.Int(b.Size) })
		e.kv("requested_size", func() { e.s.Int(b.RequestedSize) })
		e.kv("state", func() { e.s.SharedStr(b.State.String()) })
		if hist {
			e.kv("history", func() {
				e.s.StartList(nil, 1)
				e.s.StartDict(nil, 3)
				e.kv("addr", func() { e.s.Uint(b.Address) })
				e.kv("real_size", func() { e.s.Int(b.RequestedSize) })
				e.kv("frames", func() { e.frames(e.blockHandle(si, bi, b.Stack), b.Stack) })
				e.s.EndDict()
				e.s.Next()
				e.s.EndList()
			})
		}
		e.s.EndDict()
		return
	}
	n := 4
	if b.Stack != snapshot.NoStack {
		n++
	}
	e.s.StartDict(nil, n)
	e.kv("address", func() { e.s.Uint(b.Address) })
	e.kv("size", func() { e.s.Int(b.Size) })
	e.kv("requested_size", func() { e.s.Int(b.RequestedSize) })
	e.kv("state", func() { e.s.SharedStr(b.State.String()) })
	if b.Stack != snapshot.NoStack {
		e.kv("frames", func() { e.frames(e.blockHandle(si, bi, b.Stack), b.Stack) })
	}
	e.s.EndDict()
}

func (e *encoder) numDevices() int {
	n := len(e.snap.DeviceTraces)
	for _, seg := range e.snap.Segments {
		if seg.Device+1 > n {
			n = seg.Device + 1
		}
	}
	return n
}

func (e *encoder) traces() error {
	if e.opt.Legacy20 {
		nd := e.numDevices()
		e.s.StartList(nil, nd)
		for d := range nd {
			size := int64(0)
			found := false
			if d < len(e.snap.DeviceTraces) {
				for _, ev := range e.snap.DeviceTraces[d] {
					if ev.Action == snapshot.ActionSnapshot {
						size, found = ev.Size, true
					}
				}
			}
			if !found {
				for _, seg := range e.snap.Segments {
					if seg.Device == d {
						size += seg.ActiveSize
					}
				}
			}
			e.s.StartList(nil, 1)
			e.s.StartDict(nil, 4)
			e.kv("action", func() { e.s.SharedStr("snapshot") })
			e.kv("addr", func() { e.s.Int(0) })
			e.kv("size", func() { e.s.Int(size) })
			e.kv("stream", func() { e.s.Int(0) })
			e.s.EndDict()
			e.s.Next()
			e.s.EndList()
			e.s.Next()
		}
		e.s.EndList()
		return e.s.Err()
	}
	fast, _ := e.s.(*Writer)
	if fast != nil && (!fastEvents || fast.cfg.Cpp || !fast.framing || e.opt.ListPerTraceback) {
		fast = nil
	}
	e.s.StartList(nil, len(e.snap.DeviceTraces))
	for d, evs := range e.snap.DeviceTraces {
		e.s.StartList(nil, len(evs))
		for i := range evs {
			if fast != nil {
				// check and Next through the Writer itself, not the sink interface (one
				// call each per event of millions).
				if fast.err != nil {
					return fast.err
				}
				if err := e.tick(); err != nil {
					return err
				}
				if !e.fastEvent(fast, &evs[i]) {
					e.event(d, i)
				}
				fast.Next()
				continue
			}
			if err := e.check(); err != nil {
				return err
			}
			e.event(d, i)
			e.s.Next()
		}
		e.s.EndList()
		e.s.Next()
	}
	e.s.EndList()
	return e.s.Err()
}

// fastEvents turns fastEvent on (tests compare its bytes with the general path's).
var fastEvents = true

// fastEventMax bounds the bytes fastEvent writes: the dict with its memo and mark (3), six
// keys, the action and the frames list as memo gets (5 each), four integers (11 each at most:
// LONG1 of 9 bytes), SETITEMS (1).
const fastEventMax = 3 + 8*5 + 4*11 + 1

// fastEvent writes trace event ev as event does, byte for byte, straight into the writer's
// frame, when everything it refers to is already in the memo (its keys, its action, its
// frames list) and no frame can end inside it; otherwise it writes nothing and returns false.
// The pickle of a large trace is millions of these small dicts, and the general path's calls
// through the sink interface per key and value were most of the time of writing one.
func (e *encoder) fastEvent(w *Writer, ev *snapshot.Event) bool {
	if !w.frameOpen || w.err != nil || len(w.buf)-frameHeader+fastEventMax >= frameTarget || w.next >= math.MaxUint32-1 ||
		ev.Action == snapshot.ActionOOM || ev.Action == snapshot.ActionOther || ev.Action >= fastActions || ev.Extra.Index() != 0 {
		return false
	}
	keys := &e.fastKeys
	need := uint32(1<<keyAction | 1<<keyAddr | 1<<keySize | 1<<keyStream | 1<<(numFastKeys+int(ev.Action)))
	if ev.TimeUS != 0 {
		need |= 1 << keyTimeUS
	}
	if ev.Stack != snapshot.NoStack {
		need |= 1 << keyFrames
	}
	if need&^keys.have != 0 && !keys.find(w, need) {
		return false
	}
	var frames uint32
	if ev.Stack != snapshot.NoStack {
		var ok bool
		if ev.Stack >= 0 {
			// listHandle's stackKey, looked up where lookup would find it, without boxing the
			// handle and switching on its type: a third of this function's time.
			frames, ok = getDense(w.stackMemo, int(ev.Stack))
		} else {
			frames, ok = w.lookup(e.listHandle(ev.Stack))
		}
		if !ok {
			return false
		}
	}
	b := append(w.buf, OpEmptyDict, OpMemoize, OpMark)
	w.next++
	b = appendGet(b, keys.idx[keyAction])
	b = appendGet(b, keys.idx[numFastKeys+int(ev.Action)])
	b = appendGet(b, keys.idx[keyAddr])
	b = appendUint(b, ev.Addr)
	b = appendGet(b, keys.idx[keySize])
	b = appendInt(b, ev.Size)
	b = appendGet(b, keys.idx[keyStream])
	b = appendUint(b, ev.Stream)
	if ev.TimeUS != 0 {
		b = appendGet(b, keys.idx[keyTimeUS])
		b = appendInt(b, ev.TimeUS)
	}
	if ev.Stack != snapshot.NoStack {
		b = appendGet(b, keys.idx[keyFrames])
		b = appendGet(b, frames)
	}
	w.buf = append(b, OpSetItems)
	return true
}

// The keys fastEvent writes, in fastKeyNames' order.
const (
	keyAction = iota
	keyAddr
	keySize
	keyStream
	keyTimeUS
	keyFrames
	numFastKeys
)

// fastActions bounds the actions fastEvent writes (snapshot.Action values).
const fastActions = 16

var fastKeyNames = [numFastKeys]string{"action", "addr", "size", "stream", "time_us", "frames"}

// fastKeys are the memo indexes of the strings fastEvent writes as gets: fastKeyNames, then
// the action names by snapshot.Action (from numFastKeys); have marks those found in the memo.
type fastKeys struct {
	idx  [numFastKeys + fastActions]uint32
	have uint32
}

// find looks the strings of need up in the memo and reports whether all are there.
func (k *fastKeys) find(w *Writer, need uint32) bool {
	for i := range k.idx {
		if bit := uint32(1) << i; need&bit != 0 && k.have&bit == 0 {
			name := ""
			if i < numFastKeys {
				name = fastKeyNames[i]
			} else {
				name = snapshot.Action(i - numFastKeys).String()
			}
			idx, ok := w.strMemo[name]
			if !ok {
				return false
			}
			k.idx[i], k.have = idx, k.have|bit
		}
	}
	return true
}

func (e *encoder) event(d, i int) {
	ev := &e.snap.DeviceTraces[d][i]
	var x snapshot.EventExtra
	if ev.Extra.Index() > 0 && ev.Extra.Index() < len(e.snap.EventExtras) {
		x = e.snap.EventExtras[ev.Extra.Index()]
	}
	n := 4
	if ev.TimeUS != 0 {
		n++
	}
	if x.CompileContext != "" {
		n++
	}
	if x.UserMetadata != "" {
		n++
	}
	if ev.Stack != snapshot.NoStack {
		n++
	}
	action := ev.Action.String()
	if ev.Action == snapshot.ActionOther && x.ActionName != "" {
		action = x.ActionName
	}
	e.s.StartDict(nil, n)
	e.kv("action", func() { e.s.SharedStr(action) })
	if ev.Action == snapshot.ActionOOM {
		e.kv("device_free", func() { e.s.Int(ev.DeviceFree()) })
	} else {
		e.kv("addr", func() { e.s.Uint(ev.Addr) })
	}
	e.kv("size", func() { e.s.Int(ev.Size) })
	e.kv("stream", func() { e.s.Uint(ev.Stream) })
	if ev.TimeUS != 0 {
		e.kv("time_us", func() { e.s.Int(ev.TimeUS) })
	}
	if x.CompileContext != "" {
		e.kv("compile_context", func() { e.s.Str(x.CompileContext) })
	}
	if x.UserMetadata != "" {
		e.kv("user_metadata", func() { e.s.Str(x.UserMetadata) })
	}
	if ev.Stack != snapshot.NoStack {
		var h any = e.listHandle(ev.Stack)
		if e.opt.ListPerTraceback {
			h = nil
			if k := (recordKey{d, int(e.eventOwner[d][i])}); e.shared[k] {
				h = k
			}
		}
		e.kv("frames", func() { e.frames(h, ev.Stack) })
	}
	e.s.EndDict()
}

func (e *encoder) annotations() {
	e.s.StartList(nil, len(e.snap.Annotations))
	for _, a := range e.snap.Annotations {
		e.s.StartDict(nil, 4)
		e.kv("stage", func() { e.s.Str(a.Stage) })
		e.kv("name", func() { e.s.Str(a.Name) })
		e.kv("device", func() { e.s.Int(int64(a.Device)) })
		e.kv("time_us", func() { e.s.Int(a.TimeUS) })
		e.s.EndDict()
		e.s.Next()
	}
	e.s.EndList()
}

// settingsOrder is the key order PyTorch writes allocator_settings in.
var settingsOrder = []string{
	"PYTORCH_CUDA_ALLOC_CONF", "max_split_size", "garbage_collection_threshold",
	"expandable_segments", "pinned_num_register_threads", "release_lock_on_cudamalloc",
	"pinned_use_cuda_host_register", "graph_capture_record_stream_reuse", "roundup_power2_divisions",
}

func (e *encoder) settings() error {
	st := e.snap.Settings
	vals := map[string]any{}
	for k, v := range st.Raw {
		vals[k] = v
	}
	vals["PYTORCH_CUDA_ALLOC_CONF"] = st.AllocConf
	vals["max_split_size"] = st.MaxSplitSize
	vals["garbage_collection_threshold"] = st.GCThreshold
	vals["expandable_segments"] = st.ExpandableSegments
	known := map[string]bool{}
	var keys []string
	for _, k := range settingsOrder {
		known[k] = true
		if _, ok := vals[k]; ok {
			keys = append(keys, k)
		}
	}
	var rest []string
	for k := range vals {
		if !known[k] {
			rest = append(rest, k)
		}
	}
	sort.Strings(rest)
	keys = append(keys, rest...)
	e.s.StartDict(nil, len(keys))
	for _, k := range keys {
		e.key(k)
		v := vals[k]
		if k == "PYTORCH_CUDA_ALLOC_CONF" {
			e.s.Str(st.AllocConf)
		} else if err := emit(e.s, v); err != nil {
			return fmt.Errorf("allocator_settings %q: %w", k, err)
		}
		e.s.Next()
	}
	e.s.EndDict()
	return e.s.Err()
}
