// Package pyval reads a CPython pickle (protocols 2 to 5, the opcodes torch.cuda.memory's
// _dump_snapshot writes) into the writer package's value tree, keeping each object's identity:
// a dict, list, tuple or str read back through the memo is the same *writer.Dict, *writer.List,
// *writer.Tuple or *writer.Str, so writing the tree again reproduces the file's sharing. It
// serves the benchmark tools only (bench/tilesnap, bench/gensnap's tests): it trusts its input
// and executes nothing (globals are refused).
package pyval

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"

	"github.com/memsnap/memsnap/analysis/pickle/writer"
)

// Decode reads one pickle. Integers come back as int64 (or *big.Int beyond 64 bits), floats as
// float64, strings as *writer.Str (one per str object), containers as their writer types.
func Decode(data []byte) (any, error) {
	var (
		stack []any
		marks []int
		memo  = map[uint64]any{}
		nmemo uint64
	)
	pop := func() any { v := stack[len(stack)-1]; stack = stack[:len(stack)-1]; return v }
	popMark := func() []any {
		m := marks[len(marks)-1]
		marks = marks[:len(marks)-1]
		items := append([]any(nil), stack[m:]...)
		stack = stack[:m]
		return items
	}
	u := func(p, n int) uint64 {
		var b [8]byte
		copy(b[:], data[p:p+n])
		return binary.LittleEndian.Uint64(b[:])
	}
	setItems := func(d *writer.Dict, kv []any) {
		for i := 0; i+1 < len(kv); i += 2 {
			d.Items = append(d.Items, writer.Item{Key: kv[i], Value: kv[i+1]})
		}
	}
	for p := 0; p < len(data); {
		op := data[p]
		p++
		switch op {
		case 0x80: // PROTO
			p++
		case 0x95: // FRAME
			p += 8
		case '.': // STOP
			if len(stack) != 1 {
				return nil, fmt.Errorf("pyval: %d values on the stack at STOP", len(stack))
			}
			return stack[0], nil
		case '}':
			stack = append(stack, &writer.Dict{})
		case ']':
			stack = append(stack, &writer.List{})
		case ')':
			stack = append(stack, &writer.Tuple{})
		case '(':
			marks = append(marks, len(stack))
		case 0x94: // MEMOIZE
			memo[nmemo] = stack[len(stack)-1]
			nmemo++
		case 'q': // BINPUT
			memo[uint64(data[p])] = stack[len(stack)-1]
			p++
		case 'r': // LONG_BINPUT
			memo[u(p, 4)] = stack[len(stack)-1]
			p += 4
		case 'h': // BINGET
			stack = append(stack, memo[uint64(data[p])])
			p++
		case 'j': // LONG_BINGET
			stack = append(stack, memo[u(p, 4)])
			p += 4
		case 0x8c: // SHORT_BINUNICODE
			n := int(data[p])
			stack = append(stack, &writer.Str{S: string(data[p+1 : p+1+n])})
			p += 1 + n
		case 'X': // BINUNICODE
			n := int(u(p, 4))
			stack = append(stack, &writer.Str{S: string(data[p+4 : p+4+n])})
			p += 4 + n
		case 0x8d: // BINUNICODE8
			n := int(u(p, 8))
			stack = append(stack, &writer.Str{S: string(data[p+8 : p+8+n])})
			p += 8 + n
		case 'K':
			stack = append(stack, int64(data[p]))
			p++
		case 'M':
			stack = append(stack, int64(u(p, 2)))
			p += 2
		case 'J':
			stack = append(stack, int64(int32(u(p, 4))))
			p += 4
		case 0x8a: // LONG1
			n := int(data[p])
			b := data[p+1 : p+1+n]
			p += 1 + n
			if n <= 8 {
				v := u(p-n, n)
				if n > 0 && n < 8 && b[n-1]&0x80 != 0 {
					v |= math.MaxUint64 << (8 * n)
				}
				if n == 8 && b[7]&0x80 == 0 && v > math.MaxInt64 {
					stack = append(stack, v)
				} else {
					stack = append(stack, int64(v))
				}
				break
			}
			be := make([]byte, n)
			for i := range b {
				be[n-1-i] = b[i]
			}
			x := new(big.Int).SetBytes(be)
			if b[n-1]&0x80 != 0 {
				x.Sub(x, new(big.Int).Lsh(big.NewInt(1), uint(8*n)))
			}
			stack = append(stack, x)
		case 'G': // BINFLOAT
			stack = append(stack, math.Float64frombits(binary.BigEndian.Uint64(data[p:])))
			p += 8
		case 'N':
			stack = append(stack, nil)
		case 0x88:
			stack = append(stack, true)
		case 0x89:
			stack = append(stack, false)
		case 's': // SETITEM
			v, k := pop(), pop()
			setItems(stack[len(stack)-1].(*writer.Dict), []any{k, v})
		case 'u': // SETITEMS
			kv := popMark()
			setItems(stack[len(stack)-1].(*writer.Dict), kv)
		case 'a': // APPEND
			v := pop()
			l := stack[len(stack)-1].(*writer.List)
			l.Items = append(l.Items, v)
		case 'e': // APPENDS
			items := popMark()
			l := stack[len(stack)-1].(*writer.List)
			l.Items = append(l.Items, items...)
		case 0x85: // TUPLE1
			stack[len(stack)-1] = &writer.Tuple{Items: []any{stack[len(stack)-1]}}
		case 0x86: // TUPLE2
			t := &writer.Tuple{Items: append([]any(nil), stack[len(stack)-2:]...)}
			stack = append(stack[:len(stack)-2], t)
		case 0x87: // TUPLE3
			t := &writer.Tuple{Items: append([]any(nil), stack[len(stack)-3:]...)}
			stack = append(stack[:len(stack)-3], t)
		case 't': // TUPLE
			stack = append(stack, &writer.Tuple{Items: popMark()})
		default:
			return nil, fmt.Errorf("pyval: opcode 0x%02x at byte %d not supported", op, p-1)
		}
	}
	return nil, fmt.Errorf("pyval: no STOP")
}

// Get returns the value under key k of dict d (nil when absent or d is not a dict).
func Get(d any, k string) any {
	dd, ok := d.(*writer.Dict)
	if !ok {
		return nil
	}
	for _, it := range dd.Items {
		if s, ok := it.Key.(*writer.Str); ok && s.S == k {
			return it.Value
		}
	}
	return nil
}

// Str is the text of a string value ("" for anything else).
func Str(v any) string {
	if s, ok := v.(*writer.Str); ok {
		return s.S
	}
	return ""
}

// OpMix counts the opcodes of a pickle's trace: from the string "device_traces" to the next
// top-level key that follows it in PyTorch's dumps ("allocator_settings",
// "external_annotations") or the end.
type OpMix struct {
	Dicts   int // EMPTY_DICT: the trace events (and frame dicts first met in the trace)
	Strings int // SHORT_BINUNICODE, BINUNICODE, BINUNICODE8
	Puts    int // MEMOIZE, BINPUT, LONG_BINPUT
	Gets    int // BINGET, LONG_BINGET
}

// PerDict is a count per trace dict.
func (m OpMix) PerDict(n int) float64 { return float64(n) / float64(max(m.Dicts, 1)) }

// Mix walks the opcodes of data (the forms Decode reads) and counts its trace's.
func Mix(data []byte) (OpMix, error) {
	var m OpMix
	in := false
	u := func(p, n int) int {
		var b [8]byte
		copy(b[:], data[p:p+n])
		return int(binary.LittleEndian.Uint64(b[:]))
	}
	for p := 0; p < len(data); {
		op := data[p]
		p++
		var s string
		switch op {
		case 0x80, 'q', 'h', 'K':
			p++
		case 0x95, 'G':
			p += 8
		case 'r', 'j', 'J':
			p += 4
		case 'M':
			p += 2
		case 0x8a:
			p += 1 + int(data[p])
		case 0x8c:
			n := int(data[p])
			s, p = string(data[p+1:p+1+n]), p+1+n
		case 'X':
			n := u(p, 4)
			s, p = string(data[p+4:p+4+n]), p+4+n
		case 0x8d:
			n := u(p, 8)
			s, p = string(data[p+8:p+8+n]), p+8+n
		case '.':
			return m, nil
		case '}', ']', ')', '(', 0x94, 'N', 0x88, 0x89, 's', 'u', 'a', 'e', 0x85, 0x86, 0x87, 't':
		default:
			return m, fmt.Errorf("pyval: opcode 0x%02x at byte %d not supported", op, p-1)
		}
		switch s {
		case "device_traces":
			in = true
		case "allocator_settings", "external_annotations":
			in = false
		}
		if !in {
			continue
		}
		switch op {
		case '}':
			m.Dicts++
		case 0x8c, 'X', 0x8d:
			m.Strings++
		case 0x94, 'q', 'r':
			m.Puts++
		case 'h', 'j':
			m.Gets++
		}
	}
	return m, fmt.Errorf("pyval: no STOP")
}
