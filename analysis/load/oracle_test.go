package load

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	gopickle "github.com/nlpodyssey/gopickle/pickle"
	"github.com/nlpodyssey/gopickle/types"

	"github.com/memsnap/memsnap/analysis/snapshot"

	"github.com/memsnap/memsnap/internal/realsnaps"
	"github.com/memsnap/memsnap/internal/realsnaps/realtest"
)

// realDir is the folder of real snapshots (package realsnaps), present or not; tests read them
// in place.
var realDir = realsnaps.Where()

func realFiles(t *testing.T) []string { return realtest.Files(t) }

func TestMain(m *testing.M) { realtest.Main(m) }

// typeTag is restore_type_tag for the oracle: the identity on its first argument.
type typeTag struct{}

func (typeTag) Call(args ...any) (any, error) {
	if len(args) == 0 {
		return nil, fmt.Errorf("restore_type_tag without arguments")
	}
	return args[0], nil
}

// oracle decodes with gopickle (an independent generic decoder) and builds the model from its
// generic tree.
func oracle(t *testing.T, data []byte) *snapshot.Snapshot {
	t.Helper()
	if len(data) > 1 && data[0] == 0x1f && data[1] == 0x8b {
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		data, err = io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
	}
	u := gopickle.NewUnpickler(bytes.NewReader(data))
	u.FindClass = func(module, name string) (any, error) {
		if module == "torch.jit._pickle" && name == "restore_type_tag" {
			return typeTag{}, nil
		}
		return nil, fmt.Errorf("refused global %s.%s", module, name)
	}
	v, err := u.Load()
	if err != nil {
		t.Fatalf("gopickle: %v", err)
	}
	s, err := FromTree(normalize(v), snapshot.Format{})
	if err != nil {
		t.Fatalf("oracle model: %v", err)
	}
	return s
}

// normalize turns gopickle's types into the plain tree FromTree reads.
func normalize(v any) any {
	switch x := v.(type) {
	case *types.Dict:
		m := make(map[string]any, x.Len())
		for _, e := range *x {
			k, _ := e.Key.(string)
			m[k] = normalize(e.Value)
		}
		return m
	case *types.List:
		out := make([]any, x.Len())
		for i := range out {
			out[i] = normalize(x.Get(i))
		}
		return out
	case *types.Tuple:
		out := make([]any, x.Len())
		for i := range out {
			out[i] = normalize(x.Get(i))
		}
		return out
	case int:
		return int64(x)
	case *big.Int:
		if x.IsInt64() {
			return x.Int64()
		}
		if x.IsUint64() {
			return x.Uint64()
		}
		return x
	}
	return v
}

// flat is a model with stacks resolved to frames, so two models compare independent of the
// order in which each interned its frames and stacks.
type flat struct {
	Segments     []flatSegment
	DeviceTraces [][]flatEvent
	Annotations  []snapshot.Annotation
	Settings     snapshot.AllocatorSettings
}

type flatSegment struct {
	snapshot.Segment
	Frames      []snapshot.Frame
	BlockFrames [][]snapshot.Frame
}

type flatEvent struct {
	snapshot.Event
	Frames []snapshot.Frame
	Extra  snapshot.EventExtra
}

func flatten(s *snapshot.Snapshot) flat {
	var f flat
	for _, seg := range s.Segments {
		fs := flatSegment{Segment: seg, Frames: s.StackFrames(seg.Stack)}
		fs.Segment.Stack = 0
		fs.Segment.Blocks = append([]snapshot.Block(nil), seg.Blocks...)
		for i, b := range fs.Segment.Blocks {
			fs.BlockFrames = append(fs.BlockFrames, s.StackFrames(b.Stack))
			fs.Segment.Blocks[i].Stack = min(b.Stack, 0) // keep NoStack/EmptyStack distinction
		}
		f.Segments = append(f.Segments, fs)
	}
	for _, evs := range s.DeviceTraces {
		var out []flatEvent
		for _, e := range evs {
			fe := flatEvent{Event: e, Frames: s.StackFrames(e.Stack), Extra: s.EventExtras[e.Extra.Index()]}
			fe.Event.Stack, fe.Event.Extra = min(e.Stack, 0), snapshot.ExtraID{}
			out = append(out, fe)
		}
		f.DeviceTraces = append(f.DeviceTraces, out)
	}
	f.Annotations, f.Settings = s.Annotations, s.Settings
	return f
}

func assertSameModel(t *testing.T, name string, fast, want *snapshot.Snapshot) {
	t.Helper()
	a, b := flatten(fast), flatten(want)
	if !reflect.DeepEqual(a, b) {
		for i := range min(len(a.Segments), len(b.Segments)) {
			if !reflect.DeepEqual(a.Segments[i], b.Segments[i]) {
				t.Fatalf("%s: segment %d differs:\nfast   %+v\noracle %+v", name, i, a.Segments[i].Segment, b.Segments[i].Segment)
			}
		}
		for d := range min(len(a.DeviceTraces), len(b.DeviceTraces)) {
			for i := range min(len(a.DeviceTraces[d]), len(b.DeviceTraces[d])) {
				if !reflect.DeepEqual(a.DeviceTraces[d][i], b.DeviceTraces[d][i]) {
					t.Fatalf("%s: device %d event %d differs:\nfast   %+v\noracle %+v", name, d, i, a.DeviceTraces[d][i], b.DeviceTraces[d][i])
				}
			}
		}
		t.Fatalf("%s: fast model differs from the gopickle oracle (segments %d/%d, traces %d/%d)",
			name, len(a.Segments), len(b.Segments), len(a.DeviceTraces), len(b.DeviceTraces))
	}
	if len(fast.Frames) != len(want.Frames) || len(fast.Stacks) != len(want.Stacks) {
		t.Errorf("%s: interned %d frames / %d stacks, oracle %d / %d", name, len(fast.Frames), len(fast.Stacks), len(want.Frames), len(want.Stacks))
	}
}

// TestRealFilesMatchOracle: on every real pickle, the fast path's model equals the model built
// from gopickle's generic decode; the JSON file is checked by its own exact counts.
func TestRealFilesMatchOracle(t *testing.T) {
	for _, path := range realFiles(t) {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			fast, err := File(context.Background(), path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasSuffix(name, ".json") {
				return
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			assertSameModel(t, name, fast, oracle(t, data))
		})
	}
}

// TestRealFilesInvariants checks SNAPSHOT_FORMAT.md §3 on every real file and the exact counts
// its PROVENANCE.md records.
func TestRealFilesInvariants(t *testing.T) {
	want := map[string][3]int{ // segments, blocks, events
		"pt2.0_legacy-history_flexgen-opt.pickle":               {176, 463, 1},
		"pt2.1_multistream_llama-selectn.pickle":                {136, 204, 10327},
		"pt2.2_state-only_device1_diffusion.pickle":             {673, 6644, 2},
		"pt2.3-2.4_json-form_resnet-tomi.json":                  {2, 13, 209},
		"pt2.5-2.7_torch-compile_cpp-frames_cs336-fwd.pickle":   {405, 1006, 8227},
		"pt2.5-2.7_small-full-trace_cs336.pickle":               {9, 20, 97},
		"pt2.5plus_empty_4-devices.pickle":                      {0, 0, 0},
		"pt2.10_user-metadata_windows_cs336.pickle":             {216, 455, 5163},
		"pt2.5plus_tiny_two-devices_expandable_no-trace.pickle": {3, 10, 0},
	}
	for _, path := range realFiles(t) {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			s, err := File(context.Background(), path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			blocks, events := 0, 0
			for i, seg := range s.Segments {
				blocks += len(seg.Blocks)
				var sum, alloc, active, req int64
				next := seg.Address
				for j, b := range seg.Blocks {
					if b.Address != next {
						t.Fatalf("segment %d block %d at %#x, want contiguous %#x", i, j, b.Address, next)
					}
					next += uint64(b.Size)
					sum += b.Size
					switch b.State {
					case snapshot.StateActiveAllocated:
						alloc += b.Size
						active += b.Size
						req += b.RequestedSize
					case snapshot.StateActivePendingFree:
						active += b.Size
					}
				}
				if sum != seg.TotalSize || alloc != seg.AllocatedSize || active != seg.ActiveSize || req != seg.RequestedSize {
					t.Fatalf("segment %d: blocks sum %d/%d/%d/%d, segment says %d/%d/%d/%d", i,
						sum, alloc, active, req, seg.TotalSize, seg.AllocatedSize, seg.ActiveSize, seg.RequestedSize)
				}
			}
			for _, evs := range s.DeviceTraces {
				events += len(evs)
			}
			if w, ok := want[name]; ok && (len(s.Segments) != w[0] || blocks != w[1] || events != w[2]) {
				t.Errorf("got %d segments, %d blocks, %d events; PROVENANCE.md says %v", len(s.Segments), blocks, events, w)
			}
		})
	}
}

// TestRealFileDetails pins facts the provenance notes call out.
func TestRealFileDetails(t *testing.T) {
	realFiles(t)
	load := func(name string) *snapshot.Snapshot {
		s, err := File(context.Background(), filepath.Join(realDir, name), Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	cs := load("pt2.5-2.7_torch-compile_cpp-frames_cs336-fwd.pickle")
	unknown := 0
	for _, f := range cs.Frames {
		if f.Line == snapshot.LineUnknown {
			unknown++
		}
	}
	// Four frame objects carry line 2^64-1; they are one distinct frame (fake_tensor.py init_gpu_context).
	if unknown != 1 || len(cs.Annotations) != 1794 || !cs.Caps.CppFrames {
		t.Errorf("cs336-fwd: %d distinct frames with line 2^64-1 (want 1), %d annotations (want 1794), cpp=%v", unknown, len(cs.Annotations), cs.Caps.CppFrames)
	}
	win := load("pt2.10_user-metadata_windows_cs336.pickle")
	if len(win.Frames) != 55 || len(win.Stacks) != 55 || !win.Caps.PythonOnly || win.EventExtras[win.DeviceTraces[0][0].Extra.Index()].CompileContext != "N/A" {
		t.Errorf("windows: %d frames %d stacks python-only=%v extra=%+v", len(win.Frames), len(win.Stacks), win.Caps.PythonOnly, win.EventExtras[win.DeviceTraces[0][0].Extra.Index()])
	}
	legacy := load("pt2.0_legacy-history_flexgen-opt.pickle")
	if !legacy.Format.LegacyHistory || legacy.Caps.HasTrace {
		t.Errorf("legacy: format %+v caps %+v", legacy.Format, legacy.Caps)
	}
	tiny := load("pt2.5plus_tiny_two-devices_expandable_no-trace.pickle")
	if d := tiny.Devices(); !reflect.DeepEqual(d, []int{0, 1}) || !tiny.Settings.ExpandableSegments || tiny.Settings.MaxSplitSize != 134217728 {
		t.Errorf("tiny: devices %v settings %+v", d, tiny.Settings)
	}
	ms := load("pt2.1_multistream_llama-selectn.pickle")
	segStreams, evStreams := map[uint64]bool{}, map[uint64]bool{}
	for _, seg := range ms.Segments {
		segStreams[seg.Stream] = true
	}
	for _, e := range ms.DeviceTraces[0] {
		evStreams[e.Stream] = true
	}
	if len(segStreams) != 2 || !segStreams[123323568] || len(evStreams) != 10 || len(ms.DeviceTraces) != 4 {
		t.Errorf("multistream: %d segment streams, %d event streams, %d traces", len(segStreams), len(evStreams), len(ms.DeviceTraces))
	}
}

// TestFixturesMatchOracle: on every committed pickle fixture (every protocol, the TorchScript
// writer's type tags, gzip, trailing bytes) the fast path's model equals the gopickle oracle's.
func TestFixturesMatchOracle(t *testing.T) {
	files, _ := filepath.Glob("../../testdata/*/*.pickle*")
	more, _ := filepath.Glob("../../testdata/*/*/*.pickle*")
	files = append(files, more...)
	if len(files) < 10 {
		t.Fatalf("only %d pickle fixtures found under testdata", len(files))
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			fast, err := File(context.Background(), path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			assertSameModel(t, path, fast, oracle(t, data))
		})
	}
}

// TestJSONStreamMatchesGenericTree: the streaming JSON path (traces converted event by event)
// builds the same model as converting the whole document decoded generically.
func TestJSONStreamMatchesGenericTree(t *testing.T) {
	files, _ := filepath.Glob("../../testdata/*/*.json*")
	files = append(files, filepath.Join(realDir, "pt2.3-2.4_json-form_resnet-tomi.json"))
	checked := 0
	for _, path := range files {
		raw, err := os.ReadFile(path)
		if err != nil {
			continue // the real file is absent without ../shared
		}
		if strings.HasSuffix(path, ".gz") {
			zr, err := gzip.NewReader(bytes.NewReader(raw))
			if err != nil {
				t.Fatal(err)
			}
			if raw, err = io.ReadAll(zr); err != nil {
				t.Fatal(err)
			}
		}
		fast, err := File(context.Background(), path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var tree any
		if err := dec.Decode(&tree); err != nil {
			t.Fatal(err)
		}
		want, err := FromTree(tree, snapshot.Format{})
		if err != nil {
			t.Fatal(err)
		}
		assertSameModel(t, path, fast, want)
		checked++
	}
	if checked < 2 {
		t.Fatalf("only %d JSON files checked", checked)
	}
}
