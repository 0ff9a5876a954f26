package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestCheckExitCodes: the gate's contract — 0 within budget, 1 over it, 2 on bad input — with the
// no-growth fixture, whose replayed peak is 107 MiB (111,675,416 B).
func TestCheckExitCodes(t *testing.T) {
	const f = "../../testdata/scenarios/no_growth_step50.pickle"
	cases := []struct {
		name string
		args []string
		code int
		out  string // substring of stdout, or of the error for code 2
	}{
		{"within", []string{"check", f, "--max-peak", "1GiB"}, 0, "ok device 0: peak allocated 107 MiB is within --max-peak 1.0 GiB"},
		{"at the byte", []string{"check", f, "--max-peak", "111675416"}, 0, "is within --max-peak"},
		{"one byte over", []string{"check", f, "--max-peak", "111675415"}, 1, "FAIL device 0: peak allocated 111675416 B exceeds --max-peak 111675415 B by 1 B; top site at the peak (event 123): train.py:91 48.0 MiB [optimizer_state]"},
		{"final allocated", []string{"check", f, "--max-allocated", "64MiB"}, 1, "FAIL device 0: final allocated 72.5 MiB exceeds --max-allocated 64.0 MiB by 8.5 MiB; top site in the final state: train.py:91 48.0 MiB [optimizer_state]"},
		{"growth needs a baseline", []string{"check", f, "--max-growth", "5"}, 2, "--max-growth needs --baseline"},
		{"baseline needs growth", []string{"check", f, "--baseline", f}, 2, "--baseline needs --max-growth"},
		{"no budget", []string{"check", f}, 2, "no budget given"},
		{"bad size", []string{"check", f, "--max-peak", "12 parsecs"}, 2, `bad size "12 parsecs"`},
		{"missing file", []string{"check", "nope.pickle", "--max-peak", "1GiB"}, 2, "nope.pickle"},
		{"a device the file lacks", []string{"check", f, "--max-peak", "1MiB", "--device", "7"}, 2, "no device 7 (the file has devices [0])"},
		{"growth NaN", []string{"check", f, "--baseline", f, "--max-growth", "NaN"}, 2, "--max-growth must be a percentage of 0 or more"},
		{"same file as baseline", []string{"check", f, "--baseline", f, "--max-growth", "0"}, 0, "(+0.0%) is within --max-growth 0%"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := run(t, tc.args...)
			code := 0
			if err != nil {
				code = exitCode(err)
			}
			if code != tc.code {
				t.Fatalf("exit %d (%v), want %d\n%s", code, err, tc.code, out)
			}
			got := out
			if code == 2 {
				got = err.Error()
			}
			if !strings.Contains(got, tc.out) {
				t.Fatalf("output %q does not contain %q", got, tc.out)
			}
		})
	}
}

func TestCheckJSON(t *testing.T) {
	out, err := run(t, "check", "../../testdata/scenarios/no_growth_step50.pickle", "--max-peak", "100MiB", "--json")
	if exitCode(err) != 1 {
		t.Fatalf("exit: %v", err)
	}
	var r struct {
		Pass    bool `json:"pass"`
		Budgets []struct {
			Budget, Measure string
			ValueBytes      int64  `json:"value_bytes"`
			LimitBytes      int64  `json:"limit_bytes"`
			TopSite         string `json:"top_site"`
			Pass            bool
		} `json:"budgets"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if r.Pass || len(r.Budgets) != 1 || r.Budgets[0].Budget != "max-peak" || r.Budgets[0].Measure != "peak_allocated" ||
		r.Budgets[0].ValueBytes != 111675416 || r.Budgets[0].LimitBytes != 100<<20 || r.Budgets[0].TopSite != "train.py:91" {
		t.Fatalf("%+v", r)
	}
}
