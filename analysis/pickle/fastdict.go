package pickle

import (
	"encoding/binary"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// maxFastPairs bounds the key/value pairs of a dict fastDict takes (a trace event has at most
// a dozen keys).
const maxFastPairs = 16

// fastDict is the hot path of a snapshot's trace events and blocks: a dict written as
//
//	EMPTY_DICT MEMOIZE MARK (key value)* SETITEMS
//
// whose keys are memoized strings (BINGET, LONG_BINGET) and whose values are small integers,
// None, booleans, memoized plain values, or a frames list: an empty one (EMPTY_LIST MEMOIZE)
// or a traceback the run cache knows (EMPTY_LIST MEMOIZE MARK run APPENDS). buf[pos] is the
// EMPTY_DICT. It reads the whole dict first, changing nothing; only when every part is of
// those forms does it commit, leaving exactly the state the opcodes would have left one by
// one: the dict object filled and memoized, each frames list's memo slot holding its stack
// (the list itself, reduced when SETITEMS stored it, needs no object), the dict on the stack.
// It returns the position after the SETITEMS, or -1 (nothing done) for anything else.
func (d *decoder) fastDict(buf []byte, pos int) int {
	if pos+3 > len(buf) || buf[pos+1] != 0x94 || buf[pos+2] != '(' || len(d.marks) >= maxDepth*64 {
		return -1
	}
	var items [2 * maxFastPairs]val
	var lists [maxFastPairs]snapshot.StackID // the stacks of inline frames lists, in memo order
	n, nl := 0, 0
	p := pos + 3
	for {
		// A key and a value take at most 5 + 10 bytes: all are in the window.
		if p+16 > len(buf) {
			return -1
		}
		c := buf[p]
		if c == 'u' {
			break
		}
		if n == len(items) {
			return -1
		}
		var idx uint64
		switch c {
		case 'h':
			idx, p = uint64(buf[p+1]), p+2
		case 'j':
			idx, p = uint64(binary.LittleEndian.Uint32(buf[p+1:])), p+5
		default:
			return -1
		}
		k, _ := d.memo.get(idx)
		if k.k != kStr {
			return -1
		}
		var v val
		switch buf[p] {
		case 'K': // BININT1
			v, p = val{k: kInt, x: uint64(buf[p+1])}, p+2
		case 'M': // BININT2
			v, p = val{k: kInt, x: uint64(binary.LittleEndian.Uint16(buf[p+1:]))}, p+3
		case 'J': // BININT
			v, p = val{k: kInt, x: uint64(int64(int32(binary.LittleEndian.Uint32(buf[p+1:]))))}, p+5
		case 0x8a: // LONG1 of at most 8 bytes
			m := int(buf[p+1])
			if m > 8 {
				return -1
			}
			v = decodeLong8(buf[p+2:], m) // the window holds its 8 bytes
			p += 2 + m
		case 'N':
			v, p = val{k: kNone}, p+1
		case 0x88:
			v, p = val{k: kBool, x: 1}, p+1
		case 0x89:
			v, p = val{k: kBool}, p+1
		case 'h', 'j':
			var vi uint64
			if buf[p] == 'h' {
				vi, p = uint64(buf[p+1]), p+2
			} else {
				vi, p = uint64(binary.LittleEndian.Uint32(buf[p+1:])), p+5
			}
			s, ok := d.memo.get(vi)
			if !ok {
				return -1
			}
			switch v = d.resolved(s); v.k {
			case kStr, kInt, kUint, kFloat, kBool, kNone, kStack:
			default: // containers (sharing is tracked), unset slots, anything rarer
				return -1
			}
		case ']': // a frames list
			if d.keys[k.x] != keyFrames || buf[p+1] != 0x94 || nl == len(lists) {
				return -1
			}
			if buf[p+2] != '(' { // EMPTY_LIST MEMOIZE: an empty traceback
				v, p = val{k: kStack, x: uint64(snapshot.EmptyStack)}, p+2
			} else {
				id, m, ok := d.lookupRunAt(buf, p+3)
				if !ok {
					return -1
				}
				v, p = val{k: kStack, x: uint64(id)}, p+3+m+1 // past the APPENDS
			}
			lists[nl] = snapshot.StackID(v.x)
			nl++
		default:
			return -1
		}
		items[n], items[n+1] = k, v
		n += 2
	}
	// Commit. The dict takes the next memo slot, each inline list the one after.
	dict := d.newObj(kDict, nil)
	o := &d.objs[dict.x]
	o.items = append(growItems(o.items, n), items[:n]...)
	d.push(dict)
	d.memoize(d.memo.n, &d.stack[len(d.stack)-1])
	for _, id := range lists[:nl] {
		d.memo.set(d.memo.n, val{k: kStack, x: uint64(id)})
	}
	return p + 1
}
