package tools

import (
	"context"
	"encoding/json"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis/capacity"
	"github.com/memsnap/memsnap/analysis/load"
)

// TestCapacityTool: the capacity tool answers what capacity.Analyze computes (the CLI's
// capacity --json prints the same), its text is the answer's Text(), sizes are strings, and
// bad arguments are errors that say what to send.
func TestCapacityTool(t *testing.T) {
	c := newClient(t, Config{})
	dir := filepath.Join(repoRoot(t), "testdata", "capacity")
	a, b := filepath.Join(dir, "batch8.pickle"), filepath.Join(dir, "batch16.pickle")
	res := call(t, c, "capacity", map[string]any{"files": []any{map[string]any{"path": a, "size": 8}, map[string]any{"path": b, "size": 16}},
		"predict": []any{24}, "device_memory": "500MiB"})
	if res.IsError {
		t.Fatalf("error: %s", textOf(res))
	}
	var got capacity.Answer
	structured(t, res, &got)
	var files []capacity.File
	for i, p := range []string{a, b} {
		snap, err := load.File(context.Background(), p, load.Options{})
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, capacity.File{Snap: snap, Size: int64(8 * (i + 1))})
	}
	want, err := capacity.Analyze(context.Background(), files, capacity.Options{Predict: []int64{24}, DeviceMemory: 500 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&got, want) {
		t.Errorf("structuredContent differs from capacity.Analyze:\n got %+v\nwant %+v", got, *want)
	}
	if textOf(res) != want.Text() {
		t.Errorf("text differs from Text():\n%s", textOf(res))
	}
	if d := got.Devices[0]; d.DeviceBytesSource != capacity.SourceDeviceMemory || d.DeviceBytes != 500<<20 || d.MaxSize == nil || *d.MaxSize != 31 {
		t.Errorf("device %+v", d)
	}
	for _, tc := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"files": []any{map[string]any{"path": a, "size": 8}}, "capacity": "lots"}, `capacity "lots": want a size such as "80GiB"`},
		{map[string]any{"files": []any{map[string]any{"path": a, "size": 8}}, "capacity": "1GiB", "device_memory": "2GiB"}, "not both"},
		{map[string]any{"files": []any{map[string]any{"path": a, "size": 0}}}, "size"},
		{map[string]any{"files": []any{map[string]any{"path": a, "size": 8}}, "dimension": "tokens"}, "dimension"},
		{map[string]any{"files": []any{map[string]any{"path": a, "size": 8}, map[string]any{"path": b, "size": 8}}}, "have the same size 8"},
		{map[string]any{"files": []any{}}, "files"},
	} {
		res := call(t, c, "capacity", tc.args)
		if !res.IsError || !strings.Contains(textOf(res), tc.want) {
			t.Errorf("%v: isError=%v %q, want %q", tc.args, res.IsError, textOf(res), tc.want)
		}
	}
}

// TestCapAnswer: an answer over the structuredContent cap keeps its first device and fewer
// unmatched rows, and says which devices were left out; the memoized answer is unchanged.
func TestCapAnswer(t *testing.T) {
	var r capacity.Answer
	for d := range 4 {
		dv := capacity.DeviceAnswer{Device: d, Headline: strings.Repeat("x", 3000)}
		for range 12 {
			dv.Unmatched = append(dv.Unmatched, capacity.Unmatched{Site: "model.py:1", Reason: strings.Repeat("y", 200)})
		}
		r.Devices = append(r.Devices, dv)
	}
	got := capAnswer(&r, 8192)
	b, _ := json.Marshal(got)
	if len(b) > 8192 || len(got.Devices) == 0 || got.Devices[0].Device != 0 || len(got.Devices[0].Unmatched) != 3 || len(got.Notes) == 0 ||
		!strings.Contains(got.Notes[len(got.Notes)-1], "left out to keep the answer small") {
		t.Errorf("capped to %d bytes: %d devices, notes %q", len(b), len(got.Devices), got.Notes)
	}
	if len(r.Devices) != 4 || len(r.Devices[0].Unmatched) != 12 {
		t.Errorf("the original answer changed")
	}
}
