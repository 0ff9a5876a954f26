package analysis

import (
	"strings"
	"testing"
)

// TestTopStacksWeightsWithGradients: the frameless blocks from before the trace are the
// weights and their persistent .grad in answer keys #9 (1,001 MiB: 72×9 MiB = 2×36 SwiGLU
// weights, embedding and lm_head ×(param, grad)) and #15 (1.44 GiB), whose backward passes
// compute gradients of those sizes and add them into existing ones. They are weights only in
// #4 (grads set to None: each backward hands new ones over), #11 (frozen CNN: no gradient of
// its weights), #10 (frozen 4-bit base; the LoRA grads are made in the trace) and #5 (a
// forward only).
func TestTopStacksWeightsWithGradients(t *testing.T) {
	cases := []struct {
		file  string
		bytes int64 // of the frameless parameter row
		with  bool
	}{
		{realWindows, 1033033728, true},
		{realOptimizerAnnotation, 1528165376, true},
		{"pt2.3-2.4_json-form_resnet-tomi.json", 5632, false},
		{"pt2.2_repeated-snapshot-events_cnn-counterfactuals_eornn.pickle", 262144, false},
		{"pt2.1_hf-qlora-bnb-accelerate-llama-train_ftcourse.pickle", 1086627840, false},
		{realCompileForward, 13763491840, false},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			r, err := TopStacks(realFile(t, tc.file), TopStacksOptions{Device: AllDevices})
			if err != nil {
				t.Fatal(err)
			}
			var row *TopSite
			for i := range r.Sites {
				if s := &r.Sites[i]; s.Kind == SiteKindNone && s.Category == CategoryParameter {
					row = s
				}
			}
			if row == nil || row.Bytes != tc.bytes || row.WithGradients != tc.with {
				t.Fatalf("frameless parameter row %+v, want %d B with_gradients %v", row, tc.bytes, tc.with)
			}
			why := strings.Contains(r.Text(), "      why: guess: no frames because it was allocated before recording started, and it is still alive; the trace's backward pass computes gradients")
			if why != (tc.with && row.Percent >= 1) || strings.Contains(row.Evidence, "weights and their gradients") != tc.with {
				t.Errorf("why line %v, evidence %q", why, row.Evidence)
			}
		})
	}
}
