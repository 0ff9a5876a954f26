package main

import (
	"bytes"
	"context"
	"maps"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/memsnap/memsnap/analysis/load"
	"github.com/memsnap/memsnap/analysis/pickle/writer"
	"github.com/memsnap/memsnap/analysis/snapshot"
	"github.com/memsnap/memsnap/bench/internal/pyval"
)

// TestTile: three copies of the shared real 2.10 file's trace load as 3 traces and 2 sets of
// restoring events; the last copy is the original trace, event for event; the whole tiled
// trace leaves the same blocks allocated and freed as the original (so it replays onto the
// file's final segments); and the opcode mix per trace dict is the original's. Skipped
// without the shared files.
func TestTile(t *testing.T) {
	in := "../../../shared/snapshots/real/pt2.10_user-metadata_windows_cs336.pickle"
	data, err := os.ReadFile(in)
	if err != nil {
		t.Skipf("no shared real file (%v)", err)
	}
	root, err := pyval.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	tl, err := newTiler(root)
	if err != nil {
		t.Fatal(err)
	}
	tl.copies = 3
	var buf bytes.Buffer
	w := writer.NewWriter(&buf, writer.Config{Protocol: 4})
	w.Begin()
	tl.write(w)
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "tiled.pickle")
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	orig, err := load.File(context.Background(), in, load.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tiled, err := load.File(context.Background(), out, load.Options{})
	if err != nil {
		t.Fatal(err)
	}
	o, x := orig.DeviceTraces[0], tiled.DeviceTraces[0]
	if want := 3*len(o) + 2*tl.restoring; len(x) != want || tl.restoring == 0 {
		t.Fatalf("%d events, want %d (%d restoring per copy)", len(x), want, tl.restoring)
	}
	last := x[len(x)-len(o):]
	for i := range o {
		a, b := o[i], last[i]
		if a.Action != b.Action || a.Addr != b.Addr || a.Size != b.Size || a.TimeUS != b.TimeUS ||
			!equalFrames(orig, a.Stack, tiled, b.Stack) ||
			orig.EventExtras[a.Extra.Index()] != tiled.EventExtras[b.Extra.Index()] {
			t.Fatalf("event %d of the last copy: %+v, the original's %+v", i, b, a)
		}
	}
	if a, b := play(o), play(x); !maps.Equal(a, b) {
		t.Fatalf("the tiled trace leaves %d blocks changed, the original %d", len(b), len(a))
	}
	mo, _ := pyval.Mix(data)
	mx, _ := pyval.Mix(buf.Bytes())
	for _, c := range [][2]float64{
		{mo.PerDict(mo.Strings), mx.PerDict(mx.Strings)},
		{mo.PerDict(mo.Puts), mx.PerDict(mx.Puts)},
		{mo.PerDict(mo.Gets), mx.PerDict(mx.Gets)},
	} {
		if math.Abs(c[1]-c[0]) > 0.05*c[0] {
			t.Errorf("opcode mix per trace dict: strings, puts, gets %.2f %.2f %.2f; the original's %.2f %.2f %.2f",
				mx.PerDict(mx.Strings), mx.PerDict(mx.Puts), mx.PerDict(mx.Gets), mo.PerDict(mo.Strings), mo.PerDict(mo.Puts), mo.PerDict(mo.Gets))
			break
		}
	}
}

func equalFrames(a *snapshot.Snapshot, x snapshot.StackID, b *snapshot.Snapshot, y snapshot.StackID) bool {
	if x < 0 || y < 0 {
		return x == y
	}
	fa, fb := a.Stacks[x], b.Stacks[y]
	if len(fa) != len(fb) {
		return false
	}
	for i := range fa {
		if a.Frames[fa[i]] != b.Frames[fb[i]] {
			return false
		}
	}
	return true
}

// play is what a trace changes, by block address: +size for a block it allocates and leaves
// allocated, -size for one allocated before it that it frees.
func play(evs []snapshot.Event) map[uint64]int64 {
	m := map[uint64]int64{}
	for _, e := range evs {
		switch e.Action {
		case snapshot.ActionAlloc:
			m[e.Addr] += e.Size
		case snapshot.ActionFreeCompleted:
			m[e.Addr] -= e.Size
		}
		if m[e.Addr] == 0 {
			delete(m, e.Addr)
		}
	}
	return m
}
