package snapshot

import (
	"testing"
	"unsafe"
)

// TestEventIs40Bytes guards the event's size: a trace holds millions, and every pass over
// one (the index, the phase pass, each replay) streams them through the caches.
func TestEventIs40Bytes(t *testing.T) {
	if n := unsafe.Sizeof(Event{}); n != 40 {
		t.Fatalf("Event is %d bytes, want 40", n)
	}
}

// TestEventDeviceFree: only an oom event reports free device memory, kept in its Addr (it
// has no address); any other event keeps its address and reports 0.
func TestEventDeviceFree(t *testing.T) {
	cases := []struct {
		ev       Event
		n        int64
		wantAddr uint64
		wantFree int64
	}{
		{Event{Action: ActionOOM, Size: 1 << 30}, 7 << 20, 7 << 20, 7 << 20},
		{Event{Action: ActionOOM, Addr: 0x7f00, Size: 1 << 30}, 0, 0, 0},
		{Event{Action: ActionAlloc, Addr: 0x7f00, Size: 512}, 7 << 20, 0x7f00, 0},
		{Event{Action: ActionSegmentAlloc, Addr: 0x7e00, Size: 2 << 20}, 1, 0x7e00, 0},
	}
	for _, c := range cases {
		got := c.ev.WithDeviceFree(c.n)
		if got.Addr != c.wantAddr || got.DeviceFree() != c.wantFree || got.Size != c.ev.Size || got.Action != c.ev.Action {
			t.Errorf("%+v.WithDeviceFree(%d) = %+v (device free %d), want addr %#x, device free %d", c.ev, c.n, got, got.DeviceFree(), c.wantAddr, c.wantFree)
		}
	}
}

// TestExtraID: the three-byte index keeps every index below MaxEventExtras.
func TestExtraID(t *testing.T) {
	for _, i := range []uint32{0, 1, 255, 256, 65535, 65536, MaxEventExtras - 1} {
		if got := MakeExtraID(i).Index(); got != int(i) {
			t.Errorf("MakeExtraID(%d).Index() = %d", i, got)
		}
	}
	if MakeExtraID(1) == MakeExtraID(1<<8) || MakeExtraID(1<<8) == MakeExtraID(1<<16) {
		t.Error("distinct indexes share an ExtraID")
	}
}
