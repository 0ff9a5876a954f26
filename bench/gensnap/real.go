package main

import (
	"fmt"
	"strings"

	"github.com/memsnap/memsnap/analysis/pickle/writer"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// The real shape: the snapshot written as CPython's pickle writes the dict that PyTorch's
// torch.cuda.memory._snapshot() returns, for one PyTorch version's keys. Python's pickle
// memoizes by object identity, so the shape follows which objects PyTorch shares:
//   - dict keys, action names, frame dicts and their strings are shared (memo GETs);
//   - every trace event is a new dict; from 2.9 on each carries a new 'N/A' compile_context
//     string (written with its own MEMOIZE) and user_metadata '', CPython's empty-string
//     singleton (memoized once, then fetched by reference);
//   - each captured traceback is one frames list: an alloc event's is its block's (when the
//     block is still allocated at the end) and a segment_alloc's is the next alloc's and its
//     segment's; a free_completed event shares its free_requested's; an inactive block has a
//     new empty list.
// Checked against the shared real files' opcode mix by TestRealShape.

// versions are the key sets, by PyTorch minor version (2.0 to 2.10), of what changed.
type version struct {
	minor       int
	frames      bool // blocks carry frames and address (2.1 on; 2.0 has a history list)
	timeUS      bool // trace events carry time_us (2.2 on)
	settings    bool // allocator_settings and external_annotations (2.5 on)
	segFramesAt bool // the segment's frames before its blocks (2.9 on; 2.5-2.8 after)
	context     bool // compile_context and user_metadata (2.9 on)
	streamReuse bool // allocator_settings' graph_capture_record_stream_reuse (2.10)
}

func parseVersion(s string) (version, error) {
	var major, minor int
	if _, err := fmt.Sscanf(s, "%d.%d", &major, &minor); err != nil || major != 2 || minor < 0 || minor > 10 {
		return version{}, fmt.Errorf("-version %q: want 2.0 to 2.10", s)
	}
	return version{minor: minor, frames: minor >= 1, timeUS: minor >= 2, settings: minor >= 5,
		segFramesAt: minor >= 9, context: minor >= 9, streamReuse: minor >= 10}, nil
}

// realWriter writes a generated snapshot in the real shape.
type realWriter struct {
	w    *writer.Writer
	snap *snapshot.Snapshot
	v    version
	// python keeps the Python frames of each traceback only (at most pyDepth of them) and
	// makes a share emptyFrac of the tracebacks empty (a backward pass, Windows: no C++
	// unwinding).
	python    bool
	pyDepth   int
	emptyFrac float64
	// capture is each trace event's traceback number; uses counts the references to each.
	capture  [][]int32
	uses     []uint8
	blockCap map[uint64]int32 // a block's, by address: its last alloc's
	segCap   map[uint64]int32 // a segment's, by address: its segment_alloc's
	capStack []snapshot.StackID
	pyStacks map[snapshot.StackID][]snapshot.FrameID
}

type (
	capKey   int32
	frameKey int32
)

func newRealWriter(w *writer.Writer, snap *snapshot.Snapshot, v version, python bool) *realWriter {
	r := &realWriter{w: w, snap: snap, v: v, python: python, pyDepth: 12, emptyFrac: 0.7,
		blockCap: map[uint64]int32{}, segCap: map[uint64]int32{}, pyStacks: map[snapshot.StackID][]snapshot.FrameID{}}
	newCap := func(st snapshot.StackID) int32 {
		r.capStack = append(r.capStack, st)
		r.uses = append(r.uses, 0)
		return int32(len(r.capStack) - 1)
	}
	use := func(c int32) int32 {
		if r.uses[c] < 255 {
			r.uses[c]++
		}
		return c
	}
	for _, evs := range snap.DeviceTraces {
		caps := make([]int32, len(evs))
		seg := int32(-1)
		req := map[uint64]int32{}
		for i, ev := range evs {
			var c int32
			switch ev.Action {
			case snapshot.ActionSegmentAlloc:
				c = newCap(ev.Stack)
				seg = c
				r.segCap[ev.Addr] = c
			case snapshot.ActionAlloc:
				if seg >= 0 {
					c, seg = seg, -1
				} else {
					c = newCap(ev.Stack)
				}
				r.blockCap[ev.Addr] = c
			case snapshot.ActionFreeRequested:
				c = newCap(ev.Stack)
				req[ev.Addr] = c
			case snapshot.ActionFreeCompleted:
				var ok bool
				if c, ok = req[ev.Addr]; ok {
					delete(req, ev.Addr)
				} else {
					c = newCap(ev.Stack)
				}
			default:
				c = newCap(ev.Stack)
			}
			caps[i] = use(c)
		}
		r.capture = append(r.capture, caps)
	}
	for _, sg := range snap.Segments {
		if c, ok := r.segCap[sg.Address]; ok {
			use(c)
		}
		for _, b := range sg.Blocks {
			if c, ok := r.blockCap[b.Address]; ok && b.State != snapshot.StateInactive {
				use(c)
			}
		}
	}
	return r
}

// stack is what a traceback of stack st writes: all its frames, or its Python frames only.
func (r *realWriter) stack(st snapshot.StackID, c int32) []snapshot.FrameID {
	ids := r.snap.Stacks[st]
	if !r.python {
		return ids
	}
	// A fixed share of the tracebacks is empty, by a hash of the traceback's number.
	if c >= 0 && float64(uint32(c)*2654435761)/(1<<32) < r.emptyFrac {
		return nil
	}
	if py, ok := r.pyStacks[st]; ok {
		return py
	}
	var py []snapshot.FrameID
	for _, id := range ids {
		if strings.HasSuffix(r.snap.Frames[id].Filename, ".py") && len(py) < r.pyDepth {
			py = append(py, id)
		}
	}
	r.pyStacks[st] = py
	return py
}

// frames writes traceback c (stack st): a reference when it was written before.
func (r *realWriter) frames(c int32, st snapshot.StackID) {
	var h any
	if c >= 0 && r.uses[c] > 1 {
		h = capKey(c)
		if r.w.Ref(h) {
			return
		}
	}
	ids := r.stack(st, c)
	r.w.StartList(h, len(ids))
	for _, id := range ids {
		r.frame(id)
		r.w.Next()
	}
	r.w.EndList()
}

func (r *realWriter) frame(id snapshot.FrameID) {
	if r.w.Ref(frameKey(id)) {
		return
	}
	f := r.snap.Frames[id]
	r.w.StartDict(frameKey(id), 3)
	r.kv("name", func() { r.w.SharedStr(f.Name) })
	r.kv("filename", func() { r.w.SharedStr(f.Filename) })
	r.kv("line", func() { r.w.Int(f.Line) })
	r.w.EndDict()
}

func (r *realWriter) kv(k string, val func()) {
	r.w.SharedStr(k)
	val()
	r.w.Next()
}

func (r *realWriter) write() error {
	w := r.w
	w.Begin()
	n := 2
	if r.v.settings {
		n = 4
	}
	w.StartDict(nil, n)
	r.kv("segments", r.segments)
	r.kv("device_traces", r.traces)
	if r.v.settings {
		r.kv("allocator_settings", r.settings)
		r.kv("external_annotations", r.annotations)
	}
	w.EndDict()
	return w.Finish()
}

func (r *realWriter) segments() {
	w := r.w
	w.StartList(nil, len(r.snap.Segments))
	for _, sg := range r.snap.Segments {
		n := 9
		if r.v.frames {
			n = 12
		}
		w.StartDict(nil, n)
		r.kv("device", func() { w.Int(int64(sg.Device)) })
		r.kv("address", func() { w.Uint(sg.Address) })
		r.kv("total_size", func() { w.Int(sg.TotalSize) })
		r.kv("allocated_size", func() { w.Int(sg.AllocatedSize) })
		r.kv("active_size", func() { w.Int(sg.ActiveSize) })
		r.kv("requested_size", func() { w.Int(sg.RequestedSize) })
		r.kv("stream", func() { w.Uint(sg.Stream) })
		r.kv("segment_type", func() { w.SharedStr(sg.SegmentType) })
		segFrames := func() {
			c, ok := r.segCap[sg.Address]
			if !ok {
				c = -1
			}
			r.frames(c, sg.Stack)
		}
		if r.v.frames {
			r.kv("segment_pool_id", func() {
				w.StartTuple(nil, 2)
				w.Int(sg.PoolID[0])
				w.Next()
				w.Int(sg.PoolID[1])
				w.Next()
				w.EndTuple()
			})
			r.kv("is_expandable", func() { w.Bool(sg.IsExpandable) })
			if r.v.segFramesAt {
				r.kv("frames", segFrames)
			}
		}
		r.kv("blocks", func() { r.blocks(sg) })
		if r.v.frames && !r.v.segFramesAt {
			r.kv("frames", segFrames)
		}
		w.EndDict()
		w.Next()
	}
	w.EndList()
}

func (r *realWriter) blocks(sg snapshot.Segment) {
	w := r.w
	w.StartList(nil, len(sg.Blocks))
	for _, b := range sg.Blocks {
		c, ok := r.blockCap[b.Address]
		if !ok || b.State == snapshot.StateInactive {
			c = -1
		}
		if !r.v.frames { // 2.0: no address; the allocated block's history
			w.StartDict(nil, 4)
			r.kv("size", func() { w.Int(b.Size) })
			r.kv("requested_size", func() { w.Int(b.RequestedSize) })
			r.kv("state", func() { w.SharedStr(b.State.String()) })
			r.kv("history", func() {
				if c < 0 {
					w.StartList(nil, 0)
					w.EndList()
					return
				}
				w.StartList(nil, 1)
				w.StartDict(nil, 3)
				r.kv("addr", func() { w.Uint(b.Address) })
				r.kv("real_size", func() { w.Int(b.RequestedSize) })
				r.kv("frames", func() { r.frames(c, b.Stack) })
				w.EndDict()
				w.Next()
				w.EndList()
			})
			w.EndDict()
			w.Next()
			continue
		}
		w.StartDict(nil, 5)
		r.kv("address", func() { w.Uint(b.Address) })
		r.kv("size", func() { w.Int(b.Size) })
		r.kv("requested_size", func() { w.Int(b.RequestedSize) })
		r.kv("state", func() { w.SharedStr(b.State.String()) })
		r.kv("frames", func() { r.frames(c, b.Stack) })
		w.EndDict()
		w.Next()
	}
	w.EndList()
}

func (r *realWriter) traces() {
	w := r.w
	w.StartList(nil, len(r.snap.DeviceTraces))
	for d, evs := range r.snap.DeviceTraces {
		w.StartList(nil, len(evs))
		for i, ev := range evs {
			r.event(ev, r.capture[d][i])
			w.Next()
		}
		w.EndList()
		w.Next()
	}
	w.EndList()
}

func (r *realWriter) event(ev snapshot.Event, c int32) {
	w := r.w
	n := 5
	if r.v.timeUS {
		n++
	}
	if r.v.context {
		n += 2
	}
	oom := ev.Action == snapshot.ActionOOM
	if oom {
		n++
	}
	w.StartDict(nil, n)
	r.kv("action", func() { w.SharedStr(ev.Action.String()) })
	r.kv("addr", func() {
		if oom {
			w.Int(0)
		} else {
			w.Uint(ev.Addr)
		}
	})
	r.kv("size", func() { w.Int(ev.Size) })
	r.kv("stream", func() { w.Uint(ev.Stream) })
	if oom {
		r.kv("device_free", func() { w.Int(ev.DeviceFree()) })
	}
	if r.v.timeUS {
		r.kv("time_us", func() { w.Int(ev.TimeUS) })
	}
	if r.v.context {
		r.kv("compile_context", func() { w.StrAs(nil, "N/A") }) // a new str per event
		r.kv("user_metadata", func() { w.Str("") })             // CPython's '' singleton
	}
	r.kv("frames", func() { r.frames(c, ev.Stack) })
	w.EndDict()
}

func (r *realWriter) settings() {
	w := r.w
	n := 8
	if r.v.streamReuse {
		n = 9
	}
	w.StartDict(nil, n)
	r.kv("PYTORCH_CUDA_ALLOC_CONF", func() { w.Str("") })
	r.kv("max_split_size", func() { w.Int(-1) })
	r.kv("garbage_collection_threshold", func() { w.Float(0) })
	r.kv("expandable_segments", func() { w.Bool(false) })
	r.kv("pinned_num_register_threads", func() { w.Int(1) })
	r.kv("release_lock_on_cudamalloc", func() { w.Bool(false) })
	r.kv("pinned_use_cuda_host_register", func() { w.Bool(false) })
	if r.v.streamReuse {
		r.kv("graph_capture_record_stream_reuse", func() { w.Bool(false) })
	}
	r.kv("roundup_power2_divisions", func() {
		w.StartDict(nil, 16)
		for i := range 16 {
			r.kv(fmt.Sprint(1<<i), func() { w.Int(0) })
		}
		w.EndDict()
	})
	w.EndDict()
}

func (r *realWriter) annotations() {
	w := r.w
	w.StartList(nil, len(r.snap.Annotations))
	for _, a := range r.snap.Annotations {
		w.StartDict(nil, 4)
		r.kv("stage", func() { w.SharedStr(a.Stage) })
		r.kv("name", func() { w.Str(a.Name) })
		r.kv("device", func() { w.Int(int64(a.Device)) })
		r.kv("time_us", func() { w.Int(a.TimeUS) })
		w.EndDict()
		w.Next()
	}
	w.EndList()
}
