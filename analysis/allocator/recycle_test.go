package allocator

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// randomTrace is a device trace of n requests with random sizes and streams, whose frees
// are often completed late (other streams used the block), with oom events and explicit
// empty_cache() calls (segment releases no new segment follows): the allocator then completes
// pending frees on its own, before the trace does.
func randomTrace(seed uint64, n int) *snapshot.Snapshot {
	rng := rand.New(rand.NewPCG(seed, 11))
	var evs []snapshot.Event
	var live, pending, freed []uint64
	next := uint64(0x7f0000000000)
	size := func() int64 {
		if rng.IntN(3) == 0 {
			return 1 + rng.Int64N(MiB)
		}
		return MiB + rng.Int64N(60*MiB)
	}
	sizes := map[uint64]int64{}
	for range n {
		switch r := rng.IntN(100); {
		case r < 45:
			addr := next
			if len(freed) > 0 && rng.IntN(2) == 0 { // addresses come back after their free
				k := rng.IntN(len(freed))
				addr, freed = freed[k], append(freed[:k], freed[k+1:]...)
			} else {
				next += 64 * MiB
			}
			sizes[addr] = size()
			live = append(live, addr)
			evs = append(evs, snapshot.Event{Action: snapshot.ActionAlloc, Addr: addr, Size: sizes[addr], Stream: uint64(rng.IntN(2))})
		case r < 80 && len(live) > 0:
			k := rng.IntN(len(live))
			addr := live[k]
			live = append(live[:k], live[k+1:]...)
			evs = append(evs, snapshot.Event{Action: snapshot.ActionFreeRequested, Addr: addr, Size: sizes[addr]})
			if rng.IntN(3) == 0 {
				pending = append(pending, addr)
			} else {
				evs = append(evs, snapshot.Event{Action: snapshot.ActionFreeCompleted, Addr: addr, Size: sizes[addr]})
				freed = append(freed, addr)
			}
		case r < 93 && len(pending) > 0:
			k := rng.IntN(len(pending))
			addr := pending[k]
			pending = append(pending[:k], pending[k+1:]...)
			evs = append(evs, snapshot.Event{Action: snapshot.ActionFreeCompleted, Addr: addr, Size: sizes[addr]})
			freed = append(freed, addr)
		case r < 97:
			evs = append(evs, snapshot.Event{Action: snapshot.ActionOOM, Size: 100*MiB + rng.Int64N(400*MiB)}.WithDeviceFree(1))
		default:
			// An explicit release of a segment that existed before the trace.
			evs = append(evs, snapshot.Event{Action: snapshot.ActionSegmentFree, Addr: 1<<46 + uint64(len(evs))*SmallBuffer, Size: SmallBuffer})
		}
	}
	return &snapshot.Snapshot{DeviceTraces: [][]snapshot.Event{evs}}
}

// TestRunRecycleInvisible: recycling the blocks merges leave dead changes nothing a replay
// reports, also where the allocator completes frees on its own (a failed cudaMalloc at an
// oom event, an explicit empty_cache()) that the trace completes later.
func TestRunRecycleInvisible(t *testing.T) {
	ctx := context.Background()
	for seed := uint64(1); seed <= 12; seed++ {
		snap := randomTrace(seed, 4000)
		for _, set := range []Settings{{}, {ExpandableSegments: true}, {MaxSplitSize: 64 * MiB}, {GCThreshold: 0.7}} {
			tr, err := NewTrace(snap, 0, set)
			if err != nil {
				t.Fatal(err)
			}
			for _, capacity := range []int64{0, 600 * MiB, 2 << 30} {
				for _, events := range []int{0, len(tr.Events) / 2} {
					opt := RunOptions{Settings: set, Capacity: capacity, Baseline: true, Events: events}
					with, err := tr.Run(ctx, opt)
					if err != nil {
						t.Fatal(err)
					}
					opt.noRecycle = true
					without, err := tr.Run(ctx, opt)
					if err != nil {
						t.Fatal(err)
					}
					if !reflect.DeepEqual(with, without) {
						t.Fatalf("seed %d %s capacity %d events %d: recycling changed the replay:\n%+v\n%+v", seed, set.AllocConf(), capacity, events, with, without)
					}
				}
			}
		}
	}
}

// TestRunEvents: a replay of the first k events is the replay of a trace cut after them.
func TestRunEvents(t *testing.T) {
	ctx := context.Background()
	snap := randomTrace(3, 3000)
	tr, err := NewTrace(snap, 0, Settings{})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []int{1, 100, len(tr.Events) / 3, len(tr.Events) - 1} {
		got, err := tr.Run(ctx, RunOptions{Capacity: 600 * MiB, Events: k})
		if err != nil {
			t.Fatal(err)
		}
		cut := *tr
		cut.Events = tr.Events[:k]
		want, err := cut.Run(ctx, RunOptions{Capacity: 600 * MiB})
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
			t.Errorf("first %d events: %+v, cut trace: %+v", k, got, want)
		}
	}
}
