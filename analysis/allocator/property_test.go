package allocator

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// TestPropertyRandomRequests drives the allocator with random requests, frees (immediate and
// pending), record_stream, private pools and empty_cache under every setting, checking after
// every step: allocated ≤ active ≤ reserved ≤ capacity, every block inside its segment and
// every cached block in its pool (Check); a request gets a block at least its rounded size; a
// free gives back exactly the block's size; at the end, with everything freed and released,
// nothing stays allocated or reserved.
func TestPropertyRandomRequests(t *testing.T) {
	variants := []Settings{
		{},
		{ExpandableSegments: true},
		{MaxSplitSize: 64 * MiB},
		{RoundupPower2Divisions: uniform(4)},
		{GCThreshold: 0.7},
		{ExpandableSegments: true, MaxSplitSize: 64 * MiB, RoundupPower2Divisions: uniform(8)},
	}
	for vi, set := range variants {
		for _, capacity := range []int64{0, 768 * MiB} {
			for seed := uint64(1); seed <= 3; seed++ {
				t.Run(fmt.Sprintf("%s/cap=%d/seed=%d", set.AllocConf(), capacity/MiB, seed), func(t *testing.T) {
					propertyRun(t, set, capacity, seed*100+uint64(vi))
				})
			}
		}
	}
}

func propertyRun(t *testing.T, set Settings, capacity int64, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	a := New(Config{Settings: set, Capacity: capacity})
	type live struct {
		b    *Block
		size int64
	}
	var blocks []live
	var pending []*Block
	size := func() int64 {
		switch rng.IntN(10) {
		case 0, 1, 2, 3:
			return 1 + rng.Int64N(MiB)
		case 4, 5, 6:
			return MiB + rng.Int64N(9*MiB)
		case 7, 8:
			return 10*MiB + rng.Int64N(60*MiB)
		}
		return 70*MiB + rng.Int64N(130*MiB)
	}
	ooms := 0
	for step := 0; step < 1500; step++ {
		switch r := rng.IntN(100); {
		case r < 50:
			n := size()
			stream := uint64(rng.IntN(2)) * 7
			pool := DefaultPool
			if rng.IntN(20) == 0 {
				pool = snapshot.PoolID{1, 0}
			}
			before := a.Allocated()
			b, err := a.Malloc(n, stream, pool)
			if err != nil {
				ooms++
				if a.Allocated() != before {
					t.Fatalf("step %d: a failed request changed allocated %d → %d", step, before, a.Allocated())
				}
				break
			}
			if b.Size() < set.RoundSize(n) || b.Requested() != n || b.Stream() != stream || b.State() != snapshot.StateActiveAllocated {
				t.Fatalf("step %d: request %d got block size %d requested %d stream %d state %v", step, n, b.Size(), b.Requested(), b.Stream(), b.State())
			}
			if a.Allocated() != before+b.Size() {
				t.Fatalf("step %d: allocated %d → %d for a block of %d", step, before, a.Allocated(), b.Size())
			}
			blocks = append(blocks, live{b, b.Size()})
		case r < 85 && len(blocks) > 0:
			i := rng.IntN(len(blocks))
			l := blocks[i]
			blocks = append(blocks[:i], blocks[i+1:]...)
			if l.b.Size() != l.size {
				t.Fatalf("step %d: a live block changed size %d → %d", step, l.size, l.b.Size())
			}
			before, activeBefore := a.Allocated(), a.Active()
			if rng.IntN(4) == 0 {
				a.FreeRequested(l.b)
				pending = append(pending, l.b)
				if a.Active() != activeBefore {
					t.Fatalf("step %d: a pending free changed active", step)
				}
			} else {
				a.Free(l.b)
				switch {
				case l.b.State() == snapshot.StateActivePendingFree: // used on another stream (record_stream)
					pending = append(pending, l.b)
					if a.Active() != activeBefore {
						t.Fatalf("step %d: a pending free changed active", step)
					}
				case a.Active() != activeBefore-l.size:
					t.Fatalf("step %d: active %d → %d freeing %d", step, activeBefore, a.Active(), l.size)
				}
			}
			if a.Allocated() != before-l.size {
				t.Fatalf("step %d: allocated %d → %d freeing %d", step, before, a.Allocated(), l.size)
			}
		case r < 95 && len(pending) > 0:
			i := rng.IntN(len(pending))
			a.Complete(pending[i]) // a no-op when the cudaMalloc-failure path completed it already
			pending = append(pending[:i], pending[i+1:]...)
		case r < 97 && len(blocks) > 0:
			a.RecordStream(blocks[rng.IntN(len(blocks))].b, 3)
		case r < 99:
			a.EmptyCache()
		}
		if err := a.Check(); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if st := a.Stats(); st.PeakReserved < a.Reserved() || st.PeakAllocated < a.Allocated() {
			t.Fatalf("step %d: peaks %d/%d below current %d/%d", step, st.PeakReserved, st.PeakAllocated, a.Reserved(), a.Allocated())
		}
	}
	if capacity == 0 && ooms > 0 {
		t.Fatalf("%d OOMs without a capacity", ooms)
	}
	for _, l := range blocks {
		a.Free(l.b)
	}
	for _, b := range pending {
		a.Complete(b)
	}
	a.MarkPoolFreeable(snapshot.PoolID{1, 0})
	a.EmptyCache()
	if err := a.Check(); err != nil {
		t.Fatal(err)
	}
	if a.Allocated() != 0 || a.Active() != 0 || a.Reserved() != 0 || len(a.Segments()) != 0 {
		t.Fatalf("after freeing everything: allocated %d active %d reserved %d segments %d", a.Allocated(), a.Active(), a.Reserved(), len(a.Segments()))
	}
}
