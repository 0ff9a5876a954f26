package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"80GiB", 80 << 30, true},
		{"80G", 80 << 30, true},
		{"1.5 GiB", 3 << 29, true},
		{"512MiB", 512 << 20, true},
		{"1024", 1024, true},
		{"", 0, false},
		{"-1G", 0, false},
		{"lots", 0, false},
		{"nan", 0, false},
		{"inf", 0, false},
		{"1e30", 0, false},
		{"16777216TiB", 0, false},
		{"0.5", 0, false},
	}
	for _, tc := range tests {
		got, err := parseSize(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// TestAnalysisCommands runs top-stacks, diff, oom and fragmentation over the scenario fixtures.
func TestAnalysisCommands(t *testing.T) {
	const dir = "../../testdata/scenarios/"
	tests := []struct {
		args []string
		want string // a JSON fragment or text that must appear
	}{
		{[]string{"oom", dir + "activation_oom.pickle", "--json"}, `"verdict": "capacity"`},
		{[]string{"oom", dir + "fragmentation_oom.pickle", "--json"}, `"verdict": "fragmentation"`},
		{[]string{"oom", dir + "outside_pytorch_oom.pickle", "--json"}, `"verdict": "outside_pytorch"`},
		{[]string{"oom", dir + "outside_pytorch_oom.pickle", "--device-memory", "1GiB"}, "verdict: outside_pytorch"},
		{[]string{"diff", dir + "growing_container_step5.pickle", dir + "growing_container_step50.pickle", "--json"}, `"name": "growing_container"`},
		{[]string{"diff", dir + "no_growth_step5.pickle", dir + "no_growth_step50.pickle"}, "no_growth"},
		{[]string{"top-stacks", dir + "cross_stream_pending.pickle", "--state", "pending", "--json"}, `"site": "train.py:64"`},
		{[]string{"top-stacks", dir + "activation_oom.pickle", "--group-by", "file", "-n", "2"}, "model.py"},
		{[]string{"fragmentation", dir + "fragmentation_oom.pickle", "--json"}, `"largest_free_block_bytes": 9961472`},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args[:2], " "), func(t *testing.T) {
			out, err := run(t, tc.args...)
			if err != nil {
				t.Fatalf("%v: %v", tc.args, err)
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("%v: output lacks %q:\n%s", tc.args, tc.want, out)
			}
			if strings.Contains(strings.Join(tc.args, " "), "--json") {
				var v map[string]any
				if err := json.Unmarshal([]byte(out), &v); err != nil {
					t.Errorf("bad JSON: %v", err)
				}
				if strings.Contains(out, "null") {
					t.Errorf("JSON holds null: %s", out)
				}
			}
		})
	}
	for _, bad := range [][]string{
		{"top-stacks", dir + "activation_oom.pickle", "--state", "bogus"},
		{"top-stacks", dir + "activation_oom.pickle", "--skip", "("},
		{"oom", dir + "activation_oom.pickle", "--device-memory", "huge"},
		{"diff", dir + "activation_oom.pickle"},
		{"fragmentation", dir + "does-not-exist.pickle"},
	} {
		if _, err := run(t, bad...); err == nil || exitCode(err) != 2 || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: err = %v", bad, err)
		}
	}
}
