// Package snapshot is the typed model of a PyTorch CUDA memory snapshot: segments and their
// blocks, per-device trace events, interned frames and stacks, annotations, allocator settings,
// and what the file can and cannot answer. Loaders fill it; analyses read it.
package snapshot

import (
	"fmt"
	"slices"

	"github.com/memsnap/memsnap/analysis/internal/hugepage"
)

// FrameID indexes Snapshot.Frames.
type FrameID int32

// StackID indexes Snapshot.Stacks. Stack 0 is always the empty stack (a frames list with no
// entries); NoStack means the record had no frames key at all (context not captured).
type StackID int32

// NoStack marks a block, segment or event whose record carried no frames key.
const NoStack StackID = -1

// EmptyStack is the interned empty frames list.
const EmptyStack StackID = 0

// LineUnknown is stored for frame lines that do not fit int64 (Python 3.13 writes 2^64-1).
const LineUnknown int64 = -1

// Frame is one stack frame, interned by content.
type Frame struct {
	Filename string `json:"filename"`
	Line     int64  `json:"line"`
	Name     string `json:"name"`
}

// BlockState is the state of a block inside a segment.
type BlockState uint8

// Block states, exactly as PyTorch writes them (active_awaiting_free is read as pending free).
const (
	StateUnknown BlockState = iota
	StateActiveAllocated
	StateActivePendingFree
	StateInactive
)

// String returns PyTorch's spelling of the state.
func (s BlockState) String() string {
	switch s {
	case StateActiveAllocated:
		return "active_allocated"
	case StateActivePendingFree:
		return "active_pending_free"
	case StateInactive:
		return "inactive"
	}
	return "unknown"
}

// ParseBlockState maps PyTorch's state strings (and the documented alias) to a BlockState.
func ParseBlockState(s string) BlockState {
	switch s {
	case "active_allocated":
		return StateActiveAllocated
	case "active_pending_free", "active_awaiting_free":
		return StateActivePendingFree
	case "inactive":
		return StateInactive
	}
	return StateUnknown
}

// Block is one allocation unit within a segment.
type Block struct {
	Address       uint64
	Size          int64
	RequestedSize int64
	State         BlockState
	Stack         StackID
}

// PoolID identifies a memory pool; {0,0} is the default pool, others are private pools (CUDA graphs).
type PoolID [2]int64

// Segment is one cudaMalloc (or one expandable virtual range).
type Segment struct {
	Device        int
	Address       uint64
	TotalSize     int64
	AllocatedSize int64
	ActiveSize    int64
	RequestedSize int64
	Stream        uint64
	SegmentType   string // "small" or "large"
	PoolID        PoolID
	IsExpandable  bool
	Stack         StackID
	Blocks        []Block
}

// Action is a trace event kind.
type Action uint8

// Trace actions. ActionOther keeps events whose action this version does not know.
const (
	ActionOther Action = iota
	ActionAlloc
	ActionFreeRequested
	ActionFreeCompleted
	ActionSegmentAlloc
	ActionSegmentFree
	ActionSegmentMap
	ActionSegmentUnmap
	ActionSnapshot
	ActionOOM
	ActionAnnotate
	numActions
)

var actionNames = [numActions]string{"other", "alloc", "free_requested", "free_completed",
	"segment_alloc", "segment_free", "segment_map", "segment_unmap", "snapshot", "oom", "annotate"}

// String returns PyTorch's spelling of the action.
func (a Action) String() string {
	if a < numActions {
		return actionNames[a]
	}
	return "other"
}

// ParseAction maps an action string to an Action (ActionOther when unknown).
func ParseAction(s string) Action {
	for i, n := range actionNames {
		if n == s && i != 0 {
			return Action(i)
		}
	}
	return ActionOther
}

// Actions lists every known action in order, for reports.
func Actions() []Action {
	out := make([]Action, 0, numActions-1)
	for a := ActionAlloc; a < numActions; a++ {
		out = append(out, a)
	}
	return out
}

// Event is one entry of a device trace. Optional fields are zero when absent.
type Event struct {
	// Addr is the block's or the segment's address. An oom event has none: it keeps the free
	// device memory it reports there instead (read it with DeviceFree), as PyTorch's own trace
	// entries do, so that the millions of other events carry no field only oom events fill.
	Addr   uint64
	Size   int64
	Stream uint64
	TimeUS int64   // 0 when the file has no time_us
	Stack  StackID // NoStack when the event has no frames key
	// Extra indexes Snapshot.EventExtras: the optional newer string fields (0 = none).
	Extra  ExtraID
	Action Action // last: the small fields pack into 40 bytes (millions of events per file)
}

// ExtraID is an index of Snapshot.EventExtras in three bytes, so that an event packs into 40
// bytes: a file holds at most MaxEventExtras distinct combinations of those strings.
type ExtraID [3]byte

// MaxEventExtras is how many event extras an ExtraID can index.
const MaxEventExtras = 1 << 24

// TooManyExtras is what a loader says of a file with more than max-1 distinct event extras
// (max: the bound it applies, MaxEventExtras but in tests).
func TooManyExtras(max int) string {
	return fmt.Sprintf("more than %d distinct combinations of the trace events' optional strings (compile_context, user_metadata, category, …): more than memsnap indexes", max-1)
}

// MakeExtraID is the ExtraID of index i (0 <= i < MaxEventExtras; higher bits are dropped).
func MakeExtraID(i uint32) ExtraID { return ExtraID{byte(i), byte(i >> 8), byte(i >> 16)} }

// Index is the index x names.
func (x ExtraID) Index() int { return int(x[0]) | int(x[1])<<8 | int(x[2])<<16 }

// EventExtra holds an event's optional string fields; equal extras are shared by many events.
type EventExtra struct {
	CompileContext string `json:"compile_context,omitempty"`
	UserMetadata   string `json:"user_metadata,omitempty"`
	ActionName     string `json:"action_name,omitempty"` // raw action for ActionOther
	// Fields of the newest PyTorch: the event's memory pool, the forward-pass stack of a
	// backward allocation (formatted lines joined by newlines), profiler-converted categories.
	PoolID           PoolID `json:"pool_id,omitempty"`
	ForwardFrames    string `json:"forward_frames,omitempty"`
	Category         string `json:"category,omitempty"`
	InternalMetadata string `json:"internal_metadata,omitempty"`
}

// Annotation is one external_annotations entry (record_function / profiler spans).
type Annotation struct {
	Name   string `json:"name"`
	Stage  string `json:"stage"`
	Device int    `json:"device"`
	TimeUS int64  `json:"time_us"`
}

// AllocatorSettings holds allocator_settings; Present is false when the file has none.
type AllocatorSettings struct {
	Present            bool    `json:"present"`
	AllocConf          string  `json:"PYTORCH_CUDA_ALLOC_CONF"`
	MaxSplitSize       int64   `json:"max_split_size"`
	GCThreshold        float64 `json:"garbage_collection_threshold"`
	ExpandableSegments bool    `json:"expandable_segments"`
	// Raw keeps every key as decoded (plain JSON-able values), for raw-section reads.
	Raw map[string]any `json:"raw,omitempty"`
}

// Format describes the container the snapshot came in.
type Format struct {
	Encoding      string `json:"encoding"` // "pickle" or "json"
	Protocol      int    `json:"protocol,omitempty"`
	Gzip          bool   `json:"gzip"`
	TopLevelList  bool   `json:"top_level_list"`  // oldest form: a bare list of segments
	LegacyHistory bool   `json:"legacy_history"`  // PyTorch 2.0 blocks with history, no address
	TypeTagGlobal bool   `json:"type_tag_global"` // TorchScript writer's restore_type_tag seen
}

// Capabilities says what questions the file can answer.
type Capabilities struct {
	HasTrace       bool `json:"has_trace"`        // device_traces holds events beyond 'snapshot'
	FramesOnBlocks bool `json:"frames_on_blocks"` // some live block has a non-empty stack
	FramesOnAllocs bool `json:"frames_on_allocs"` // some alloc event has a non-empty stack
	FramesOnFrees  bool `json:"frames_on_frees"`  // some free event has a non-empty stack
	CppFrames      bool `json:"cpp_frames"`       // stacks include C++ frames (stacks="all")
	PythonOnly     bool `json:"python_only"`      // frames exist but none is C++
	// TraceIncomplete: the trace does not reach back to the first allocation (recording started
	// late or the ring buffer filled): blocks alive at the end or frees lack their alloc.
	TraceIncomplete bool `json:"trace_incomplete"`
	// RingBufferFull: the file says the trace overflowed (trace_alloc_overflowed).
	RingBufferFull bool `json:"ring_buffer_full"`
	// TraceStart says how the trace begins: "complete" (it reaches back to the first
	// allocation), "late_start" (recording was switched on mid-run: an arbitrary event count,
	// opening on a normal allocation), "ring_buffer" (the trace holds exactly max_entries events,
	// or says it overflowed: the oldest events fell off) or "" without a trace.
	TraceStart string `json:"trace_start,omitempty"`
	MaxEntries int64  `json:"max_entries,omitempty"`
}

// Snapshot is one loaded snapshot file.
type Snapshot struct {
	Path         string
	Format       Format
	Frames       []Frame
	Stacks       [][]FrameID // Stacks[EmptyStack] is empty
	Segments     []Segment
	DeviceTraces [][]Event    // index = device
	EventExtras  []EventExtra // EventExtras[0] is the zero extra
	Annotations  []Annotation
	Settings     AllocatorSettings
	Caps         Capabilities
	// DroppedEvents[d] counts the oldest events of device d dropped by a max-events bound.
	DroppedEvents []int64
	// indexes keeps the trace indexes (see TraceIndex); nil unless the loader made it.
	indexes *traceIndexes
}

// StackFrames returns the frames of a stack, innermost first (nil for NoStack).
func (s *Snapshot) StackFrames(id StackID) []Frame {
	if id < 0 || int(id) >= len(s.Stacks) {
		return nil
	}
	ids := s.Stacks[id]
	out := make([]Frame, len(ids))
	for i, f := range ids {
		out[i] = s.Frames[f]
	}
	return out
}

// Devices returns the sorted device ids that have segments or trace events.
func (s *Snapshot) Devices() []int {
	seen := map[int]bool{}
	for _, seg := range s.Segments {
		seen[seg.Device] = true
	}
	for d, evs := range s.DeviceTraces {
		if len(evs) > 0 {
			seen[d] = true
		}
	}
	out := make([]int, 0, len(seen))
	for d := range seen {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

// Compact releases spare capacity of the device traces (a loader may size them for the most
// events a file could hold). Worth it for snapshots kept in memory long, as a server's cache
// does; a one-shot command need not pay for the copy.
func (s *Snapshot) Compact() {
	for d, evs := range s.DeviceTraces {
		if cap(evs)-len(evs) > 4096 && cap(evs) > len(evs)+len(evs)/4 {
			s.DeviceTraces[d] = cloneEvents(evs)
			if c := s.indexes; c != nil && c.owner == s {
				c.mu.Lock()
				if x := c.byDev[d]; x != nil && x.Indexes(evs) { // the same events, moved
					moved := *x
					moved.first = &s.DeviceTraces[d][0]
					c.byDev[d] = &moved
				}
				c.mu.Unlock()
			}
		}
	}
}

// cloneEvents copies events into an array of their exact size, backed by huge pages when large.
func cloneEvents(evs []Event) []Event {
	out := hugepage.Make[Event](0, len(evs))
	return append(out, evs...)
}

// DeviceFree is the free device memory an oom event reports (device_free); 0 for any other
// event.
func (e Event) DeviceFree() int64 {
	if e.Action != ActionOOM {
		return 0
	}
	return int64(e.Addr)
}

// WithDeviceFree returns e reporting n bytes free; only an oom event keeps it (see Addr).
func (e Event) WithDeviceFree(n int64) Event {
	if e.Action == ActionOOM {
		e.Addr = uint64(n)
	}
	return e
}
