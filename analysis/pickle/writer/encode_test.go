package writer

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis/snapshot"
	"github.com/nlpodyssey/gopickle/pickle"
	"github.com/nlpodyssey/gopickle/types"
)

const (
	a0 = uint64(139637976727552)
	a1 = a0 + 1048576
	b0 = uint64(139706696204288)
)

// testSnapshot is a small snapshot touching every field Encode writes; testdata/want_*.json hold
// what PyTorch's file for it decodes to (json.dumps of the unpickled object).
func testSnapshot() *snapshot.Snapshot {
	in := snapshot.NewInterner()
	f0 := in.Frame(snapshot.Frame{Filename: "train.py", Line: 10, Name: "step"})
	f1 := in.Frame(snapshot.Frame{Filename: "??", Line: 0, Name: "c10::cuda::CUDACachingAllocator::malloc"})
	f2 := in.Frame(snapshot.Frame{Filename: "model.py", Line: snapshot.LineUnknown, Name: "forward"})
	f3 := in.Frame(snapshot.Frame{Filename: `C:\work\x.py`, Line: 5, Name: "main"})
	f4 := in.Frame(snapshot.Frame{Filename: "", Line: 0, Name: "unicodé ✓"})
	s1 := in.Stack([]snapshot.FrameID{f1, f2, f0})
	s2 := in.Stack([]snapshot.FrameID{f1, f3})
	s3 := in.Stack([]snapshot.FrameID{f4})
	return &snapshot.Snapshot{
		Frames: in.Frames,
		Stacks: in.Stacks,
		Segments: []snapshot.Segment{
			{Device: 0, Address: a0, TotalSize: 2097152, AllocatedSize: 1048576, ActiveSize: 1048576,
				RequestedSize: 1000000, Stream: 0, SegmentType: "small", Stack: s1,
				Blocks: []snapshot.Block{
					{Address: a0, Size: 1048576, RequestedSize: 1000000, State: snapshot.StateActiveAllocated, Stack: s1},
					{Address: a1, Size: 1048576, RequestedSize: 0, State: snapshot.StateInactive, Stack: snapshot.EmptyStack},
				}},
			{Device: 1, Address: b0, TotalSize: 20971520, AllocatedSize: 0, ActiveSize: 20971520,
				RequestedSize: 0, Stream: 94000000000000, SegmentType: "large", PoolID: snapshot.PoolID{1, 7},
				IsExpandable: true, Stack: snapshot.EmptyStack,
				Blocks: []snapshot.Block{
					{Address: b0, Size: 20971520, RequestedSize: 20000000, State: snapshot.StateActivePendingFree, Stack: s2},
				}},
		},
		DeviceTraces: [][]snapshot.Event{
			{
				{Action: snapshot.ActionSegmentAlloc, Addr: a0, Size: 2097152, TimeUS: 1000, Stack: s1},
				{Action: snapshot.ActionAlloc, Addr: a0, Size: 1048576, TimeUS: 1001, Stack: s1},
				{Action: snapshot.ActionAlloc, Addr: a1, Size: 512, TimeUS: 1002, Stack: s2, Extra: snapshot.MakeExtraID(1)},
				{Action: snapshot.ActionFreeRequested, Addr: a1, Size: 512, TimeUS: 1003, Stack: s2},
				{Action: snapshot.ActionFreeCompleted, Addr: a1, Size: 512, TimeUS: 1004, Stack: snapshot.NoStack},
				snapshot.Event{Action: snapshot.ActionOOM, Size: 4194304, TimeUS: 1005, Stack: s3}.WithDeviceFree(1024),
				{Action: snapshot.ActionOther, Extra: snapshot.MakeExtraID(2), Stack: snapshot.NoStack},
			},
			{{Action: snapshot.ActionSnapshot, Size: 20971520, Stack: snapshot.NoStack}},
			{},
		},
		EventExtras: []snapshot.EventExtra{{}, {CompileContext: "N/A", UserMetadata: "meta"}, {ActionName: "pool_reset"}},
		Annotations: []snapshot.Annotation{{Name: "ProfilerStep#3", Stage: "START", Device: 0, TimeUS: 999}},
		Settings: snapshot.AllocatorSettings{
			Present: true, AllocConf: "expandable_segments:True", MaxSplitSize: -1, ExpandableSegments: true,
			Raw: map[string]any{
				"pinned_num_register_threads": int64(1),
				"roundup_power2_divisions":    map[string]any{"16": int64(4), "2": int64(0), "1": int64(0)},
				"zz_new":                      "x",
				"max_split_size":              int64(12345), // typed field wins
			},
		},
	}
}

func readWant(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// toTree converts gopickle's decoded objects into this package's value tree (to print as JSON).
func toTree(t *testing.T, v any) any {
	switch x := v.(type) {
	case *types.Dict:
		d := &Dict{}
		for _, e := range *x {
			d.Items = append(d.Items, Item{toTree(t, e.Key), toTree(t, e.Value)})
		}
		return d
	case *types.List:
		out := []any{}
		for _, e := range *x {
			out = append(out, toTree(t, e))
		}
		return out
	case *types.Tuple:
		out := []any{}
		for _, e := range *x {
			out = append(out, toTree(t, e))
		}
		return out
	case string, int, float64, bool, nil, *big.Int:
		return x
	}
	t.Fatalf("unexpected decoded type %T", v)
	return nil
}

func asJSON(t *testing.T, v any) string {
	var buf bytes.Buffer
	j := newJSONWriter(&buf, false)
	if err := emit(j, v); err != nil {
		t.Fatal(err)
	}
	if err := j.finish(); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// restoreTypeTag is the identity function torch.jit._pickle.restore_type_tag(value, type_str).
type restoreTypeTag struct{}

func (restoreTypeTag) Call(args ...any) (any, error) {
	if len(args) != 2 {
		return nil, fmt.Errorf("restore_type_tag: %d args", len(args))
	}
	return args[0], nil
}

func gopickleLoad(t *testing.T, data []byte) any {
	t.Helper()
	u := pickle.NewUnpickler(bytes.NewReader(data))
	u.FindClass = func(module, name string) (any, error) {
		if module == "torch.jit._pickle" && name == "restore_type_tag" {
			return restoreTypeTag{}, nil
		}
		return nil, fmt.Errorf("refusing global %s.%s", module, name)
	}
	v, err := u.Load()
	if err != nil {
		t.Fatalf("gopickle: %v", err)
	}
	return v
}

func gunzip(t *testing.T, data []byte) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

type encodeCase struct {
	name    string
	opt     Options
	want    string // testdata file
	cppLine bool   // frame line 2^64-1 reads back as -1 (C++ writer)
	segList bool   // top level is the segments list
}

var encodeCases = []encodeCase{
	{"protocol 4 default", Options{}, "want_default.json", false, false},
	{"protocol 2", Options{Protocol: 2}, "want_default.json", false, false},
	{"protocol 3", Options{Protocol: 3}, "want_default.json", false, false},
	{"protocol 5", Options{Protocol: 5}, "want_default.json", false, false},
	{"list per traceback", Options{ListPerTraceback: true}, "want_default.json", false, false},
	{"cpp writer", Options{CppWriter: true}, "want_default.json", true, false},
	{"type tag", Options{TypeTag: true}, "want_default.json", true, false},
	{"gzip", Options{Gzip: true}, "want_default.json", false, false},
	{"trailing NULs", Options{TrailingBytes: 7}, "want_default.json", false, false},
	{"gzip trailing", Options{Gzip: true, TrailingBytes: 3, Protocol: 2}, "want_default.json", false, false},
	{"legacy 2.0", Options{Legacy20: true}, "want_legacy20.json", false, false},
	{"segment list", Options{SegmentList: true}, "want_default.json", false, true},
}

// expected returns the JSON the case decodes to.
func expected(t *testing.T, file string, cppLine, segList bool) string {
	want := readWant(t, file)
	if cppLine {
		want = strings.ReplaceAll(want, "18446744073709551615", "-1")
	}
	if segList {
		i := strings.Index(want, `"segments": `) + len(`"segments": `)
		j := strings.Index(want, `, "device_traces"`)
		want = want[i:j]
	}
	return want
}

func TestEncodeDecodesWithGopickle(t *testing.T) {
	for _, tc := range encodeCases {
		t.Run(tc.name, func(t *testing.T) {
			data, err := Encode(testSnapshot(), tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			if tc.opt.Gzip {
				data = gunzip(t, data)
			}
			if tc.opt.TrailingBytes > 0 {
				tail := data[len(data)-tc.opt.TrailingBytes-1:]
				if !bytes.Equal(tail, append([]byte{OpStop}, make([]byte, tc.opt.TrailingBytes)...)) {
					t.Fatalf("tail %x: want STOP then %d NULs", tail, tc.opt.TrailingBytes)
				}
			}
			wantProto := tc.opt.Protocol
			if wantProto == 0 {
				wantProto = 4
				if tc.opt.CppWriter || tc.opt.TypeTag {
					wantProto = 2
				}
			}
			if data[0] != OpProto || int(data[1]) != wantProto {
				t.Fatalf("header %x, want protocol %d", data[:2], wantProto)
			}
			if got := bytes.Contains(data, []byte("restore_type_tag")); got != tc.opt.TypeTag {
				t.Fatalf("restore_type_tag present = %v", got)
			}
			got := asJSON(t, toTree(t, gopickleLoad(t, data)))
			if want := expected(t, tc.want, tc.cppLine, tc.segList); got != want {
				t.Errorf("decoded\n%s\nwant\n%s", got, want)
			}
		})
	}
}

func TestEncodeDecodesWithCPython(t *testing.T) {
	py := needPython(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "load.py")
	err := os.WriteFile(script, []byte(`import gzip, json, pickle, sys
class Refuse(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) == ("torch.jit._pickle", "restore_type_tag"):
            return lambda value, type_str: value
        raise pickle.UnpicklingError("global %s.%s refused" % (module, name))
for path in sys.argv[1:]:
    data = open(path, "rb").read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    if data[:1] in (b"{", b"["):
        obj = json.loads(data)
    else:
        import io
        obj = Refuse(io.BytesIO(data)).load()
    print(json.dumps(obj))
`), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	type run struct {
		name, want string
	}
	var runs []run
	args := []string{script}
	cases := append(append([]encodeCase{}, encodeCases...),
		encodeCase{"json", Options{JSON: true}, "want_default.json", false, false},
		encodeCase{"json indent gzip", Options{JSON: true, JSONIndent: true, Gzip: true}, "want_default.json", false, false},
	)
	for i, tc := range cases {
		data, err := Encode(testSnapshot(), tc.opt)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		p := filepath.Join(dir, fmt.Sprintf("case%d", i))
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, p)
		runs = append(runs, run{tc.name, expected(t, tc.want, tc.cppLine, tc.segList)})
	}
	out, err := exec.Command(py, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(runs) {
		t.Fatalf("python printed %d lines, want %d:\n%s", len(lines), len(runs), out)
	}
	for i, r := range runs {
		if lines[i] != r.want {
			t.Errorf("%s: CPython decoded\n%s\nwant\n%s", r.name, lines[i], r.want)
		}
	}
}

func TestEncodeJSONMatchesPythonJSONDumps(t *testing.T) {
	py := needPython(t)
	compact, err := Encode(testSnapshot(), Options{JSON: true})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(compact), readWant(t, "want_default.json"); got != want {
		t.Errorf("JSON\n%s\nwant\n%s", got, want)
	}
	indented, err := Encode(testSnapshot(), Options{JSON: true, JSONIndent: true})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, "-c", "import json,sys; sys.stdout.write(json.dumps(json.load(sys.stdin), indent=4))")
	cmd.Stdin = bytes.NewReader(compact)
	want, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(indented, want) {
		t.Errorf("indent=4 JSON differs from Python's:\n%s\nwant\n%s", indented, want)
	}
}

func field(t *testing.T, d any, key string) any {
	t.Helper()
	dict, ok := d.(*types.Dict)
	if !ok {
		t.Fatalf("%T is not a dict", d)
	}
	v, ok := dict.Get(key)
	if !ok {
		t.Fatalf("no key %q", key)
	}
	return v
}

func index(t *testing.T, l any, i int) any {
	t.Helper()
	list, ok := l.(*types.List)
	if !ok {
		t.Fatalf("%T is not a list", l)
	}
	return (*list)[i]
}

func TestEncodeSharesThroughMemo(t *testing.T) {
	for _, perTraceback := range []bool{false, true} {
		t.Run(fmt.Sprintf("ListPerTraceback=%v", perTraceback), func(t *testing.T) {
			data, err := Encode(testSnapshot(), Options{ListPerTraceback: perTraceback})
			if err != nil {
				t.Fatal(err)
			}
			top := gopickleLoad(t, data)
			seg0 := index(t, field(t, top, "segments"), 0)
			seg1 := index(t, field(t, top, "segments"), 1)
			dev0 := index(t, field(t, top, "device_traces"), 0)
			segFrames := field(t, seg0, "frames")
			blockFrames := field(t, index(t, field(t, seg0, "blocks"), 0), "frames")
			segAllocFrames := field(t, index(t, dev0, 0), "frames")
			allocFrames := field(t, index(t, dev0, 1), "frames")
			alloc2Frames := field(t, index(t, dev0, 2), "frames")
			freeReqFrames := field(t, index(t, dev0, 3), "frames")
			pendingFrames := field(t, index(t, field(t, seg1, "blocks"), 0), "frames")
			// Stack s1 everywhere: one list in the default mode; in per-traceback mode the block
			// shares its alloc event's list and the segment its segment_alloc event's list.
			same := func(a, b any) bool { return a.(*types.List) == b.(*types.List) }
			checks := []struct {
				name string
				got  bool
				want bool
			}{
				{"block/alloc", same(blockFrames, allocFrames), true},
				{"segment/segment_alloc", same(segFrames, segAllocFrames), true},
				// the alloc caused the segment_alloc just before it: one context
				{"alloc/segment_alloc", same(allocFrames, segAllocFrames), true},
				// a free with the block's own stack reuses its allocation context (context "alloc")
				{"alloc2/free_requested", same(alloc2Frames, freeReqFrames), true},
				// the pending-free block's alloc event is on another device's trace: own list
				{"pending block/alloc2", same(pendingFrames, alloc2Frames), !perTraceback},
				// frame dicts are shared in both modes: '??' malloc frame heads s1 and s2
				{"frame dict", index(t, allocFrames, 0).(*types.Dict) == index(t, alloc2Frames, 0).(*types.Dict), true},
			}
			for _, c := range checks {
				if c.got != c.want {
					t.Errorf("%s shared = %v, want %v", c.name, c.got, c.want)
				}
			}
		})
	}
}

// deepSnapshot: n events all with the same 50-frame stack.
func deepSnapshot(n int) *snapshot.Snapshot {
	in := snapshot.NewInterner()
	var ids []snapshot.FrameID
	for i := range 50 {
		ids = append(ids, in.Frame(snapshot.Frame{Filename: fmt.Sprintf("/src/pkg/mod%02d.py", i), Line: int64(i + 1), Name: fmt.Sprintf("function_number_%02d", i)}))
	}
	st := in.Stack(ids)
	evs := make([]snapshot.Event, n)
	for i := range evs {
		evs[i] = snapshot.Event{Action: snapshot.ActionAlloc, Addr: uint64(i) * 512, Size: 512, TimeUS: int64(i + 1), Stack: st}
	}
	return &snapshot.Snapshot{Frames: in.Frames, Stacks: in.Stacks, DeviceTraces: [][]snapshot.Event{evs}}
}

func TestEncodeMemoKeepsFilesSmall(t *testing.T) {
	snap := deepSnapshot(1000)
	cases := []struct {
		name      string
		opt       Options
		nameCount int // times one frame's name string appears in the file
	}{
		{"pickle", Options{}, 1},
		{"per traceback", Options{ListPerTraceback: true}, 1},
		{"cpp", Options{CppWriter: true}, 1},
		{"json", Options{JSON: true}, 1000},
	}
	sizes := map[string]int{}
	for _, tc := range cases {
		data, err := Encode(snap, tc.opt)
		if err != nil {
			t.Fatal(err)
		}
		sizes[tc.name] = len(data)
		if got := bytes.Count(data, []byte("function_number_07")); got != tc.nameCount {
			t.Errorf("%s: frame name appears %d times, want %d", tc.name, got, tc.nameCount)
		}
	}
	// one shared list: each event is ~60 bytes; per traceback each event repeats 50 GETs
	if sizes["pickle"] > 100_000 {
		t.Errorf("shared-list pickle is %d bytes, want < 100000", sizes["pickle"])
	}
	if sizes["per traceback"] < 120_000 || sizes["per traceback"] > 200_000 {
		t.Errorf("per-traceback pickle is %d bytes, want 120k..200k (50 BINGETs per event)", sizes["per traceback"])
	}
	if sizes["json"] < 40*sizes["pickle"] {
		t.Errorf("JSON %d bytes is not 40x the pickle's %d", sizes["json"], sizes["pickle"])
	}
}

func TestEncodeRejectsBadInput(t *testing.T) {
	cases := []struct {
		name string
		mut  func(s *snapshot.Snapshot)
		opt  Options
		want string
	}{
		{"block stack out of range", func(s *snapshot.Snapshot) { s.Segments[0].Blocks[0].Stack = 99 }, Options{}, "block 0 refers to stack 99"},
		{"event stack negative", func(s *snapshot.Snapshot) { s.DeviceTraces[0][0].Stack = -5 }, Options{}, "event 0 refers to stack -5"},
		{"frame out of range", func(s *snapshot.Snapshot) { s.Stacks[1] = []snapshot.FrameID{77} }, Options{}, "refers to frame 77"},
		{"extra out of range", func(s *snapshot.Snapshot) { s.DeviceTraces[0][1].Extra = snapshot.MakeExtraID(9) }, Options{}, "refers to extra 9"},
		{"protocol 7", func(*snapshot.Snapshot) {}, Options{Protocol: 7}, "protocol 7 not supported"},
		{"cpp protocol 4", func(*snapshot.Snapshot) {}, Options{TypeTag: true, Protocol: 4}, "writes protocol 2"},
		{"bad raw setting", func(s *snapshot.Snapshot) { s.Settings.Raw["odd"] = struct{}{} }, Options{}, `allocator_settings "odd"`},
		{"negative trailing", func(*snapshot.Snapshot) {}, Options{TrailingBytes: -1}, "negative TrailingBytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := testSnapshot()
			tc.mut(s)
			_, err := Encode(s, tc.opt)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	if _, err := Encode(nil, Options{}); err == nil {
		t.Fatal("Encode(nil) succeeded")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := EncodeTo(ctx, io.Discard, deepSnapshot(10000), Options{})
	if err == nil || !strings.Contains(err.Error(), "context canceled") {
		t.Fatalf("cancelled EncodeTo error %v", err)
	}
}
