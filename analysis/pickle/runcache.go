package pickle

import (
	"bytes"
	"hash/maphash"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// runCache remembers the bytes of tracebacks already read: a run of BINGET / LONG_BINGET
// frame references ending in APPENDS, with the stack those frames intern to. Real files
// repeat a few thousand tracebacks millions of times, each written as the same bytes (the
// same memo slots), so a repeated traceback costs a scan, a hash and one compare instead of
// a memo read, a hash step and an interner compare per frame.
//
// An entry is valid while the memo slots it names hold the same frames: memo slots are only
// ever rewritten by an explicit PUT (or MEMOIZE) over a slot that exists, which drops every
// entry at once (and after maxInvalidations of those the cache stays off: no snapshot
// writer rewrites its memo). Memory is bounded: the table has at most maxRunBuckets
// buckets, and the arena of run bytes is cleared when it reaches its limit.
type runCache struct {
	// table holds 4-way buckets of one cache line each, a power of two of them.
	table []runBucket
	used  int // entries recorded since the table last grew
	arena []byte
	seed  maphash.Seed
	// invalidations counts memo rewrites; off is set once there were too many.
	invalidations int
	off           bool
	// pending is the miss being decoded the slow way: its hash, where its bytes sit in the
	// arena, and the input offset at which the run must end (its APPENDS) to be recorded.
	pendHash uint64
	pendOff  uint32
	pendLen  uint32
	pendEnd  int64
	pending  bool
}

// runBucket is four entries; a hit moves an entry one way toward the front, a new entry
// takes the last way, so the runs met most often stay.
type runBucket [4]runEntry

type runEntry struct {
	tag uint32 // the high half of the run's hash, 0 for an empty way
	off uint32 // the run's bytes: arena[off : off+n]
	id  snapshot.StackID
	n   uint16
}

const (
	minRunBuckets = 1 << 6
	maxRunBuckets = 1 << 12 // 16 Ki entries in 256 KiB
	// maxRunBytes: longer runs (a 300-frame C++ stack is 1.5 KB) are not cached.
	maxRunBytes = 4096
	// maxRunArena bounds the bytes of all cached runs together.
	maxRunArena = 16 << 20
	// maxInvalidations: after this many memo rewrites the cache stays off.
	maxInvalidations = 16
)

func newRunCache() *runCache {
	return &runCache{seed: maphash.MakeSeed(), table: make([]runBucket, minRunBuckets)}
}

func runTag(h uint64) uint32 { return uint32(h>>32) | 1 }

// invalidate drops every entry (a memo slot was rewritten).
func (c *runCache) invalidate() {
	if c.invalidations++; c.invalidations > maxInvalidations {
		c.off = true
	}
	c.clear()
}

func (c *runCache) clear() {
	clear(c.table)
	c.arena = c.arena[:0]
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

// runKey is the hash a run is filed under: that of its bytes up to the first 'e' byte (0x65,
// APPENDS: the run's end, or a byte of a memo index). It can be taken at the start of a run
// without decoding the run opcode by opcode (a vectorised search finds the byte): a run whose
// bytes are a cached run's, followed by APPENDS, is that run, whatever the first 'e' was.
func (c *runCache) runKey(buf []byte) uint64 { return runKeyOf(c.seed, buf) }

func runKeyOf(seed maphash.Seed, buf []byte) uint64 {
	key, _ := runKeyAndEnd(seed, buf)
	return key
}

// runKeyAndEnd is runKeyOf with the number of bytes it hashed (up to the first 'e').
func runKeyAndEnd(seed maphash.Seed, buf []byte) (uint64, int) {
	q := bytes.IndexByte(buf[:min(len(buf), maxRunBytes+1)], 'e')
	if q < 0 {
		q = min(len(buf), maxRunBytes+1)
	}
	return maphash.Bytes(seed, buf[:q]), q
}

// find looks up the cached run that buf starts with (followed by APPENDS), key its runKey:
// the stack, the run's length, and whether there is one.
func (c *runCache) find(buf []byte, key uint64) (snapshot.StackID, int, bool) {
	b := &c.table[key&uint64(len(c.table)-1)]
	tag := runTag(key)
	for w := range b {
		e := &b[w]
		n := int(e.n)
		if e.tag == tag && n < len(buf) && buf[n] == 'e' && string(c.arena[e.off:e.off+uint32(n)]) == string(buf[:n]) {
			id := e.id
			if w > 0 {
				b[w-1], b[w] = b[w], b[w-1]
			}
			return id, n, true
		}
	}
	return 0, 0, false
}

// lookupRunAt finds the stack of a cached run at buf[at:] (followed by its APPENDS), changing
// nothing but the cache's order: the stack, the run's length, and whether it was found. It
// takes the run's key from the run scanner when it has it.
func (d *decoder) lookupRunAt(buf []byte, at int) (snapshot.StackID, int, bool) {
	c := d.runs
	run := buf[at:]
	if c.off || len(run) == 0 || run[0]|2 != 'j' {
		return 0, 0, false
	}
	if d.scan != nil {
		if key, ok := d.scan.key(int(d.base) + at); ok {
			d.keysAhead++
			return c.find(run, key)
		}
	}
	return c.find(run, c.runKey(run))
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
	key, ahead := uint64(0), false
	if d.scan != nil {
		key, ahead = d.scan.key(int(d.base) + d.pos)
	}
	if ahead {
		d.keysAhead++
	} else {
		key = c.runKey(buf)
	}
	if id, n, ok := c.find(buf, key); ok {
		lst.frames = append(lst.frames[:0], d.in.Stacks[id]...)
		lst.hashedN = -1
		lst.known, lst.knownN = id, int32(len(lst.frames))
		d.pos += n
		return true
	}
	n := scanRun(buf)
	if n == 0 {
		return false
	}
	if len(c.arena)+n > maxRunArena {
		c.clear()
	}
	c.pendHash, c.pendOff, c.pendLen, c.pendEnd, c.pending = key, uint32(len(c.arena)), uint32(n), d.offset()+int64(n), true
	c.arena = append(c.arena, buf[:n]...)
	return false
}

// recordRun is called by frameRun when a run that cachedRun noted has been decoded to its
// APPENDS: if its stack is already interned, the run's bytes now stand for it. (A stack seen
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
		c.arena = c.arena[:c.pendOff]
		return
	}
	c.file(c.pendHash, c.pendOff, c.pendLen, id)
	lst.known, lst.knownN = id, int32(len(lst.frames))
}

// put records the run of n bytes at the start of buf (followed by its APPENDS) as stack id.
func (c *runCache) put(buf []byte, n int, id snapshot.StackID) {
	if c.off || n == 0 || n > maxRunBytes {
		return
	}
	if len(c.arena)+n > maxRunArena {
		c.clear()
	}
	key, off := c.runKey(buf), uint32(len(c.arena))
	c.arena = append(c.arena, buf[:n]...)
	c.file(key, off, uint32(n), id)
}

// file enters a run whose bytes are arena[off : off+n] under its key.
func (c *runCache) file(key uint64, off, n uint32, id snapshot.StackID) {
	if c.used++; c.used > 2*len(c.table) && len(c.table) < maxRunBuckets {
		c.grow()
	}
	b := &c.table[key&uint64(len(c.table)-1)]
	w := len(b) - 1
	for k := range b {
		if b[k].tag == 0 {
			w = k
			break
		}
	}
	b[w] = runEntry{tag: runTag(key), off: off, n: uint16(n), id: id}
}

// grow makes the table four times larger. Entries do not keep their full hash, so they are
// dropped (and recorded again as they are met; their bytes stay in the arena until it is
// cleared).
func (c *runCache) grow() {
	c.table = make([]runBucket, 4*len(c.table))
	c.used = 0
}
