package snapshot

import (
	"reflect"
	"testing"
)

func TestInternerDeduplicatesByContent(t *testing.T) {
	in := NewInterner()
	a := in.Frame(Frame{Filename: "model.py", Line: 214, Name: "forward"})
	b := in.Frame(Frame{Filename: "train.py", Line: 9, Name: "step"})
	if a2 := in.Frame(Frame{Filename: "model.py", Line: 214, Name: "forward"}); a2 != a || a == b {
		t.Fatalf("frame ids %d %d %d", a, a2, b)
	}
	s1 := in.Stack([]FrameID{a, b})
	s2 := in.Stack([]FrameID{b, a})
	if in.Stack([]FrameID{a, b}) != s1 || s1 == s2 || in.Stack(nil) != EmptyStack || in.Stack([]FrameID{}) != EmptyStack {
		t.Fatalf("stack ids %d %d", s1, s2)
	}
	if !reflect.DeepEqual(in.Stacks[s2], []FrameID{b, a}) || len(in.Stacks) != 3 {
		t.Fatalf("stacks %v", in.Stacks)
	}
}

// TestInternerHashCollision forces two different stacks onto one hash: the second must get its
// own id through the exact-key fallback, and both must be found again.
func TestInternerHashCollision(t *testing.T) {
	in := NewInterner()
	first := in.Stack([]FrameID{1, 2, 3})
	h := StackHash([]FrameID{4, 5})
	in.byHash[h] = first // pretend {4,5} hashes like {1,2,3}
	second := in.Stack([]FrameID{4, 5})
	if second == first || !reflect.DeepEqual(in.Stacks[second], []FrameID{4, 5}) {
		t.Fatalf("collision gave id %d (first %d): %v", second, first, in.Stacks)
	}
	if in.Stack([]FrameID{4, 5}) != second || in.Stack([]FrameID{1, 2, 3}) != first {
		t.Fatal("stacks not found again after a collision")
	}
}

func TestIsCppFrame(t *testing.T) {
	for _, c := range []struct {
		f    Frame
		want bool
	}{
		{Frame{"??", 0, "at::native::empty_cuda"}, true},
		{Frame{"", 0, "x"}, true},
		{Frame{"memory_snapshot.cpp", 0, "gather"}, true},
		{Frame{"/usr/include/c10/core/Allocator.h", 12, "f"}, true},
		{Frame{"libtorch_cuda.so", 0, "f"}, true},
		{Frame{"/w/model.py", 214, "forward"}, false},
		{Frame{`D:\proj\train.py`, 3, "main"}, false},
	} {
		if got := IsCppFrame(c.f); got != c.want {
			t.Errorf("IsCppFrame(%+v) = %v", c.f, got)
		}
	}
}

func TestCompact(t *testing.T) {
	evs := make([]Event, 3, 100000)
	evs[2].Size = 7
	s := &Snapshot{DeviceTraces: [][]Event{evs, make([]Event, 2, 3)}}
	s.Compact()
	if cap(s.DeviceTraces[0]) != 3 || s.DeviceTraces[0][2].Size != 7 || cap(s.DeviceTraces[1]) != 3 {
		t.Fatalf("caps %d %d", cap(s.DeviceTraces[0]), cap(s.DeviceTraces[1]))
	}
}
