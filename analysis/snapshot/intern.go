package snapshot

import (
	"slices"
	"strings"
	"unsafe"
)

// Interner deduplicates frames by content and stacks by their frame sequence while a
// snapshot is being built. Both loaders (the fast pickle path and the generic one) use it, so
// equal content always gets equal ids in order of first appearance.
type Interner struct {
	Frames  []Frame
	Stacks  [][]FrameID
	frameID map[Frame]FrameID
	byHash  map[uint64]StackID
	stackID map[string]StackID // stacks whose hash collided with another's
	keyBuf  []byte
	recent  *[4096]recentStack
}

// NewInterner returns an interner whose stack 0 is the empty stack.
func NewInterner() *Interner {
	return &Interner{
		Stacks:  [][]FrameID{{}},
		frameID: map[Frame]FrameID{},
		byHash:  map[uint64]StackID{StackHashSeed: EmptyStack},
		stackID: map[string]StackID{},
		recent:  new([4096]recentStack),
	}
}

// Frame interns one frame.
func (in *Interner) Frame(f Frame) FrameID {
	if id, ok := in.frameID[f]; ok {
		return id
	}
	id := FrameID(len(in.Frames))
	in.Frames = append(in.Frames, f)
	in.frameID[f] = id
	return id
}

// Stack interns a frame sequence; ids is not retained. Stacks are found by a hash of their
// frame ids and confirmed by comparing the ids, so no key is built per lookup.
func (in *Interner) Stack(ids []FrameID) StackID {
	return in.StackWithHash(ids, StackHash(ids))
}

// StackHashSeed is the hash of the empty stack; HashFrame extends a hash by one frame id, so
// a decoder can hash a traceback while it reads it.
const StackHashSeed uint64 = 14695981039346656037

// HashFrame extends a stack hash (FNV-1a over the frame ids) by one frame.
func HashFrame(h uint64, id FrameID) uint64 { return (h ^ uint64(uint32(id))) * 1099511628211 }

// StackHash is the hash Stack uses for a frame sequence.
func StackHash(ids []FrameID) uint64 {
	h := StackHashSeed
	for _, id := range ids {
		h = HashFrame(h, id)
	}
	return h
}

// StackWithHash is Stack for a caller that already has StackHash(ids).
func (in *Interner) StackWithHash(ids []FrameID, h uint64) StackID {
	// Real files repeat a few thousand stacks across millions of tracebacks: a small
	// direct-mapped cache answers most lookups without touching the map.
	c := &in.recent[h%uint64(len(in.recent))]
	if c.hash == h && c.valid && equalIDs(in.Stacks[c.id], ids) {
		return c.id
	}
	id, ok := in.byHash[h]
	switch {
	case ok && equalIDs(in.Stacks[id], ids):
	case ok: // a hash collision: fall back to the exact key
		return in.stackByKey(ids)
	default:
		id = StackID(len(in.Stacks))
		in.Stacks = append(in.Stacks, slices.Clone(ids))
		in.byHash[h] = id
	}
	*c = recentStack{hash: h, id: id, valid: true}
	return id
}

// Find returns the id of an interned stack (h is StackHash(ids)) without interning it.
func (in *Interner) Find(ids []FrameID, h uint64) (StackID, bool) {
	c := &in.recent[h%uint64(len(in.recent))]
	if c.hash == h && c.valid && equalIDs(in.Stacks[c.id], ids) {
		return c.id, true
	}
	if id, ok := in.byHash[h]; ok && equalIDs(in.Stacks[id], ids) {
		return id, true
	}
	if len(in.stackID) > 0 {
		b := in.keyBuf[:0]
		for _, id := range ids {
			b = append(b, byte(id), byte(id>>8), byte(id>>16), byte(id>>24))
		}
		in.keyBuf = b
		id, ok := in.stackID[string(b)]
		return id, ok
	}
	return 0, false
}

// equalIDs compares two frame sequences as bytes (a vectorised compare).
func equalIDs(a, b []FrameID) bool {
	if len(a) != len(b) {
		return false
	}
	if len(a) == 0 {
		return true
	}
	const w = int(unsafe.Sizeof(FrameID(0)))
	return string(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(a))), len(a)*w)) ==
		string(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(b))), len(b)*w))
}

type recentStack struct {
	hash  uint64
	id    StackID
	valid bool
}

func (in *Interner) stackByKey(ids []FrameID) StackID {
	b := in.keyBuf[:0]
	for _, id := range ids {
		b = append(b, byte(id), byte(id>>8), byte(id>>16), byte(id>>24))
	}
	in.keyBuf = b
	if id, ok := in.stackID[string(b)]; ok {
		return id
	}
	id := StackID(len(in.Stacks))
	in.Stacks = append(in.Stacks, slices.Clone(ids))
	in.stackID[string(b)] = id
	return id
}

// IsCppFrame reports whether a frame comes from C++ (PyTorch writes "??", "", a .cpp/.h/.cu
// path or a basename without .py and line 0 for native frames).
func IsCppFrame(f Frame) bool {
	fn := f.Filename
	if fn == "" || fn == "??" {
		return true
	}
	for _, ext := range []string{".cpp", ".cc", ".cxx", ".h", ".hpp", ".cu", ".cuh", ".c", ".S", ".s", ".asm", ".so"} {
		if strings.HasSuffix(fn, ext) {
			return true
		}
	}
	return !strings.HasSuffix(fn, ".py") && f.Line == 0
}
