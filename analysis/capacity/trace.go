package capacity

import (
	"strconv"

	"github.com/memsnap/memsnap/analysis/allocator"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// rec is one allocation of a device's trace: made at trace event at (-1: alive before the
// trace), released at event end (free_completed, else free_requested; -1: alive at the end of
// what is read).
type rec struct {
	key    uint64 // the call stack's identity across files (blocks alive before the trace: preTraceKey)
	occ    int    // how many earlier allocations of this step share key
	step   int    // the step the allocation was made in (see numberSteps; -2: before the trace)
	stack  snapshot.StackID
	addr   uint64
	size   int64 // as recorded (requested bytes where the file records them)
	stream uint64
	at     int
	end    int
}

// devTrace is what the capacity analysis reads of one device of one file.
type devTrace struct {
	file int
	path string
	size int64
	dev  int
	snap *snapshot.Snapshot
	set  allocator.Settings
	recs []rec
	// byKey lists the recs of each step and key, in order: occurrence n is byKey[{step, key}][n].
	byKey map[stepKey][]int
	// stepped: the occurrences are counted per step (numberSteps found steps).
	stepped bool
	// events is how many trace events are read: up to the first OOM (excluded), or all.
	events int
	// oom is the first oom event (-1: none), oomRequest its size.
	oom        int
	oomRequest int64
	// preTrace counts the blocks alive before the trace and their bytes.
	preTrace      int
	preTraceBytes int64
}

// stackKeys gives each stack an identity that holds across files (stack ids differ between
// files): a 64-bit FNV-1a hash of its frames (file, line, function), each frame hashed once.
type stackKeys struct {
	snap   *snapshot.Snapshot
	frames []uint64 // per frame id: its hash (0: not yet)
	keys   map[snapshot.StackID]uint64
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * fnvPrime
	}
	return h
}

func (k *stackKeys) of(id snapshot.StackID) uint64 {
	if h, ok := k.keys[id]; ok {
		return h
	}
	h := uint64(fnvOffset)
	if id >= 0 && int(id) < len(k.snap.Stacks) {
		for _, f := range k.snap.Stacks[id] {
			fh := k.frames[f]
			if fh == 0 {
				fr := k.snap.Frames[f]
				fh = fnvString(fnvString(fnvString(fnvOffset, fr.Filename), strconv.FormatInt(fr.Line, 10)), fr.Name) | 1
				k.frames[f] = fh
			}
			h = (h ^ fh) * fnvPrime
		}
	}
	h |= 1 << 63 // never a preTraceKey
	k.keys[id] = h
	return h
}

// preTraceKey names a block alive before the trace (the top bit clear: never a stack's key),
// from the stack key of what is known of it: the free event's stack for a block the trace
// frees, the block's own stack for one alive at the end (final), kept apart so that the
// weights alive throughout match the weights of the other file, whatever number of
// activations each trace saw freed before them.
func preTraceKey(stackKey uint64, final bool) uint64 {
	k := stackKey ^ 0x9e3779b97f4a7c15
	if final {
		k = stackKey ^ 0x7f4a7c159e3779b9
	}
	k = (k * fnvPrime) &^ (1 << 63)
	return max(k, 1)
}

// readTrace reads device dev of snap: its allocations up to the first OOM, and the blocks
// alive before the trace (frees of addresses the trace never allocated, and live blocks of the
// final state it never allocated).
func readTrace(snap *snapshot.Snapshot, dev, file int, size int64) *devTrace {
	t := &devTrace{file: file, path: snap.Path, size: size, dev: dev, snap: snap, set: allocator.FromSnapshot(snap.Settings),
		oom: -1}
	evs := snap.DeviceTraces[dev]
	keys := &stackKeys{snap: snap, frames: make([]uint64, len(snap.Frames)), keys: map[snapshot.StackID]uint64{}}
	var pre, trace []rec
	live := map[uint64]int{} // address -> index in trace (>= 0) or -(index in pre)-1
	seen := map[uint64]bool{}
	t.events = len(evs)
	for i := range evs {
		ev := &evs[i]
		switch ev.Action {
		case snapshot.ActionOOM:
			t.oom, t.oomRequest, t.events = i, ev.Size, i
		case snapshot.ActionAlloc:
			seen[ev.Addr] = true
			live[ev.Addr] = len(trace)
			trace = append(trace, rec{key: keys.of(ev.Stack), stack: ev.Stack, addr: ev.Addr, size: ev.Size, stream: ev.Stream, at: i, end: -1})
		case snapshot.ActionFreeRequested, snapshot.ActionFreeCompleted:
			k, ok := live[ev.Addr]
			if !ok {
				if seen[ev.Addr] {
					continue // a second free event of a block already released
				}
				// A block allocated before the trace.
				seen[ev.Addr] = true
				pre = append(pre, rec{key: preTraceKey(keys.of(ev.Stack), false), stack: snapshot.NoStack, addr: ev.Addr, size: ev.Size, stream: ev.Stream, at: -1, end: i})
				k = -len(pre)
				live[ev.Addr] = k
			}
			var r *rec
			if k >= 0 {
				r = &trace[k]
			} else {
				r = &pre[-k-1]
			}
			r.end = i
			if ev.Action == snapshot.ActionFreeCompleted {
				delete(live, ev.Addr)
			}
		}
		if t.oom >= 0 {
			break
		}
	}
	// Blocks alive at the end that no event of the trace names were alive before it too.
	if t.oom < 0 {
		for _, sg := range snap.Segments {
			if sg.Device != dev {
				continue
			}
			for _, b := range sg.Blocks {
				if (b.State == snapshot.StateActiveAllocated || b.State == snapshot.StateActivePendingFree) && !seen[b.Address] {
					n := b.RequestedSize
					if n <= 0 {
						n = b.Size
					}
					pre = append(pre, rec{key: preTraceKey(keys.of(b.Stack), true), stack: snapshot.NoStack, addr: b.Address, size: n, stream: sg.Stream, at: -1, end: -1})
				}
			}
		}
	}
	t.preTrace = len(pre)
	for _, r := range pre {
		t.preTraceBytes += r.size
	}
	t.recs = append(pre, trace...)
	t.numberSteps(nil)
	return t
}

// partial reports whether the trace frees blocks it never saw allocated: it began in the middle
// of the program's work (a ring buffer, recording switched on mid-step), not only after
// blocks that stay (weights loaded before recording began).
func (t *devTrace) partial() bool {
	for _, r := range t.recs[:t.preTrace] {
		if r.end >= 0 {
			return true
		}
	}
	return false
}

// stepKey is where an allocation sits: its step and its call stack.
type stepKey struct {
	step int
	key  uint64
}

// numberSteps numbers each allocation's occurrence of its call stack within its step: the
// step it was made in, counted from the first step start (allocations before it are step -1,
// blocks alive before the trace -2), so that traces of one workload that begin at different
// points (a ring buffer, recording switched on late) still match step for step. Without step
// starts, the occurrences count from the start of the trace.
func (t *devTrace) numberSteps(starts []int) {
	t.byKey = map[stepKey][]int{}
	t.stepped = len(starts) > 0
	s := 0
	for i := range t.recs {
		r := &t.recs[i]
		switch {
		case r.at < 0:
			r.step = -2
		case len(starts) == 0:
			r.step = 0
		default:
			for s < len(starts) && starts[s] <= r.at {
				s++
			}
			r.step = s - 1
		}
		k := stepKey{r.step, r.key}
		r.occ = len(t.byKey[k])
		t.byKey[k] = append(t.byKey[k], i)
	}
}

// hasAllocs reports whether device dev of snap has allocation events.
func hasAllocs(snap *snapshot.Snapshot, dev int) bool {
	if dev < 0 || dev >= len(snap.DeviceTraces) {
		return false
	}
	for _, ev := range snap.DeviceTraces[dev] {
		if ev.Action == snapshot.ActionAlloc {
			return true
		}
	}
	return false
}
