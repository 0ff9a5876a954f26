package load

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/memsnap/memsnap/analysis/pickle"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// Bounds a load is held to: heap allocated (garbage included) per byte of pickle read,
// decompressed, plus a constant. See the pickle package's bounds for the worst cases.
const (
	loadAllocPerByte = 128
	loadAllocSlack   = 64 << 20
)

// loadMeasured loads data (as a file when path is set) and returns the snapshot, the bytes
// allocated meanwhile, the time it took and the error.
func loadMeasured(t testing.TB, path string, data []byte, opt Options) (*snapshot.Snapshot, uint64, time.Duration, error) {
	t.Helper()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	var s *snapshot.Snapshot
	var err error
	if path != "" {
		s, err = File(context.Background(), path, opt)
	} else {
		s, err = Reader(context.Background(), bytes.NewReader(data), "test", int64(len(data)), opt)
	}
	elapsed := time.Since(start)
	runtime.ReadMemStats(&after)
	return s, after.TotalAlloc - before.TotalAlloc, elapsed, err
}

// gzBest compresses at the best ratio, as an attacker would.
func gzBest(b []byte) []byte {
	var buf bytes.Buffer
	w, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

func sharedTuples(head string) string {
	return head + strings.Repeat("2\x86", 24)
}

// TestIssue9Rows turns each input of the resource-exhaustion report into a test: the outcome
// (an exact error or a bounded load) and the memory and time it may cost.
func TestIssue9Rows(t *testing.T) {
	var binput strings.Builder
	binput.WriteString("\x80\x04N")
	for i, n := 0, uint32(0); i < 30000; i++ {
		binput.WriteString("r" + u32(n+4095))
		n += 4096
	}
	binput.WriteString(".")
	segment := func(size uint64) string {
		return "}\x94(" + sstr("device") + "K\x00" + sstr("address") + "K\x00" + sstr("total_size") + "\x8a\x08" + u64(size) +
			sstr("blocks") + "]u"
	}
	sharedSegments := func(size uint64, refs int) []byte {
		return p4("}", sstr("segments"), "]\x94(", segment(size), strings.Repeat("h\x01", refs), "es")
	}
	blocks := "]\x94(" + strings.Repeat("}("+sstr("size")+"K\x00"+sstr("state")+sstr("inactive")+"u", 1000) + "e"
	sharedBlocks := p4("}", sstr("segments"), "](}\x94(", sstr("device"), "K\x00", sstr("address"), "K\x00", sstr("total_size"), "K\x00",
		sstr("blocks"), blocks, "u", strings.Repeat("h\x00", 1000), "es")
	long4 := "\x8b" + u32(65536) + strings.Repeat("\x7f", 65536)
	emptyLists := append(append([]byte("\x80\x04"), bytes.Repeat([]byte("]"), 128<<20)...), '.')
	binbytes8 := append(append([]byte("\x80\x04\x8e"+u64(1<<31-1)), make([]byte, 64<<20)...), '.')

	cases := []struct {
		name     string
		data     []byte
		read     int64  // bytes of pickle the decoder may read (decompressed), for the bounds
		err      string // the exact message after "test: ", "" for a successful load
		maxAlloc uint64 // a tighter bound than the general one, when the row needs one
	}{
		{"dup fan-out", p4("}", sstr("segments"), "]s", sharedTuples(sstr("x")+"]"), "s"), 69, "", 4 << 20},
		{"memo fan-out", p4("}", sstr("segments"), "]s", sstr("x"), "]q\x000", strings.Repeat("h\x00h\x00\x86q\x000", 24), "h\x00s"), 200, "", 4 << 20},
		{"dup fan-out in allocator_settings", p4("}", sstr("segments"), "]s", sstr("allocator_settings"), "}", sharedTuples(sstr("x")+"]"), "ss"), 100,
			"allocator_settings: x: shared references repeat the same segments, blocks or events beyond the file's size (more than 65627 values): no snapshot does this", 64 << 20},
		{"far LONG_BINPUT", []byte(binput.String()), 150004, "not a memory snapshot: the file holds a None, not a dict with 'segments'", 16 << 20},
		{"gzip BINBYTES8 2^31-1", gzBest(binbytes8), 11,
			"string length 2147483647 is larger than any snapshot string (the limit is 16777216 bytes) (at byte 2)", 8 << 20},
		{"gzip 128 Mi EMPTY_LIST", gzBest(emptyLists), 200 << 10,
			"131071 values wait on the stack: more than one per 8 bytes read, which no snapshot needs (at byte 131073)", 32 << 20},
		{"shared LONG4", p4("}", sstr("segments"), "]s", sstr("x"), "](", long4, "\x94", strings.Repeat("h\x00", 999), "es"), 68000, "", 8 << 20},
		{"2M nested lists", nested(2000000), 200 << 10, "131071 values wait on the stack: more than one per 8 bytes read, which no snapshot needs (at byte 131073)", 32 << 20},
		{"memo-shared 2^50 segments", sharedSegments(1<<50, 8192), 17000, "segments[0]: total_size 1125899906842624 is not a possible segment size (0 to 256 TiB)", 8 << 20},
		{"memo-shared 2^48 segments", sharedSegments(1<<48, 8192), 17000, "segments[16]: the segments add up to more than 4 PiB, more device memory than any machine has", 8 << 20},
		{"memo-shared block list", sharedBlocks, 40000, "segments[94]: blocks: shared references repeat the same segments, blocks or events beyond the file's size (more than 95605 values): no snapshot does this", 8 << 20},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, alloc, elapsed, err := loadMeasured(t, "", c.data, Options{})
			switch {
			case c.err == "" && err != nil:
				t.Fatalf("error %v", err)
			case c.err != "" && (err == nil || err.Error() != "test: "+c.err):
				t.Fatalf("error %v, want %q", err, c.err)
			}
			if limit := min(c.maxAlloc, loadAllocPerByte*uint64(c.read)+loadAllocSlack); alloc > limit {
				t.Fatalf("allocated %d bytes (limit %d)", alloc, limit)
			}
			if elapsed > 10*time.Second {
				t.Fatalf("took %v", elapsed)
			}
			t.Logf("%d bytes in, allocated %d, %v", len(c.data), alloc, elapsed)
			if s != nil {
				if _, err := json.Marshal(s.Settings); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestSparseFile: a small snapshot extended to 20 GiB by a hole loads as the small one,
// reserving nothing from the file's size.
func TestSparseFile(t *testing.T) {
	src := "../../testdata/scenarios/summarize_basic.pickle"
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	want, err := File(context.Background(), src, Options{})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "sparse.pickle")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, 20<<30); err != nil {
		t.Skipf("cannot make a sparse file here: %v", err)
	}
	s, alloc, elapsed, err := loadMeasured(t, path, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if limit := uint64(loadAllocPerByte*len(data)) + loadAllocSlack; alloc > limit || elapsed > 10*time.Second {
		t.Fatalf("allocated %d bytes (limit %d) in %v", alloc, limit, elapsed)
	}
	s.Path = want.Path
	assertSameModel(t, "sparse", s, want)
}

// TestDecompressedLimit: gzip input may not decompress past the limit; the error says how to
// raise it, and raising it (or -1) loads the file.
func TestDecompressedLimit(t *testing.T) {
	big := p4("}", sstr("segments"), "]s", sstr("x"), "\x8d"+u64(8<<20)+strings.Repeat("a", 8<<20), "s")
	js := []byte(`{"segments": [], "x": "` + strings.Repeat("a", 8<<20) + `"}`)
	for name, data := range map[string][]byte{"pickle": gzBest(big), "json": gzBest(js)} {
		_, alloc, _, err := loadMeasured(t, "", data, Options{MaxDecompressed: 1 << 20})
		want := "test: decompresses to more than 1 MiB, the limit for gzip input (raise it with --max-decompressed BYTES, or -1 for none)"
		if err == nil || !strings.HasPrefix(err.Error(), want) || !errors.Is(err, ErrDecompressedLimit) {
			t.Errorf("%s: error %v, want %q", name, err, want)
		}
		if alloc > 16<<20 {
			t.Errorf("%s: allocated %d bytes", name, alloc)
		}
		for _, limit := range []int64{9 << 20, -1, 0} {
			if _, err := Reader(context.Background(), bytes.NewReader(data), "test", 0, Options{MaxDecompressed: limit}); err != nil {
				t.Errorf("%s: limit %d: %v", name, limit, err)
			}
		}
	}
}

// TestSettingsJSONSafe: NaN and infinities in allocator_settings come out JSON-safe.
func TestSettingsJSONSafe(t *testing.T) {
	nan := p4("}", sstr("segments"), "]s", sstr("allocator_settings"), "}(", sstr("garbage_collection_threshold"),
		"G\x7f\xf8\x00\x00\x00\x00\x00\x01", sstr("x"), "G\x7f\xf0\x00\x00\x00\x00\x00\x00", sstr("y"), "](G\xff\xf0\x00\x00\x00\x00\x00\x00e", "us")
	js := []byte(`{"segments": [], "allocator_settings": {"garbage_collection_threshold": 1e999, "x": -1e999, "y": 0.25}}`)
	for name, c := range map[string]struct {
		data []byte
		raw  string
	}{
		"pickle": {nan, `{"garbage_collection_threshold":"NaN","x":"Infinity","y":["-Infinity"]}`},
		"json":   {js, `{"garbage_collection_threshold":"1e999","x":"-1e999","y":0.25}`},
	} {
		s, err := Reader(context.Background(), bytes.NewReader(c.data), name, 0, Options{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out, err := json.Marshal(s.Settings)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		raw, _ := json.Marshal(s.Settings.Raw)
		if string(raw) != c.raw || s.Settings.GCThreshold != 0 {
			t.Errorf("%s: raw %s, threshold %v (settings %s)", name, raw, s.Settings.GCThreshold, out)
		}
	}
}

// TestImpossibleEventValues: trace values no allocator produces are refused, so no sum or
// difference over them can overflow.
func TestImpossibleEventValues(t *testing.T) {
	ev := func(fields string) []byte {
		return []byte(`{"segments": [], "device_traces": [[{"action": "alloc", "addr": 0, "stream": 0, ` + fields + `}]]}`)
	}
	for _, c := range []struct {
		data []byte
		want string
	}{
		{ev(`"size": -1`), "device_traces[0]: [0]: alloc size -1 is not a possible size (0 to 256 TiB)"},
		{ev(`"size": 281474976710657`), "device_traces[0]: [0]: alloc size 281474976710657 is not a possible size (0 to 256 TiB)"},
		{ev(`"size": 1, "time_us": -5`), "device_traces[0]: [0]: time_us -5 is not a time"},
		{[]byte(`{"segments": [], "device_traces": [[` + strings.Repeat(`{"action": "alloc", "size": 281474976710656}, `, 4096) +
			`{"action": "alloc", "size": 281474976710656}]]}`), "device_traces[0]: [4096]: the trace's event sizes add up to more than 1 EiB"},
		{[]byte(`{"segments": [{"device": 0, "address": 0, "total_size": 1024, "allocated_size": 2048, "blocks": []}]}`),
			"segments[0]: allocated_size 2048 is not within the segment's total_size 1024"},
		{[]byte(`{"segments": [{"device": 0, "address": 18446744073709551615, "total_size": 1024, "blocks": []}]}`),
			"segments[0]: a segment of 1024 bytes at address 0xffffffffffffffff passes the end of the address space"},
	} {
		_, err := Reader(context.Background(), bytes.NewReader(c.data), "test", 0, Options{})
		if err == nil || err.Error() != "test: "+c.want {
			t.Errorf("error %v, want %q", err, c.want)
		}
	}
	// An OOM's request failed: it may exceed any device.
	oom := []byte(`{"segments": [], "device_traces": [[{"action": "oom", "size": 1125899906842624, "device_free": 1024}]]}`)
	if _, err := Reader(context.Background(), bytes.NewReader(oom), "test", 0, Options{}); err != nil {
		t.Errorf("oom: %v", err)
	}
}

// TestProtocolsZeroToFour: CPython's protocols 0 to 4 of one snapshot load to the same model
// (testdata/gen_protocols.py writes them), and that model is gopickle's (protocols 1 to 4).
func TestProtocolsZeroToFour(t *testing.T) {
	var models []*snapshot.Snapshot
	for p := 0; p <= 4; p++ {
		path := filepath.Join("testdata", "protocols.p"+string(rune('0'+p))+".pickle")
		s, err := File(context.Background(), path, Options{})
		if err != nil {
			t.Fatalf("protocol %d: %v", p, err)
		}
		if s.Format.Protocol != p {
			t.Errorf("protocol %d read as %d", p, s.Format.Protocol)
		}
		if p > 0 { // gopickle misreads protocol 0's raw-unicode-escape: p0 is held to p4 below
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			assertSameModel(t, path, s, oracle(t, data))
		}
		models = append(models, s)
	}
	for p, s := range models {
		assertSameModel(t, "protocol "+string(rune('0'+p)), s, models[4])
	}
	s := models[0]
	if len(s.Segments) != 2 || len(s.DeviceTraces) != 2 || len(s.DeviceTraces[0]) != 4 || s.Segments[1].PoolID != (snapshot.PoolID{1, 7}) ||
		s.Settings.GCThreshold != 0.5 || len(s.Annotations) != 1 {
		t.Fatalf("protocol 0 model: %+v", s)
	}
	b := s.StackFrames(s.Segments[0].Blocks[0].Stack)
	if len(b) != 3 || b[1].Name != "step \u00e9\u4e2d\U0001f600" || b[1].Line != snapshot.LineUnknown || b[2].Name != "at::native::empty\nline two\\u0041 \x1a" {
		t.Fatalf("protocol 0 frames: %+v", b)
	}
}

// TestErrorsWrap: a load error keeps the decoder's error (and its offset) for errors.As.
func TestErrorsWrap(t *testing.T) {
	_, err := Reader(context.Background(), strings.NewReader("\x80\x02cos\nsystem\n."), "test", 0, Options{})
	var le *Error
	var pe *pickle.Error
	if !errors.As(err, &le) || !errors.As(err, &pe) || !errors.Is(err, pickle.ErrUnsafe) || le.Offset != 2 || pe.Offset != 2 ||
		err.Error() != "test: refusing unsafe global os.system: a snapshot holds only plain data (at byte 2)" {
		t.Fatalf("error %v", err)
	}
	_, err = Reader(context.Background(), bytes.NewReader(p4("\xff")), "test", 0, Options{})
	if !errors.Is(err, pickle.ErrCorrupt) || !errors.As(err, &le) || le.Offset != 2 {
		t.Fatalf("error %v", err)
	}
	_, err = File(context.Background(), filepath.Join(t.TempDir(), "absent"), Options{})
	if !errors.Is(err, os.ErrNotExist) || err.Error() != filepath.Join(t.TempDir(), "absent")+": no such file" && !strings.HasSuffix(err.Error(), "absent: no such file") {
		t.Fatalf("error %v", err)
	}
}
