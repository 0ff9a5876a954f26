package main

import (
	"encoding/json"
	"strings"
	"testing"
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
			[]string{`"iteration_source": "periodicity"`, `"iterations": 50`, `"iteration_period_allocs": 19`, `"growth_per_iteration_bytes": 0`}},
		{[]string{"replay", dir + "growing_container_step50.pickle"},
			[]string{"50 iterations (the trace repeats every 20 allocations", "each iteration leaves 4.0 MiB more allocated", "train.py:97 allocates without freeing: 50 blocks"}},
		{[]string{"replay", dir + "summarize_basic.pickle", "--device", "0", "--json"},
			[]string{`"iteration_source": "annotations"`, `"iterations": 3`}},
		{[]string{"replay", dir + "summarize_basic.pickle", "--device", "3"},
			[]string{"device 3: no trace; final allocated 0 B", "the file has no trace for this device"}},
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
	if _, err := run(t, "replay", dir+"missing.pickle"); err == nil {
		t.Error("missing file: no error")
	}
}
