package pickle

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"math/big"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// Bounds every decode is held to (see the package comment): heap allocated during a decode,
// garbage included, per byte read plus a constant, and at most one tree value per byte read.
// The worst inputs allocate about 80 bytes per byte (a list of a million NONEs: 16 bytes per
// item, doubled by growth, plus the tree's 16); a snapshot allocates less than one.
const (
	allocPerByte = 128
	allocSlack   = 64 << 20
	valueSlack   = 64
)

// decodeMeasured decodes data and returns the result, the decoder's counters, the bytes
// allocated on the heap meanwhile (the memo, outside the heap, is Stats.MemoBytes) and the error.
func decodeMeasured(t testing.TB, data []byte, opt Options) (*Result, Stats, uint64, error) {
	t.Helper()
	var st Stats
	opt.Stats = &st
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	res, err := Decode(context.Background(), bytes.NewReader(data), opt)
	runtime.ReadMemStats(&after)
	return res, st, after.TotalAlloc - before.TotalAlloc, err
}

// checkBounds fails when a decode allocated or produced more than its bytes allow.
func checkBounds(t testing.TB, st Stats, alloc uint64) {
	t.Helper()
	if limit := allocPerByte*uint64(st.Bytes) + allocSlack; alloc > limit {
		t.Fatalf("allocated %d bytes for %d bytes read (limit %d)", alloc, st.Bytes, limit)
	}
	if st.MemoBytes > 16*st.Bytes+4<<20 {
		t.Fatalf("memo of %d bytes for %d bytes read", st.MemoBytes, st.Bytes)
	}
	if st.Values > st.Bytes+valueSlack {
		t.Fatalf("%d values from %d bytes read", st.Values, st.Bytes)
	}
}

func u32(n uint32) string { return string(binary.LittleEndian.AppendUint32(nil, n)) }
func u64(n uint64) string { return string(binary.LittleEndian.AppendUint64(nil, n)) }

// TestIssueRows: the inputs of the resource-exhaustion report, each decoded within the bounds
// with the outcome stated (an exact error, or a bounded result).
func TestIssueRows(t *testing.T) {
	long4 := "\x8b" + u32(65536) + strings.Repeat("\x7f", 65536)
	var binput strings.Builder
	binput.WriteString("\x80\x04N")
	for i, n := 0, uint32(0); i < 30000; i++ {
		binput.WriteString("r" + u32(n+4095))
		n += 4096
	}
	binput.WriteString(".")
	for _, c := range []struct {
		name string
		data string
		err  string // the exact error, "" for success
	}{
		// 69 bytes whose DUP/TUPLE2 fan-out expands to 2^24 leaves: converted once per tuple.
		{"dup fan-out", "\x80\x04}\x8c\x08segments]s\x8c\x01x]" + strings.Repeat("2\x86", 24) + "s.", ""},
		{"memo fan-out", "\x80\x04}\x8c\x08segments]s\x8c\x01x]q\x000" + strings.Repeat("h\x00h\x00\x86q\x000", 24) + "h\x00s.", ""},
		// 150 KB of LONG_BINPUT at memo.n + 4095: the memo grows by a slot per byte at most.
		{"far LONG_BINPUT", binput.String(), ""},
		// a declared 2 GiB BINBYTES8: refused before anything is read.
		{"BINBYTES8 2^31-1", "\x80\x04\x8e" + u64(1<<31-1) + strings.Repeat("\x00", 1<<16) + ".",
			"string length 2147483647 is larger than any snapshot string (the limit is 16777216 bytes) (at byte 2)"},
		// a million EMPTY_LISTs: refused once the stack outgrows the bytes read.
		{"EMPTY_LIST run", "\x80\x04" + strings.Repeat("]", 1<<20) + ".",
			"131072 values wait on the stack: more than one per 8 bytes read, which no snapshot needs (at byte 131074)"},
		// a 64 KiB integer named 1,000 times: converted once.
		{"shared LONG4", "\x80\x04](" + long4 + "\x94" + strings.Repeat("h\x00", 999) + "e.", ""},
		// 2,000,000 nested EMPTY_LIST/APPEND: refused by the stack bound before any nesting.
		{"2M nested lists", "\x80\x04" + strings.Repeat("]", 2000000) + strings.Repeat("a", 1999999) + ".",
			"131072 values wait on the stack: more than one per 8 bytes read, which no snapshot needs (at byte 131074)"},
		// nesting within the stack bound: refused as it is built.
		{"300 nested lists", "\x80\x04" + strings.Repeat("]", 300) + strings.Repeat("a", 299) + ".",
			"values nested more than 256 deep (at byte 557)"},
		{"a list holding itself", "\x80\x04]\x94h\x00a.", "a list contains itself: a snapshot holds no cycles (at byte 8)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			res, st, alloc, err := decodeMeasured(t, []byte(c.data), Options{})
			if c.err == "" && err != nil {
				t.Fatalf("error %v", err)
			}
			if c.err != "" && (err == nil || err.Error() != c.err) {
				t.Fatalf("error %v, want %q", err, c.err)
			}
			checkBounds(t, st, alloc)
			if elapsed := time.Since(start); elapsed > 5*time.Second {
				t.Fatalf("took %v", elapsed)
			}
			t.Logf("%d bytes read, %d allocated, %d memo bytes, %d values", st.Bytes, alloc, st.MemoBytes, st.Values)
			if c.name == "shared LONG4" {
				items := res.Root.([]any)
				if len(items) != 1000 || items[0].(*big.Int) != items[999].(*big.Int) || st.Values > 1002 {
					t.Fatalf("%d items, %d values: the integer is not shared", len(items), st.Values)
				}
			}
		})
	}
}

// TestSharedContainersConvertOnce: every reference to a shared container gets the same Go
// value, so the tree is a DAG no larger than the pickle.
func TestSharedContainersConvertOnce(t *testing.T) {
	data := []byte("\x80\x04]" + strings.Repeat("2\x86", 40) + ".")
	res, st, alloc, err := decodeMeasured(t, data, Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkBounds(t, st, alloc)
	v := res.Root
	for depth := 0; depth < 40; depth++ {
		pair := v.([]any)
		a, b := pair[0].([]any), pair[1].([]any)
		if unsafe.SliceData(a) != unsafe.SliceData(b) {
			t.Fatalf("depth %d: the two references are different values", depth)
		}
		v = a
	}
	if st.Values > 42 {
		t.Fatalf("%d values for 41 containers", st.Values)
	}
}

// TestHostilePatternsBounded: runs of the cheapest opcodes that build something, each held
// to the bounds (they end in an error or in a large but proportionate tree).
func TestHostilePatternsBounded(t *testing.T) {
	const n = 1 << 20
	rep := func(s string) string { return strings.Repeat(s, n/len(s)) }
	batches := func(item string) string {
		b := strings.Repeat(item, 3000/len(item))
		return "](" + b + strings.Repeat("e("+b, n/len(b)) + "e"
	}
	for name, body := range map[string]string{
		"EMPTY_LIST":             rep("]"),
		"MARK NONE":              "(" + rep("N"),
		"EMPTY_LIST MEMOIZE":     rep("]\x94"),
		"EMPTY_LIST MEMOIZE POP": "N" + rep("]\x940"),
		"MEMOIZE":                "N" + rep("\x94"),
		"MEMOIZE of a float":     "G\xc0" + strings.Repeat("\x00", 7) + rep("\x94"), // -2.0: a value the memo's slots cannot pack
		"BINPUT of a float":      "G\xc0" + strings.Repeat("\x00", 7) + "\x94" + rep("q\x00"),
		"BINPUT of an int":       "J\xff\xff\xff\xff" + rep("q\x00q\x01"),
		"NONE items":             batches("N"),
		"int items":              batches("K\x00"),
		"string items":           batches("\x8c\x00"),
		"empty list items":       batches("]"),
		"empty dict items":       batches("}"),
		"memoized list items":    batches("]\x94"),
		"TUPLE1 items":           batches("N\x85"),
		"DUP TUPLE2 items":       batches("]2\x86"),
		"big int items":          batches("\x8a\x0a" + strings.Repeat("\x01", 10)),
		"dict items":             "}(" + rep("\x8c\x00N") + "u",
		"memo key items":         "\x8c\x00\x940}(" + rep("h\x00N") + "u",
		"event refs":             "]}(\x8c\x06action\x8c\x05alloc\x8c\x04size\x4b\x10u\x94a" + rep("h\x00a"),
		"far BINPUTs":            "N" + rep("r\xff\xff\xff\x7f"),
		"GET text":               "Np0\n" + rep("g0\n0"),
	} {
		t.Run(name, func(t *testing.T) {
			_, st, alloc, err := decodeMeasured(t, []byte("\x80\x04"+body+"."), Options{})
			checkBounds(t, st, alloc)
			t.Logf("%d bytes read, %.1f allocated per byte, %d memo bytes, %d values, error %v", st.Bytes, float64(alloc)/float64(st.Bytes), st.MemoBytes, st.Values, err)
		})
	}
}

// TestErrorClasses: every error is an *Error wrapping the class of failure.
func TestErrorClasses(t *testing.T) {
	for _, c := range []struct {
		data  string
		class error
		msg   string
	}{
		{"\x80\x02cos\nsystem\n.", ErrUnsafe, "refusing unsafe global os.system: a snapshot holds only plain data (at byte 2)"},
		{"(ios\nsystem\n.", ErrUnsafe, "refusing unsafe global os.system (INST): a snapshot holds only plain data (at byte 1)"},
		{"\x80\x02NN)R.", ErrUnsafe, "REDUCE of something that is not restore_type_tag: refusing to call it (at byte 5)"},
		{"\x80\x02N)\x81.", ErrUnsafe, "NEWOBJ builds a Python object: refusing it, a snapshot holds only plain data (at byte 4)"},
		{"\x80\x02NQ.", ErrUnsafe, "BINPERSID refers to an object outside the pickle: refusing it, a snapshot holds only plain data (at byte 3)"},
		{"\x80\x04\x8f.", ErrCorrupt, "unsupported opcode EMPTY_SET (0x8f): a snapshot holds only dicts, lists, tuples, strings and numbers (at byte 2)"},
		{"\x80\x04\xff", ErrCorrupt, "unsupported or invalid opcode 0xff (at byte 2)"},
		{"\x80\x04\x8b" + u32(1<<20), ErrLimit, "integer of 1048576 bytes is larger than any snapshot value (at byte 2)"},
		{"I" + strings.Repeat("1", 5000) + "\n.", ErrLimit, "INT argument longer than 4096 bytes (at byte 0)"},
		{"Sabc\n.", ErrCorrupt, "STRING: the string is not quoted (at byte 0)"},
	} {
		_, err := Decode(context.Background(), strings.NewReader(c.data), Options{})
		var pe *Error
		if !errors.As(err, &pe) || !errors.Is(err, c.class) || err.Error() != c.msg {
			t.Errorf("%q: error %v, want %q (%v)", c.data, err, c.msg, c.class)
		}
	}
}

// TestReadErrorsWrapped: an error of the input (not its end) is reported as such.
func TestReadErrorsWrapped(t *testing.T) {
	boom := errors.New("boom")
	_, err := Decode(context.Background(), &failingReader{data: []byte("\x80\x04](K\x01"), err: boom}, Options{})
	if !errors.Is(err, boom) || err.Error() != "boom (at byte 6)" {
		t.Fatalf("error %v", err)
	}
}

type failingReader struct {
	data []byte
	err  error
}

func (r *failingReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, r.err
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

// TestProtocol0Values: the text opcodes of protocols 0 and 1 (CPython's and Python 2's).
func TestProtocol0Values(t *testing.T) {
	data := "(lp0\nI01\naI00\naI-7\naL18446744073709551615L\naL-99999999999999999999999L\naF0.5\naFnan\naFinf\naF-inf\na" +
		"S'it\\'s \\x41\\101\\n'\naS\"q\"\naV\\u00e9\\u005c\\\\u0041\\U0001f600\xe9\na" +
		"U\x03abcaT\x02\x00\x00\x00hia(I1\nI2\ntp1\nag1\na(da."
	res, err := Decode(context.Background(), strings.NewReader(data), Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := res.Root.([]any)
	big1, _ := new(big.Int).SetString("-99999999999999999999999", 10)
	want := []any{true, false, int64(-7), uint64(math.MaxUint64), big1, 0.5, math.NaN(), math.Inf(1), math.Inf(-1),
		"it's AA\n", "q", "é\\\\\\u0041😀é", "abc", "hi", []any{int64(1), int64(2)}, []any{int64(1), int64(2)}, map[string]any{}}
	if len(got) != len(want) {
		t.Fatalf("got %d values %v", len(got), got)
	}
	for i := range want {
		switch w := want[i].(type) {
		case float64:
			g, ok := got[i].(float64)
			if !ok || (math.IsNaN(w) != math.IsNaN(g)) || (!math.IsNaN(w) && g != w) {
				t.Errorf("[%d] = %v, want %v", i, got[i], w)
			}
		case *big.Int:
			if g, ok := got[i].(*big.Int); !ok || g.Cmp(w) != 0 {
				t.Errorf("[%d] = %v, want %v", i, got[i], w)
			}
		case []any:
			if g, ok := got[i].([]any); !ok || len(g) != 2 || g[0] != w[0] || g[1] != w[1] {
				t.Errorf("[%d] = %#v, want %#v", i, got[i], w)
			}
		case map[string]any:
			if g, ok := got[i].(map[string]any); !ok || len(g) != 0 {
				t.Errorf("[%d] = %#v, want {}", i, got[i])
			}
		default:
			if got[i] != w {
				t.Errorf("[%d] = %#v, want %#v", i, got[i], w)
			}
		}
	}
	if res.Protocol != 0 {
		t.Errorf("protocol %d, want 0", res.Protocol)
	}
}
