package writer

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// pySrc renders a value tree as a Python expression that builds the same objects with the same
// identities: fresh strings are built at run time (so they are distinct objects), *List/*Dict/
// *Tuple/*Str are created once and referred to through _o afterwards.
type pySrc struct {
	ids map[any]int
}

func (p *pySrc) expr(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case bool:
		if x {
			return "True"
		}
		return "False"
	case int:
		return strconv.Itoa(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case uint64:
		return strconv.FormatUint(x, 10)
	case *big.Int:
		return x.String()
	case float64:
		return fmt.Sprintf("float.fromhex(%q)", strconv.FormatFloat(x, 'x', -1, 64))
	case string:
		return fmt.Sprintf("_s(%s)", strconv.QuoteToASCII(x))
	case Interned:
		return fmt.Sprintf("sys.intern(_s(%s))", strconv.QuoteToASCII(string(x)))
	}
	if id, ok := p.ids[v]; ok {
		return fmt.Sprintf("_o[%d]", id)
	}
	id := len(p.ids)
	p.ids[v] = id
	var b strings.Builder
	switch x := v.(type) {
	case *Str:
		b.WriteString(fmt.Sprintf("_s(%s)", strconv.QuoteToASCII(x.S)))
	case *List:
		b.WriteString("[")
		for _, it := range x.Items {
			b.WriteString(p.expr(it) + ", ")
		}
		b.WriteString("]")
	case *Tuple:
		b.WriteString("(")
		for _, it := range x.Items {
			b.WriteString(p.expr(it) + ", ")
		}
		b.WriteString(")")
	case *Dict:
		b.WriteString("{")
		for _, it := range x.Items {
			b.WriteString(p.expr(it.Key) + ": " + p.expr(it.Value) + ", ")
		}
		b.WriteString("}")
	default:
		panic(fmt.Sprintf("pySrc: %T", v))
	}
	return fmt.Sprintf("_m(%d, %s)", id, b.String())
}

func needPython(t *testing.T) string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not available: byte-for-byte comparison with CPython's pickler skipped")
	}
	return py
}

// cpythonDumps returns pickle.dumps(v, proto) for each value and protocol, as CPython writes
// it (one Python process for all of them).
func cpythonDumps(t *testing.T, py string, vs []any, protos []int) []map[int][]byte {
	t.Helper()
	var script strings.Builder
	script.WriteString(`import pickle, sys
def _m(i, x):
    _o[i] = x
    return x
def _s(x):
    return x if len(x) < 2 else ''.join(list(x))
vs = []
`)
	for _, v := range vs {
		src := (&pySrc{ids: map[any]int{}}).expr(v)
		script.WriteString("_o = {}\nvs.append(" + src + ")\n")
	}
	script.WriteString(`for v in vs:
    for p in sys.argv[1:]:
        print(pickle.dumps(v, int(p)).hex())
`)
	path := filepath.Join(t.TempDir(), "dump.py")
	if err := os.WriteFile(path, []byte(script.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{path}
	for _, p := range protos {
		args = append(args, strconv.Itoa(p))
	}
	out, err := exec.Command(py, args...).Output()
	if err != nil {
		t.Fatalf("python: %v", err)
	}
	lines := strings.Fields(string(out))
	if len(lines) != len(protos)*len(vs) {
		t.Fatalf("python printed %d lines, want %d", len(lines), len(protos)*len(vs))
	}
	res := make([]map[int][]byte, len(vs))
	for i := range vs {
		res[i] = map[int][]byte{}
		for j, p := range protos {
			b, err := hex.DecodeString(lines[i*len(protos)+j])
			if err != nil {
				t.Fatal(err)
			}
			res[i][p] = b
		}
	}
	return res
}

func strs(n int, f func(i int) string) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = f(i)
	}
	return out
}

func dictOf(n int) *Dict {
	d := &Dict{}
	for i := range n {
		d.Items = append(d.Items, Item{Key: i, Value: i * 3})
	}
	return d
}

func TestValueMatchesCPythonBytes(t *testing.T) {
	py := needPython(t)
	shared := &List{Items: []any{1, "two"}}
	sharedTuple := &Tuple{Items: []any{7, 8}}
	sharedStr := &Str{S: "shared string"}
	two64 := new(big.Int).Lsh(big.NewInt(1), 100)
	neg := new(big.Int).Neg(two64)
	huge := new(big.Int).Lsh(big.NewInt(1), 3000)
	many := strs(300, func(i int) string { return fmt.Sprintf("s%03d", i) })
	manyStrs := make([]any, 300)
	for i := range manyStrs {
		manyStrs[i] = &Str{S: fmt.Sprintf("t%03d", i)}
	}
	refs := append(append([]any{}, manyStrs...), manyStrs[0], manyStrs[299], manyStrs[255], manyStrs[256])
	cases := []struct {
		name string
		v    any
	}{
		{"scalars", &List{Items: []any{nil, true, false, 0, 1, 255, 256, 65535, 65536, -1, -128, -129,
			int64(math.MaxInt32), int64(math.MaxInt32) + 1, int64(math.MinInt32), int64(math.MinInt32) - 1,
			int64(math.MaxInt64), int64(math.MinInt64), uint64(math.MaxUint64), uint64(1) << 63,
			two64, neg, 1.5, math.Copysign(0, -1), 1e300, math.Inf(1)}}},
		{"strings", &List{Items: []any{"", "a", "é", "ab", "ab", "h\u00e9llo \u2713 \U0001F600", strings.Repeat("x", 255), strings.Repeat("y", 256), Interned("key"), Interned("key")}}},
		{"single", "just a string"},
		{"huge int", huge},
		{"shared objects", &List{Items: []any{shared, shared, &Dict{Items: []Item{{Interned("k"), shared}, {Interned("t"), sharedTuple}}}, sharedTuple, sharedStr, sharedStr}}},
		{"tuples", &List{Items: []any{&Tuple{}, &Tuple{}, &Tuple{Items: []any{1}}, &Tuple{Items: []any{1, 2}}, &Tuple{Items: []any{1, 2, 3}}, &Tuple{Items: []any{1, 2, 3, 4}}}}},
		{"one-item containers", &List{Items: []any{&List{Items: []any{1}}, &Dict{Items: []Item{{"a", 1}}}, &List{}, &Dict{}}}},
		{"dict 2", dictOf(2)},
		{"dict 1000", dictOf(1000)},
		{"dict 1001", dictOf(1001)},
		{"dict 2500", dictOf(2500)},
		{"list 1000", &List{Items: strs(1000, func(i int) string { return "v" + strconv.Itoa(i) })}},
		{"list 2001", &List{Items: strs(2001, func(i int) string { return "w" + strconv.Itoa(i) })}},
		{"memo beyond 256", &List{Items: append(many, refs...)}},
		{"frames", &List{Items: strs(3000, func(i int) string { return strings.Repeat("f", 40) + strconv.Itoa(i) })}},
		{"large string bypasses frames", &List{Items: []any{"ab", strings.Repeat("z", 70000), "cd", strings.Repeat("q", 65535), strings.Repeat("r", 65536), "ef"}}},
		{"nested frame boundary", &List{Items: []any{&List{Items: []any{strings.Repeat("a", 30000), strings.Repeat("b", 36000)}}, "c"}}},
	}
	protos := []int{2, 3, 4, 5}
	var vs []any
	for _, tc := range cases {
		vs = append(vs, tc.v)
	}
	wants := cpythonDumps(t, py, vs, protos)
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want := wants[i]
			for _, p := range protos {
				got, err := Dumps(tc.v, Config{Protocol: p})
				if err != nil {
					t.Fatalf("protocol %d: %v", p, err)
				}
				if !bytes.Equal(got, want[p]) {
					i := 0
					for i < len(got) && i < len(want[p]) && got[i] == want[p][i] {
						i++
					}
					t.Errorf("protocol %d: %d bytes, CPython %d; first difference at byte %d", p, len(got), len(want[p]), i)
				}
			}
		})
	}
}

func TestCppWriterOpcodes(t *testing.T) {
	shared := &List{Items: []any{1}}
	v := &Dict{Items: []Item{
		{"k", "v"},
		{"k", shared},
		{"n", int64(-1)},
		{"big", int64(1) << 40},
		{"u", uint64(math.MaxUint64)},
		{"s", shared},
	}}
	got, err := Dumps(v, Config{Protocol: 2, Cpp: true, TypeTag: true})
	if err != nil {
		t.Fatal(err)
	}
	var want []byte
	add := func(b ...byte) { want = append(want, b...) }
	addS := func(s string) { add(OpBinUnicode, byte(len(s)), 0, 0, 0); add([]byte(s)...) }
	add(OpProto, 2)
	add(OpGlobal)
	add([]byte("torch.jit._pickle\nrestore_type_tag\n")...)
	add(OpBinPut, 0, OpEmptyDict, OpMark)
	addS("k")
	add(OpBinPut, 1)
	addS("v")
	add(OpBinPut, 2)
	add(OpBinGet, 1) // "k" memoised by value
	add(OpBinGet, 0, OpEmptyList, OpMark, OpBinInt1, 1, OpAppends)
	addS("List[Any]")
	add(OpBinPut, 3, OpTuple2, OpReduce, OpBinPut, 4) // shared list memoised after it is built
	addS("n")
	add(OpBinPut, 5, OpBinInt, 0xff, 0xff, 0xff, 0xff)
	addS("big")
	add(OpBinPut, 6, OpLong1, 8, 0, 0, 0, 0, 0, 1, 0, 0)
	addS("u")
	add(OpBinPut, 7, OpBinInt, 0xff, 0xff, 0xff, 0xff) // 2^64-1 wraps to int64 -1
	addS("s")
	add(OpBinPut, 8, OpBinGet, 4, OpSetItems)
	addS("Dict[Any, Any]")
	add(OpBinPut, 9, OpTuple2, OpReduce, OpBinPut, 10, OpStop) // a *Dict has a handle: memoised too
	if !bytes.Equal(got, want) {
		t.Errorf("C++ writer bytes\n got %x\nwant %x", got, want)
	}
}

func TestWriterErrors(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		body func(w *Writer)
		want string
	}{
		{"protocol 1", Config{Protocol: 1}, func(w *Writer) { w.None() }, "protocol 1 not supported"},
		{"cpp protocol 4", Config{Protocol: 4, Cpp: true}, func(w *Writer) { w.None() }, "writes protocol 2"},
		{"too many items", Config{}, func(w *Writer) {
			w.StartList(nil, 1)
			w.Int(1)
			w.Next()
			w.Int(2)
			w.Next()
			w.EndList()
		}, "declared with 1 items got more"},
		{"too few items", Config{}, func(w *Writer) { w.StartList(nil, 2); w.Int(1); w.Next(); w.EndList() }, "declared with 2 items got 1"},
		{"unbalanced", Config{}, func(w *Writer) { w.StartList(nil, 0); w.EndDict() }, "without matching Start"},
		{"left open", Config{}, func(w *Writer) { w.StartDict(nil, 0) }, "still open"},
		{"next outside", Config{}, func(w *Writer) { w.Next() }, "no open container"},
		{"big int cpp", Config{Protocol: 2, Cpp: true}, func(w *Writer) { w.BigInt(new(big.Int).Lsh(big.NewInt(1), 70)) }, "beyond int64"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			w := NewWriter(&buf, tc.cfg)
			w.Begin()
			tc.body(w)
			err := w.Finish()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	if _, err := Dumps(struct{}{}, Config{}); err == nil || !strings.Contains(err.Error(), "unsupported value type") {
		t.Fatalf("Dumps(struct{}{}) error %v", err)
	}
}

func TestRawOps(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf, Config{Protocol: 2})
	w.Begin()
	w.Raw(OpGlobal)
	w.Raw([]byte("os\nsystem\n")...)
	w.StartTuple(nil, 1)
	w.Str("echo hi")
	w.Next()
	w.EndTuple()
	w.Raw(OpReduce)
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	want := "\x80\x02cos\nsystem\nX\x07\x00\x00\x00echo hiq\x00\x85q\x01R."
	if buf.String() != want {
		t.Errorf("raw pickle %q, want %q", buf.String(), want)
	}
}

func TestPyFloatRepr(t *testing.T) {
	cases := map[float64]string{0: "0.0", 1: "1.0", 0.5: "0.5", 1e16: "1e+16", 1.5e-5: "1.5e-05",
		0.0001: "0.0001", 123456789012345.0: "123456789012345.0", math.NaN(): "NaN", -2.5: "-2.5"}
	for f, want := range cases {
		if got := pyFloatRepr(f); got != want {
			t.Errorf("pyFloatRepr(%v) = %q, want %q", f, got, want)
		}
	}
}

// TestAppendIntLong1: LONG1's length counted from the value's bits is the length trimTwos
// gives, around every byte boundary of both signs and on random values.
func TestAppendIntLong1(t *testing.T) {
	want := func(v int64) []byte {
		var le [8]byte
		binary.LittleEndian.PutUint64(le[:], uint64(v))
		tr := trimTwos(le[:])
		return append([]byte{OpLong1, byte(len(tr))}, tr...)
	}
	var vs []int64
	for k := 31; k < 63; k++ {
		for _, d := range []int64{-1, 0, 1} {
			vs = append(vs, int64(1)<<k+d, -(int64(1)<<k)+d)
		}
	}
	vs = append(vs, math.MaxInt64, math.MinInt64, math.MinInt64+1, math.MaxInt32+1, math.MinInt32-1)
	r := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		vs = append(vs, int64(r.Uint64())>>r.IntN(64))
	}
	for _, v := range vs {
		if v >= math.MinInt32 && v <= math.MaxInt32 {
			continue // BININT and shorter
		}
		got := appendInt([]byte{0xAA}, v)
		if got[0] != 0xAA || !bytes.Equal(got[1:], want(v)) {
			t.Fatalf("appendInt(%d) = % x, want aa % x", v, got, want(v))
		}
	}
}
