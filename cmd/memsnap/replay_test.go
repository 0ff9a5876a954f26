package main

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis"
	"github.com/memsnap/memsnap/analysis/load"
)

func TestReplayCommand(t *testing.T) {
	const dir = "../../testdata/scenarios/"
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"replay", dir + "cross_stream_pending.pickle"},
			[]string{"4 delayed frees (8.0 MiB", "2 still pending at the end", "live at the peak:"}},
		{[]string{"replay", dir + "no_growth_step50.pickle", "--json"},
			[]string{`"iteration_source": "phases"`, `"iterations": 50`, `"iteration_period_allocs": 0`, `"growth_per_iteration_bytes": 0`, `"workload": "training"`}},
		{[]string{"replay", dir + "growing_container_step50.pickle"},
			[]string{"50 steps (a forward pass after each backward pass or optimizer step)", "each step leaves 4.0 MiB more allocated", "train.py:97 [user_container] allocates without freeing: 50 blocks"}},
		{[]string{"replay", dir + "summarize_basic.pickle", "--device", "0", "--json"},
			[]string{`"iteration_source": "annotations"`, `"iterations": 3`}},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args[1:], " "), func(t *testing.T) {
			out, err := run(t, tc.args...)
			if err != nil {
				t.Fatalf("%v: %v", tc.args, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if strings.Contains(strings.Join(tc.args, " "), "--json") {
				var v struct {
					Path    string           `json:"path"`
					Devices []map[string]any `json:"devices"`
				}
				if err := json.Unmarshal([]byte(out), &v); err != nil || len(v.Devices) != 1 {
					t.Errorf("bad JSON (%v): %s", err, out)
				}
				if strings.Contains(out, "null") {
					t.Errorf("JSON holds null")
				}
			}
		})
	}
	if _, err := run(t, "replay", dir+"summarize_basic.pickle", "--device", "-1"); err == nil || !strings.Contains(err.Error(), "--device") {
		t.Errorf("negative device: %v", err)
	}
	// A device the file does not have is an error naming the devices it has (as summarize's).
	if _, err := run(t, "replay", dir+"summarize_basic.pickle", "--device", "3"); err == nil || !strings.Contains(err.Error(), "no device 3 (the file has devices [0])") {
		t.Errorf("absent device: %v", err)
	}
	if _, err := run(t, "replay", dir+"missing.pickle"); err == nil {
		t.Error("missing file: no error")
	}
}

// TestReplayJSONIsReport: --json prints exactly analysis.ReplaySnapshot's report (the replay MCP
// tool's structuredContent), for every device and for one.
func TestReplayJSONIsReport(t *testing.T) {
	const dir = "../../testdata/scenarios/"
	zero := 0
	for _, tc := range []struct {
		file   string
		device *int
		args   []string
	}{
		{"activation_oom.pickle", nil, nil},
		{"cross_stream_pending.pickle", &zero, []string{"--device", "0"}},
		{"multirank/rank0.pickle", nil, []string{"-n", "3"}},
	} {
		out, err := run(t, append([]string{"replay", dir + tc.file, "--json"}, tc.args...)...)
		if err != nil {
			t.Fatal(err)
		}
		snap, err := load.File(context.Background(), dir+tc.file, load.Options{})
		if err != nil {
			t.Fatal(err)
		}
		opt := analysis.ReplayOptions{Limit: 10}
		if len(tc.args) == 2 && tc.args[0] == "-n" {
			opt.Limit = 3
		}
		rep, err := analysis.ReplaySnapshot(context.Background(), snap, tc.device, opt)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(rep)
		var got, exp any
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatal(err)
		}
		_ = json.Unmarshal(want, &exp)
		if !reflect.DeepEqual(got, exp) {
			t.Errorf("%s: --json differs from analysis.ReplaySnapshot:\n%s\nwant\n%s", tc.file, out, want)
		}
	}
}
