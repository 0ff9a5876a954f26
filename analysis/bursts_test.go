package analysis

import (
	"context"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// TestRealSegmentBursts: segment-release bursts of the real files, against DIAGNOSIS.md.
func TestRealSegmentBursts(t *testing.T) {
	tests := []struct {
		diag, file           string
		kind                 string
		bursts, events       int
		bytes                int64
		followed, reReserved int
		site                 string
		want, never          []string
	}{
		// #13: 28 per-layer empty_cache() calls at entrance.py:104, 15 segments each.
		{"#13", "pt2.5-2.7_hf-qwen2-inference_segment-free-churn_sqattn.pickle", BurstEmptyCache, 28, 420, 156019720192, 27, 27, "entrance.py:104",
			[]string{"remove the empty_cache() at entrance.py:104"}, []string{"at its limit", "cudaMalloc failed"}},
		// #2: 39 bursts without frames, each followed by segment_alloc: cudaMalloc-failure retries.
		{"#2", "pt2.1_multistream_llama-selectn.pickle", BurstMallocRetry, 39, 579, 150596485120, 39, 39, "select_n.py:140",
			[]string{"the device is at its limit", "Calling empty_cache() would not help", "10 streams and cached blocks are per stream"},
			[]string{"remove the empty_cache()", "call empty_cache()"}},
	}
	for _, tc := range tests {
		t.Run(tc.diag, func(t *testing.T) {
			snap := realFile(t, tc.file)
			r, err := ReplayDevice(context.Background(), snap, ReplayOptions{Device: 0})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.SegmentBursts) != 1 {
				t.Fatalf("bursts %+v", r.SegmentBursts)
			}
			b := r.SegmentBursts[0]
			if b.Kind != tc.kind || b.Bursts != tc.bursts || b.Events != tc.events || b.Bytes != tc.bytes ||
				b.FollowedBySegmentAlloc != tc.followed || b.ReReserved != tc.reReserved || b.Site != tc.site || b.Device != 0 {
				t.Errorf("got %+v", b)
			}
			for _, w := range tc.want {
				if !strings.Contains(b.Advice, w) {
					t.Errorf("advice lacks %q: %s", w, b.Advice)
				}
			}
			for _, w := range tc.never {
				if strings.Contains(b.Advice, w) {
					t.Errorf("advice says %q: %s", w, b.Advice)
				}
			}
			if !strings.Contains(r.Text(), "segment release bursts ("+tc.kind+")") {
				t.Errorf("text lacks the bursts:\n%s", r.Text())
			}
			// The fragmentation answer names them too.
			f, err := Fragmentation(snap, FragOptions{Device: AllDevices})
			if err != nil {
				t.Fatal(err)
			}
			if len(f.SegmentBursts) != 1 || f.SegmentBursts[0].Bursts != tc.bursts || !strings.Contains(strings.Join(f.Advice, "\n"), b.Advice) {
				t.Errorf("fragmentation bursts %+v advice %q", f.SegmentBursts, f.Advice)
			}
		})
	}
	// Files without segment frees have no bursts (and a JSON list, not null).
	for _, name := range []string{"pt2.10_user-metadata_windows_cs336.pickle", "pt2.5plus_tiny_two-devices_expandable_no-trace.pickle"} {
		snap := realFile(t, name)
		r, err := ReplayDevice(context.Background(), snap, ReplayOptions{Device: 0})
		if err != nil {
			t.Fatal(err)
		}
		if r.SegmentBursts == nil || len(r.SegmentBursts) != 0 {
			t.Errorf("%s: bursts %+v", name, r.SegmentBursts)
		}
	}
}

// TestSegmentBurstKinds: hand-built traces for each kind.
func TestSegmentBurstKinds(t *testing.T) {
	b := newTB()
	ec := b.stack("??", 0, "THCPModule_emptyCache(_object*, _object*)",
		"/env/lib/python3.11/site-packages/torch/cuda/memory.py", 192, "empty_cache",
		"/w/loop.py", 55, "run")
	const seg = 20 << 20
	a := uint64(1 << 32)
	ev := func(e snapshot.Event) { b.ev(0, e) }
	// 1) explicit empty_cache(): two segments freed with the empty_cache stack, then re-reserved.
	ev(segAlloc(a+4*seg, seg)) // freed after the OOM (4)
	ev(segAlloc(a, seg))
	ev(segAlloc(a+seg, seg))
	f1, f2 := segFree(a, seg), segFree(a+seg, seg)
	f1.Stack, f2.Stack = ec, ec
	ev(f1)
	ev(f2)
	ev(segAlloc(a+2*seg, seg))
	// 3) a release with neither mark: frames-less frees followed by an alloc (not a segment).
	ev(segFree(a+2*seg, seg))
	ev(alloc(a+9*seg, 512, snapshot.NoStack))
	// 2) a retry that failed: one segment freed without frames, then the oom event.
	ev(segAlloc(a+3*seg, seg))
	ev(segFree(a+3*seg, seg))
	ev(snapshot.Event{Action: snapshot.ActionOOM, Size: 64 * mib, Stack: snapshot.NoStack}.WithDeviceFree(10 * mib))
	// 4) a release after the OOM: the exception unwinding (an unwind span), never a burst.
	ev(segFree(a+4*seg, seg))
	snap := b.done()
	roles, err := NewRoles(snap, AttributionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]SegmentBurst{}
	for _, x := range segmentBursts(snap, roles, 0) {
		got[x.Kind] = x
	}
	if x := got[BurstEmptyCache]; x.Bursts != 1 || x.Events != 2 || x.Bytes != 2*seg || x.Site != "loop.py:55" || x.ReReserved != 1 || x.FollowedBySegmentAlloc != 1 {
		t.Errorf("empty_cache %+v", x)
	}
	if x := got[BurstMallocRetry]; x.Bursts != 1 || x.Events != 1 || x.FollowedByOOM != 1 || x.ReReserved != 0 || !strings.Contains(x.Advice, "the retry failed: OOM") {
		t.Errorf("malloc_retry %+v", x)
	}
	if x := got[BurstRelease]; x.Bursts != 1 || x.Bytes != seg || x.FirstEvent != 6 {
		t.Errorf("release %+v", x)
	}
}
