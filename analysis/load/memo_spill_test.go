package load

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"testing"
)

// pickleBuilder writes protocol 4 opcodes by hand and numbers the memo slots it fills.
type pickleBuilder struct {
	b    []byte
	memo uint32
}

func (p *pickleBuilder) op(b ...byte) { p.b = append(p.b, b...) }

// memoize is MEMOIZE: the stack top takes the next slot, returned.
func (p *pickleBuilder) memoize() uint32 { p.op(0x94); p.memo++; return p.memo - 1 }

func (p *pickleBuilder) str(s string) uint32 {
	p.op(0x8c, byte(len(s)))
	p.b = append(p.b, s...)
	return p.memoize()
}

func (p *pickleBuilder) get(slot uint32) {
	p.op('j')
	p.b = binary.LittleEndian.AppendUint32(p.b, slot)
}

// long is LONG1 of 8 bytes.
func (p *pickleBuilder) long(x uint64) { p.op(0x8a, 8); p.b = binary.LittleEndian.AppendUint64(p.b, x) }

func (p *pickleBuilder) float(f float64) {
	p.op('G')
	p.b = binary.BigEndian.AppendUint64(p.b, math.Float64bits(f))
}

// TestMemoizedValuesThatSpill: values whose memo slot cannot hold them packed (a negative int,
// a float, ints of 61 and 64 bits) read back through BINGET exactly, in the allocator
// settings and in a trace event's address (the second event names the first one's keys, its
// address and its time through the memo), as the gopickle oracle reads them. Pickle writers memoize
// only strings and containers, so only such an input reaches the memo's spill path.
func TestMemoizedValuesThatSpill(t *testing.T) {
	var p pickleBuilder
	p.op(0x80, 4, '}')
	p.memoize()
	p.op('(')
	p.str("segments")
	p.op(']')
	p.memoize()
	p.str("allocator_settings")
	p.op('}')
	p.memoize()
	p.op('(')
	p.str("held_negative")
	p.op('J')
	p.b = binary.LittleEndian.AppendUint32(p.b, 0xffffffff) // -1
	neg := p.memoize()
	p.str("held_float")
	p.float(0.625)
	flt := p.memoize()
	p.str("held_huge")
	p.long(1<<63 + 12345) // an 8-byte LONG1 with the sign bit: -2^63 + 12345
	huge := p.memoize()
	p.str("max_split_size")
	p.get(neg)
	p.str("garbage_collection_threshold")
	p.get(flt)
	p.str("again_huge")
	p.get(huge)
	p.op('u')
	p.str("device_traces")
	p.op(']')
	p.memoize()
	p.op('(', ']') // device 0's trace
	p.memoize()
	p.op('(')
	// The first event: every key and value new.
	p.op('}')
	p.memoize()
	p.op('(')
	kAction := p.str("action")
	p.str("alloc")
	kAddr := p.str("addr")
	p.long(1<<60 + 1<<20) // 61 bits: spills
	addr := p.memoize()
	kSize := p.str("size")
	p.op('M', 0, 2) // 512
	kStream := p.str("stream")
	p.op('K', 0)
	kTime := p.str("time_us")
	p.long(1772688726282825) // a time in µs: packs
	tus := p.memoize()
	p.op('u')
	// The second: its free, every key and the address and time read back from the memo.
	p.op('}')
	p.memoize()
	p.op('(')
	p.get(kAction)
	p.str("free_completed")
	p.get(kAddr)
	p.get(addr)
	p.get(kSize)
	p.op('M', 0, 2)
	p.get(kStream)
	p.op('K', 0)
	p.get(kTime)
	p.get(tus)
	p.op('u')
	p.op('e', 'e', 'u', '.') // APPENDS (events), APPENDS (traces), SETITEMS, STOP
	data := p.b

	got, err := Reader(context.Background(), bytes.NewReader(data), "spill.pickle", int64(len(data)), Options{})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	assertSameModel(t, "spill.pickle", got, oracle(t, data))
	// And the values themselves, so that a fault shared with the oracle's conversion shows.
	if s := got.Settings; s.MaxSplitSize != -1 || s.GCThreshold != 0.625 {
		t.Errorf("settings: max_split_size %d, garbage_collection_threshold %v; want -1, 0.625", s.MaxSplitSize, s.GCThreshold)
	}
	if h, ok := got.Settings.Raw["again_huge"].(int64); !ok || h != math.MinInt64+12345 {
		t.Errorf("settings again_huge = %#v, want %d", got.Settings.Raw["again_huge"], int64(math.MinInt64+12345))
	}
	if len(got.DeviceTraces) != 1 || len(got.DeviceTraces[0]) != 2 {
		t.Fatalf("traces: %d devices, want 1 with 2 events", len(got.DeviceTraces))
	}
	for i, e := range got.DeviceTraces[0] {
		if e.Addr != 1<<60+1<<20 || e.TimeUS != 1772688726282825 || e.Size != 512 {
			t.Errorf("event %d: addr %#x time %d size %d", i, e.Addr, e.TimeUS, e.Size)
		}
	}
}
