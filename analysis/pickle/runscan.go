package pickle

import (
	"bytes"
	"hash/maphash"
	"runtime"
	"runtime/debug"
	"sync"
)

// runScanner works out the run cache's keys of the tracebacks ahead of the decoder, on another
// core: it walks the input in chunks, finds where a frames list's run of memo references may
// start (EMPTY_LIST MEMOIZE MARK, then BINGET or LONG_BINGET), and keys each with a keyer of
// its own (runKeyer). A key is a function of the bytes alone, so the decoder takes it instead
// of hashing when its traceback starts at a position the scanner reached first, and hashes
// itself otherwise: the result is the same either way. Positions that are not really a run
// (those bytes inside a string or a number) only cost the scanner a hash.
//
// Only for an in-place decode (the whole input in memory) large enough to pay for it.
type runScanner struct {
	input  []byte
	keys   runKeyer // with the run cache's seed
	chunks chan *scanChunk
	// free takes the chunks the decoder is done with back to the scanner: their room is
	// reused, so the scan's memory stays a few chunks' worth (garbage would wait for a GC
	// that a load's growing heap puts off, and count in RSS meanwhile).
	free chan *scanChunk
	stop chan struct{}
	wg   sync.WaitGroup
	// The decoder's side: the chunk it reads, and where in it.
	cur *scanChunk
	i   int
}

// scanChunk is the keys and lengths of the runs starting in input[start:end], in input order.
type scanChunk struct {
	start, end int
	pos        []int
	keys       []uint64
	lens       []uint16
}

const (
	scanChunkBytes = 1 << 20
	scanAhead      = 8 // chunks the scanner may be ahead
)

// runStart is what precedes a frames list's run: EMPTY_LIST MEMOIZE MARK.
var runStart = []byte("]\x94(")

// scanSlots bounds the scanners at work at once to the cores beyond one: decodes running side
// by side (diff loads two files) already fill the cores, and a scanner would only take turns
// with the decoders it serves.
var scanSlots = make(chan struct{}, max(runtime.GOMAXPROCS(0)-1, 1))

// minScanInput: smaller inputs are not worth a goroutine (a variable for tests).
var minScanInput = 8 << 20

// waitForScanner is for tests, which must see the scanner's keys taken whatever the cores and
// the scheduling: the scanner starts even on one core and waits for its slot, and the decoder
// waits for its chunks instead of hashing when the scanner is behind.
var waitForScanner = false

// startRunScanner starts a scanner over input, or returns nil when as many are already at
// work as there are spare cores.
func startRunScanner(input []byte, seed maphash.Seed) *runScanner {
	if waitForScanner {
		scanSlots <- struct{}{}
	} else {
		select {
		case scanSlots <- struct{}{}:
		default:
			return nil
		}
	}
	s := &runScanner{input: input, keys: runKeyer{seed: seed}, chunks: make(chan *scanChunk, scanAhead),
		free: make(chan *scanChunk, scanAhead+2), stop: make(chan struct{})}
	s.wg.Add(1)
	go s.scan()
	return s
}

func (s *runScanner) scan() {
	defer s.wg.Done()
	defer close(s.chunks)
	// A mapped file that shrinks under the scan faults: the scan stops (the decoder meets the
	// fault itself, where it is reported).
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if _, fault := r.(interface{ Addr() uintptr }); !fault {
				panic(r)
			}
		}
	}()
	for start := 0; start < len(s.input); start += scanChunkBytes {
		var ch *scanChunk
		select {
		case ch = <-s.free:
			ch.pos, ch.keys, ch.lens = ch.pos[:0], ch.keys[:0], ch.lens[:0]
		default:
			ch = &scanChunk{}
		}
		ch.start, ch.end = start, min(start+scanChunkBytes, len(s.input))
		for at := start; at < ch.end; {
			k := bytes.Index(s.input[at:ch.end], runStart)
			if k < 0 {
				break
			}
			at += k + 3
			if at < len(s.input) && s.input[at]|2 == 'j' {
				if key, n := s.keys.key(s.input[at:]); n > 0 {
					ch.pos = append(ch.pos, at)
					ch.keys = append(ch.keys, key)
					ch.lens = append(ch.lens, uint16(n))
					// The search goes on past the run: its memo references hold no other
					// (and a start found inside anything else only costs a key the decoder
					// never asks for).
					at += n
				}
			}
		}
		select {
		case s.chunks <- ch:
		case <-s.stop:
			return
		}
	}
}

// key returns the key and length of the run at input[at:] if the scanner has them. The
// decoder asks for increasing positions.
func (s *runScanner) key(at int) (uint64, int, bool) {
	for s.cur == nil || at >= s.cur.end {
		var ch *scanChunk
		ok := true
		if waitForScanner {
			ch, ok = <-s.chunks
		} else {
			select {
			case ch, ok = <-s.chunks:
			default:
				return 0, 0, false // the scanner is behind: the decoder hashes
			}
		}
		if !ok {
			return 0, 0, false
		}
		if s.cur != nil {
			select {
			case s.free <- s.cur:
			default:
			}
		}
		s.cur, s.i = ch, 0
	}
	if at < s.cur.start {
		return 0, 0, false
	}
	pos := s.cur.pos
	for s.i < len(pos) && pos[s.i] < at {
		s.i++
	}
	if s.i < len(pos) && pos[s.i] == at {
		return s.cur.keys[s.i], int(s.cur.lens[s.i]), true
	}
	return 0, 0, false
}

// close stops the scanner and waits for it: the input may be unmapped afterwards.
func (s *runScanner) close() {
	close(s.stop)
	for range s.chunks { // let a blocked send go
	}
	s.wg.Wait()
	<-scanSlots
}
