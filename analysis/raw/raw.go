// Package raw reads one section of a loaded snapshot — allocator settings, annotations,
// segments, one segment's blocks, one device's trace events, one stack — paged by offset and
// limit and capped in size, with every referenced stack rendered once by id, so an agent can
// check raw evidence without flooding its context.
package raw

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/memsnap/memsnap/analysis/bound"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// Options page and cap a section read.
type Options struct {
	Offset int // first item, relative to the section's own range
	Limit  int // items at most; 0 means 50
	// MaxBytes caps the JSON size of the items and stacks returned (0 means 12,000); at least
	// one item is always returned.
	MaxBytes int
	// MaxFrames caps the frames rendered per stack in item sections (0 means 12); read
	// stacks[ID] for all of a stack's frames.
	MaxFrames int
}

// Section kinds.
const (
	KindSettings     = "allocator_settings"
	KindAnnotations  = "external_annotations"
	KindSegments     = "segments"
	KindSegment      = "segment"
	KindBlocks       = "blocks"
	KindDeviceTrace  = "device_trace"
	KindStack        = "stack"
	KindFormat       = "format"
	KindCapabilities = "capabilities"
	KindFrameText    = "frame_text"
)

// FrameText is a page of one frame's full text ("file:line name"), in bytes.
type FrameText struct {
	Stack int        `json:"stack"`
	Frame int        `json:"frame"`
	Bytes int        `json:"bytes"`
	Text  bound.Page `json:"text"`
}

// Segment is one segment's header.
type Segment struct {
	Index         int    `json:"index"`
	Device        int    `json:"device"`
	Address       string `json:"address"`
	TotalSize     int64  `json:"total_size"`
	AllocatedSize int64  `json:"allocated_size"`
	ActiveSize    int64  `json:"active_size"`
	RequestedSize int64  `json:"requested_size"`
	Stream        uint64 `json:"stream"`
	SegmentType   string `json:"segment_type"`
	Pool          string `json:"pool"`
	Expandable    bool   `json:"expandable"`
	StackID       int    `json:"stack_id"`
	Blocks        int    `json:"blocks"`
}

// Block is one block of a segment.
type Block struct {
	Segment       int    `json:"segment"`
	Index         int    `json:"index"`
	Address       string `json:"address"`
	Size          int64  `json:"size"`
	RequestedSize int64  `json:"requested_size"`
	State         string `json:"state"`
	StackID       int    `json:"stack_id"`
}

// Event is one trace event.
type Event struct {
	Index          int    `json:"index"`
	Action         string `json:"action"`
	Address        string `json:"address"`
	Size           int64  `json:"size"`
	Stream         uint64 `json:"stream"`
	TimeUS         int64  `json:"time_us"`
	StackID        int    `json:"stack_id"`
	DeviceFree     int64  `json:"device_free,omitempty"`
	CompileContext string `json:"compile_context,omitempty"`
	UserMetadata   string `json:"user_metadata,omitempty"`
}

// Stack is one stack rendered once, innermost frame first.
type Stack struct {
	ID            int      `json:"id"`
	Frames        []string `json:"frames"`
	FramesTotal   int      `json:"frames_total"`
	FramesOmitted int      `json:"frames_omitted"`
}

// Result is one section read.
type Result struct {
	Path       string `json:"path"`
	Section    string `json:"section"`
	Kind       string `json:"kind" jsonschema:"enum=allocator_settings,enum=external_annotations,enum=segments,enum=segment,enum=blocks,enum=device_trace,enum=stack,enum=format,enum=capabilities,enum=frame_text"`
	Total      int    `json:"total"`
	Offset     int    `json:"offset"`
	Returned   int    `json:"returned"`
	More       bool   `json:"more"`
	NextOffset int    `json:"next_offset"`

	Settings     *snapshot.AllocatorSettings `json:"allocator_settings,omitempty"`
	Format       *snapshot.Format            `json:"format,omitempty"`
	Capabilities *snapshot.Capabilities      `json:"capabilities,omitempty"`
	Segment      *Segment                    `json:"segment,omitempty"`
	Segments     []Segment                   `json:"segments,omitempty"`
	Blocks       []Block                     `json:"blocks,omitempty"`
	Events       []Event                     `json:"events,omitempty"`
	Annotations  []snapshot.Annotation       `json:"annotations,omitempty"`
	FrameText    *FrameText                  `json:"frame_text,omitempty"`
	Stacks       []Stack                     `json:"stacks"`
	Notes        []string                    `json:"notes"`
}

// Sections lists the section forms Read accepts, for error messages and docs.
const Sections = "allocator_settings, external_annotations, format, capabilities, segments, segments[N], segments[N].blocks, segments[N].blocks[A:B], device_traces[D], device_traces[D][A:B], stacks[ID], stacks[ID].frames[K]"

var (
	reIndexed = regexp.MustCompile(`^(segments|device_traces|stacks)\[(\d+)\](.*)$`)
	reSlice   = regexp.MustCompile(`^\[(\d*)(:?)(\d*)\]$`)
	reFrame   = regexp.MustCompile(`^\.frames\[(\d+)\]$`)
)

// Error is a bad section request; its message says what is accepted.
type Error struct{ Msg string }

func (e *Error) Error() string { return e.Msg }

func errorf(format string, args ...any) error { return &Error{fmt.Sprintf(format, args...)} }

// span is a [lo, hi) range from a slice suffix.
type span struct{ lo, hi int }

func parseSlice(s string, n int) (span, error) {
	if s == "" {
		return span{0, n}, nil
	}
	m := reSlice.FindStringSubmatch(s)
	if m == nil {
		return span{}, errorf("cannot read %q as [A:B], [A:] or [K]", s)
	}
	lo := 0
	if m[1] != "" {
		lo, _ = strconv.Atoi(m[1])
	}
	hi := n
	if m[2] == "" { // [K]
		if m[1] == "" {
			return span{}, errorf("empty index []")
		}
		hi = lo + 1
	} else if m[3] != "" {
		hi, _ = strconv.Atoi(m[3])
	}
	if lo > n {
		return span{}, errorf("index %d is past the end (%d items)", lo, n)
	}
	if hi > n {
		hi = n
	}
	if hi < lo {
		return span{}, errorf("range [%d:%d] is empty", lo, hi)
	}
	return span{lo, hi}, nil
}

// Read reads one section of snap.
func Read(snap *snapshot.Snapshot, section string, opt Options) (*Result, error) {
	if snap == nil {
		return nil, errorf("no snapshot")
	}
	if opt.Offset < 0 {
		return nil, errorf("offset must be 0 or more, not %d", opt.Offset)
	}
	if opt.Limit <= 0 {
		opt.Limit = 50
	}
	if opt.MaxBytes <= 0 {
		opt.MaxBytes = 12000
	}
	if opt.MaxFrames <= 0 {
		opt.MaxFrames = 12
	}
	sec := strings.ReplaceAll(strings.TrimSpace(section), " ", "")
	r := &Result{Path: snap.Path, Section: sec, Offset: opt.Offset, Stacks: []Stack{}, Notes: []string{}}
	pg := &pager{snap: snap, opt: opt, r: r, seen: map[snapshot.StackID]bool{}}
	switch sec {
	case "allocator_settings":
		r.Kind = KindSettings
		st := bound.Strings(snap.Settings)
		r.Settings = &st
		if !st.Present {
			r.Notes = append(r.Notes, "the file has no allocator_settings (PyTorch before 2.5 did not write them)")
		}
		return r, nil
	case "format":
		r.Kind = KindFormat
		f := bound.Strings(snap.Format)
		r.Format = &f
		return r, nil
	case "capabilities":
		r.Kind = KindCapabilities
		c := bound.Strings(snap.Caps)
		r.Capabilities = &c
		return r, nil
	case "external_annotations":
		r.Kind = KindAnnotations
		r.Annotations = []snapshot.Annotation{}
		pg.page(span{0, len(snap.Annotations)}, func(i int) (any, snapshot.StackID, func()) {
			a := bound.Strings(snap.Annotations[i])
			return a, snapshot.NoStack, func() { r.Annotations = append(r.Annotations, a) }
		})
		if len(snap.Annotations) == 0 {
			r.Notes = append(r.Notes, "the file has no external_annotations")
		}
		return r, nil
	case "segments":
		r.Kind = KindSegments
		r.Segments = []Segment{}
		pg.page(span{0, len(snap.Segments)}, func(i int) (any, snapshot.StackID, func()) {
			s := segmentOf(snap, i)
			return s, snap.Segments[i].Stack, func() { r.Segments = append(r.Segments, s) }
		})
		return r, nil
	}
	m := reIndexed.FindStringSubmatch(sec)
	if m == nil {
		return nil, errorf("unknown section %q; sections are %s", section, Sections)
	}
	idx, err := strconv.Atoi(m[2])
	if err != nil {
		return nil, errorf("bad index in %q", section)
	}
	rest := m[3]
	switch m[1] {
	case "segments":
		if idx >= len(snap.Segments) {
			if len(snap.Segments) == 0 {
				return nil, errorf("segments[%d] does not exist: the file has no segments", idx)
			}
			return nil, errorf("segments[%d] does not exist: the file has %d segments (0 to %d); read section \"segments\" to list them", idx, len(snap.Segments), len(snap.Segments)-1)
		}
		seg := &snap.Segments[idx]
		hdr := segmentOf(snap, idx)
		r.Segment = &hdr
		pg.addStack(seg.Stack)
		var sp span
		switch {
		case rest == "" || rest == ".blocks":
			r.Kind = KindSegment
			if rest == ".blocks" {
				r.Kind = KindBlocks
			}
			sp = span{0, len(seg.Blocks)}
		case strings.HasPrefix(rest, ".blocks["):
			r.Kind = KindBlocks
			if sp, err = parseSlice(strings.TrimPrefix(rest, ".blocks"), len(seg.Blocks)); err != nil {
				return nil, errorf("%s: %v (segments[%d] has %d blocks)", section, err, idx, len(seg.Blocks))
			}
		default:
			return nil, errorf("cannot read %q: after segments[N] only .blocks or .blocks[A:B] may follow", section)
		}
		r.Blocks = []Block{}
		var addr uint64 = seg.Address
		addrs := make([]uint64, len(seg.Blocks))
		for i, b := range seg.Blocks {
			if b.Address != 0 {
				addr = b.Address
			}
			addrs[i] = addr
			addr += uint64(b.Size)
		}
		pg.page(sp, func(i int) (any, snapshot.StackID, func()) {
			b := seg.Blocks[i]
			blk := Block{Segment: idx, Index: i, Address: hex(addrs[i]), Size: b.Size, RequestedSize: b.RequestedSize,
				State: b.State.String(), StackID: int(b.Stack)}
			return blk, b.Stack, func() { r.Blocks = append(r.Blocks, blk) }
		})
		return r, nil
	case "device_traces":
		if idx >= len(snap.DeviceTraces) {
			if len(snap.DeviceTraces) == 0 {
				return nil, errorf("device_traces[%d] does not exist: the file has no trace (history was not recorded)", idx)
			}
			return nil, errorf("device_traces[%d] does not exist: the file has traces for devices 0 to %d", idx, len(snap.DeviceTraces)-1)
		}
		evs := snap.DeviceTraces[idx]
		r.Kind = KindDeviceTrace
		sp, err := parseSlice(rest, len(evs))
		if err != nil {
			return nil, errorf("%s: %v (device_traces[%d] has %d events)", section, err, idx, len(evs))
		}
		r.Events = []Event{}
		pg.page(sp, func(i int) (any, snapshot.StackID, func()) {
			e := evs[i]
			addr := e.Addr
			if e.Action == snapshot.ActionOOM {
				addr = 0 // an oom event's Addr is its device_free
			}
			ev := Event{Index: i, Action: e.Action.String(), Address: hex(addr), Size: e.Size, Stream: e.Stream,
				TimeUS: e.TimeUS, StackID: int(e.Stack), DeviceFree: e.DeviceFree()}
			if e.Extra.Index() < len(snap.EventExtras) {
				x := snap.EventExtras[e.Extra.Index()]
				ev.CompileContext, ev.UserMetadata = bound.String(x.CompileContext), bound.String(x.UserMetadata)
				if e.Action == snapshot.ActionOther && x.ActionName != "" {
					ev.Action = bound.String(x.ActionName)
				}
			}
			return ev, e.Stack, func() { r.Events = append(r.Events, ev) }
		})
		if idx < len(snap.DroppedEvents) && snap.DroppedEvents[idx] > 0 {
			r.Notes = append(r.Notes, fmt.Sprintf("%d older events were dropped at load (max trace events)", snap.DroppedEvents[idx]))
		}
		if len(evs) == 0 {
			r.Notes = append(r.Notes, fmt.Sprintf("device %d has no trace events", idx))
		}
		return r, nil
	default: // stacks
		if idx >= len(snap.Stacks) {
			if len(snap.Stacks) == 0 {
				return nil, errorf("stacks[%d] does not exist: the file has no stacks", idx)
			}
			return nil, errorf("stacks[%d] does not exist: stack ids run from 0 to %d", idx, len(snap.Stacks)-1)
		}
		if rest != "" {
			fm := reFrame.FindStringSubmatch(rest)
			if fm == nil {
				return nil, errorf("cannot read %q: after stacks[ID] only .frames[K] may follow; use offset/limit to page its frames", section)
			}
			k, err := strconv.Atoi(fm[1])
			if err != nil || k >= len(snap.Stacks[idx]) {
				return nil, errorf("stacks[%d] has %d frames (0 to %d); %q does not exist", idx, len(snap.Stacks[idx]), len(snap.Stacks[idx])-1, section)
			}
			readFrameText(r, idx, k, fullFrame(snap.Frames[snap.Stacks[idx][k]]), opt.Offset)
			return r, nil
		}
		r.Kind = KindStack
		ids := snap.Stacks[idx]
		r.Total = len(ids)
		end := len(ids)
		if opt.Offset < len(ids) && opt.Limit < len(ids)-opt.Offset {
			end = opt.Offset + opt.Limit
		}
		st := Stack{ID: idx, Frames: []string{}, FramesTotal: len(ids)}
		for i := min(opt.Offset, len(ids)); i < end; i++ {
			st.Frames = append(st.Frames, frameString(snap.Frames[ids[i]]))
		}
		r.Returned = len(st.Frames)
		r.NextOffset = opt.Offset + r.Returned
		r.More = r.NextOffset < len(ids)
		st.FramesOmitted = len(ids) - r.Returned
		r.Stacks = append(r.Stacks, st)
		return r, nil
	}
}

// framePageBytes is the most bytes of a frame's text one stacks[ID].frames[K] read returns.
const framePageBytes = bound.MaxPage

// readFrameText fills r with the bytes of one frame's full text from offset on, at most
// framePageBytes, cut at character boundaries, so that a frame cut in every other answer can
// still be read whole, page by page.
func readFrameText(r *Result, stack, frame int, text string, offset int) {
	r.Kind = KindFrameText
	r.Total = len(text)
	start := min(offset, len(text))
	for start < len(text) && !utf8.RuneStart(text[start]) {
		start++
	}
	end := len(text)
	if end-start > framePageBytes {
		end = start + framePageBytes
		for end > start && !utf8.RuneStart(text[end]) {
			end--
		}
	}
	r.FrameText = &FrameText{Stack: stack, Frame: frame, Bytes: len(text), Text: bound.Page(text[start:end])}
	r.Offset = start
	r.Returned = end - start
	r.NextOffset = end
	r.More = end < len(text)
}

func hex(a uint64) string { return "0x" + strconv.FormatUint(a, 16) }

func segmentOf(snap *snapshot.Snapshot, i int) Segment {
	s := &snap.Segments[i]
	return Segment{Index: i, Device: s.Device, Address: hex(s.Address), TotalSize: s.TotalSize, AllocatedSize: s.AllocatedSize,
		ActiveSize: s.ActiveSize, RequestedSize: s.RequestedSize, Stream: s.Stream, SegmentType: bound.String(s.SegmentType),
		Pool: fmt.Sprintf("%d,%d", s.PoolID[0], s.PoolID[1]), Expandable: s.IsExpandable, StackID: int(s.Stack), Blocks: len(s.Blocks)}
}

// frameString renders a frame, cut to the string bound.
func frameString(f snapshot.Frame) string {
	return bound.String(fullFrame(f))
}

// fullFrame renders a frame whole (stacks[ID].frames[K] pages through it).
func fullFrame(f snapshot.Frame) string {
	if f.Line == snapshot.LineUnknown {
		return f.Filename + ":? " + f.Name
	}
	return f.Filename + ":" + strconv.FormatInt(f.Line, 10) + " " + f.Name
}

// pager adds items of a span from offset on, within the limit and the byte cap, and renders
// each referenced stack once.
type pager struct {
	snap  *snapshot.Snapshot
	opt   Options
	r     *Result
	seen  map[snapshot.StackID]bool
	bytes int
}

// stackOf renders stack id with at most MaxFrames frames.
func (p *pager) stackOf(id snapshot.StackID) Stack {
	ids := p.snap.Stacks[id]
	st := Stack{ID: int(id), Frames: []string{}, FramesTotal: len(ids)}
	for i, f := range ids {
		if i == p.opt.MaxFrames {
			break
		}
		st.Frames = append(st.Frames, frameString(p.snap.Frames[f]))
	}
	st.FramesOmitted = len(ids) - len(st.Frames)
	return st
}

// stackSize is the JSON size addStack would add for id (0 when it adds nothing).
func (p *pager) stackSize(id snapshot.StackID) int {
	if id < 0 || int(id) >= len(p.snap.Stacks) || p.seen[id] {
		return 0
	}
	return jsonSize(p.stackOf(id))
}

// addStack renders stack id into the result once.
func (p *pager) addStack(id snapshot.StackID) {
	if id < 0 || int(id) >= len(p.snap.Stacks) || p.seen[id] {
		return
	}
	p.seen[id] = true
	st := p.stackOf(id)
	p.r.Stacks = append(p.r.Stacks, st)
	p.noteCut(st)
}

// noteCut tells how to read the whole of any frame of st that was cut to the string bound.
func (p *pager) noteCut(st Stack) {
	for k, f := range st.Frames {
		if bound.IsCut(f) {
			p.r.Notes = append(p.r.Notes, fmt.Sprintf("stacks[%d] frame %d is cut to %d bytes: read section stacks[%d].frames[%d] (offset and limit in bytes) to page through it whole", st.ID, k, bound.MaxString, st.ID, k))
			return
		}
	}
}

// page adds the items of sp from the offset on: add(i) returns item i, its stack and a
// commit that appends it to the result, called only when the item fits.
func (p *pager) page(sp span, add func(i int) (any, snapshot.StackID, func())) {
	r := p.r
	r.Total = sp.hi - sp.lo
	start := sp.hi
	if p.opt.Offset < sp.hi-sp.lo { // compared as a length: lo + a huge offset would overflow
		start = sp.lo + p.opt.Offset
	}
	i := start
	for ; i < sp.hi && i-start < p.opt.Limit; i++ {
		item, stack, commit := add(i)
		size := jsonSize(item) + p.stackSize(stack)
		// The first item always; later ones only while the whole answer stays under the cap.
		if i > start && p.bytes+size > p.opt.MaxBytes {
			r.Notes = append(r.Notes, fmt.Sprintf("stopped at %d bytes of JSON to stay small; continue with offset=%d", p.opt.MaxBytes, i-sp.lo))
			break
		}
		commit()
		p.bytes += size
		p.addStack(stack)
	}
	r.Returned = i - start
	r.NextOffset = i - sp.lo
	r.More = i < sp.hi
}

func jsonSize(v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		return 0
	}
	return len(b)
}
