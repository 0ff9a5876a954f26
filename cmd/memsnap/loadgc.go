package main

import (
	"context"
	"os"
	"runtime"
	"runtime/debug"
	"sync"

	"github.com/memsnap/memsnap/analysis/load"
	"github.com/memsnap/memsnap/analysis/snapshot"
	"github.com/memsnap/memsnap/tools"
)

// loadGCPercent is the garbage collector's target while the server loads: the CLI's (see
// root.go). A load's heap is nearly all the snapshot it builds, which stays live: at Go's
// default the collector starts again each time the heap doubles and marks it all anew. On the
// 969 MB bench file a cold MCP summarize call took 1.86-2.25 s at the default against
// 1.30-1.42 s at 200 (the CLI: 1.27-1.41 s).
const loadGCPercent = 200

// loadGC raises the collector's target to loadGCPercent while at least one load is in flight
// and puts back the one it found after the last, so that the snapshots the server keeps for
// long live under Go's default between loads. The soft memory limit (serve's --cache-mb) still
// bounds the heap meanwhile.
type loadGC struct {
	mu   sync.Mutex
	n    int // loads in flight
	prev int // the target before the first of them
	// set changes the target and returns the one before (debug.SetGCPercent), collect runs a
	// collection (runtime.GC): tests replace them.
	set     func(int) int
	collect func()
}

func newLoadGC() *loadGC { return &loadGC{set: debug.SetGCPercent, collect: runtime.GC} }

func (g *loadGC) begin() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n == 0 {
		g.prev = g.set(loadGCPercent)
	}
	g.n++
}

func (g *loadGC) end() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n--
	if g.n == 0 {
		g.set(g.prev)
	}
}

// inFlight is the number of loads under way.
func (g *loadGC) inFlight() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n
}

// file wraps load.File, dir load.Dir. What a decoder leaves is garbage once its load ends
// (tens of MB on a large file), and the next collection may be far off: after a large load it
// is collected, as the CLI does, so that the analysis that follows reuses those pages instead
// of new ones the kernel must zero first. After a small one it is not worth a collection of
// the whole heap, which holds the cache's snapshots.
func (g *loadGC) file(fn tools.LoadFunc) tools.LoadFunc {
	return func(ctx context.Context, path string, opt load.Options) (s *snapshot.Snapshot, err error) {
		g.begin()
		// Deferred: a loader that panics (the cache recovers it) must not leave the target raised.
		defer func() {
			g.end()
			if s != nil {
				g.collectAfter(tools.SnapshotCost(s))
			}
		}()
		return fn(ctx, path, opt)
	}
}

func (g *loadGC) dir(fn tools.DirLoadFunc) tools.DirLoadFunc {
	return func(ctx context.Context, dir string, opt load.Options) (ranks []snapshot.Rank, err error) {
		g.begin()
		defer func() {
			g.end()
			var cost int64
			for _, r := range ranks {
				if r.Snap != nil {
					cost += tools.SnapshotCost(r.Snap)
				}
			}
			g.collectAfter(cost)
		}()
		return fn(ctx, dir, opt)
	}
}

// minCollectBytes: loads of snapshots smaller than this leave too little garbage to collect.
const minCollectBytes = 16 << 20

// collectAfter collects the garbage of a load of snapshots that hold cost bytes, if large.
func (g *loadGC) collectAfter(cost int64) {
	if cost >= minCollectBytes {
		g.collect()
	}
}

// serverLoaders are the loaders of `memsnap serve`: load.File and load.Dir under loadGC,
// unless GOGC is set (the user's choice stands).
func serverLoaders() (tools.LoadFunc, tools.DirLoadFunc) {
	if os.Getenv("GOGC") != "" {
		return nil, nil
	}
	g := newLoadGC()
	return g.file(load.File), g.dir(load.Dir)
}
