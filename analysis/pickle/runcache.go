package pickle

import (
	"bytes"
	"hash/maphash"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// runCache remembers the tracebacks already read: a run of BINGET / LONG_BINGET frame
// references ending in APPENDS, with the stack those frames intern to. Real files repeat a few
// thousand tracebacks millions of times, each written as the same bytes (the same memo
// slots), so a repeated traceback costs a hash instead of a memo read, a hash step and an
// interner compare per frame.
//
// A run is filed under a 64-bit hash of its exact bytes (up to its APPENDS) and its length
// (runKeyer), and a lookup that finds both takes the stack without comparing the bytes. The
// hash is seeded at random per process, so two different runs match only if they collide on
// all 64 bits: about 2^-62 per lookup (up to four entries are compared), 2^-42 over the
// million tracebacks of a 300 MB file, and a file cannot be written to make it likelier
// without knowing the seed. Not reading the bytes again is the point: on a hit they are most
// of the input, the run scanner has hashed them on another core already, and the decoder
// then never touches them.
//
// An entry is valid while the memo slots it names hold the same frames: memo slots are only
// ever rewritten by an explicit PUT (or MEMOIZE) over a slot that exists, which drops every
// entry at once (and after maxInvalidations of those the cache stays off: no snapshot
// writer rewrites its memo). Memory is bounded: the table has at most maxRunBuckets buckets.
type runCache struct {
	// table holds 4-way buckets of one cache line each, a power of two of them.
	table []runBucket
	used  int // entries recorded since the table last grew
	keys  runKeyer
	// invalidations counts memo rewrites; off is set once there were too many.
	invalidations int
	off           bool
	// pending is the miss being decoded the slow way: its key and length, and the input
	// offset at which the run must end (its APPENDS) to be recorded.
	pendKey uint64
	pendLen int
	pendEnd int64
	pending bool
}

// runBucket is four entries; a hit moves an entry one way toward the front, a new entry
// takes the last way, so the runs met most often stay.
type runBucket [4]runEntry

type runEntry struct {
	key uint64 // the run's key (runKeyer)
	id  snapshot.StackID
	n   uint16 // the run's length in bytes; 0 for an empty way
}

const (
	minRunBuckets = 1 << 6
	maxRunBuckets = 1 << 12 // 16 Ki entries in 256 KiB
	// maxRunBytes: longer runs (a 300-frame C++ stack is 1.5 KB) are not cached.
	maxRunBytes = 4096
	// maxInvalidations: after this many memo rewrites the cache stays off.
	maxInvalidations = 16
)

func newRunCache() *runCache {
	return &runCache{keys: runKeyer{seed: maphash.MakeSeed()}, table: make([]runBucket, minRunBuckets)}
}

// invalidate drops every entry (a memo slot was rewritten).
func (c *runCache) invalidate() {
	if c.invalidations++; c.invalidations > maxInvalidations {
		c.off = true
	}
	c.clear()
}

func (c *runCache) clear() {
	clear(c.table)
	c.used = 0
	c.pending = false
}

// scanRun measures a run of frame references at the start of buf: the length of the run
// when it ends in APPENDS within buf and within maxRunBytes, else 0.
func scanRun(buf []byte) int {
	// 'h' (BINGET, 2 bytes) and 'j' (LONG_BINGET, 5 bytes) differ only in bit 1, which gives
	// the width without a branch.
	n, lim := 0, min(len(buf), maxRunBytes+1)
	for n < lim {
		c := buf[n]
		if c|2 != 'j' {
			break
		}
		n += 2 + 3*int(c>>1&1)
	}
	if n == 0 || n >= len(buf) || n > maxRunBytes || buf[n] != 'e' {
		return 0
	}
	return n
}

// runKeyer works out run keys: the hash of a run's bytes up to its APPENDS, and its length (0
// when the bytes do not start with a run the cache takes). The length takes a walk over the
// run, reference by reference, each waiting for the byte that says where the next starts, so
// a keyer walks a run only the first time it meets its bytes. It finds the first 'e' byte
// (APPENDS, or a byte of a memo index) by a vectorised search instead, and remembers a run's
// length by the hash of its bytes before that 'e': a run met again has the same bytes, so the
// same length. For other bytes with the same prefix the remembered length is only a guess,
// which is enough: the key is then the hash of the bytes up to the guessed APPENDS, and only a
// run decoded and filed with exactly those bytes and that length matches it, which then is
// this run (the same bytes parse the same way). A guess not followed by an 'e' is walked.
//
// The key is a function of the bytes alone, whatever the keyer remembers: the run scanner and
// the decoder, each with a keyer of its own, work out the same keys.
type runKeyer struct {
	seed    maphash.Seed
	lengths []runLength // direct-mapped by the prefix's hash; made on first use
}

type runLength struct {
	prefix uint64
	n      uint16
}

// runLengths is the size of runKeyer.lengths (a power of two).
const runLengths = 1 << 14

// key returns the key and the length of the run at the start of run (0, 0 for none).
func (k *runKeyer) key(run []byte) (uint64, int) {
	q := bytes.IndexByte(run[:min(len(run), maxRunBytes+1)], 'e')
	if q <= 0 {
		return 0, 0
	}
	if k.lengths == nil {
		k.lengths = make([]runLength, runLengths)
	}
	prefix := maphash.Bytes(k.seed, run[:q])
	g := &k.lengths[prefix&(runLengths-1)]
	n := int(g.n)
	if g.prefix != prefix || n == 0 || n >= len(run) || run[n] != 'e' {
		if n = scanRun(run); n == 0 {
			return 0, 0
		}
		g.prefix, g.n = prefix, uint16(n)
	}
	if n == q {
		return prefix, q
	}
	return maphash.Bytes(k.seed, run[:n]), n
}

// learn remembers n as the length of the run at the start of run (decoded: it ends in
// APPENDS there).
func (k *runKeyer) learn(run []byte, n int) {
	if q := bytes.IndexByte(run[:n+1], 'e'); q > 0 && k.lengths != nil {
		prefix := maphash.Bytes(k.seed, run[:q])
		k.lengths[prefix&(runLengths-1)] = runLength{prefix: prefix, n: uint16(n)}
	}
}

// find looks up the cached run of the given key and length: its stack, and whether there is
// one.
func (c *runCache) find(key uint64, n int) (snapshot.StackID, bool) {
	b := &c.table[key&uint64(len(c.table)-1)]
	for w := range b {
		e := &b[w]
		if e.key == key && int(e.n) == n {
			id := e.id
			if w > 0 {
				b[w-1], b[w] = b[w], b[w-1]
			}
			return id, true
		}
	}
	return 0, false
}

// runKeyAt is the key and length of the run at the start of run, which is at input offset
// off: the scanner's when it has them (ahead), else worked out here.
func (d *decoder) runKeyAt(run []byte, off int) (key uint64, n int, ahead bool) {
	if d.scan != nil {
		if key, n, ok := d.scan.key(off); ok {
			d.keysAhead++
			return key, n, true
		}
	}
	key, n = d.runs.keys.key(run)
	return key, n, false
}

// lookupRunAt finds the stack of a cached run at buf[at:] (followed by its APPENDS), changing
// nothing but the cache's order: the stack, the run's length, and whether it was found.
func (d *decoder) lookupRunAt(buf []byte, at int) (snapshot.StackID, int, bool) {
	c := d.runs
	run := buf[at:]
	if c.off || len(run) == 0 || run[0]|2 != 'j' {
		return 0, 0, false
	}
	key, n, _ := d.runKeyAt(run, int(d.base)+at)
	if n == 0 {
		return 0, 0, false
	}
	id, ok := c.find(key, n)
	return id, n, ok
}

// cachedRun handles a traceback whose bytes were seen before: right after the MARK of an
// empty list, when the window holds a whole run of frame references ending in APPENDS that
// the cache knows, it fills the list with the stack's frames, records the stack, and leaves
// the input at the APPENDS, exactly where frameRun would. Otherwise it returns false, having
// noted the run (pending) so that frameRun can record it once decoded.
func (d *decoder) cachedRun(lst *object) bool {
	c := d.runs
	c.pending = false
	if c.off {
		return false
	}
	buf := d.buf[d.pos:d.end]
	if len(buf) == 0 || buf[0]|2 != 'j' {
		return false
	}
	key, n, _ := d.runKeyAt(buf, int(d.base)+d.pos)
	if n == 0 {
		return false
	}
	if id, ok := c.find(key, n); ok {
		lst.frames = append(lst.frames[:0], d.in.Stacks[id]...)
		lst.hashedN = -1
		lst.known, lst.knownN = id, int32(len(lst.frames))
		d.pos += n
		return true
	}
	c.pendKey, c.pendLen, c.pendEnd, c.pending = key, n, d.offset()+int64(n), true
	return false
}

// recordRun is called by frameRun when a run that cachedRun noted has been decoded to its
// APPENDS: if its stack is already interned, the run's key now stands for it. (A stack seen
// for the first time is interned later, where the list is reduced, so that stack ids keep
// their order of first appearance; the run is recorded at its next occurrence.)
func (d *decoder) recordRun(lst *object, h uint64) {
	c := d.runs
	if !c.pending || d.offset() != c.pendEnd {
		return
	}
	c.pending = false
	id, ok := d.in.Find(lst.frames, h)
	if !ok {
		return
	}
	c.file(c.pendKey, c.pendLen, id)
	lst.known, lst.knownN = id, int32(len(lst.frames))
}

// put records the run of n bytes at the start of buf (followed by its APPENDS) as stack id.
func (c *runCache) put(buf []byte, n int, id snapshot.StackID) {
	if c.off || n == 0 || n > maxRunBytes {
		return
	}
	key, kn := c.keys.key(buf)
	if kn != n {
		// The keyer guessed the length of another run with the same first bytes: the key is
		// that of the run as decoded, and the keyer learns its length.
		key = maphash.Bytes(c.keys.seed, buf[:n])
		c.keys.learn(buf, n)
	}
	c.file(key, n, id)
}

// file enters the run of the given key and length n.
func (c *runCache) file(key uint64, n int, id snapshot.StackID) {
	if c.used++; c.used > 2*len(c.table) && len(c.table) < maxRunBuckets {
		c.grow()
	}
	b := &c.table[key&uint64(len(c.table)-1)]
	w := len(b) - 1
	for k := range b {
		if b[k].n == 0 {
			w = k
			break
		}
	}
	b[w] = runEntry{key: key, n: uint16(n), id: id}
}

// grow makes the table four times larger and files the entries again by their keys (the
// entries of a bucket spread over four buckets of the new table, none over another's).
func (c *runCache) grow() {
	old := c.table
	c.table = make([]runBucket, 4*len(old))
	c.used = 0
	for i := range old {
		for _, e := range old[i] {
			if e.n == 0 {
				continue
			}
			b := &c.table[e.key&uint64(len(c.table)-1)]
			for w := range b {
				if b[w].n == 0 {
					b[w] = e
					c.used++
					break
				}
			}
		}
	}
}
