package tools

import (
	"path/filepath"
	"testing"
)

func TestSmoke(t *testing.T) {
	c := newClient(t, Config{})
	for _, tc := range []struct {
		tool string
		args map[string]any
	}{
		{"summarize", map[string]any{"path": filepath.Join(scenarios(t), "activation_oom.pickle")}},
		{"top-stacks", map[string]any{"path": filepath.Join(scenarios(t), "activation_oom.pickle")}},
		{"oom-report", map[string]any{"path": filepath.Join(scenarios(t), "activation_oom.pickle")}},
		{"fragmentation", map[string]any{"path": filepath.Join(scenarios(t), "fragmentation_oom.pickle")}},
		{"diff", map[string]any{"before": filepath.Join(scenarios(t), "retained_graph_step5.pickle"), "after": filepath.Join(scenarios(t), "retained_graph_step50.pickle")}},
		{"read-raw-section", map[string]any{"path": filepath.Join(scenarios(t), "activation_oom.pickle"), "section": "segments[0].blocks[0:3]"}},
		{"summarize", map[string]any{"path": filepath.Join(scenarios(t), "multirank")}},
	} {
		res := call(t, c, tc.tool, tc.args)
		t.Logf("%s isError=%v\n%s", tc.tool, res.IsError, textOf(res))
	}
}
