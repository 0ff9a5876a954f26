package pickle

import (
	"math"
	"testing"
)

// TestMemoTableSlots pins the packed memo: every value reads back as written, whether its x
// packs into a slot or spills (a negative int, a float, an event of a far object), through
// set, push (values that pack) and rewrites of either form by the other, across a page
// boundary; unset slots read kMark, slots past the end do not exist, and rewrites of a spilled
// slot do not grow the spill.
func TestMemoTableSlots(t *testing.T) {
	var m memoTable
	defer m.release()
	values := []val{
		{k: kStr, x: 7},
		{k: kNone},
		{k: kInt, x: slotXMask},                         // the largest x that packs
		{k: kInt, x: slotXMask + 1},                     // the smallest that spills
		{k: kInt, x: uint64(math.MaxUint64 - 4)},        // -5
		{k: kFloat, x: math.Float64bits(-2.5)},          // a float's bits
		{k: kEvent, x: uint64(1)<<32 | 3},               // an event of object 1
		{k: kEvent, x: uint64(1<<31)<<32 | (1<<32 - 1)}, // an event of a far object
		{k: kStack, x: 1<<31 - 1},
		{k: kMark},
	}
	page := uint64(1) << memoPageBits
	// Pushed across the end of the first page.
	m.set(page-3, val{k: kStr, x: 1})
	for i := uint64(0); i < page-3; i++ {
		if v, ok := m.get(i); !ok || v != (val{k: kMark}) {
			t.Fatalf("unset slot %d reads %+v, %v", i, v, ok)
		}
	}
	m.reserve(uint64(len(values)))
	first := m.n
	for _, v := range values {
		if fits(v) {
			m.push(v) // push takes only values that pack
		} else {
			m.set(m.n, v)
		}
	}
	for k, v := range values {
		if got, ok := m.get(first + uint64(k)); !ok || got != v {
			t.Errorf("pushed slot %d (%+v) reads %+v, %v", first+uint64(k), v, got, ok)
		}
	}
	if _, ok := m.get(m.n); ok {
		t.Errorf("slot %d past the end exists", m.n)
	}
	// Rewrites: each slot gets its neighbour's value (spilled over packed and back).
	for k := range values {
		m.put(first+uint64(k), values[(k+1)%len(values)])
	}
	for k := range values {
		if got, _ := m.get(first + uint64(k)); got != values[(k+1)%len(values)] {
			t.Errorf("rewritten slot %d reads %+v, want %+v", first+uint64(k), got, values[(k+1)%len(values)])
		}
	}
	// set far ahead: the skipped slots are unset, the target holds a spilled value.
	far := m.n + 10
	m.set(far, values[4])
	if got, _ := m.get(far - 1); got != (val{k: kMark}) {
		t.Errorf("skipped slot reads %+v", got)
	}
	if got, _ := m.get(far); got != values[4] {
		t.Errorf("far slot reads %+v, want %+v", got, values[4])
	}
	// Four values spill when appended; of the rewrites, the two into slots that held packed
	// values add entries, those into spilled slots reuse theirs; the far one adds one.
	if len(m.spill) != 4+2+1 {
		t.Errorf("spill holds %d values, want 7", len(m.spill))
	}
	// Rewriting a spilled slot with another value that spills, again and again, reuses its
	// entry.
	for k := range 100 {
		m.put(far, val{k: kFloat, x: math.Float64bits(float64(-1 - k))})
	}
	if got, _ := m.get(far); got != (val{k: kFloat, x: math.Float64bits(-100)}) || len(m.spill) != 7 {
		t.Errorf("after 100 rewrites the far slot reads %+v and spill holds %d values, want -100 and 7", got, len(m.spill))
	}
}
