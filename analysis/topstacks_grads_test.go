package analysis

import (
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis/snapshot"
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

// TestWeightsWithGradientsSynthetic: eight 32 MiB frameless blocks from before the trace, and
// a backward pass after a forward. Half as many gradients of their size computed and freed
// inside the pass: weights and their gradients (added into). As many: activation gradients of
// a frozen model's weight size (none are weights' gradients). Gradients that outlive the pass:
// new .grad tensors, so the blocks are weights only.
func TestWeightsWithGradientsSynthetic(t *testing.T) {
	const w = 32 * mib
	cases := []struct {
		name     string
		computed int  // backward allocations of size w
		outlive  bool // they outlive the pass (handed to .grad)
		want     bool
	}{
		{"gradients added into existing ones", 4, false, true},
		{"frozen, activation gradients of a weight's size", 8, false, false},
		{"new gradients handed over", 4, true, false},
		{"no gradient of these sizes", 0, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := newTB()
			fwd := b.stack("/usr/lib/python3/site-packages/torch/nn/modules/linear.py", 116, "forward", "/work/proj/model.py", 12, "forward", "/work/proj/train.py", 40, "main")
			bw := b.stack("/usr/lib/python3/site-packages/torch/autograd/graph.py", 825, "_engine_run_backward", "/usr/lib/python3/site-packages/torch/_tensor.py", 522, "backward", "/work/proj/train.py", 44, "main")
			var blocks []snapshot.Block
			for i := 0; i < 8; i++ {
				blocks = append(blocks, blk(w, snapshot.StateActiveAllocated, snapshot.NoStack))
			}
			live := 0
			if tc.outlive {
				live = tc.computed
			}
			for i := 0; i < live; i++ {
				blocks = append(blocks, blk(w, snapshot.StateActiveAllocated, bw))
			}
			blocks = append(blocks, blk(int64(32-live)*w, snapshot.StateInactive, snapshot.NoStack))
			b.seg(0, 1<<32, 0, blocks...)
			base := uint64(1<<32) + uint64(8*w)
			act := base + uint64(live)*uint64(w)
			for i := 0; i < 8; i++ {
				b.ev(0, alloc(act+uint64(i)*uint64(w), 4*mib, fwd))
			}
			for i := 0; i < 8; i++ {
				b.ev(0, alloc(act+uint64(8+i)*uint64(w), 1*mib, bw)) // a temporary
				b.ev(0, freeDone(act+uint64(i)*uint64(w), 4*mib))
				if i < tc.computed {
					g := act + uint64(16+i)*uint64(w)
					if tc.outlive {
						g = base + uint64(i)*uint64(w)
					}
					b.ev(0, alloc(g, w, bw))
					if !tc.outlive {
						b.ev(0, freeDone(g, w))
					}
				}
				b.ev(0, freeDone(act+uint64(8+i)*uint64(w), 1*mib))
			}
			b.ev(0, alloc(act, 512, bw)) // the pass's last allocation
			b.ev(0, freeDone(act, 512))
			snap := b.done()
			snap.Caps.FramesOnAllocs, snap.Caps.FramesOnFrees = true, true
			r, err := TopStacks(snap, TopStacksOptions{Device: AllDevices})
			if err != nil {
				t.Fatal(err)
			}
			var row *TopSite
			for i := range r.Sites {
				if s := &r.Sites[i]; s.Kind == SiteKindNone && s.Category == CategoryParameter {
					row = s
				}
			}
			if row == nil || row.Bytes != 8*w || row.WithGradients != tc.want {
				t.Fatalf("frameless parameter row %+v, want with_gradients %v\n%s", row, tc.want, r.Text())
			}
		})
	}
}
