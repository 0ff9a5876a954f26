package main

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/memsnap/memsnap/analysis/load"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// fakeGC records the targets loadGC sets, starting from cur.
type fakeGC struct {
	mu   sync.Mutex
	cur  int
	sets []int
}

func (f *fakeGC) set(p int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	prev := f.cur
	f.cur = p
	f.sets = append(f.sets, p)
	return prev
}

func (f *fakeGC) now() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cur
}

// TestLoadGCOverlappingLoads: two loads that overlap raise the target once, keep it raised
// until the second ends, and put back the one found (also after a failed load).
func TestLoadGCOverlappingLoads(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start int
		err   error
	}{
		{"default", 100, nil},
		{"user target kept", 50, nil},
		{"failed loads", 100, errors.New("bad file")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeGC{cur: tc.start}
			g := &loadGC{set: f.set, collect: func() {}}
			release := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
			inside := make(chan int, 2)
			fn := g.file(func(_ context.Context, path string, _ load.Options) (*snapshot.Snapshot, error) {
				i := int(path[0] - '0')
				inside <- f.now()
				<-release[i]
				return &snapshot.Snapshot{Path: path}, tc.err
			})
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for i := range 2 {
				wg.Go(func() { _, errs[i] = fn(context.Background(), string(rune('0'+i)), load.Options{}) })
			}
			seen := []int{<-inside, <-inside}
			close(release[0])
			// The first load is over, the second is not: the target stays raised.
			for deadline := time.Now().Add(10 * time.Second); g.inFlight() != 1; runtime.Gosched() {
				if g.inFlight() == 0 || time.Now().After(deadline) {
					t.Fatalf("%d loads in flight, want 1", g.inFlight())
				}
			}
			if got := f.now(); got != loadGCPercent {
				t.Errorf("target %d with one load in flight, want %d", got, loadGCPercent)
			}
			close(release[1])
			wg.Wait()
			if want := []int{loadGCPercent, loadGCPercent}; !slices.Equal(seen, want) {
				t.Errorf("targets inside the loads %v, want %v", seen, want)
			}
			if want := []int{loadGCPercent, tc.start}; !slices.Equal(f.sets, want) {
				t.Errorf("targets set %v, want %v", f.sets, want)
			}
			for _, err := range errs {
				if !errors.Is(err, tc.err) {
					t.Errorf("load error %v, want %v", err, tc.err)
				}
			}
		})
	}
}

// TestLoadGCDirLoads: a directory load raises the target as well.
func TestLoadGCDirLoads(t *testing.T) {
	f := &fakeGC{cur: 100}
	g := &loadGC{set: f.set, collect: func() {}}
	var inside int
	ranks, err := g.dir(func(context.Context, string, load.Options) ([]snapshot.Rank, error) {
		inside = f.now()
		return []snapshot.Rank{{}}, nil
	})(context.Background(), "dir", load.Options{})
	if err != nil || len(ranks) != 1 {
		t.Fatalf("dir load: %d ranks, %v", len(ranks), err)
	}
	if inside != loadGCPercent || f.now() != 100 {
		t.Errorf("target %d inside the load, %d after, want %d and 100", inside, f.now(), loadGCPercent)
	}
}

// TestLoadGCCollectsAfterLargeLoads: the decoder's garbage is collected after a load of a
// large snapshot (or of a directory of them), not after a small one.
func TestLoadGCCollectsAfterLargeLoads(t *testing.T) {
	big := &snapshot.Snapshot{DeviceTraces: [][]snapshot.Event{make([]snapshot.Event, minCollectBytes/unsafe.Sizeof(snapshot.Event{}))}}
	small := &snapshot.Snapshot{DeviceTraces: [][]snapshot.Event{make([]snapshot.Event, 1000)}}
	for _, tc := range []struct {
		name  string
		snaps []*snapshot.Snapshot
		dir   bool
		want  int
	}{
		{"large file", []*snapshot.Snapshot{big}, false, 1},
		{"small file", []*snapshot.Snapshot{small}, false, 0},
		{"failed load", nil, false, 0},
		{"directory of large ranks", []*snapshot.Snapshot{small, big}, true, 1},
		{"directory of small ranks", []*snapshot.Snapshot{small, small}, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			collections := 0
			g := &loadGC{set: (&fakeGC{cur: 100}).set, collect: func() { collections++ }}
			ctx := context.Background()
			if tc.dir {
				var ranks []snapshot.Rank
				for i, s := range tc.snaps {
					ranks = append(ranks, snapshot.Rank{Rank: i, Snap: s})
				}
				g.dir(func(context.Context, string, load.Options) ([]snapshot.Rank, error) { return ranks, nil })(ctx, "dir", load.Options{})
			} else {
				g.file(func(context.Context, string, load.Options) (*snapshot.Snapshot, error) {
					if len(tc.snaps) == 0 {
						return nil, errors.New("bad file")
					}
					return tc.snaps[0], nil
				})(ctx, "f", load.Options{})
			}
			if collections != tc.want {
				t.Errorf("%d collections, want %d", collections, tc.want)
			}
		})
	}
}

// TestLoadGCPanickingLoad: a loader that panics (the server's cache recovers it) leaves the
// target as it found it and no load in flight.
func TestLoadGCPanickingLoad(t *testing.T) {
	f := &fakeGC{cur: 100}
	g := &loadGC{set: f.set, collect: func() {}}
	for _, call := range []func(){
		func() {
			g.file(func(context.Context, string, load.Options) (*snapshot.Snapshot, error) { panic("model bug") })(context.Background(), "f", load.Options{})
		},
		func() {
			g.dir(func(context.Context, string, load.Options) ([]snapshot.Rank, error) { panic("model bug") })(context.Background(), "d", load.Options{})
		},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("the panic did not reach the caller")
				}
			}()
			call()
		}()
		if f.now() != 100 || g.inFlight() != 0 {
			t.Errorf("after a panicking load: target %d, %d loads in flight; want 100 and 0", f.now(), g.inFlight())
		}
	}
}

// TestServerLoadersRespectGOGC: with GOGC set the server keeps the plain loaders (the user's
// target stands); without, it wraps both.
func TestServerLoadersRespectGOGC(t *testing.T) {
	t.Setenv("GOGC", "80")
	if f, d := serverLoaders(); f != nil || d != nil {
		t.Error("GOGC=80: the loaders are wrapped")
	}
	t.Setenv("GOGC", "")
	if f, d := serverLoaders(); f == nil || d == nil {
		t.Error("GOGC unset: the loaders are not wrapped")
	}
}
