package tools

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis"
	"github.com/memsnap/memsnap/analysis/load"
)

// TestWhatIfTool: the what-if tool answers exactly what analysis.WhatIf computes (the CLI's
// whatif --json prints the same result), its text is the result's Text(), and wrong settings
// are errors naming the accepted keys.
func TestWhatIfTool(t *testing.T) {
	c := newClient(t, Config{})
	tests := []struct {
		file string
		args map[string]any
		opt  analysis.WhatIfOptions
		dev  *int
		fits bool
	}{
		{"whatif_expandable_avoids.pickle", map[string]any{"settings": map[string]any{"expandable_segments": true}},
			analysis.WhatIfOptions{Settings: []analysis.WhatIfSetting{{Key: "expandable_segments", Value: "True"}}}, nil, true},
		{"whatif_capacity_oom.pickle", map[string]any{"settings": map[string]any{"expandable_segments": true, "max_split_size_mb": 128, "roundup_power2_divisions": 4, "garbage_collection_threshold": 0.8}, "device": 0},
			analysis.WhatIfOptions{Settings: []analysis.WhatIfSetting{{Key: "expandable_segments", Value: "True"}, {Key: "max_split_size_mb", Value: "128"},
				{Key: "roundup_power2_divisions", Value: "4"}, {Key: "garbage_collection_threshold", Value: "0.8"}}}, new(int), true},
		{"fragmentation_oom.pickle", map[string]any{"recommend": true}, analysis.WhatIfOptions{Recommend: true}, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			args := map[string]any{"path": fx(t, tc.file)}
			for k, v := range tc.args {
				args[k] = v
			}
			res := call(t, c, "what-if", args)
			if res.IsError {
				t.Fatalf("error: %s", textOf(res))
			}
			var got analysis.WhatIfResult
			structured(t, res, &got)
			snap, err := load.File(context.Background(), fx(t, tc.file), load.Options{})
			if err != nil {
				t.Fatal(err)
			}
			want, err := analysis.WhatIf(context.Background(), snap, tc.dev, tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(&got, want) {
				t.Errorf("structuredContent differs from analysis.WhatIf:\n got %+v\nwant %+v", got, *want)
			}
			if textOf(res) != want.Text() {
				t.Errorf("text differs from Text():\n%s", textOf(res))
			}
			if len(got.Devices) != 1 || len(got.Devices[0].OOMs) != 1 || got.Devices[0].OOMs[0].WhatIfFits != tc.fits || !got.Devices[0].Fidelity.Exact {
				t.Errorf("devices %+v", got.Devices)
			}
		})
	}
	for _, tc := range []struct {
		args map[string]any
		want []string
	}{
		{map[string]any{"settings": map[string]any{"expandable": true}}, []string{"unknown argument expandable"}},
		{map[string]any{"settings": map[string]any{"max_split_size_mb": 8}}, []string{"max_split_size_mb must be more than 20", "accepted keys: expandable_segments, max_split_size_mb, roundup_power2_divisions, garbage_collection_threshold"}},
		{map[string]any{"settings": map[string]any{"roundup_power2_divisions": 3}}, []string{"0 or a power of two"}},
		{map[string]any{"settings": map[string]any{"garbage_collection_threshold": 1.5}}, []string{"garbage_collection_threshold must be a number in (0, 1)"}},
		{map[string]any{"settings": map[string]any{}}, []string{"settings is empty", "recommend"}},
		{map[string]any{}, []string{"settings is empty"}},
		{map[string]any{"settings": map[string]any{"expandable_segments": true}, "device": 2}, []string{"device 2 has no allocation events", "without device"}},
	} {
		args := map[string]any{"path": fx(t, "fragmentation_oom.pickle")}
		for k, v := range tc.args {
			args[k] = v
		}
		res := call(t, c, "what-if", args)
		for _, w := range tc.want {
			if !res.IsError || !strings.Contains(textOf(res), w) {
				t.Errorf("%v: %q lacks %q", tc.args, textOf(res), w)
			}
		}
	}
	res := call(t, c, "what-if", map[string]any{"path": fx(t, "summarize_basic_segment_list.pickle"), "settings": map[string]any{"expandable_segments": true}})
	if !res.IsError || !strings.Contains(textOf(res), "a what-if needs the trace") || !strings.Contains(textOf(res), "_record_memory_history") {
		t.Errorf("no trace: %s", textOf(res))
	}
}

// TestWhatIfRankingDescribed: the recommend argument describes the ranking the analysis uses,
// in the words the CLI's help takes from the same constant.
func TestWhatIfRankingDescribed(t *testing.T) {
	f, _ := reflect.TypeFor[WhatIfInput]().FieldByName("Recommend")
	if desc := strings.ReplaceAll(f.Tag.Get("jsonschema"), `\,`, ","); !strings.Contains(desc, analysis.WhatIfRanking) {
		t.Errorf("recommend's description %q does not say %q", desc, analysis.WhatIfRanking)
	}
}
