package analysis

// Notes and advice on real files (../shared/snapshots/real) that the answer keys call for.

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// TestRingBufferWording: a wrapped ring buffer is a fact only when the file says so; a round
// event count opening on unknown frees is also what a trimmed file looks like.
func TestRingBufferWording(t *testing.T) {
	tests := []struct {
		caps snapshot.Capabilities
		want string
	}{
		{snapshot.Capabilities{HasTrace: true, TraceStart: "ring_buffer", RingBufferFull: true},
			"the trace ring buffer wrapped (it holds max_entries events): the oldest events are lost"},
		{snapshot.Capabilities{HasTrace: true, TraceStart: "ring_buffer", MaxEntries: 100000},
			"the trace ring buffer wrapped (it holds max_entries events): the oldest events are lost"},
		{snapshot.Capabilities{HasTrace: true, TraceStart: "ring_buffer"},
			"the trace ring buffer most likely wrapped (a round count of events opening on frees of blocks it never allocated; a file cut to its last events looks the same): the oldest events are lost"},
	}
	for _, tc := range tests {
		if got := cannotAnswer(tc.caps, snapshot.Format{}); !strings.Contains(got, tc.want) {
			t.Errorf("caps %+v:\n got %q\nwant it to contain %q", tc.caps, got, tc.want)
		}
	}
}

// TestSegmentStackHint: the triton file's blocks carry no frames, but one of its four segments
// carries the stack that created it (answer key #14): summarize and top-stacks name it, as a lead.
func TestSegmentStackHint(t *testing.T) {
	s := realSnap(t, "pt2.5-2.8_max-split-512_no-history_triton-unfold.pkl")
	want := "1 segment of 4 carries the stack of the request that created it (history was on then): it was created at projects/triton-unfold/unfold1d_elementwise.py:42 in unfold <- triton-unfold/./bench_fold1d.py:25 in random_unfold_triton <- triton-unfold/utils/benchmark.py:40 in benchmark"
	sum, err := Summarize(context.Background(), s, SummaryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ts, err := TopStacks(s, TopStacksOptions{Device: AllDevices})
	if err != nil {
		t.Fatal(err)
	}
	for name, notes := range map[string][]string{"summarize": sum.Notes, "top-stacks": ts.Notes} {
		if !slices.ContainsFunc(notes, func(n string) bool {
			return strings.HasPrefix(n, want) && strings.HasSuffix(n, "the code their memory belongs to can only be guessed from it (a guess: any later request can reuse a segment)")
		}) {
			t.Errorf("%s notes %q", name, notes)
		}
	}
	// Files with block stacks get no such note.
	sum, err = Summarize(context.Background(), realSnap(t, "pt2.5-2.7_small-full-trace_cs336.pickle"), SummaryOptions{})
	if err != nil || slices.ContainsFunc(sum.Notes, func(n string) bool { return strings.Contains(n, "the stack of the request that created it") }) {
		t.Errorf("cs336 notes %q (%v)", sum.Notes, err)
	}
}

// TestOOMNearMisses: no oom event, but the llama file's 39 cudaMalloc-failure retries (answer
// key #2) are what came closest: the OOM report says so instead of only "no oom event".
func TestOOMNearMisses(t *testing.T) {
	r, err := OOMReport(context.Background(), realSnap(t, "pt2.1_multistream_llama-selectn.pickle"), OOMOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := "but device 0 came close: 39 times a cudaMalloc failed (most often for select_n.py:140) and the allocator recovered by freeing every cached unused segment (140 GiB in all) and retrying: the device is at its limit"
	if len(r.OOMs) != 0 || !slices.ContainsFunc(r.Notes, func(n string) bool { return strings.HasPrefix(n, want) }) {
		t.Errorf("ooms %d notes %q", len(r.OOMs), r.Notes)
	}
	r, err = OOMReport(context.Background(), realSnap(t, "pt2.5-2.7_hf-qwen2-inference_segment-free-churn_sqattn.pickle"), OOMOptions{})
	if err != nil || slices.ContainsFunc(r.Notes, func(n string) bool { return strings.Contains(n, "came close") }) {
		t.Errorf("qwen2 (empty_cache churn, no failure): notes %q (%v)", r.Notes, err)
	}
}

// TestReplayForwardOnlyAdvice: the compiled forward saves 3.7 GiB of activations for a backward
// the trace never shows (answer key #5): the replay says what inference_mode would not keep.
// A trace with a backward pass gets checkpointing advice instead, never this.
func TestReplayForwardOnlyAdvice(t *testing.T) {
	r, err := Replay(context.Background(), realSnap(t, "pt2.5-2.7_torch-compile_cpp-frames_cs336-fwd.pickle"), 0)
	if err != nil {
		t.Fatal(err)
	}
	want := "the trace holds a forward pass with grad enabled and no backward: 3.7 GiB (22%) at the peak are activations it saves for a backward; if none follows (a forward-only benchmark, evaluation, generation), run it under torch.inference_mode()"
	if !strings.HasPrefix(r.ForwardOnlyAdvice, want) || r.CheckpointingAdvice != "" || !strings.Contains(r.Text(), want) {
		t.Errorf("forward-only advice %q, checkpointing %q", r.ForwardOnlyAdvice, r.CheckpointingAdvice)
	}
	r, err = Replay(context.Background(), realSnap(t, "pt2.10_user-metadata_windows_cs336.pickle"), 0)
	if err != nil || r.ForwardOnlyAdvice != "" || r.CheckpointingAdvice == "" {
		t.Errorf("with a backward pass: forward-only %q, checkpointing %q (%v)", r.ForwardOnlyAdvice, r.CheckpointingAdvice, err)
	}
}

// TestWhatIfEmptyCacheChurn: qwen2's churn is 28 explicit empty_cache() calls (answer key #13):
// the what-if says no setting removes it, where it ranked expandable segments first in silence.
func TestWhatIfEmptyCacheChurn(t *testing.T) {
	r, err := WhatIf(context.Background(), realSnap(t, "pt2.5-2.7_hf-qwen2-inference_segment-free-churn_sqattn.pickle"), nil, WhatIfOptions{Recommend: true})
	if err != nil {
		t.Fatal(err)
	}
	want := "28 runs of segment releases are explicit torch.cuda.empty_cache() calls (empty_cache in their stacks, or no new segment right after them): every replay makes them at the same points, so no setting removes the cudaFree and cudaMalloc calls they cause"
	if !slices.ContainsFunc(r.Devices[0].Notes, func(n string) bool { return strings.HasPrefix(n, want) }) {
		t.Errorf("notes %q", r.Devices[0].Notes)
	}
}

// TestReplaySawtoothFirstStep: tomi's first step makes the cuBLAS workspaces that later steps
// keep (answer key #4): its 16.3 MiB rise is that step's, not every step's. eornn's first step
// rises as much as the others: no such remark.
func TestReplaySawtoothFirstStep(t *testing.T) {
	r, err := Replay(context.Background(), realSnap(t, "pt2.3-2.4_json-form_resnet-tomi.json"), 0)
	if err != nil {
		t.Fatal(err)
	}
	want := "sawtooth over 4 complete steps: starts at 3.7 KiB (the last at 16.3 MiB), rises by up to 16.3 MiB within a step (the first step: most likely one-time memory that later steps keep) (peak 17.3 MiB); no growth from one step to the next"
	if !strings.Contains(r.Text(), want) {
		t.Errorf("text lacks %q:\n%s", want, r.Text())
	}
	r, err = Replay(context.Background(), realSnap(t, "pt2.2_repeated-snapshot-events_cnn-counterfactuals_eornn.pickle"), 0)
	if err != nil || !strings.Contains(r.Text(), "starts at 23.4 MiB (the last at 46.5 MiB), rises by up to 56.8 MiB within a step (peak 103 MiB)") {
		t.Errorf("eornn (%v):\n%s", err, r.Text())
	}
}

// TestReplayCheckpointingIdiom: the checkpointing advice names the switch of the activations'
// library: the QLoRA job's Hugging Face model has its own (answer key #10), the cs336 model
// (plain PyTorch modules) gets torch.utils.checkpoint.
func TestReplayCheckpointingIdiom(t *testing.T) {
	for file, want := range map[string]string{
		"pt2.1_hf-qlora-bnb-accelerate-llama-train_ftcourse.pickle": "activation checkpointing (model.gradient_checkpointing_enable() on this Hugging Face transformers model)",
		"pt2.10_user-metadata_windows_cs336.pickle":                 "activation checkpointing (torch.utils.checkpoint on the repeated blocks)",
	} {
		r, err := Replay(context.Background(), realSnap(t, file), 0)
		if err != nil || !strings.Contains(r.CheckpointingAdvice, want) {
			t.Errorf("%s: advice %q (%v)", file, r.CheckpointingAdvice, err)
		}
	}
}
