package raw

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// testSnap: 3 segments on 2 devices; segment 1 has 100 blocks sharing two stacks; device 0
// has 10 events; stack 2 has 30 frames.
func testSnap() *snapshot.Snapshot {
	s := &snapshot.Snapshot{Path: "t.pickle", EventExtras: []snapshot.EventExtra{{}, {UserMetadata: "step=3"}}}
	for i := 0; i < 30; i++ {
		s.Frames = append(s.Frames, snapshot.Frame{Filename: fmt.Sprintf("f%d.py", i), Line: int64(i + 1), Name: fmt.Sprintf("fn%d", i)})
	}
	s.Stacks = [][]snapshot.FrameID{{}, {0, 1}, {}}
	for i := 0; i < 30; i++ {
		s.Stacks[2] = append(s.Stacks[2], snapshot.FrameID(i))
	}
	s.Segments = []snapshot.Segment{
		{Device: 0, Address: 0x1000, TotalSize: 2 << 20, SegmentType: "small", Stack: 1,
			Blocks: []snapshot.Block{{Address: 0x1000, Size: 512, RequestedSize: 4, State: snapshot.StateActiveAllocated, Stack: 1},
				{Address: 0x1200, Size: 2<<20 - 512, State: snapshot.StateInactive, Stack: snapshot.NoStack}}},
		{Device: 0, Address: 0x400000, TotalSize: 100 << 20, SegmentType: "large", Stack: snapshot.NoStack, PoolID: snapshot.PoolID{1, 2}},
		{Device: 1, Address: 0x9000000, TotalSize: 20 << 20, SegmentType: "large", Stack: 2},
	}
	for i := 0; i < 100; i++ {
		st := snapshot.StackID(1 + i%2)
		s.Segments[1].Blocks = append(s.Segments[1].Blocks, snapshot.Block{Size: 1 << 20, RequestedSize: 1 << 20, State: snapshot.StateActiveAllocated, Stack: st})
	}
	s.DeviceTraces = [][]snapshot.Event{{}, {}}
	for i := 0; i < 10; i++ {
		s.DeviceTraces[0] = append(s.DeviceTraces[0], snapshot.Event{Action: snapshot.ActionAlloc, Addr: uint64(0x1000 + i), Size: 512, TimeUS: int64(i), Stack: 1})
	}
	s.DeviceTraces[0][9] = snapshot.Event{Action: snapshot.ActionOOM, Size: 1 << 30, Stack: 2, Extra: snapshot.MakeExtraID(1)}.WithDeviceFree(7)
	s.Annotations = []snapshot.Annotation{{Name: "fwd", Stage: "START"}, {Name: "fwd", Stage: "END", TimeUS: 5}}
	s.Settings = snapshot.AllocatorSettings{Present: true, AllocConf: "expandable_segments:True", Raw: map[string]any{"k": 1}}
	return s
}

func TestRead(t *testing.T) {
	s := testSnap()
	for _, tc := range []struct {
		section       string
		opt           Options
		kind          string
		total, ret    int
		more          bool
		next          int
		first         string // address or index of the first item, or the settings conf
		stacks        []int
		framesOmitted int // of the last stack
	}{
		{"allocator_settings", Options{}, KindSettings, 0, 0, false, 0, "expandable_segments:True", nil, 0},
		{"segments", Options{}, KindSegments, 3, 3, false, 3, "0x1000", []int{1, 2}, 18},
		{"segments", Options{Offset: 1, Limit: 1}, KindSegments, 3, 1, true, 2, "0x400000", nil, 0},
		{"segments[0]", Options{}, KindSegment, 2, 2, false, 2, "0x1000", []int{1}, 0},
		{"segments[1].blocks[10:20]", Options{}, KindBlocks, 10, 10, false, 10, "0xe00000", []int{1, 2}, 18},
		{"segments[1].blocks[10:20]", Options{Offset: 5, Limit: 2}, KindBlocks, 10, 2, true, 7, "0x1300000", []int{2, 1}, 0},
		{"segments[1].blocks[95:]", Options{}, KindBlocks, 5, 5, false, 5, "0x6300000", []int{2, 1}, 0},
		{"segments[1].blocks[7]", Options{}, KindBlocks, 1, 1, false, 1, "0xb00000", []int{2}, 18},
		{"device_traces[0]", Options{Offset: 8}, KindDeviceTrace, 10, 2, false, 10, "#8", []int{1, 2}, 18},
		{"device_traces[0][2:4]", Options{}, KindDeviceTrace, 2, 2, false, 2, "#2", []int{1}, 0},
		{"device_traces[1]", Options{}, KindDeviceTrace, 0, 0, false, 0, "", nil, 0},
		{"external_annotations", Options{Limit: 1}, KindAnnotations, 2, 1, true, 1, "", nil, 0},
		{"stacks[2]", Options{Offset: 25}, KindStack, 30, 5, false, 30, "", []int{2}, 25},
		{" segments [ 0 ] ", Options{}, KindSegment, 2, 2, false, 2, "0x1000", []int{1}, 0},
	} {
		r, err := Read(s, tc.section, tc.opt)
		if err != nil {
			t.Errorf("%s: %v", tc.section, err)
			continue
		}
		if r.Kind != tc.kind || r.Total != tc.total || r.Returned != tc.ret || r.More != tc.more || r.NextOffset != tc.next {
			t.Errorf("%s %+v: kind %s total %d returned %d more %v next %d", tc.section, tc.opt, r.Kind, r.Total, r.Returned, r.More, r.NextOffset)
		}
		var first string
		switch {
		case r.Settings != nil:
			first = r.Settings.AllocConf
		case len(r.Segments) > 0:
			first = r.Segments[0].Address
		case len(r.Blocks) > 0:
			first = r.Blocks[0].Address
		case len(r.Events) > 0:
			first = fmt.Sprintf("#%d", r.Events[0].Index)
		}
		if first != tc.first {
			t.Errorf("%s: first item %q, want %q", tc.section, first, tc.first)
		}
		var ids []int
		for _, st := range r.Stacks {
			ids = append(ids, st.ID)
		}
		if tc.stacks != nil && fmt.Sprint(ids) != fmt.Sprint(tc.stacks) {
			t.Errorf("%s: stacks %v, want %v", tc.section, ids, tc.stacks)
		}
		if n := len(r.Stacks); n > 0 && r.Stacks[n-1].FramesOmitted != tc.framesOmitted {
			t.Errorf("%s: frames omitted %d, want %d", tc.section, r.Stacks[n-1].FramesOmitted, tc.framesOmitted)
		}
		if r.Text() == "" {
			t.Errorf("%s: empty text", tc.section)
		}
	}
}

func TestReadEventFields(t *testing.T) {
	r, err := Read(testSnap(), "device_traces[0][9]", Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := r.Events[0]
	if e.Action != "oom" || e.Size != 1<<30 || e.DeviceFree != 7 || e.UserMetadata != "step=3" || e.Address != "0x0" || e.StackID != 2 {
		t.Errorf("%+v", e)
	}
	if !strings.Contains(r.Text(), `#9 oom 0x0 1073741824 B`) || !strings.Contains(r.Text(), "… 18 more frames (read stacks[2])") {
		t.Errorf("text:\n%s", r.Text())
	}
}

// TestReadByteCap: a large page stops at the byte cap, at least one item, and says where to go on.
func TestReadByteCap(t *testing.T) {
	r, err := Read(testSnap(), "segments[1].blocks", Options{Limit: 500, MaxBytes: 2000})
	if err != nil {
		t.Fatal(err)
	}
	if r.Returned == 0 || r.Returned >= 100 || !r.More || r.NextOffset != r.Returned || len(r.Notes) != 1 || !strings.Contains(r.Notes[0], fmt.Sprintf("offset=%d", r.Returned)) {
		t.Fatalf("returned %d more %v next %d notes %q", r.Returned, r.More, r.NextOffset, r.Notes)
	}
	b, _ := json.Marshal(r)
	if len(b) > 4000 {
		t.Errorf("%d bytes", len(b))
	}
	r, err = Read(testSnap(), "segments[1].blocks", Options{MaxBytes: 1})
	if err != nil || r.Returned != 1 {
		t.Errorf("tiny cap: %v returned %d", err, r.Returned)
	}
}

func TestReadErrors(t *testing.T) {
	s := testSnap()
	for _, tc := range []struct {
		section string
		opt     Options
		want    string
	}{
		{"segments[3]", Options{}, "the file has 3 segments"},
		{"segments[0].frames", Options{}, "only .blocks"},
		{"segments[1].blocks[200:]", Options{}, "past the end"},
		{"segments[1].blocks[5:2]", Options{}, "is empty"},
		{"segments[1].blocks[x]", Options{}, "cannot read"},
		{"device_traces[2]", Options{}, "devices 0 to 1"},
		{"stacks[9]", Options{}, "stack ids run from 0 to 2"},
		{"stacks[1][0:1]", Options{}, "only .frames[K] may follow"},
		{"stacks[1].frames[99]", Options{}, "does not exist"},
		{"blocks", Options{}, "sections are"},
		{"segments", Options{Offset: -1}, "offset"},
	} {
		_, err := Read(s, tc.section, tc.opt)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.section, err, tc.want)
		}
	}
	empty := &snapshot.Snapshot{Path: "empty.pickle"}
	for section, want := range map[string]string{
		"segments[0]":      "segments[0] does not exist: the file has no segments",
		"device_traces[0]": "device_traces[0] does not exist: the file has no trace",
		"stacks[0]":        "stacks[0] does not exist: the file has no stacks",
	} {
		if _, err := Read(empty, section, Options{}); err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "-1") {
			t.Errorf("empty file, %s: %v, want %q", section, err, want)
		}
	}
	if _, err := Read(nil, "segments", Options{}); err == nil {
		t.Error("nil snapshot accepted")
	}
}

// TestReadHugeOffset: an offset near the largest int past a slice's start or with a limit must
// not overflow into a negative index (a resource URI carries any offset).
func TestReadHugeOffset(t *testing.T) {
	s := testSnap()
	const huge = int(^uint(0)>>1) - 3
	for _, tc := range []struct {
		section string
		opt     Options
	}{
		{"device_traces[0][5:]", Options{Offset: huge}},
		{"segments[1].blocks[10:20]", Options{Offset: huge}},
		{"stacks[2]", Options{Offset: 5, Limit: huge}},
		{"stacks[2]", Options{Offset: huge, Limit: 10}},
	} {
		r, err := Read(s, tc.section, tc.opt)
		if err != nil {
			t.Errorf("%s %+v: %v", tc.section, tc.opt, err)
			continue
		}
		want := 0
		if tc.opt.Offset == 5 {
			want = 25 // stack 2 has 30 frames
		}
		if r.Returned != want || r.More {
			t.Errorf("%s %+v: returned %d more %v, want %d false", tc.section, tc.opt, r.Returned, r.More, want)
		}
	}
}
