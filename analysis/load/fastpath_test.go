package load

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis/pickle/writer"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// genTrace builds a snapshot that exercises the decoder's fast paths (the traceback run
// cache and the event dict path) and their fallbacks: tracebacks repeated many times, frames
// repeated inside one traceback (a frame dict named again before it is reduced), empty and
// absent frames, a traceback longer than the run cache takes, extras, OOMs, two devices.
func genTrace(seed uint64, events int) *snapshot.Snapshot {
	r := rand.New(rand.NewPCG(seed, seed+1))
	in := snapshot.NewInterner()
	var frames []snapshot.FrameID
	for i := range 300 {
		f := snapshot.Frame{Filename: fmt.Sprintf("/home/u/p/m%d.py", i%17), Line: int64(i), Name: fmt.Sprintf("f%d", i)}
		switch i % 7 {
		case 0:
			f = snapshot.Frame{Filename: "??", Name: fmt.Sprintf("c10::op%d()", i)}
		case 3:
			f.Line = snapshot.LineUnknown
		}
		frames = append(frames, in.Frame(f))
	}
	var stacks []snapshot.StackID
	for i := range 60 {
		n := 1 + r.IntN(40)
		if i == 7 {
			n = 1200 // more than maxRunBytes of references
		}
		ids := make([]snapshot.FrameID, n)
		for j := range ids {
			ids[j] = frames[r.IntN(len(frames))]
			if j > 0 && r.IntN(5) == 0 {
				ids[j] = ids[j-1] // the same frame twice in one traceback
			}
		}
		stacks = append(stacks, in.Stack(ids))
	}
	stacks = append(stacks, snapshot.EmptyStack, snapshot.NoStack)
	extras := []snapshot.EventExtra{{}, {CompileContext: "N/A"}, {CompileContext: "N/A", UserMetadata: "step 3"}}
	traces := make([][]snapshot.Event, 2)
	var segs []snapshot.Segment
	for d := range traces {
		live := map[uint64]snapshot.Event{}
		for i := 0; i < events; i++ {
			st := stacks[int(float64(len(stacks))*r.Float64()*r.Float64())]
			addr := uint64(0x7f0000000000 + 512*r.IntN(400))
			ev := snapshot.Event{Addr: addr, Size: int64(512 * (1 + r.IntN(1<<12))), Stream: uint64(r.IntN(2)) * 0x5555,
				TimeUS: int64(1_700_000_000_000_000 + i), Stack: st, Extra: snapshot.MakeExtraID(uint32(r.IntN(len(extras))))}
			if old, ok := live[addr]; ok {
				ev.Action, ev.Size = snapshot.ActionFreeRequested, old.Size
				traces[d] = append(traces[d], ev)
				ev.Action = snapshot.ActionFreeCompleted
				delete(live, addr)
			} else {
				ev.Action = snapshot.ActionAlloc
				live[addr] = ev
			}
			if i%997 == 0 {
				ev = snapshot.Event{Action: snapshot.ActionOOM, Size: 1 << 34, TimeUS: ev.TimeUS, Stack: st}.WithDeviceFree(1 << 20)
			}
			traces[d] = append(traces[d], ev)
		}
		// The live blocks, one segment each (a block shares its alloc event's traceback).
		for addr, ev := range live {
			segs = append(segs, snapshot.Segment{Device: d, Address: addr, TotalSize: ev.Size, AllocatedSize: ev.Size,
				ActiveSize: ev.Size, RequestedSize: ev.Size, Stream: ev.Stream, SegmentType: "large", Stack: ev.Stack,
				Blocks: []snapshot.Block{{Address: addr, Size: ev.Size, RequestedSize: ev.Size, State: snapshot.StateActiveAllocated, Stack: ev.Stack}}})
		}
	}
	slicesSortSegments(segs)
	return &snapshot.Snapshot{Frames: in.Frames, Stacks: in.Stacks, Segments: segs, DeviceTraces: traces, EventExtras: extras}
}

func slicesSortSegments(segs []snapshot.Segment) {
	for i := 1; i < len(segs); i++ {
		for j := i; j > 0 && (segs[j].Device < segs[j-1].Device || segs[j].Device == segs[j-1].Device && segs[j].Address < segs[j-1].Address); j-- {
			segs[j], segs[j-1] = segs[j-1], segs[j]
		}
	}
}

// TestFastPathsMatchOracle: on generated traces in every writer form the fast paths meet,
// the decoder's model equals the gopickle oracle's, and interning order is unchanged.
func TestFastPathsMatchOracle(t *testing.T) {
	snap := genTrace(1, 3000)
	for _, opt := range []writer.Options{
		{Protocol: 4, ListPerTraceback: true},
		{Protocol: 4},
		{Protocol: 5, ListPerTraceback: true},
		{Protocol: 3, ListPerTraceback: true},
		{Protocol: 2, CppWriter: true},
		{Protocol: 2, TypeTag: true},
	} {
		t.Run(fmt.Sprintf("%+v", opt), func(t *testing.T) {
			data, err := writer.Encode(snap, opt)
			if err != nil {
				t.Fatal(err)
			}
			fast, err := Reader(context.Background(), bytes.NewReader(data), "gen", int64(len(data)), Options{})
			if err != nil {
				t.Fatal(err)
			}
			want := oracle(t, data)
			assertSameModel(t, "generated", fast, want)
			// Stacks are interned in order of first appearance, as the generic converter does.
			for i := range min(len(fast.Stacks), len(want.Stacks)) {
				if !sameFrames(fast, want, fast.Stacks[i], want.Stacks[i]) {
					t.Fatalf("stack %d differs from the oracle's stack %d", i, i)
				}
			}
		})
	}
}

func sameFrames(a, b *snapshot.Snapshot, x, y []snapshot.FrameID) bool {
	if len(x) != len(y) {
		return false
	}
	for i := range x {
		if a.Frames[x[i]] != b.Frames[y[i]] {
			return false
		}
	}
	return true
}

// TestRunCacheSeesMemoRewrites: a traceback written with the same bytes after its frame's memo
// slot was rewritten (BINPUT over it) names the new frame, not the cached stack.
func TestRunCacheSeesMemoRewrites(t *testing.T) {
	key := func(s string) string { return sstr(s) + "\x94" }
	frame := func(file, name string, slotKeys [3]string) string {
		return "}\x94(" + slotKeys[0] + key(file) + slotKeys[1] + "K\x01" + slotKeys[2] + key(name) + "u"
	}
	// Memo: 0 top dict, 1 "segments", 2 [], 3 "device_traces", 4 [], 5 trace list,
	// 6 event dict, 7 "action", 8 "alloc", 9 "addr", 10 "size", 11 "frames", 12 frames list,
	// 13 frame A, 14 "filename", 15 "a.py", 16 "line", 17 "name", 18 "fa".
	var b strings.Builder
	b.WriteString("}\x94(" + key("segments") + "]\x94" + key("device_traces") + "]\x94(]\x94(")
	b.WriteString("}\x94(" + key("action") + key("alloc") + key("addr") + "K\x01" + key("size") + "K\x02" + key("frames") + "]\x94(")
	b.WriteString(frame("a.py", "fa", [3]string{key("filename"), key("line"), key("name")}) + "eu")
	event := "}\x94(h\x07h\x08h\x09K\x01h\x0aK\x02h\x0b]\x94(h\x0deu"
	for range 4 { // a miss, a miss that records, then hits
		b.WriteString(event)
	}
	// Frame B over slot 13 (inside a list, so that it is reduced), the list then dropped.
	b.WriteString("](" + frame("b.py", "fb", [3]string{"h\x0e", "h\x10", "h\x11"}) + "q\x0de0")
	for range 3 {
		b.WriteString(event)
	}
	b.WriteString("eeu")
	data := p4(b.String())
	fast, err := Reader(context.Background(), bytes.NewReader(data), "rewrite", int64(len(data)), Options{})
	if err != nil {
		t.Fatal(err)
	}
	assertSameModel(t, "rewrite", fast, oracle(t, data))
	evs := fast.DeviceTraces[0]
	if len(evs) != 8 || fast.StackFrames(evs[4].Stack)[0].Filename != "a.py" || fast.StackFrames(evs[5].Stack)[0].Filename != "b.py" {
		t.Fatalf("events %d; stacks %v then %v", len(evs), fast.StackFrames(evs[4].Stack), fast.StackFrames(evs[5].Stack))
	}
}

// TestMappedMatchesStream: a pickle file large enough to be mapped and decoded in place
// loads exactly as the same bytes read as a stream, and reports progress to its end.
func TestMappedMatchesStream(t *testing.T) {
	data, err := writer.Encode(genTrace(2, 20000), writer.Options{Protocol: 4, ListPerTraceback: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(data) < 2*minMapSize {
		t.Fatalf("only %d bytes: too small to be mapped", len(data))
	}
	path := filepath.Join(t.TempDir(), "big.pickle")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	var last int64
	mapped, err := File(context.Background(), path, Options{Progress: func(done, total int64) {
		if total != int64(len(data)) || done < last {
			t.Errorf("progress %d of %d after %d", done, total, last)
		}
		last = done
	}})
	if err != nil {
		t.Fatal(err)
	}
	if last != int64(len(data)) {
		t.Errorf("progress stopped at %d of %d", last, len(data))
	}
	stream, err := Reader(context.Background(), bytes.NewReader(data), path, int64(len(data)), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(mapped, stream) {
		t.Fatal("the mapped file loads differently from the stream")
	}
}

// TestMappedFileShrinks: a mapped file cut short while it is decoded (its pages gone) is an
// error, not a crash.
func TestMappedFileShrinks(t *testing.T) {
	data, err := writer.Encode(genTrace(3, 20000), writer.Options{Protocol: 4, ListPerTraceback: true})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "shrinks.pickle")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, ok := mapFile(f, int64(len(data)))
	if !ok {
		t.Skip("mapping is not supported here")
	}
	defer unmapFile(m)
	if err := os.Truncate(path, 4096); err != nil {
		t.Fatal(err)
	}
	_, err = decodeMapped(context.Background(), m, path, Options{})
	var le *Error
	if !errors.As(err, &le) || !strings.Contains(le.Msg, "changed") {
		t.Fatalf("got %v, want the file-changed error", err)
	}
}

// errAfter returns its data in small reads, then its error.
type errAfter struct {
	data []byte
	err  error
}

func (e *errAfter) Read(p []byte) (int, error) {
	if len(e.data) == 0 {
		return 0, e.err
	}
	n := copy(p[:min(len(p), 1000)], e.data)
	e.data = e.data[n:]
	return n, nil
}

// TestReadAhead: the read-ahead reader returns its source's bytes and then its error, and
// stops its goroutine when closed early.
func TestReadAhead(t *testing.T) {
	data := make([]byte, 3*readAheadSize+12345)
	for i := range data {
		data[i] = byte(i * 7)
	}
	for _, srcErr := range []error{io.EOF, io.ErrUnexpectedEOF, errors.New("corrupt gzip")} {
		ra := newReadAhead(&errAfter{data: data, err: srcErr})
		got, err := io.ReadAll(struct{ io.Reader }{ra})
		if srcErr == io.EOF {
			srcErr = nil // ReadAll's
		}
		if !bytes.Equal(got, data) || !errors.Is(err, srcErr) && err != srcErr {
			t.Fatalf("read %d bytes (want %d), error %v (want %v)", len(got), len(data), err, srcErr)
		}
		if _, err := ra.Read(make([]byte, 10)); srcErr != nil && err != srcErr {
			t.Fatalf("read after the end: %v", err)
		}
		ra.Close()
	}
	ra := newReadAhead(bytes.NewReader(data))
	if _, err := ra.Read(make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	ra.Close() // must return: the goroutine stops with buffers still to fill
	ra.Close()
}

// TestMappedTraceCapacity: a trace list that outgrows its first room in a mapped file grows to
// what the rest of the file holds, not to twice its length, so that the MCP server's cache
// (Snapshot.Compact) need not copy millions of events to give the spare half back.
func TestMappedTraceCapacity(t *testing.T) {
	snap := genTrace(4, 300000)
	snap.DeviceTraces = snap.DeviceTraces[:1]
	data, err := writer.Encode(snap, writer.Options{Protocol: 4, ListPerTraceback: true})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "one-trace.pickle")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := File(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	evs := got.DeviceTraces[0]
	if n, c := len(evs), cap(evs); n != len(snap.DeviceTraces[0]) || c < n || c > n+n/20 {
		t.Errorf("%d events in a list of capacity %d, want %d events and at most 5%% spare", n, c, len(snap.DeviceTraces[0]))
	}
	stream, err := Reader(context.Background(), bytes.NewReader(data), path, int64(len(data)), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, stream) {
		t.Fatal("the mapped file loads differently from the stream")
	}
}
