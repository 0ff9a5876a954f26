package writer

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/memsnap/memsnap/analysis/load"
	"github.com/nlpodyssey/gopickle/types"

	"github.com/memsnap/memsnap/internal/realsnaps"
	"github.com/memsnap/memsnap/internal/realsnaps/realtest"
)

// realDir is the folder of real snapshots (package realsnaps), present or not.
var realDir = realsnaps.Where()

func TestMain(m *testing.M) { realtest.Main(m) }

// countObjects counts the distinct list and dict objects reachable from v.
func countObjects(v any, lists, dicts map[any]bool) {
	switch x := v.(type) {
	case *types.List:
		if lists[x] {
			return
		}
		lists[x] = true
		for _, e := range *x {
			countObjects(e, lists, dicts)
		}
	case *types.Dict:
		if dicts[x] {
			return
		}
		dicts[x] = true
		for _, e := range *x {
			countObjects(e.Value, lists, dicts)
		}
	case *types.Tuple:
		for _, e := range *x {
			countObjects(e, lists, dicts)
		}
	}
}

// TestReencodeRealFilesKeepsListSharing loads real snapshots, writes them back with
// ListPerTraceback and checks that the file has exactly as many list objects as PyTorch wrote
// (one per captured traceback), at most as many dicts (frames are interned by content), and the
// same data.
func TestReencodeRealFilesKeepsListSharing(t *testing.T) {
	realtest.Require(t)
	cases := []struct {
		file        string
		lessLists   int // lists PyTorch wrote that the model cannot carry
		compareData bool
	}{
		{"pt2.5-2.7_small-full-trace_cs336.pickle", 1, true}, // external_annotations: [] is not written
		{"pt2.5-2.7_torch-compile_cpp-frames_cs336-fwd.pickle", 0, false},
		{"pt2.1_multistream_llama-selectn.pickle", 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			p := filepath.Join(realDir, tc.file)
			origData, err := os.ReadFile(p)
			if err != nil {
				t.Skipf("%s absent: %v", p, err)
			}
			snap, err := load.File(context.Background(), p, load.Options{})
			if err != nil {
				t.Fatal(err)
			}
			data, err := Encode(snap, Options{ListPerTraceback: true})
			if err != nil {
				t.Fatal(err)
			}
			ol, od := map[any]bool{}, map[any]bool{}
			countObjects(gopickleLoad(t, origData), ol, od)
			ml, md := map[any]bool{}, map[any]bool{}
			countObjects(gopickleLoad(t, data), ml, md)
			if len(ml) != len(ol)-tc.lessLists {
				t.Errorf("re-encoded file has %d list objects, PyTorch's %d (-%d expected)", len(ml), len(ol), tc.lessLists)
			}
			// PyTorch sometimes writes two dict objects for one frame; the model interns frames.
			if len(md) > len(od) {
				t.Errorf("re-encoded file has %d dict objects, more than PyTorch's %d", len(md), len(od))
			}
			if !tc.compareData {
				return // expanding the shared frames of the big files to JSON takes seconds
			}
			got := asJSON(t, toTree(t, gopickleLoad(t, data)))
			orig := toTree(t, gopickleLoad(t, origData))
			top := orig.(*Dict)
			var kept []Item
			for _, it := range top.Items {
				if l, ok := it.Value.([]any); it.Key == "external_annotations" && ok && len(l) == 0 {
					continue
				}
				kept = append(kept, it)
			}
			top.Items = kept
			if want := asJSON(t, top); got != want {
				t.Errorf("re-encoded file decodes to different data (%d vs %d JSON bytes)", len(got), len(want))
			}
		})
	}
}
