package sim

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

type siteStat struct{ blocks, size, req int64 }

// liveBySite groups active_allocated blocks by user site.
func liveBySite(sn *snapshot.Snapshot) map[string]siteStat {
	out := map[string]siteStat{}
	for _, seg := range sn.Segments {
		for _, b := range seg.Blocks {
			if b.State != snapshot.StateActiveAllocated {
				continue
			}
			k := UserSite(sn, b.Stack)
			st := out[k]
			st.blocks++
			st.size += b.Size
			st.req += b.RequestedSize
			out[k] = st
		}
	}
	return out
}

func growth(a, b map[string]siteStat) map[string]siteStat {
	out := map[string]siteStat{}
	for k, v := range b {
		d := siteStat{v.blocks - a[k].blocks, v.size - a[k].size, v.req - a[k].req}
		if d != (siteStat{}) {
			out[k] = d
		}
	}
	for k, v := range a {
		if _, ok := b[k]; !ok {
			out[k] = siteStat{-v.blocks, -v.size, -v.req}
		}
	}
	return out
}

func dump(m map[string]siteStat) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var b strings.Builder
	for _, k := range ks {
		fmt.Fprintf(&b, "  %q: {%d, %d, %d},\n", k, m[k].blocks, m[k].size, m[k].req)
	}
	return b.String()
}

const (
	fc1  = "/workspace/proj/model.py:41 forward"
	gelu = "/workspace/proj/model.py:42 forward"
	res  = "/workspace/proj/model.py:44 forward"
	loss = "/workspace/proj/train.py:89 train_step"
	hist = "/workspace/proj/train.py:97 train_step"
	step = "/workspace/proj/train.py:91 train_step"
)

func TestPairGroundTruth(t *testing.T) {
	adam := siteStat{15, 48*MiB + 5*512, 48*MiB + 5*4}
	for _, c := range []struct {
		name string
		fn   func() (*snapshot.Snapshot, *snapshot.Snapshot)
		want map[string]siteStat
	}{
		{"retained", RetainedGraphPair, map[string]siteStat{
			fc1: {90, 180 * MiB, 180 * MiB}, gelu: {90, 180 * MiB, 180 * MiB}, res: {90, 45 * MiB, 45 * MiB},
			loss: {90, 180*MiB + 45*512, 180*MiB + 45*4}}},
		{"container", GrowingContainerPair, map[string]siteStat{hist: {45, 180 * MiB, 180 * MiB}}},
		{"nogrowth", NoGrowthPair, map[string]siteStat{}},
		{"optimizer", OptimizerFirstStepPair, map[string]siteStat{step: adam}},
	} {
		a, b := c.fn()
		for _, sn := range []*snapshot.Snapshot{a, b} {
			if err := CheckInvariants(sn); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
		}
		got := growth(liveBySite(a), liveBySite(b))
		if len(got) != len(c.want) {
			t.Errorf("%s: growth\n%s", c.name, dump(got))
			continue
		}
		for k, v := range c.want {
			if got[k] != v {
				t.Errorf("%s: %s grew %+v, want %+v", c.name, k, got[k], v)
			}
		}
	}
	// The steady state of a correct loop, exactly.
	_, b := NoGrowthPair()
	want := map[string]siteStat{
		"/workspace/proj/train.py:112 main": {5, 24 * MiB, 24 * MiB},
		"/workspace/proj/train.py:115 main": {1, 512 * 1024, 512 * 1024},
		"/workspace/proj/train.py:116 main": {1, 2048, 2048},
		step:                                adam,
	}
	got := liveBySite(b)
	if len(got) != len(want) {
		t.Fatalf("no-growth live:\n%s", dump(got))
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("no-growth live %s = %+v, want %+v", k, got[k], v)
		}
	}
	// Container step 5 holds exactly 5 history blocks.
	a, _ := GrowingContainerPair()
	if got := liveBySite(a)[hist]; got != (siteStat{5, 20 * MiB, 20 * MiB}) {
		t.Errorf("container step 5 history %+v", got)
	}
}

func TestOOMGroundTruth(t *testing.T) {
	const outsideAlloc = 72*MiB + 5*512 + 512*1024 + 2048
	for _, c := range []struct {
		name string
		fn   func() (*snapshot.Snapshot, OOMTruth)
		want OOMTruth
	}{
		{"activation", ActivationOOM, OOMTruth{Site: fc1, Requested: 64 * MiB, DeviceFree: 58 * MiB, Reserved: 882 * MiB,
			Allocated: 880*MiB + 32*1024, Inactive: 2*MiB - 32*1024, LargestFree: 2*MiB - 32*1024, Verdict: "capacity"}},
		{"fragmentation", FragmentationOOM, OOMTruth{Site: "/workspace/proj/model.py:58 forward", Requested: 32 * MiB, DeviceFree: 24 * MiB,
			Reserved: 1000 * MiB, Allocated: 525 * MiB, Inactive: 475 * MiB, LargestFree: 9*MiB + MiB/2, Verdict: "fragmentation"}},
		{"outside", OutsidePyTorchOOM, OOMTruth{Site: "/workspace/proj/train.py:103 train_step", Requested: GiB, DeviceFree: 46 * MiB,
			// params 24 MiB + AdamW 48 MiB + 5 step tensors (512 B blocks) + batch 512 KiB + 2 KiB.
			Reserved: 82 * MiB, Allocated: outsideAlloc, Inactive: 82*MiB - outsideAlloc, LargestFree: 8 * MiB, Verdict: "outside"}},
	} {
		sn, got := c.fn()
		if err := CheckInvariants(sn); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got != c.want {
			t.Errorf("%s: truth\n got %+v\nwant %+v", c.name, got, c.want)
		}
		evs := sn.DeviceTraces[0]
		var oom *snapshot.Event
		for i := range evs {
			if evs[i].Action == snapshot.ActionOOM {
				oom = &evs[i]
			}
		}
		if oom == nil || oom.Size != c.want.Requested || oom.DeviceFree() != c.want.DeviceFree {
			t.Errorf("%s: oom event %+v", c.name, oom)
		}
	}
	// The activation OOM released exactly one cached segment (16 MiB) just before failing.
	sn, _ := ActivationOOM()
	evs := sn.DeviceTraces[0]
	n := len(evs)
	if evs[n-2].Action != snapshot.ActionSegmentFree || evs[n-2].Size != 16*MiB || evs[n-1].Action != snapshot.ActionOOM {
		t.Errorf("activation OOM tail: %+v %+v", evs[n-2], evs[n-1])
	}
}

func TestCrossStreamPending(t *testing.T) {
	sn := CrossStreamPendingFrees()
	if err := CheckInvariants(sn); err != nil {
		t.Fatal(err)
	}
	var pending []snapshot.Block
	var side int
	for _, seg := range sn.Segments {
		for _, b := range seg.Blocks {
			if b.State == snapshot.StateActivePendingFree {
				pending = append(pending, b)
				if seg.Stream != 0 || UserSite(sn, b.Stack) != "/workspace/proj/train.py:64 prefetch" {
					t.Errorf("pending block on stream %d at %s", seg.Stream, UserSite(sn, b.Stack))
				}
			}
		}
		if seg.Stream == SideStream {
			side++
			if seg.AllocatedSize != 512*1024 || seg.SegmentType != "small" {
				t.Errorf("side segment %+v", seg)
			}
		}
	}
	if len(pending) != 2 || pending[0].Size != 2*MiB || pending[1].Size != 2*MiB || side != 1 {
		t.Fatalf("pending %+v side segments %d", pending, side)
	}
	req := map[uint64]int{}
	comp := map[uint64]int{}
	delayed := 0
	evs := sn.DeviceTraces[0]
	for i, ev := range evs {
		switch ev.Action {
		case snapshot.ActionFreeRequested:
			req[ev.Addr]++
		case snapshot.ActionFreeCompleted:
			comp[ev.Addr]++
			if i == 0 || evs[i-1].Action != snapshot.ActionFreeRequested || evs[i-1].Addr != ev.Addr {
				delayed++
			}
		}
	}
	if delayed != 4 {
		t.Errorf("delayed free_completed = %d, want 4", delayed)
	}
	for _, b := range pending {
		if req[b.Address] == comp[b.Address] {
			t.Errorf("pending block %#x has matching free_completed", b.Address)
		}
	}
}

func TestBackwardNoPythonFrames(t *testing.T) {
	sn := BackwardNoPythonFrames()
	if err := CheckInvariants(sn); err != nil {
		t.Fatal(err)
	}
	empty, withFrames := 0, 0
	for _, ev := range sn.DeviceTraces[0] {
		if ev.Action != snapshot.ActionAlloc {
			continue
		}
		if ev.Stack == snapshot.EmptyStack {
			empty++
		} else {
			withFrames++
		}
	}
	var emptyBlocks, emptyBytes int64
	for _, seg := range sn.Segments {
		for _, b := range seg.Blocks {
			if b.State == snapshot.StateActiveAllocated && b.Stack == snapshot.EmptyStack {
				emptyBlocks++
				emptyBytes += b.Size
			}
		}
	}
	if empty != 24 || emptyBlocks != 5 || emptyBytes != 24*MiB || withFrames == 0 || !sn.Caps.PythonOnly || sn.Caps.CppFrames {
		t.Errorf("empty allocs %d (with frames %d), empty blocks %d / %d B, caps %+v", empty, withFrames, emptyBlocks, emptyBytes, sn.Caps)
	}
}

func TestMultiRank(t *testing.T) {
	snaps := MultiRank(4)
	if len(snaps) != 4 || MultiRankOutlier(4) != 1 || MultiRankOutlier(1) != 0 {
		t.Fatalf("ranks %d", len(snaps))
	}
	var alloc [4]int64
	for r, sn := range snaps {
		if err := CheckInvariants(sn); err != nil {
			t.Fatal(err)
		}
		if len(sn.DeviceTraces) != 4 || len(sn.DeviceTraces[r]) == 0 || sn.Segments[0].Device != r {
			t.Errorf("rank %d: traces %d device %d", r, len(sn.DeviceTraces), sn.Segments[0].Device)
		}
		for _, seg := range sn.Segments {
			alloc[r] += seg.AllocatedSize
		}
	}
	if alloc[1]-alloc[0] != 1536*MiB || alloc[0] != alloc[2] || alloc[0] != alloc[3] {
		t.Errorf("allocated per rank %v", alloc)
	}
}

func TestSummarizeBasic(t *testing.T) {
	sn := SummarizeBasic()
	if err := CheckInvariants(sn); err != nil {
		t.Fatal(err)
	}
	streams := map[uint64]bool{}
	types := map[string]bool{}
	var private int64
	for _, seg := range sn.Segments {
		streams[seg.Stream] = true
		types[seg.SegmentType] = true
		if seg.PoolID != DefaultPool {
			private += seg.AllocatedSize
			if seg.PoolID != (snapshot.PoolID{1, 0}) {
				t.Errorf("pool %v", seg.PoolID)
			}
		}
	}
	if len(streams) != 2 || !types["small"] || !types["large"] || private != 8*MiB {
		t.Errorf("streams %v types %v private %d", streams, types, private)
	}
	if len(sn.Annotations) != 6 || sn.Annotations[0].Name != "ProfilerStep#1" || sn.Annotations[0].Stage != "START" || sn.Annotations[5].Stage != "END" {
		t.Errorf("annotations %+v", sn.Annotations)
	}
	for i := 1; i < len(sn.Annotations); i++ {
		if sn.Annotations[i].TimeUS <= sn.Annotations[i-1].TimeUS {
			t.Errorf("annotation times not increasing")
		}
	}
	if !sn.Settings.Present || sn.Settings.MaxSplitSize != -1 || sn.Settings.AllocConf != "" {
		t.Errorf("settings %+v", sn.Settings)
	}
	live := liveBySite(sn)
	if live["/workspace/proj/train.py:71 reduce_on_side"] != (siteStat{1, 256 * 1024, 256 * 1024}) || live[step].blocks != 15 {
		t.Errorf("live:\n%s", dump(live))
	}
}

func TestScenariosDeterministic(t *testing.T) {
	a1, b1 := RetainedGraphPair()
	a2, b2 := RetainedGraphPair()
	if fmt.Sprint(a1.Segments, b1.DeviceTraces, b1.Stacks) != fmt.Sprint(a2.Segments, b2.DeviceTraces, b2.Stacks) {
		t.Error("RetainedGraphPair differs between runs")
	}
}
