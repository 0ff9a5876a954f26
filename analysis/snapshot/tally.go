package snapshot

// TraceTally is what one pass over a trace, in order, finds: how many events of each action,
// the ranges of their values, which stacks they name, and the bytes allocated as the trace goes
// (the summary's peaks). The indexer keeps it while it numbers the addresses, so that the
// loader's checks, the file's capabilities and the summary need no pass of their own over
// millions of events: the loader indexes on another goroutine while it decodes.
type TraceTally struct {
	// Actions counts the events of each action.
	Actions [256]int64
	// Ranges of the values over all events, widened to take in zero; sizes apart for OOM
	// events, whose failed request may be larger than anything allocated.
	MinSize, MaxSize, MaxOOMSize int64 // MinSize over all events, MaxSize over all but OOMs
	MinDeviceFree, MaxDeviceFree int64 // over the oom events (the only ones that report it)
	MinTimeUS, MaxTimeUS         int64
	SizeSum                      int64 // of all but OOMs
	SizeSumOverflow              bool  // SizeSum went past the int64 range (or a size was negative)
	OddAllocSize                 bool  // an alloc's size is not a multiple of 512 (requested bytes)
	FreeBeforeAlloc              bool  // a free of a block the trace had not allocated (or had freed)
	// OOMEvents are the indexes of the oom events, in order.
	OOMEvents []int
	// What events name each stack (stackBy* bits, by stack id), and whether an id was beyond
	// maxStackUse.
	stackUse         []uint8
	stackUseOverflow bool
	// The trace replayed block by block (by TraceIndex block id) and segment by segment: the
	// running sums and their peaks (see Peaks).
	blocks                          []blockTally
	running, before, peakRunning    int64
	segRunning, segNet, peakSegment int64
	// peakEvent: the event index (plus one, so the zero value means none) where the running
	// sum of allocated bytes first reached peakRunning.
	peakEvent int
}

// Bits of TraceTally.stackUse: what events name a stack.
const (
	stackByEvent uint8 = 1 << iota
	stackByAlloc
	stackByFree
)

// maxStackUse bounds the stack ids the tally records (ids are dense: for a file with more
// stacks than this the callers count them themselves, see StacksNamed).
const maxStackUse = 1 << 24

// blockTally is one block address's state as the trace replays: the size of its last alloc (or
// of its free, when the trace starts with the block alive and has not allocated it since), and
// where it stands.
type blockTally struct {
	size  int64
	state uint8
}

// blockTally states.
const (
	blockSet       uint8 = 1 << iota // the address has had an event
	blockPending                     // free requested, not completed
	blockGone                        // completely freed
	blockInTrace                     // allocated in the trace and not yet completely freed
	blockAllocated                   // allocated in the trace at least once (size is the last alloc's)
)

// add tallies event e, the trace's event i, whose address id (TraceIndex.Slot) is id.
func (t *TraceTally) add(e *Event, i int, id int32) {
	t.Actions[e.Action]++
	if e.Size < t.MinSize {
		t.MinSize = e.Size
	}
	if e.Action == ActionOOM {
		t.MaxOOMSize = max(t.MaxOOMSize, e.Size)
		t.MinDeviceFree, t.MaxDeviceFree = min(t.MinDeviceFree, e.DeviceFree()), max(t.MaxDeviceFree, e.DeviceFree())
		t.OOMEvents = append(t.OOMEvents, i)
	} else {
		t.MaxSize = max(t.MaxSize, e.Size)
		if t.SizeSum += e.Size; t.SizeSum < 0 {
			t.SizeSumOverflow = true
		}
	}
	t.MinTimeUS, t.MaxTimeUS = min(t.MinTimeUS, e.TimeUS), max(t.MaxTimeUS, e.TimeUS)
	use := stackByEvent
	switch e.Action {
	case ActionAlloc:
		use |= stackByAlloc
		t.OddAllocSize = t.OddAllocSize || e.Size%512 != 0
		b := t.block(id)
		if b.state&(blockSet|blockGone|blockPending) == blockSet {
			t.running -= b.size // allocated twice without a free: the replay drops the old block
		}
		*b = blockTally{size: e.Size, state: blockSet | blockInTrace | blockAllocated}
		t.running += e.Size
		if t.running > t.peakRunning {
			t.peakRunning, t.peakEvent = t.running, i+1
		}
	case ActionFreeRequested, ActionFreeCompleted:
		use |= stackByFree
		b := t.block(id)
		if b.state&blockInTrace == 0 {
			t.FreeBeforeAlloc = true
		}
		if e.Action == ActionFreeRequested {
			switch {
			case b.state&blockSet == 0: // alive before the trace
				t.before += e.Size
				t.running -= e.Size
				*b = blockTally{size: e.Size, state: blockSet | blockPending}
			case b.state&(blockGone|blockPending) == 0:
				t.running -= b.size
				b.state |= blockPending
			}
			break
		}
		switch {
		case b.state&blockSet == 0: // alive (pending) before the trace: never counted as allocated
			*b = blockTally{state: blockSet | blockGone}
		case b.state&blockGone == 0:
			if b.state&blockPending == 0 {
				t.running -= b.size
			}
			// The size stays for LastAllocSize; nothing else reads a gone block's.
			*b = blockTally{size: b.size, state: blockSet | blockGone | b.state&blockAllocated}
		}
	case ActionSegmentAlloc, ActionSegmentMap:
		t.segNet += e.Size
		t.segRunning += e.Size
		t.peakSegment = max(t.peakSegment, t.segRunning)
	case ActionSegmentFree, ActionSegmentUnmap:
		t.segNet -= e.Size
		t.segRunning -= e.Size
	}
	if s := e.Stack; s > 0 {
		if s >= maxStackUse {
			t.stackUseOverflow = true
		} else {
			if int(s) >= len(t.stackUse) {
				t.stackUse = append(t.stackUse, make([]uint8, int(s)+1-len(t.stackUse))...)
			}
			t.stackUse[s] |= use
		}
	}
}

// block returns block id's state, making room for a new id.
func (t *TraceTally) block(id int32) *blockTally {
	for int(id) >= len(t.blocks) {
		t.blocks = append(t.blocks, blockTally{})
	}
	return &t.blocks[id]
}

// Peaks are the most bytes the trace held in blocks and in segments at once, counted from its
// start as the caching allocator's own replay counts them: Allocated is the running sum of
// allocs less frees (a free requested counts at once; a block allocated twice without a free
// counts once), Before what the trace frees of blocks alive before it; Segments is the running
// sum of segment allocs and maps less frees and unmaps, and SegmentNet where that sum ends.
func (t *TraceTally) Peaks() (allocated, before, segments, segmentNet int64) {
	return t.peakRunning, t.before, t.peakSegment, t.segNet
}

// Running is the allocated running sum at the trace's end (see Peaks): with Before added back,
// the bytes of the blocks the trace leaves allocated (not pending).
func (t *TraceTally) Running() int64 { return t.running }

// PeakEvent is the index of the event where the allocated running sum (Peaks) first reached
// its peak, or -1 when no alloc raised it.
func (t *TraceTally) PeakEvent() int { return t.peakEvent - 1 }

// LastAlloc is the size of block id's last alloc (or of its first free, for a block alive
// before the trace), and whether the block is still allocated (or pending) at the end.
func (t *TraceTally) LastAlloc(id int32) (size int64, live bool) {
	if id < 0 || int(id) >= len(t.blocks) {
		return 0, false
	}
	b := t.blocks[id]
	if b.state&blockGone != 0 {
		return 0, false
	}
	return b.size, true
}

// LastAllocSize is the size of the trace's last alloc of block id, whatever followed it, and
// whether the trace allocates the block at all.
func (t *TraceTally) LastAllocSize(id int32) (int64, bool) {
	if id < 0 || int(id) >= len(t.blocks) || t.blocks[id].state&blockAllocated == 0 {
		return 0, false
	}
	return t.blocks[id].size, true
}

// AllocatedInTrace reports whether block id was allocated in the trace and not completely
// freed after.
func (t *TraceTally) AllocatedInTrace(id int32) bool {
	return id >= 0 && int(id) < len(t.blocks) && t.blocks[id].state&blockInTrace != 0
}

// StackUse reports whether events name stack id at all, in allocs, and in frees (requested or
// completed), for ids below StacksNamed.
func (t *TraceTally) StackUse(id StackID) (named, alloc, free bool) {
	if id <= 0 || int(id) >= len(t.stackUse) {
		return false, false, false
	}
	u := t.stackUse[id]
	return u&stackByEvent != 0, u&stackByAlloc != 0, u&stackByFree != 0
}

// StacksNamed is one more than the largest stack id events name (StackUse answers below it),
// and whether the tally recorded them all (false when an id is beyond what it records).
func (t *TraceTally) StacksNamed() (n int, complete bool) {
	return len(t.stackUse), !t.stackUseOverflow
}
