package tools

import (
	"container/list"
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unsafe"

	"github.com/memsnap/memsnap/analysis/load"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// LoadFunc loads one snapshot file; load.File by default.
type LoadFunc func(ctx context.Context, path string, opt load.Options) (*snapshot.Snapshot, error)

// DirLoadFunc loads a directory of per-rank snapshots; load.Dir by default.
type DirLoadFunc func(ctx context.Context, dir string, opt load.Options) ([]snapshot.Rank, error)

// Cache holds loaded snapshots keyed by path, size and modification time, and directories of
// rank snapshots keyed by path and every file's name, size and modification time, within a
// memory budget with LRU eviction. Concurrent calls for the same file share one load; the load
// is cancelled only when every caller waiting for it has gone.
//
// The budget counts the results held and the loads in flight: a load is admitted only while
// its estimated cost (EstimateLoadCost) fits beside the other loads, after evicting the least
// recently used results; one load is always admitted, so a file larger than the budget still
// loads (alone). A load stops counting when it returns or is cancelled.
type Cache struct {
	budget    int64
	loader    LoadFunc
	dirLoader DirLoadFunc
	estimate  func(path string, size int64) int64 // EstimateLoadCost; tests replace it

	mu       sync.Mutex
	used     int64
	lru      *list.List // of *cacheEntry, most recent first
	entries  map[cacheKey]*list.Element
	inflight map[cacheKey]*flight
	loads    int64         // loads started, for tests
	loading  int64         // estimated bytes of the admitted loads
	admitted int           // loads admitted and not yet returned or cancelled
	freed    chan struct{} // closed (and replaced) when an admitted load stops counting
}

type cacheKey struct {
	path  string
	size  int64
	mtime int64
}

// loaded is what one cache entry holds: a snapshot, or the ranks of a directory.
type loaded struct {
	snap  *snapshot.Snapshot
	ranks []snapshot.Rank
}

func (l loaded) empty() bool { return l.snap == nil && l.ranks == nil }

func (l loaded) cost() int64 {
	if l.snap != nil {
		return SnapshotCost(l.snap)
	}
	var n int64
	for _, r := range l.ranks {
		if r.Snap != nil {
			n += SnapshotCost(r.Snap)
		}
	}
	return n
}

type cacheEntry struct {
	key  cacheKey
	val  loaded
	cost int64
}

type flight struct {
	done     chan struct{}
	val      loaded
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
	return &Cache{budget: budget, loader: loader, dirLoader: load.Dir, lru: list.New(),
		entries: map[cacheKey]*list.Element{}, inflight: map[cacheKey]*flight{}, freed: make(chan struct{}),
		estimate: EstimateLoadCost}
}

// Cost of a load in flight, measured with /usr/bin/time on this repository's files: the peak
// RSS a load adds is 0.73-0.78x the uncompressed size on 54 MB and 296 MB pickles and 1-3x on
// the 1-3 MB real snapshots (fixed overhead dominates), 9.5x the compressed size of a gzip
// pickle (0.78x uncompressed). The estimate is 1.5x the uncompressed size plus 4 MiB.
const (
	loadCostFactor = 1.5
	loadCostBase   = 4 << 20
)

// EstimateLoadCost estimates the memory a load of the file at path, size bytes long, takes
// while in flight: loadCostFactor times the uncompressed size (read from the gzip trailer of a
// gzip file) plus loadCostBase.
func EstimateLoadCost(path string, size int64) int64 {
	return int64(loadCostFactor*float64(uncompressedSize(path, size))) + loadCostBase
}

// uncompressedSize is size, or for a gzip file the size its trailer records (ISIZE, the
// uncompressed size modulo 4 GiB; a trailer smaller than the file means it wrapped, and 8x the
// compressed size is assumed).
func uncompressedSize(path string, size int64) int64 {
	if size < 18 {
		return size
	}
	f, err := os.Open(path)
	if err != nil {
		return size
	}
	defer f.Close()
	var head [2]byte
	if _, err := f.ReadAt(head[:], 0); err != nil || head[0] != 0x1f || head[1] != 0x8b {
		return size
	}
	var tail [4]byte
	if _, err := f.ReadAt(tail[:], size-4); err != nil {
		return size
	}
	isize := int64(binary.LittleEndian.Uint32(tail[:]))
	if isize < size {
		return 8 * size
	}
	return isize
}

// admit blocks until a load of estimated cost est fits in the budget beside the results held
// and the other admitted loads (evicting results as needed), or until no other load is
// admitted. release (idempotent) makes the load stop counting.
func (c *Cache) admit(ctx context.Context, est int64) (release func(), err error) {
	for {
		c.mu.Lock()
		// Evict results only when that makes room: while loads in flight alone fill the budget,
		// the cached results stay and this load waits.
		for c.loading+est <= c.budget && c.used+c.loading+est > c.budget && c.lru.Len() > 0 {
			c.evictOldest()
		}
		if c.admitted == 0 && c.used+c.loading+est > c.budget {
			for c.lru.Len() > 0 && c.used+est > c.budget {
				c.evictOldest() // a load bigger than the budget runs alone, beside as little as possible
			}
		}
		if c.admitted == 0 || c.used+c.loading+est <= c.budget {
			c.loading += est
			c.admitted++
			c.mu.Unlock()
			var once sync.Once
			return func() {
				once.Do(func() {
					c.mu.Lock()
					c.loading -= est
					c.admitted--
					close(c.freed)
					c.freed = make(chan struct{})
					c.mu.Unlock()
				})
			}, nil
		}
		freed := c.freed
		c.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// evictOldest drops the least recently used result; c.mu is held.
func (c *Cache) evictOldest() {
	old := c.lru.Remove(c.lru.Back()).(*cacheEntry)
	delete(c.entries, old.key)
	c.used -= old.cost
}

// Loading reports the estimated bytes and the number of the loads admitted now.
func (c *Cache) Loading() (bytes int64, loads int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.loading, c.admitted
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
	if !st.Mode().IsRegular() {
		// A FIFO would block the load in open(2) until someone writes to it; a device or socket
		// is no snapshot either.
		return nil, "", &load.Error{File: path, Offset: -1, Msg: "is not a regular file (a FIFO, socket or device); give the snapshot file itself"}
	}
	key := cacheKey{path, st.Size(), st.ModTime().UnixNano()}
	version := fmt.Sprintf("%s|%d|%d", key.path, key.size, key.mtime)
	v, err := c.fetch(ctx, key, path, c.estimate(path, st.Size()), progress, func(ctx context.Context, opt load.Options) (loaded, error) {
		s, err := c.loader(ctx, path, opt)
		if s != nil {
			s.Compact() // kept for many calls: no spare event capacity
		}
		return loaded{snap: s}, err
	})
	if v.snap == nil && err == nil {
		err = fmt.Errorf("loading %s: no snapshot", path)
	}
	return v.snap, version, err
}

// getDir returns the ranks of a directory of per-rank snapshots, loaded at most once while no
// file in it changes (the key holds every regular file's name, size and modification time),
// and the version of the directory served.
func (c *Cache) getDir(ctx context.Context, dir string) ([]snapshot.Rank, string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		// Let the loader phrase the error.
		ranks, err := c.dirLoader(ctx, dir, load.Options{})
		return ranks, "", err
	}
	var b strings.Builder
	var total, est int64
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // removed meanwhile: the loader sees the same directory
		}
		fmt.Fprintf(&b, "%s|%d|%d\n", e.Name(), info.Size(), info.ModTime().UnixNano())
		total += info.Size()
		est += c.estimate(filepath.Join(dir, e.Name()), info.Size())
	}
	h := fnv.New64a()
	h.Write([]byte(b.String()))
	key := cacheKey{path: dir + "\x00dir\x00" + b.String(), size: total}
	version := fmt.Sprintf("%s|dir|%d|%x", dir, total, h.Sum64())
	v, err := c.fetch(ctx, key, dir, est, nil, func(ctx context.Context, opt load.Options) (loaded, error) {
		ranks, err := c.dirLoader(ctx, dir, opt)
		for _, r := range ranks {
			if r.Snap != nil {
				r.Snap.Compact()
			}
		}
		return loaded{ranks: ranks}, err
	})
	return v.ranks, version, err
}

// fetch returns the entry of key, loading it with fn at most once for concurrent callers; est is
// the load's estimated cost (EstimateLoadCost).
func (c *Cache) fetch(ctx context.Context, key cacheKey, name string, est int64, progress func(done, total int64),
	fn func(context.Context, load.Options) (loaded, error)) (loaded, error) {
	c.mu.Lock()
	if el, ok := c.entries[key]; ok {
		c.lru.MoveToFront(el)
		c.mu.Unlock()
		return el.Value.(*cacheEntry).val, nil
	}
	f := c.inflight[key]
	if f == nil {
		lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		f = &flight{done: make(chan struct{}), cancel: cancel, progress: map[int]func(int64, int64){}}
		c.inflight[key] = f
		c.loads++
		go c.run(lctx, key, f, est, fn)
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
		return f.val, f.err
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
		return loaded{}, fmt.Errorf("loading %s: %w", name, ctx.Err())
	}
}

// run admits the load of f (waiting for room in the budget), loads it with fn and keeps the
// result when it fits.
func (c *Cache) run(ctx context.Context, key cacheKey, f *flight, est int64, fn func(context.Context, load.Options) (loaded, error)) {
	defer f.cancel()
	var val loaded
	release, err := c.admit(ctx, est)
	if err == nil {
		// A cancelled load stops counting at once: one stuck in a system call holds no memory
		// worth counting, and one that honours its context stops soon.
		stop := context.AfterFunc(ctx, release)
		val, err = c.loadRecovered(ctx, f, fn)
		stop()
		release()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inflight[key] == f {
		delete(c.inflight, key)
	}
	f.val, f.err = val, err
	close(f.done)
	if err != nil || val.empty() || ctx.Err() != nil {
		return // a load every caller gave up on is not kept
	}
	if _, ok := c.entries[key]; ok {
		return // a newer flight for the same file finished first
	}
	cost := val.cost()
	for c.used+c.loading+cost > c.budget && c.lru.Len() > 0 {
		c.evictOldest()
	}
	if c.used+c.loading+cost > c.budget {
		return // served to the waiting callers, not kept
	}
	c.entries[key] = c.lru.PushFront(&cacheEntry{key: key, val: val, cost: cost})
	c.used += cost
}

// loadRecovered is load, with a panic (a decoder bug on a hostile file) turned into this
// load's error instead of the end of the server.
func (c *Cache) loadRecovered(ctx context.Context, f *flight, fn func(context.Context, load.Options) (loaded, error)) (val loaded, err error) {
	defer func() {
		if p := recover(); p != nil {
			val, err = loaded{}, fmt.Errorf("internal error while loading (please report it): %v", p)
		}
	}()
	return c.load(ctx, f, fn)
}

// load runs fn, passing its progress on to every caller waiting for f.
func (c *Cache) load(ctx context.Context, f *flight, fn func(context.Context, load.Options) (loaded, error)) (loaded, error) {
	return fn(ctx, load.Options{Progress: func(done, total int64) {
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
