package main

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis/load"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

func readAll(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[filepath.ToSlash(rel)] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestDeterministicAndCommitted(t *testing.T) {
	d1, d2 := t.TempDir(), t.TempDir()
	if err := generate(d1); err != nil {
		t.Fatal(err)
	}
	if err := generate(d2); err != nil {
		t.Fatal(err)
	}
	a, b := readAll(t, d1), readAll(t, d2)
	if len(a) != 37 {
		t.Errorf("generated %d files, want 37", len(a))
	}
	var total int
	for name, data := range a {
		if !bytes.Equal(data, b[name]) {
			t.Errorf("%s differs between two runs", name)
		}
		if len(data) >= 200_000 {
			t.Errorf("%s is %d bytes, over the 200 KB fixture limit", name, len(data))
		}
		total += len(data)
	}
	if total >= 2_000_000 {
		t.Errorf("fixtures total %d bytes, over 2 MB", total)
	}
	committed := filepath.Join("..", "..", "..", filepath.FromSlash(DefaultDir))
	c := readAll(t, committed)
	for name, data := range a {
		if !bytes.Equal(data, c[name]) {
			t.Errorf("%s/%s is stale or missing (the sim or the pickle writer changed): run go run ./analysis/sim/genfixtures and commit testdata/scenarios", DefaultDir, name)
		}
	}
	for name := range c {
		if _, ok := a[name]; !ok {
			t.Errorf("%s/%s is not generated any more: delete it", DefaultDir, name)
		}
	}
}

type blockView struct {
	Addr      uint64
	Size, Req int64
	State     snapshot.BlockState
	Frames    []snapshot.Frame
}

func segView(sn *snapshot.Snapshot, frames bool) [][]blockView {
	var out [][]blockView
	for _, seg := range sn.Segments {
		var bs []blockView
		for _, b := range seg.Blocks {
			v := blockView{b.Address, b.Size, b.RequestedSize, b.State, nil}
			if frames {
				v.Frames = sn.StackFrames(b.Stack)
			}
			bs = append(bs, v)
		}
		out = append(out, bs)
	}
	return out
}

type eventView struct {
	Action           snapshot.Action
	Addr             uint64
	Size, Time, Free int64
	Stream           uint64
	HasFrames        bool
	Frames           []snapshot.Frame
}

func evView(sn *snapshot.Snapshot) [][]eventView {
	var out [][]eventView
	for _, evs := range sn.DeviceTraces {
		var vs []eventView
		for _, ev := range evs {
			vs = append(vs, eventView{ev.Action, ev.Addr, ev.Size, ev.TimeUS, ev.DeviceFree(), ev.Stream, ev.Stack != snapshot.NoStack, sn.StackFrames(ev.Stack)})
		}
		out = append(out, vs)
	}
	return out
}

// TestFixturesLoad reads every generated file back with the loader and checks it carries the
// simulated snapshot: the full content for the modern forms, the segments for the old forms.
func TestFixturesLoad(t *testing.T) {
	dir := t.TempDir()
	if err := generate(dir); err != nil {
		t.Fatal(err)
	}
	for _, g := range groups() {
		for _, f := range g.files {
			got, err := load.File(context.Background(), filepath.Join(dir, f.name), load.Options{})
			if err != nil {
				t.Errorf("%s: %v", f.name, err)
				continue
			}
			modern := !f.opt.Legacy20 && !f.opt.SegmentList
			if !reflect.DeepEqual(segView(got, modern), segView(f.snap, modern)) {
				t.Errorf("%s: segments differ after loading", f.name)
			}
			if !modern {
				continue
			}
			if !reflect.DeepEqual(evView(got), evView(f.snap)) {
				t.Errorf("%s: traces differ after loading", f.name)
			}
			if len(got.Annotations) != len(f.snap.Annotations) || got.Settings.MaxSplitSize != f.snap.Settings.MaxSplitSize {
				t.Errorf("%s: annotations %d/%d settings %+v", f.name, len(got.Annotations), len(f.snap.Annotations), got.Settings)
			}
			if strings.HasSuffix(f.name, ".gz") != got.Format.Gzip {
				t.Errorf("%s: gzip %v", f.name, got.Format.Gzip)
			}
		}
	}
}
