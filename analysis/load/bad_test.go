package load

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// p4 wraps opcodes in a protocol-4 header and a STOP.
func p4(body ...string) []byte {
	return []byte("\x80\x04" + strings.Join(body, "") + ".")
}

func u32(n uint32) string {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], n)
	return string(b[:])
}

func u64(n uint64) string {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], n)
	return string(b[:])
}

func sstr(s string) string { return "\x8c" + string(rune(len(s))) + s }

func gz(b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

func nested(depth int) []byte {
	return p4(strings.Repeat("]", depth), strings.Repeat("a", depth-1))
}

// minimal is a valid snapshot: {"segments": []}.
var minimal = p4("}", sstr("segments"), "]", "s")

// TestBadInput: every malformed input gives a one-line error naming the file, what is wrong
// and, for pickles, the byte offset — never a panic.
func TestBadInput(t *testing.T) {
	cases := []struct {
		name string
		data []byte
		want string // substring of the error, after "FILE: "
	}{
		{"empty", nil, "empty file"},
		{"text", []byte("hello, world\n"), "not a snapshot: neither a pickle nor JSON (first byte 0x68) (at byte 0)"},
		{"truncated", minimal[:len(minimal)-3], "corrupt pickle: truncated"},
		{"no stop", minimal[:len(minimal)-1], "corrupt pickle: truncated: no STOP opcode (at byte 15)"},
		{"bad opcode", p4("\xff"), "corrupt pickle: unsupported or invalid opcode 0xff (at byte 2)"},
		{"protocol 6", []byte("\x80\x06N."), "unsupported pickle protocol 6 (at byte 0)"},
		{"an int", p4("K\x07"), "not a memory snapshot: the file holds a int, not a dict with 'segments'"},
		{"state_dict keys", p4("}(", sstr("layer.weight"), "K\x01", sstr("layer.bias"), "K\x02", "u"), "not a memory snapshot: no 'segments' key (keys: layer.bias, layer.weight)"},
		{"segments not a list", p4("}", sstr("segments"), "K\x05", "s"), "segments is a int, not a list"},
		{"block size a string", p4("}", sstr("segments"), "](}(", sstr("device"), "K\x00", sstr("address"), "K\x00", sstr("total_size"), "K\x00",
			sstr("blocks"), "](}(", sstr("size"), sstr("big"), sstr("state"), sstr("inactive"), "ue", "ues"), "segments[0]: blocks[0]: size is a str, not an integer"},
		{"huge BINUNICODE8", []byte("\x80\x04\x8d" + u64(1<<62) + "x."), ": string length 4611686018427387904 is larger than any snapshot string (the limit is 16777216 bytes) (at byte 2)"},
		{"huge BINUNICODE", []byte("\x80\x04X" + u32(0x7ffffff0) + "abc"), ": string length 2147483632 is larger than any snapshot string (the limit is 16777216 bytes) (at byte 2)"},
		{"long BINUNICODE", []byte("\x80\x04X" + u32(0xfffff0) + "abc"), "corrupt pickle: truncated: declared length 16777200, input ends after 3 bytes (at byte 2)"},
		{"huge FRAME", []byte("\x80\x04\x95" + u64(1<<62) + "N."), "not a memory snapshot: the file holds a None"},
		{"stack underflow", p4("a"), "corrupt pickle: stack underflow in APPEND (at byte 2)"},
		{"unset memo", p4("h\x05"), "corrupt pickle: memo slot 5 read before it was set (at byte 2)"},
		{"global", []byte("\x80\x02cos\nsystem\nq\x00."), ": refusing unsafe global os.system: a snapshot holds only plain data (at byte 2)"},
		{"stack global", p4(sstr("builtins"), sstr("eval"), "\x93"), ": refusing unsafe global builtins.eval: a snapshot holds only plain data (at byte 18)"},
		{"reduce", []byte("\x80\x02NN)R."), "refusing to call it"},
		{"odd setitems", p4("}(", sstr("a"), "u"), "SETITEMS with an odd number of items"},
		{"two values at stop", p4("NN"), "STOP with 2 values on the stack (want 1)"},
		{"deep nesting", nested(300), "corrupt pickle: values nested more than 256 deep (at byte 557)"},
		{"long stack", nested(100000), "values wait on the stack: more than one per 8 bytes read, which no snapshot needs"},
		{"gzip of garbage", gz([]byte("garbage")), "not a snapshot: neither a pickle nor JSON"},
		{"corrupt gzip", []byte("\x1f\x8b\x08\x00garbage"), "corrupt gzip"},
		{"truncated gzip", gz(minimal)[:20], "corrupt pickle"},
		{"json not a snapshot", []byte(`{"model": 1}`), "not a memory snapshot: no 'segments' key (keys: model)"},
		{"truncated json", []byte(`{"segments": [`), "truncated JSON"},
		{"json wrong type", []byte(`{"segments": [{"device": "zero"}]}`), "segments[0]: device is a str, not an integer"},
		{"json event not a dict", []byte(`{"segments": [], "device_traces": [[5]]}`), "device_traces[0]: [0]: trace event is a number, not a dict"},
		{"json traces not lists", []byte(`{"segments": [], "device_traces": [5]}`), "device_traces[0] is not a list of events"},
		{"json event without action", []byte(`{"segments": [], "device_traces": [[{"addr": 1}]]}`), "device_traces[0]: [0]: event has no action string"},
	}
	dir := t.TempDir()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_"))
			if err := os.WriteFile(path, c.data, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := File(context.Background(), path, Options{})
			if err == nil {
				t.Fatalf("loaded without error")
			}
			var le *Error
			if !errors.As(err, &le) || le.File != path {
				t.Fatalf("error %q does not name the file", err)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, path+": ") || !strings.Contains(msg, c.want) || strings.Contains(msg, "\n") {
				t.Fatalf("error %q, want one line containing %q", msg, c.want)
			}
		})
	}
}

// TestHugeLengthMemoryBounded: a declared 2 GiB string in a tiny file costs about the file's
// size, not the declared length.
func TestHugeLengthMemoryBounded(t *testing.T) {
	data := []byte("\x80\x04X" + u32(0x7ffffff0) + strings.Repeat("a", 3<<20))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := Reader(context.Background(), bytes.NewReader(data), "huge", int64(len(data)), Options{})
	runtime.ReadMemStats(&after)
	if err == nil {
		t.Fatal("want an error")
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
		t.Fatalf("allocated %d bytes for a %d-byte file", grew, len(data))
	}
}

func TestMinimalForms(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		data []byte
		list bool
	}{
		{"pickle", minimal, false},
		{"gzip pickle", gz(minimal), false},
		{"trailing NULs", append(append([]byte{}, minimal...), make([]byte, 100)...), false},
		{"segment list", p4("]"), true},
		{"protocol 2 type tag", []byte("\x80\x02ctorch.jit._pickle\nrestore_type_tag\nq\x00}q\x01(X\x08\x00\x00\x00segmentsq\x02]q\x03uX\x04\x00\x00\x00dictq\x04\x86q\x05R."), false},
		{"json", []byte(" \n{\"segments\": [], \"device_traces\": [[]]}"), false},
		{"gzip json", gz([]byte(`[]`)), true},
	} {
		s, err := Reader(ctx, bytes.NewReader(c.data), c.name, 0, Options{})
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if s.Format.TopLevelList != c.list || len(s.Segments) != 0 {
			t.Errorf("%s: format %+v, %d segments", c.name, s.Format, len(s.Segments))
		}
	}
}

// TestNewestEventFields: the newest PyTorch's optional event fields are kept, on the fast path
// and on the JSON path alike.
func TestNewestEventFields(t *testing.T) {
	event := p4("}(", sstr("segments"), "]", sstr("device_traces"), "]]}(",
		sstr("action"), sstr("alloc"), sstr("addr"), "K\x00", sstr("size"), "M\x00\x02", sstr("stream"), "K\x00",
		sstr("pool_id"), "K\x01K\x02\x86", sstr("forward_frames"), "](", sstr("model.py:3 fwd"), sstr("train.py:9 step"), "e",
		sstr("category"), sstr("activation"), sstr("internal_metadata"), sstr("x"), sstr("user_metadata"), sstr("u"),
		sstr("compile_context"), sstr("N/A"), "uaau")
	js := []byte(`{"segments": [], "device_traces": [[{"action": "alloc", "addr": 0, "size": 512, "stream": 0,
		"pool_id": [1, 2], "forward_frames": ["model.py:3 fwd", "train.py:9 step"], "category": "activation",
		"internal_metadata": "x", "user_metadata": "u", "compile_context": "N/A"}]]}`)
	want := snapshot.EventExtra{CompileContext: "N/A", UserMetadata: "u", PoolID: snapshot.PoolID{1, 2},
		ForwardFrames: "model.py:3 fwd\ntrain.py:9 step", Category: "activation", InternalMetadata: "x"}
	for name, data := range map[string][]byte{"pickle": event, "json": js} {
		s, err := Reader(context.Background(), bytes.NewReader(data), name, 0, Options{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(s.DeviceTraces) != 1 || len(s.DeviceTraces[0]) != 1 {
			t.Fatalf("%s: traces %+v", name, s.DeviceTraces)
		}
		e := s.DeviceTraces[0][0]
		if got := s.EventExtras[e.Extra.Index()]; got != want || e.Size != 512 || e.Action != snapshot.ActionAlloc {
			t.Errorf("%s: event %+v extra %+v, want %+v", name, e, got, want)
		}
	}
}

// TestImpossibleValues: values no snapshot can hold are refused with the place they are at.
func TestImpossibleValues(t *testing.T) {
	seg := func(fields string) []byte {
		return []byte(`{"segments": [{"device": 0, "address": 4096, "total_size": 1024, "stream": 0, ` + fields + `}]}`)
	}
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"negative device", []byte(`{"segments": [{"device": -3, "address": 0, "total_size": 0, "blocks": []}]}`), "segments[0]: device -3 is not a CUDA device index"},
		{"negative total", []byte(`{"segments": [{"device": 0, "address": 0, "total_size": -5, "blocks": []}]}`), "segments[0]: total_size -5 is not a possible segment size"},
		{"negative block", seg(`"blocks": [{"size": -5, "requested_size": 0, "state": "inactive"}]`), "segments[0]: blocks[0]: size -5 / requested_size 0 are not possible sizes"},
		{"blocks overflow", seg(`"blocks": [{"size": 1024, "state": "inactive"}, {"size": 4611686018427387904, "state": "inactive"}]`), "segments[0]: blocks[1]: size 4611686018427387904"},
		{"blocks exceed total", seg(`"blocks": [{"size": 1024, "state": "inactive"}, {"size": 512, "state": "inactive"}]`), "segments[0]: blocks[1]: the blocks add up to more than the segment's total_size 1024"},
	} {
		_, err := Reader(context.Background(), bytes.NewReader(c.data), c.name, 0, Options{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want %q", c.name, err, c.want)
		}
	}
}

func TestDirDuplicateRanks(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"step5_rank0.pickle", "step50_rank0.pickle"} {
		if err := os.WriteFile(filepath.Join(dir, name), minimal, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, err := Dir(context.Background(), dir, Options{})
	if err == nil || !strings.Contains(err.Error(), "step50_rank0.pickle and step5_rank0.pickle both claim rank 0") {
		t.Fatalf("err %v", err)
	}
}

// TestEventExtrasBoundJSON: a JSON trace with more distinct combinations of the events'
// optional strings than an event's index holds is refused, naming the event; one fewer loads.
func TestEventExtrasBoundJSON(t *testing.T) {
	defer func(n int) { maxEventExtras = n }(maxEventExtras)
	maxEventExtras = 3 // none and two more
	js := func(ccs ...string) []byte {
		var evs []string
		for _, cc := range ccs {
			evs = append(evs, `{"action": "alloc", "addr": 0, "size": 512, "stream": 0, "compile_context": "`+cc+`"}`)
		}
		return []byte(`{"segments": [], "device_traces": [[` + strings.Join(evs, ", ") + `]]}`)
	}
	s, err := Reader(context.Background(), bytes.NewReader(js("a", "b", "a")), "ok.json", 0, Options{})
	if err != nil || len(s.EventExtras) != 3 || s.EventExtras[s.DeviceTraces[0][1].Extra.Index()].CompileContext != "b" {
		t.Fatalf("two contexts: %v", err)
	}
	_, err = Reader(context.Background(), bytes.NewReader(js("a", "b", "c")), "over.json", 0, Options{})
	if err == nil || !strings.Contains(err.Error(), "device_traces[0]: [2]: more than 2 distinct combinations") {
		t.Fatalf("three contexts: error %v, want the bound's at event 2", err)
	}
}
