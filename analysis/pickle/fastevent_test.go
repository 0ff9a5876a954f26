package pickle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"reflect"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis/pickle/writer"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// Trace-list pickles for the event fast path: a list whose first batch (decoded the slow
// way, it makes the list a trace list) defines the memo slots the later events name:
// 0 the list, 1 the first event, 2 "action", 3 "alloc", 4 "size", 5 "addr".
const (
	feHead  = "\x80\x04]\x94(}\x94(\x8c\x06action\x94\x8c\x05alloc\x94\x8c\x04size\x94K\x10\x8c\x04addr\x94K\x01ue"
	feEvent = "}\x94(h\x02h\x03h\x04K\x20h\x05K\x02u" // the fast path's form; each takes the next memo slot
	// feSlow is an event the fast path does not take (a key it has not seen: a new string).
	feSlow = "}\x94(h\x02h\x03\x8c\x04size\x94K\x30u"
	// feFresh writes its action and a compile context as new strings, memoized or not, as
	// PyTorch's writer does for every event.
	feFresh = "}\x94(h\x02\x8c\x0efree_completed\x94h\x04K\x20h\x07\x8c\x03N/Au"
	// feRewrite is a slow event (a new key) whose compile context is the string "addr" put
	// over memo slot 4 (BINPUT), which held the key "size".
	feRewrite = "}\x94(h\x02h\x03\x8c\x0fcompile_context\x94\x8c\x04addrq\x04u"
	// feHead2 is feHead with an event that defines slot 7, "compile_context" (slot 6 is its
	// dict).
	feHead2 = "\x80\x04]\x94(}\x94(\x8c\x06action\x94\x8c\x05alloc\x94\x8c\x04size\x94K\x10\x8c\x04addr\x94K\x01u}\x94(h\x02h\x03\x8c\x0fcompile_context\x94\x8c\x03N/A\x94ue"
)

// TestFastEventsMatchSlowPath: whatever a batch does after events were stored ahead of its
// APPENDS, decoding in place (with the event fast path) gives exactly what the slow path
// gives (the stream decode never takes it): the same events, memo reads and errors. Inputs
// that look back into the open batch are decoded again without the fast path (Redone).
func TestFastEventsMatchSlowPath(t *testing.T) {
	for _, tc := range []struct {
		name       string
		batch      string
		fast       int64 // events the fast path reads (the slow ones it stores ahead are not counted)
		redone     bool
		wantEvents int // -1: an error
	}{
		{"plain", feEvent + feEvent, 2, false, 3},
		{"new strings", feFresh + feFresh, 2, false, 4},
		{"a string of the batch read back", feFresh + "h\x0a", 1, false, -1},
		{"a slow event between", feEvent + feSlow + feEvent, 2, false, 4},
		{"slow events first", feSlow + feSlow + feEvent, 1, false, 4},
		{"POP after stored events", feEvent + feEvent + "0", 2, true, 2},
		{"BINGET of a stored event", feEvent + feEvent + "h\x06", 2, true, 4},
		{"SETITEMS on a stored event", feEvent + feEvent + "(K\x01K\x02u", 2, true, 3},
		{"MEMOIZE of a stored event", feEvent + feEvent + "\x94", 2, true, 3},
		{"TUPLE2 of stored events", feEvent + feEvent + "\x86", 2, true, -1},
		{"DUP of a stored event", feEvent + "2", 1, true, 3},
		{"a nested list", feEvent + "]\x94(" + feEvent + "e", 1, false, -1},
		{"POP_MARK", feEvent + feEvent + "1", 2, true, -1},
		{"a non-event after", feEvent + "K\x01", 1, false, -1},
		// A slow event's BINPUT makes slot 4 "addr" instead of "size": the next event's
		// first pairs read the same bytes as before, and must not read them as before.
		{"a key's memo slot rewritten", feEvent + feRewrite + feEvent, 2, false, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Bytes after STOP are ignored: the padding keeps the fast paths' window open.
			head := feHead
			if strings.Contains(tc.batch, feFresh) {
				head = feHead2
			}
			data := []byte(head + "(" + tc.batch + "e." + strings.Repeat("N", 32))
			stream, err1 := Decode(context.Background(), bytes.NewReader(data), Options{})
			sameAsStream(t, data, Options{}, stream, err1)
			var st Stats
			res, err := DecodeBytes(context.Background(), data, Options{Stats: &st})
			if st.Redone != tc.redone {
				t.Errorf("redone %v, want %v", st.Redone, tc.redone)
			}
			if !tc.redone && st.FastEvents != tc.fast {
				t.Errorf("fast events %d, want %d", st.FastEvents, tc.fast)
			}
			if tc.wantEvents < 0 {
				if err == nil {
					t.Fatalf("no error; root %#v", res.Root)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if n := len(res.Root.(EventList).Events); n != tc.wantEvents {
				t.Fatalf("%d events, want %d", n, tc.wantEvents)
			}
		})
	}
}

// TestRunScannerKeys: with the run scanner on, the decoder takes the tracebacks' keys it
// worked out ahead, and the in-place decode still equals the stream's.
func TestRunScannerKeys(t *testing.T) {
	defer func(n int) { minScanInput = n }(minScanInput)
	minScanInput = 0
	sameWithScanner(t, runTrace(t))
}

// sameWithScanner decodes data in place with the run scanner on (minScanInput set by the
// caller) and from a stream: the decoder must have taken keys from the scanner, and both
// decodes must give the same values and interned stacks.
func sameWithScanner(t *testing.T, data []byte) {
	t.Helper()
	defer func(w bool) { waitForScanner = w }(waitForScanner)
	waitForScanner = true
	stream, err := Decode(context.Background(), bytes.NewReader(data), Options{Index: true})
	if err != nil {
		t.Fatal(err)
	}
	var st Stats
	res, err := DecodeBytes(context.Background(), data, Options{Index: true, Stats: &st})
	if err != nil {
		t.Fatal(err)
	}
	if st.KeysAhead == 0 {
		t.Fatalf("the decoder took no key from the scanner (%d fast events)", st.FastEvents)
	}
	if !reflect.DeepEqual(stream.Root, res.Root) || !reflect.DeepEqual(stream.Interner, res.Interner) {
		t.Fatal("the in-place decode differs from the stream's")
	}
}

// runTrace is a snapshot whose tracebacks repeat (the run cache matches them) and whose
// trace spans many APPENDS batches and index hand-overs.
func runTrace(t *testing.T) []byte {
	t.Helper()
	in := snapshot.NewInterner()
	var stacks []snapshot.StackID
	for s := range 5 {
		var ids []snapshot.FrameID
		for f := range 4 + s {
			ids = append(ids, in.Frame(snapshot.Frame{Filename: fmt.Sprintf("/home/u/m%d.py", f), Line: int64(10*s + f), Name: "f"}))
		}
		stacks = append(stacks, in.Stack(ids))
	}
	var evs []snapshot.Event
	for i := range 3 * indexChunk {
		a := snapshot.ActionAlloc
		if i%2 == 1 {
			a = snapshot.ActionFreeCompleted
		}
		evs = append(evs, snapshot.Event{Action: a, Addr: uint64(0x7f0000000000 + 512*(i%64)), Size: 512, TimeUS: int64(i), Stack: stacks[i/2%len(stacks)]})
	}
	snap := &snapshot.Snapshot{Frames: in.Frames, Stacks: in.Stacks, DeviceTraces: [][]snapshot.Event{evs}, EventExtras: []snapshot.EventExtra{{}}}
	data, err := writer.Encode(snap, writer.Options{Protocol: 4, ListPerTraceback: true})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestRunKeyer: a run's key is the hash of its bytes up to its APPENDS, wherever an 'e' byte
// (0x65, APPENDS) sits inside a memo index; a length remembered for other bytes of the same
// prefix never makes two different runs match.
func TestRunKeyer(t *testing.T) {
	c := newRunCache()
	k := &c.keys
	// A: h 1, j 0x65, h 2, APPENDS; the first 'e' byte is j's index.
	a := []byte("h\x01j\x65\x00\x00\x00h\x02e")
	// B: the same first bytes; its third reference is a j whose index has an 'e' byte where
	// A's APPENDS is.
	b := []byte("h\x01j\x65\x00\x00\x00j\x01\x65\x00\x00e")
	hash := func(p []byte) uint64 { return maphash.Bytes(k.seed, p) }
	for i := range 2 { // walked, then remembered
		if key, n := k.key(a); n != 9 || key != hash(a[:9]) {
			t.Fatalf("A, call %d: key %x length %d, want %x 9", i, key, n, hash(a[:9]))
		}
	}
	c.file(hash(a[:9]), 9, 7)
	// B takes A's length as a guess (an 'e' byte is there): a key no decoded run has.
	key, n := k.key(b)
	if n != 9 || key != hash(b[:9]) {
		t.Fatalf("B: key %x length %d, want the guess %x 9", key, n, hash(b[:9]))
	}
	if id, ok := c.find(key, n); ok {
		t.Fatalf("B found A's stack %d", id)
	}
	// B decoded the slow way and filed: under its own key, and the keyer learns its length.
	c.put(b, 12, 8)
	if key, n := k.key(b); n != 12 || key != hash(b[:12]) {
		t.Fatalf("B after put: key %x length %d, want %x 12", key, n, hash(b[:12]))
	}
	if id, ok := c.find(hash(b[:12]), 12); !ok || id != 8 {
		t.Fatalf("B: stack %d %v, want 8", id, ok)
	}
	// A again: the remembered length does not fit it, so it is walked.
	if key, n := k.key(a); n != 9 || key != hash(a[:9]) {
		t.Fatalf("A again: key %x length %d", key, n)
	}
	if id, ok := c.find(hash(a[:9]), 9); !ok || id != 7 {
		t.Fatalf("A: stack %d %v, want 7", id, ok)
	}
	for _, run := range []string{"", "e", "h\x01K\x02e", "h\x01h\x02", "j\x01\x00"} {
		if key, n := k.key([]byte(run)); n != 0 || key != 0 {
			t.Errorf("%q: key %x length %d, want none", run, key, n)
		}
	}
}

// TestRunScannerKeysWithAppendsBytes: tracebacks whose memo references hold 'e' bytes (0x65,
// the APPENDS opcode) in their indexes, in BINGETs and LONG_BINGETs, decode in place (run
// scanner on) exactly as from a stream.
func TestRunScannerKeysWithAppendsBytes(t *testing.T) {
	defer func(n int) { minScanInput = n }(minScanInput)
	minScanInput = 0
	in := snapshot.NewInterner()
	var stacks []snapshot.StackID
	for s := range 60 {
		var ids []snapshot.FrameID
		for f := range 20 + s%7 {
			ids = append(ids, in.Frame(snapshot.Frame{Filename: fmt.Sprintf("/home/u/m%d.py", (7*s+f)%150), Line: int64(f), Name: "f"}))
		}
		stacks = append(stacks, in.Stack(ids))
	}
	var evs []snapshot.Event
	for i := range 2 * indexChunk {
		evs = append(evs, snapshot.Event{Action: snapshot.ActionAlloc, Addr: uint64(0x7f0000000000 + 512*(i%64)), Size: 512, TimeUS: int64(i), Stack: stacks[i*13%len(stacks)]})
	}
	snap := &snapshot.Snapshot{Frames: in.Frames, Stacks: in.Stacks, DeviceTraces: [][]snapshot.Event{evs}, EventExtras: []snapshot.EventExtra{{}}}
	data, err := writer.Encode(snap, writer.Options{Protocol: 4, ListPerTraceback: true})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte("(h\x65")) && !bytes.Contains(data, []byte("h\x65h")) || !bytes.Contains(data, []byte("j\x65")) {
		t.Fatal("no memo reference with an 'e' byte in a traceback: the test tests nothing")
	}
	sameWithScanner(t, data)
}

// TestEventExtrasBound: a trace whose events make more distinct combinations of their
// optional strings than an event's three-byte index holds is refused with a limit error, on
// the fast path and the slow one alike; one fewer loads.
func TestEventExtrasBound(t *testing.T) {
	defer func(n int) { maxEventExtras = n }(maxEventExtras)
	maxEventExtras = 4 // none, "N/A" (feHead2's event), and two more
	ev := func(cc string) string {
		return "}\x94(h\x02h\x03h\x04K\x20h\x07\x8c" + string(rune(len(cc))) + cc + "u"
	}
	for _, tc := range []struct {
		batch string
		ok    bool
	}{
		{ev("A") + ev("B") + ev("A"), true},
		{ev("A") + ev("B") + ev("C"), false},
	} {
		data := []byte(feHead2 + "(" + tc.batch + "e." + strings.Repeat("N", 32))
		for _, in := range []string{"stream", "in place"} {
			var res *Result
			var err error
			if in == "stream" {
				res, err = Decode(context.Background(), bytes.NewReader(data), Options{})
			} else {
				res, err = DecodeBytes(context.Background(), data, Options{})
			}
			switch {
			case tc.ok && err != nil:
				t.Errorf("%s, %q: %v", in, tc.batch, err)
			case tc.ok && len(res.Extras) != 4:
				t.Errorf("%s, %q: %d extras, want 4", in, tc.batch, len(res.Extras))
			case !tc.ok && (err == nil || !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "more than 3 distinct combinations")):
				t.Errorf("%s, %q: error %v, want the bound's", in, tc.batch, err)
			}
		}
	}
}

// TestFreshStringsPerEvent: a trace whose every event makes its compile context again, as a
// new memoized string object (CPython pickling PyTorch 2.5+'s per-event 'N/A'), decodes to
// the slow path's events and extras through the fast path, and makes no string per event:
// an event's string with the bytes of one of the last four an earlier event made for that
// field is that string again.
func TestFreshStringsPerEvent(t *testing.T) {
	const n = 3000
	ctxOf := func(i int) string {
		switch {
		case i%7 == 3:
			return "ctx"
		case i%500 == 1:
			return fmt.Sprintf("step %d", i) // a new value now and then
		}
		return "N/A"
	}
	var b strings.Builder
	distinct := map[string]bool{}
	for i := range n {
		ctx := ctxOf(i)
		distinct[ctx] = true
		fmt.Fprintf(&b, "}\x94(h\x02h\x03h\x04K\x20h\x07\x8c%c%s\x94u", byte(len(ctx)), ctx)
	}
	data := []byte(feHead2 + "(" + b.String() + "e." + strings.Repeat("N", 32))
	stream, err := Decode(context.Background(), bytes.NewReader(data), Options{})
	if err != nil {
		t.Fatal(err)
	}
	sameAsStream(t, data, Options{}, stream, nil)
	var st Stats
	res, err := DecodeBytes(context.Background(), data, Options{Stats: &st})
	if err != nil {
		t.Fatal(err)
	}
	if st.FastEvents != n {
		t.Errorf("fast events %d, want %d", st.FastEvents, n)
	}
	// The head's 6 strings (its "N/A" came the slow way) and one per distinct value.
	if want := 6 + len(distinct); st.Strings != want {
		t.Errorf("%d strings made, want %d", st.Strings, want)
	}
	evs := res.Root.(EventList).Events
	if len(evs) != n+2 {
		t.Fatalf("%d events, want %d", len(evs), n+2)
	}
	for i, ev := range evs[2:] {
		if got, want := res.Extras[ev.Extra.Index()].CompileContext, ctxOf(i); got != want {
			t.Fatalf("event %d: compile context %q, want %q", i, got, want)
		}
	}
	if len(res.Extras) != 1+len(distinct) { // extra 0 is the empty one
		t.Errorf("%d extras, want %d: %+v", len(res.Extras), 1+len(distinct), res.Extras)
	}
}
