package tools

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/memsnap/memsnap/analysis"
	"github.com/memsnap/memsnap/analysis/load"
)

// TestReplayTool: the replay tool answers exactly what analysis.ReplayDevice computes for each
// device (the CLI's replay --json prints the same report: cmd/memsnap TestReplayJSONIsReport), and
// its text is the report's Text().
func TestReplayTool(t *testing.T) {
	c := newClient(t, Config{})
	for _, tc := range []struct {
		file    string
		args    map[string]any
		devices []int
		// Exact values of the first device (pinned so a silent change of the analysis shows).
		peakAlloc int64
		peakEvent int
		ooms      int
	}{
		{"activation_oom.pickle", nil, []int{0}, 939556864, 72, 1},
		{"cross_stream_pending.pickle", map[string]any{"device": 0}, []int{0}, 2621440, 3, 0},
		{"growing_container_step50.pickle", map[string]any{"limit": 3}, []int{0}, 317196312, 2919, 0},
		{"multirank/rank1.pickle", map[string]any{"limit": 2, "user_root": []any{"/workspace/proj"}}, nil, -1, -1, -1},
	} {
		t.Run(tc.file, func(t *testing.T) {
			args := map[string]any{"path": fx(t, tc.file)}
			for k, v := range tc.args {
				args[k] = v
			}
			res := call(t, c, "replay", args)
			var got analysis.ReplayReport
			structured(t, res, &got)

			snap, err := load.File(context.Background(), fx(t, tc.file), load.Options{})
			if err != nil {
				t.Fatal(err)
			}
			devs := tc.devices
			if devs == nil {
				devs = snap.Devices()
			}
			if got.Path != fx(t, tc.file) || len(got.Devices) != len(devs) {
				t.Fatalf("path %s, %d devices; want %s, %d", got.Path, len(got.Devices), fx(t, tc.file), len(devs))
			}
			opt := analysis.ReplayOptions{Limit: replayDefaultLimit}
			if l, ok := tc.args["limit"].(int); ok {
				opt.Limit = l
			}
			if _, ok := tc.args["user_root"]; ok {
				opt.Attribution.UserRoots = []string{"/workspace/proj"}
			}
			for i, d := range devs {
				o := opt
				o.Device = d
				want, err := analysis.ReplayDevice(context.Background(), snap, o)
				if err != nil {
					t.Fatal(err)
				}
				g := got.Devices[i]
				if g.Device != d || g.PeakAllocatedBytes != want.PeakAllocatedBytes || g.PeakAllocatedEvent != want.PeakAllocatedEvent ||
					g.PeakReservedBytes != want.PeakReservedBytes || g.OOMEvents != want.OOMEvents {
					t.Errorf("device %d: peak %d at event %d, reserved %d, ooms %d; ReplayDevice: device %d peak %d at %d, reserved %d, ooms %d",
						g.Device, g.PeakAllocatedBytes, g.PeakAllocatedEvent, g.PeakReservedBytes, g.OOMEvents,
						d, want.PeakAllocatedBytes, want.PeakAllocatedEvent, want.PeakReservedBytes, want.OOMEvents)
				}
				if len(g.PeakSites) > opt.Limit {
					t.Errorf("device %d: %d peak sites > limit %d", d, len(g.PeakSites), opt.Limit)
				}
				// The whole answer, field by field, as JSON.
				gj, _ := json.Marshal(g)
				wj, _ := json.Marshal(want)
				var gv, wv any
				_ = json.Unmarshal(gj, &gv)
				_ = json.Unmarshal(wj, &wv)
				if !reflect.DeepEqual(gv, wv) {
					t.Errorf("device %d: structuredContent differs from ReplayDevice:\n%s\nwant\n%s", d, gj, wj)
				}
			}
			if tc.peakAlloc >= 0 {
				g := got.Devices[0]
				if g.PeakAllocatedBytes != tc.peakAlloc || g.PeakAllocatedEvent != tc.peakEvent || g.OOMEvents != tc.ooms {
					t.Errorf("peak %d at event %d, ooms %d; want %d at %d, %d", g.PeakAllocatedBytes, g.PeakAllocatedEvent, g.OOMEvents, tc.peakAlloc, tc.peakEvent, tc.ooms)
				}
			}
			if txt := textOf(res); txt != got.Text() || len(txt) > DefaultMaxTextBytes {
				t.Errorf("text (%d bytes) is not the report's Text():\n%s\nwant\n%s", len(txt), txt, got.Text())
			}
		})
	}
	t.Run("ground truth", func(t *testing.T) {
		// testdata/scenarios/README.md: 4 earlier batches' frees delayed (2 MiB each), 2 still
		// pending at the snapshot, all from train.py:64 prefetch.
		var r analysis.ReplayReport
		structured(t, call(t, c, "replay", map[string]any{"path": fx(t, "cross_stream_pending.pickle")}), &r)
		d := r.Devices[0].DelayedFrees
		if d.Count != 4 || d.Bytes != 4*2<<20 || d.PendingAtEnd != 2 || len(d.Sites) != 1 || d.Sites[0].Site != "train.py:64" {
			t.Errorf("delayed frees %+v", d)
		}
		// growing_container_step50: train.py:97 keeps one 4 MiB block per step, 50 at step 50.
		structured(t, call(t, c, "replay", map[string]any{"path": fx(t, "growing_container_step50.pickle")}), &r)
		rs := r.Devices[0].RepeatingSites
		if len(rs) == 0 || rs[0].Site != "train.py:97" || rs[0].Survivors != 50 || rs[0].Bytes != 200<<20 || r.Devices[0].Sawtooth.GrowthPerIterationBytes != 4<<20 {
			t.Errorf("repeating sites %+v, sawtooth %+v", rs, r.Devices[0].Sawtooth)
		}
	})
}

// TestReplayToolErrors: a missing file, an absent device, a bad pattern and a bad limit are
// isError answers that say what to do.
func TestReplayToolErrors(t *testing.T) {
	c := newClient(t, Config{})
	for _, tc := range []struct {
		args map[string]any
		want []string
	}{
		{map[string]any{"path": fx(t, "does_not_exist.pickle")}, []string{"no such file", "Check the path"}},
		{map[string]any{"path": fx(t, "activation_oom.pickle"), "device": 7}, []string{"no device 7", "the file has devices [0]", "call replay without device"}},
		{map[string]any{"path": fx(t, "activation_oom.pickle"), "device": -1}, []string{"device"}},
		{map[string]any{"path": fx(t, "activation_oom.pickle"), "skip": []any{"("}}, []string{"skip pattern", "not a regular expression"}},
		{map[string]any{"path": fx(t, "activation_oom.pickle"), "limit": 0}, []string{"limit"}},
		{map[string]any{"path": fx(t, "activation_oom.pickle"), "bogus": 1}, []string{"bogus"}},
		{map[string]any{}, []string{"path"}},
		{map[string]any{"path": scenarios(t)}, []string{"is a directory"}},
	} {
		res := call(t, c, "replay", tc.args)
		if !res.IsError {
			t.Errorf("%v: not an error: %.200s", tc.args, textOf(res))
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(textOf(res), w) {
				t.Errorf("%v: %q lacks %q", tc.args, textOf(res), w)
			}
		}
	}
	// The server still answers after every failure.
	var r analysis.ReplayReport
	structured(t, call(t, c, "replay", map[string]any{"path": fx(t, "no_growth_step5.pickle")}), &r)
	if len(r.Devices) != 1 {
		t.Errorf("%d devices", len(r.Devices))
	}
}

// TestReplayToolCancelled: a call whose context is cancelled answers isError "cancelled", also
// when the snapshot is already cached (the replay itself stops), and nothing wrong is memoized.
func TestReplayToolCancelled(t *testing.T) {
	rs, err := newRoots([]string{repoRoot(t)})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{cache: NewCache(0, nil), memo: newMemo(4), roots: rs, maxText: DefaultMaxTextBytes}
	st, err := replayTool(e)
	if err != nil {
		t.Fatal(err)
	}
	req := func(limit int) mcp.CallToolRequest {
		r := mcp.CallToolRequest{}
		r.Params.Name = "replay"
		r.Params.Arguments = map[string]any{"path": fx(t, "growing_container_step50.pickle"), "limit": limit}
		return r
	}
	// Warm the cache, then replay with other options (no memoized answer) on a cancelled context.
	if res, err := st.Handler(context.Background(), req(1)); err != nil || res.IsError {
		t.Fatalf("warm-up: %v %v", err, res)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := st.Handler(ctx, req(2))
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.Contains(textOf(res), "cancelled") {
		t.Errorf("cancelled call: isError=%v %q", res.IsError, textOf(res))
	}
	res, err = st.Handler(context.Background(), req(2))
	if err != nil || res.IsError {
		t.Errorf("after the cancelled call: %v %s", err, textOf(res))
	}
}
