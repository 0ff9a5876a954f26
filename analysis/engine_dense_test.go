package analysis

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/memsnap/memsnap/analysis/load"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// allocatedBlocks is what liveSites reads of an engine: the allocated live blocks by address.
func allocatedBlocks(e *engine) map[uint64]liveBlk {
	out := map[uint64]liveBlk{}
	e.eachLive(func(addr uint64, b *liveBlk) {
		if !b.pending {
			c := *b
			c.freeReqIdx = 0
			out[addr] = c
		}
	})
	return out
}

// liveBlocks is every live block of an engine by address.
func liveBlocks(e *engine) map[uint64]liveBlk {
	out := map[uint64]liveBlk{}
	e.eachLive(func(addr uint64, b *liveBlk) { out[addr] = *b })
	return out
}

// randomTrace is a trace with every oddity a replay meets: blocks alive before it (frees
// first), allocs over live blocks, frees of unknown blocks, pending frees, segment events, and
// final blocks at addresses without events.
func randomTrace(seed uint64, n int) *snapshot.Snapshot {
	r := rand.New(rand.NewPCG(seed, 7))
	var evs []snapshot.Event
	for i := range n {
		acts := []snapshot.Action{snapshot.ActionAlloc, snapshot.ActionAlloc, snapshot.ActionFreeRequested, snapshot.ActionFreeCompleted,
			snapshot.ActionSegmentAlloc, snapshot.ActionSegmentFree, snapshot.ActionOOM}
		a := acts[r.IntN(len(acts))]
		addr := uint64(0x1000 + 512*r.IntN(64))
		evs = append(evs, snapshot.Event{Action: a, Addr: addr, Size: int64(512 * (1 + r.IntN(8))), Stack: snapshot.StackID(r.IntN(3)), TimeUS: int64(i + 1)})
	}
	seg := snapshot.Segment{Address: 0x1000, TotalSize: 1 << 20}
	for k := range 6 {
		st := snapshot.StateActiveAllocated
		if k%3 == 0 {
			st = snapshot.StateActivePendingFree
		}
		addr := uint64(0x1000 + 512*r.IntN(80)) // some beyond the trace's addresses
		seg.Blocks = append(seg.Blocks, snapshot.Block{Address: addr, Size: 512, RequestedSize: 500, State: st, Stack: 1})
	}
	return &snapshot.Snapshot{Stacks: [][]snapshot.FrameID{{}, {0}, {0}}, Frames: []snapshot.Frame{{Filename: "a.py", Name: "f"}},
		Segments: []snapshot.Segment{seg}, DeviceTraces: [][]snapshot.Event{evs}}
}

// TestDenseEngineMatchesMapEngine: the dense engine (slots by trace index) leaves exactly the
// live blocks, counters and segments the map engine does, at every point; and allocatedAt and
// allocatedBefore (back from the end, for points in the second half) give the allocated blocks
// a replay up to that point leaves, without replaying.
func TestDenseEngineMatchesMapEngine(t *testing.T) {
	snaps := map[string]*snapshot.Snapshot{}
	for s := range uint64(20) {
		snaps["random"+string(rune('a'+s))] = randomTrace(s, 400)
	}
	if files, err := filepath.Glob(filepath.Join(realDir, "*.pickle")); err == nil {
		for _, f := range files {
			s, err := load.File(context.Background(), f, load.Options{})
			if err != nil {
				t.Fatal(err)
			}
			snaps[filepath.Base(f)] = s
		}
	}
	for name, snap := range snaps {
		for _, dev := range snap.Devices() {
			seed := newEngineSeed(snap, dev)
			m, d := newEngine(snap, dev), seed.engine(true)
			n := len(m.evs)
			end := seed.engine(true)
			if err := end.run(context.Background(), n); err != nil {
				t.Fatal(err)
			}
			points := map[int]bool{-1: true, 0: true, n / 3: true, n / 2: true, n - 1: true}
			for i := -1; i < n; i++ {
				if i >= 0 {
					m.step()
					d.step()
				}
				if !points[i] && n > 2000 {
					continue
				}
				if m.allocated != d.allocated || m.active != d.active || m.reserved != d.reserved || m.unmatched != d.unmatched ||
					m.doubleAlloc != d.doubleAlloc || m.liveCount() != d.liveCount() || !reflect.DeepEqual(m.segs, d.segs) ||
					!reflect.DeepEqual(liveBlocks(m), liveBlocks(d)) {
					t.Fatalf("%s device %d after event %d: dense engine differs", name, dev, i)
				}
				at, err := seed.allocatedAt(context.Background(), i)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(allocatedBlocks(at), allocatedBlocks(m)) {
					t.Fatalf("%s device %d after event %d: allocatedAt differs from the replay", name, dev, i)
				}
				back, err := seed.allocatedBefore(context.Background(), end, i)
				if err != nil {
					t.Fatal(err)
				}
				if back.next != i+1 || !reflect.DeepEqual(allocatedBlocks(back), allocatedBlocks(m)) {
					t.Fatalf("%s device %d after event %d: allocatedBefore differs from the replay", name, dev, i)
				}
			}
			if m.consistent() != d.consistent() {
				t.Fatalf("%s device %d: consistent %v vs %v", name, dev, m.consistent(), d.consistent())
			}
		}
	}
}

// TestSiteKeysMatch: the cached keys are SiteIdentity.key and Attribution.rowKey.
func TestSiteKeysMatch(t *testing.T) {
	var c siteKeys
	for _, cat := range append(AllCategories, CategoryUserContainer, "") {
		for i, id := range []SiteIdentity{{Site: "a.py:3", File: "/x/a.py", Line: 3, Function: "f", Kind: SiteKindUser},
			{Site: SitePreTrace, Kind: SiteKindNone}, {Site: "b.py:-1", File: "b.py", Line: -1}} {
			at := Attribution{SiteIdentity: id, Category: cat}
			for _, stack := range []snapshot.StackID{snapshot.NoStack, 0, snapshot.StackID(i + 1)} {
				if got, want := c.rowKey(at, stack), at.rowKey(); got != want {
					t.Fatalf("rowKey %q, want %q", got, want)
				}
				if got, want := c.siteKey(at, stack), at.key(); got != want {
					t.Fatalf("siteKey %q, want %q", got, want)
				}
			}
		}
	}
}
