package tools

import (
	"container/list"
	"context"
	"fmt"
	"os"
	"sync"
	"unsafe"

	"github.com/memsnap/memsnap/analysis/load"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// LoadFunc loads one snapshot file; load.File by default.
type LoadFunc func(ctx context.Context, path string, opt load.Options) (*snapshot.Snapshot, error)

// Cache holds loaded snapshots keyed by path, size and modification time, within a memory
// budget with LRU eviction. Concurrent calls for the same file share one load; the load is
// cancelled only when every caller waiting for it has gone.
type Cache struct {
	budget int64
	loader LoadFunc

	mu       sync.Mutex
	used     int64
	lru      *list.List // of *cacheEntry, most recent first
	entries  map[cacheKey]*list.Element
	inflight map[cacheKey]*flight
	loads    int64 // loads started, for tests
}

type cacheKey struct {
	path  string
	size  int64
	mtime int64
}

type cacheEntry struct {
	key  cacheKey
	snap *snapshot.Snapshot
	cost int64
}

type flight struct {
	done     chan struct{}
	snap     *snapshot.Snapshot
	err      error
	waiters  int
	cancel   context.CancelFunc
	progress map[int]func(done, total int64)
	nextID   int
}

// NewCache returns a cache with the given budget in bytes (<= 0: 4 GiB) and loader (nil: load.File).
func NewCache(budget int64, loader LoadFunc) *Cache {
	if budget <= 0 {
		budget = 4 << 30
	}
	if loader == nil {
		loader = load.File
	}
	return &Cache{budget: budget, loader: loader, lru: list.New(),
		entries: map[cacheKey]*list.Element{}, inflight: map[cacheKey]*flight{}}
}

// Loads reports how many loads the cache has started.
func (c *Cache) Loads() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.loads
}

// Used reports the estimated bytes held.
func (c *Cache) Used() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.used
}

// Get returns the snapshot at path, loading it at most once for concurrent callers. progress
// (may be nil) receives this caller's view of the load's progress.
func (c *Cache) Get(ctx context.Context, path string, progress func(done, total int64)) (*snapshot.Snapshot, error) {
	s, _, err := c.get(ctx, path, progress)
	return s, err
}

// get is Get that also returns the version of the file served ("path|size|mtime"), for memos.
func (c *Cache) get(ctx context.Context, path string, progress func(done, total int64)) (*snapshot.Snapshot, string, error) {
	st, err := os.Stat(path)
	if err != nil {
		// Let the loader phrase the error (no such file, permission denied).
		s, err := c.loader(ctx, path, load.Options{})
		return s, "", err
	}
	if st.IsDir() {
		return nil, "", &load.Error{File: path, Offset: -1, Msg: "is a directory, not a snapshot file"}
	}
	key := cacheKey{path, st.Size(), st.ModTime().UnixNano()}
	version := fmt.Sprintf("%s|%d|%d", key.path, key.size, key.mtime)
	c.mu.Lock()
	if el, ok := c.entries[key]; ok {
		c.lru.MoveToFront(el)
		c.mu.Unlock()
		return el.Value.(*cacheEntry).snap, version, nil
	}
	f := c.inflight[key]
	if f == nil {
		lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		f = &flight{done: make(chan struct{}), cancel: cancel, progress: map[int]func(int64, int64){}}
		c.inflight[key] = f
		c.loads++
		go c.run(lctx, key, f)
	}
	f.waiters++
	id := f.nextID
	f.nextID++
	if progress != nil {
		f.progress[id] = progress
	}
	c.mu.Unlock()

	select {
	case <-f.done:
		c.mu.Lock()
		delete(f.progress, id)
		c.mu.Unlock()
		return f.snap, version, f.err
	case <-ctx.Done():
		c.mu.Lock()
		delete(f.progress, id)
		f.waiters--
		if f.waiters == 0 {
			f.cancel()
			if c.inflight[key] == f {
				delete(c.inflight, key)
			}
		}
		c.mu.Unlock()
		return nil, "", fmt.Errorf("loading %s: %w", path, ctx.Err())
	}
}

func (c *Cache) run(ctx context.Context, key cacheKey, f *flight) {
	defer f.cancel()
	snap, err := c.loader(ctx, key.path, load.Options{Progress: func(done, total int64) {
		c.mu.Lock()
		fns := make([]func(int64, int64), 0, len(f.progress))
		for _, fn := range f.progress {
			fns = append(fns, fn)
		}
		c.mu.Unlock()
		for _, fn := range fns {
			fn(done, total)
		}
	}})
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inflight[key] == f {
		delete(c.inflight, key)
	}
	f.snap, f.err = snap, err
	close(f.done)
	if err != nil || snap == nil {
		return
	}
	cost := SnapshotCost(snap)
	if cost > c.budget {
		return // served to the waiting callers, not kept
	}
	for c.used+cost > c.budget && c.lru.Len() > 0 {
		old := c.lru.Remove(c.lru.Back()).(*cacheEntry)
		delete(c.entries, old.key)
		c.used -= old.cost
	}
	c.entries[key] = c.lru.PushFront(&cacheEntry{key: key, snap: snap, cost: cost})
	c.used += cost
}

// SnapshotCost estimates the memory a loaded snapshot holds, in bytes.
func SnapshotCost(s *snapshot.Snapshot) int64 {
	n := int64(unsafe.Sizeof(*s))
	n += int64(len(s.Segments)) * int64(unsafe.Sizeof(snapshot.Segment{}))
	for i := range s.Segments {
		n += int64(len(s.Segments[i].Blocks)) * int64(unsafe.Sizeof(snapshot.Block{}))
	}
	for _, evs := range s.DeviceTraces {
		n += int64(len(evs)) * int64(unsafe.Sizeof(snapshot.Event{}))
	}
	for _, f := range s.Frames {
		n += int64(unsafe.Sizeof(f)) + int64(len(f.Filename)+len(f.Name))
	}
	for _, st := range s.Stacks {
		n += 24 + int64(len(st))*4
	}
	for _, e := range s.EventExtras {
		n += int64(unsafe.Sizeof(e)) + int64(len(e.CompileContext)+len(e.UserMetadata)+len(e.ActionName))
	}
	n += int64(len(s.Annotations)) * int64(unsafe.Sizeof(snapshot.Annotation{}))
	return n
}
