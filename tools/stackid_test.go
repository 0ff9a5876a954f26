package tools

import (
	"fmt"
	"slices"
	"testing"

	"github.com/memsnap/memsnap/analysis"
	"github.com/memsnap/memsnap/analysis/raw"
)

// TestStackIDDrillDown: the stack_id of a top-stacks group (and of an oom-report live site)
// resolves through read-raw-section stacks[ID] to the stack the group shows: the same id, every
// frame, and the site's own frame among them.
func TestStackIDDrillDown(t *testing.T) {
	c := newClient(t, Config{})
	path := fx(t, "activation_oom.pickle")
	var ts analysis.TopStacksResult
	structured(t, call(t, c, "top-stacks", map[string]any{"path": path, "limit": 1}), &ts)
	var oom analysis.OOMResult
	structured(t, call(t, c, "oom-report", map[string]any{"path": path, "limit": 1}), &oom)
	for _, tc := range []struct {
		name           string
		id             int
		file, function string
		line           int64
	}{
		{"top-stacks", ts.Sites[0].StackID, ts.Sites[0].File, ts.Sites[0].Function, ts.Sites[0].Line},
		{"oom-report", oom.OOMs[0].LiveSites[0].StackID, oom.OOMs[0].LiveSites[0].File, oom.OOMs[0].LiveSites[0].Function, oom.OOMs[0].LiveSites[0].Line},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.file != "/workspace/proj/train.py" || tc.line != 112 || tc.function != "main" || tc.id <= 0 {
				t.Fatalf("site %s:%d %s stack %d, want /workspace/proj/train.py:112 main with a stack", tc.file, tc.line, tc.function, tc.id)
			}
			var r raw.Result
			structured(t, call(t, c, "read-raw-section", map[string]any{"path": path, "section": fmt.Sprintf("stacks[%d]", tc.id), "limit": 500}), &r)
			if r.Kind != raw.KindStack || len(r.Stacks) != 1 || r.Stacks[0].ID != tc.id || r.More ||
				len(r.Stacks[0].Frames) != r.Stacks[0].FramesTotal || r.Stacks[0].FramesTotal == 0 {
				t.Fatalf("stacks[%d] = %+v", tc.id, r)
			}
			if !slices.Contains(r.Stacks[0].Frames, "/workspace/proj/train.py:112 main") {
				t.Errorf("stacks[%d] frames %q lack the site frame", tc.id, r.Stacks[0].Frames)
			}
		})
	}
	if ts.Sites[0].StackID != oom.OOMs[0].LiveSites[0].StackID {
		t.Errorf("top-stacks and oom-report name different stacks for train.py:112: %d vs %d", ts.Sites[0].StackID, oom.OOMs[0].LiveSites[0].StackID)
	}
}
