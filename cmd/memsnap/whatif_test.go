package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// TestWhatIfCommand checks the JSON contract and the errors (one line, exit status 2).
func TestWhatIfCommand(t *testing.T) {
	out, err := run(t, "whatif", filepath.Join(scenarios, "whatif_capacity_oom.pickle"), "--set", "expandable_segments=True", "--set", "max_split_size_mb=128", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Settings map[string]any `json:"settings"`
		Devices  []struct {
			Device         int    `json:"device"`
			CapacityBytes  int64  `json:"capacity_bytes"`
			CapacitySource string `json:"capacity_source"`
			Start          string `json:"start"`
			Fidelity       struct {
				Recorded   int `json:"recorded_segment_allocs"`
				Reproduced int `json:"reproduced_segment_allocs"`
			} `json:"fidelity"`
			Baseline map[string]int64 `json:"baseline"`
			WhatIf   map[string]int64 `json:"whatif"`
			OOMs     []map[string]any `json:"ooms"`
			Notes    []string         `json:"notes"`
		} `json:"devices"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	if v.Settings["alloc_conf"] != "expandable_segments:True,max_split_size_mb:128" || v.Settings["expandable_segments"] != true || v.Settings["max_split_size_mb"] != float64(128) {
		t.Errorf("settings %v", v.Settings)
	}
	if len(v.Devices) != 1 {
		t.Fatalf("devices %+v", v.Devices)
	}
	d := v.Devices[0]
	if d.Device != 0 || d.CapacityBytes != 2<<30 || d.CapacitySource != "oom_event" || d.Start != "empty" || d.Fidelity.Recorded != 50 || d.Fidelity.Reproduced != 50 ||
		d.Baseline["oom_count"] != 1 || d.Baseline["cuda_malloc_calls"] != 50 || d.Baseline["cache_flushes"] != 1 || d.Baseline["cuda_free_calls"] != 14 || len(d.WhatIf) != 6 || len(d.OOMs) != 1 || len(d.Notes) == 0 {
		t.Errorf("device %+v", d)
	}
	for _, k := range []string{"event_index", "requested_bytes", "baseline_fits", "whatif_fits", "headroom_bytes"} {
		if _, ok := d.OOMs[0][k]; !ok {
			t.Errorf("oom lacks %s: %v", k, d.OOMs[0])
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--set", "expandable=1"}, `--set expandable=1: unknown allocator setting "expandable": the accepted keys are expandable_segments, max_split_size_mb, roundup_power2_divisions, garbage_collection_threshold`},
		{[]string{"--set", "max_split_size_mb=big"}, "accepted keys: expandable_segments, max_split_size_mb, roundup_power2_divisions, garbage_collection_threshold"},
		{[]string{"--set", "expandable_segments"}, "KEY=VALUE with KEY one of expandable_segments"},
		{nil, "give at least one --set KEY=VALUE"},
		{[]string{"--set", "expandable_segments=True", "--device-memory", "lots"}, "--device-memory: bad size"},
	} {
		args := append([]string{"whatif", filepath.Join(scenarios, "whatif_capacity_oom.pickle")}, tc.args...)
		_, err := run(t, args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(oneLine(err), "\n") || exitCode(err) != 2 {
			t.Errorf("%v: %v (exit %d), want %q", tc.args, err, exitCode(err), tc.want)
		}
	}
	_, err = run(t, "whatif", filepath.Join(scenarios, "summarize_basic_segment_list.pickle"), "--set", "expandable_segments=True")
	if err == nil || !strings.Contains(err.Error(), "a what-if needs the trace") || !strings.Contains(err.Error(), "_record_memory_history") || exitCode(err) != 2 {
		t.Errorf("no trace: %v", err)
	}
}
