package analysis

import (
	"context"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis/load"
	"github.com/memsnap/memsnap/analysis/sim"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

const (
	genPy  = sim.ProjDir + "/generate.py"
	attnPy = sim.ProjDir + "/attention.py"
	ctxPy  = sim.TorchDir + "/utils/_contextlib.py"
	modPy  = sim.TorchDir + "/nn/modules/module.py"
)

// inferenceOOM: a no_grad generation on a 2 GiB device: 1 GiB of fp16 weights moved to the GPU
// (module.to), then per-request attention scores (softmax at attention.py:31) and MLP outputs
// under torch.no_grad (decorate_context) until a 512 MiB request fails. With unwind, the
// exception then frees the request's tensors (events after the OOM).
func inferenceOOM(t *testing.T, unwind bool) *snapshot.Snapshot {
	t.Helper()
	if unwind {
		return inferenceOOMFreeing(t, 6)
	}
	return inferenceOOMFreeing(t, 0)
}

// inferenceOOMFreeing frees the first n of the pass's six blocks after the OOM.
func inferenceOOMFreeing(t *testing.T, n int) *snapshot.Snapshot {
	t.Helper()
	s := sim.New(sim.Config{Capacity: 2 * sim.GiB})
	load := sim.Op("to", sim.Py(modPy, 1150, "convert"), sim.Py(modPy, 900, "_apply"), sim.Py(genPy, 20, "main"))
	for i := 0; i < 8; i++ {
		if _, err := s.Alloc(128*sim.MiB, 0, load); err != nil {
			t.Fatal(err)
		}
	}
	under := func(fr ...snapshot.Frame) []snapshot.Frame {
		return sim.Chain(fr, sim.ModuleCall(), []snapshot.Frame{sim.Py(genPy, 77, "decode"), sim.Py(ctxPy, 116, "decorate_context"), sim.Py(genPy, 140, "<module>")})
	}
	scores := sim.Op("softmax", under(sim.Py(attnPy, 31, "forward"))...)
	mlp := sim.Op("linear", under(sim.Py(sim.ModelPy, 41, "forward"))...)
	var live []uint64
	for i := 0; i < 3; i++ {
		p, err := s.Alloc(192*sim.MiB, 0, scores)
		if err != nil {
			t.Fatal(err)
		}
		q, err := s.Alloc(96*sim.MiB, 0, mlp)
		if err != nil {
			t.Fatal(err)
		}
		live = append(live, p, q)
	}
	if _, err := s.Alloc(512*sim.MiB, 0, mlp); err == nil {
		t.Fatal("no OOM")
	}
	if n > 0 {
		for _, p := range live[:n] {
			if err := s.Free(p, sim.FreeAt(sim.Py(genPy, 140, "<module>"))); err != nil {
				t.Fatal(err)
			}
		}
	}
	return s.Snapshot()
}

func fixesText(o OOMEvent) string { return strings.Join(o.Fixes, "\n") }

// TestOOMFixGating: which fixes a capacity OOM gets depends on what the device shows.
func TestOOMFixGating(t *testing.T) {
	scen := func(name string) *snapshot.Snapshot {
		snap, err := load.File(context.Background(), "../testdata/scenarios/"+name, load.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return snap
	}
	tests := []struct {
		name         string
		snap         func() *snapshot.Snapshot
		verdict      string
		workload     string
		backward     bool
		checkpoint   bool // activation checkpointing advised
		attention    bool // fused attention advised
		optimizer    bool // 8-bit Adam / ZeRO advised
		inferenceFix string
		dominant     string
	}{
		// activation_oom is the first forward of a training loop: the trace ends in the forward,
		// so no backward pass is visible and checkpointing is not advised from this file.
		{"activation_oom", func() *snapshot.Snapshot { return scen("activation_oom.pickle") }, VerdictCapacity, WorkloadUnknown, false, false, false, false, "", CategoryActivation},
		{"fragmentation_oom", func() *snapshot.Snapshot { return scen("fragmentation_oom.pickle") }, VerdictFragmentation, "", false, false, false, false, "", ""},
		{"outside_pytorch_oom", func() *snapshot.Snapshot { return scen("outside_pytorch_oom.pickle") }, VerdictOutsidePyTorch, WorkloadTraining, true, false, false, false, "", ""},
		{"sim inference", func() *snapshot.Snapshot { return inferenceOOM(t, false) }, VerdictCapacity, WorkloadInference, false, false, true, false, "quantized weights", CategoryParameter},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := OOMReport(context.Background(), tc.snap(), OOMOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.OOMs) != 1 {
				t.Fatalf("%d OOMs", len(r.OOMs))
			}
			o := r.OOMs[0]
			fx := fixesText(o)
			if o.Verdict != tc.verdict {
				t.Fatalf("verdict %s, want %s: %s", o.Verdict, tc.verdict, o.Explanation)
			}
			if tc.workload != "" && o.Workload != tc.workload {
				t.Errorf("workload %q, want %q", o.Workload, tc.workload)
			}
			if o.HasBackward != tc.backward {
				t.Errorf("has_backward %v, want %v", o.HasBackward, tc.backward)
			}
			if got := strings.Contains(fx, "checkpoint"); got != tc.checkpoint {
				t.Errorf("checkpointing advised %v, want %v:\n%s", got, tc.checkpoint, fx)
			}
			if got := strings.Contains(fx, "scaled_dot_product_attention"); got != tc.attention {
				t.Errorf("fused attention advised %v, want %v:\n%s", got, tc.attention, fx)
			}
			if got := strings.Contains(fx, "8-bit Adam"); got != tc.optimizer {
				t.Errorf("optimizer fix %v, want %v:\n%s", got, tc.optimizer, fx)
			}
			if tc.inferenceFix != "" && !strings.Contains(fx, tc.inferenceFix) {
				t.Errorf("no %q fix:\n%s", tc.inferenceFix, fx)
			}
			if tc.dominant != "" && o.Dominant != tc.dominant {
				t.Errorf("dominant %s, want %s", o.Dominant, tc.dominant)
			}
			// Memory outside PyTorch is reported for every verdict: device − reserved − free.
			if o.OutsidePyTorchBytes != o.DeviceTotalBytes-o.ReservedBytes-o.DeviceFreeBytes || !o.OutsidePyTorchLowerBound {
				t.Errorf("outside %d (lower bound %v), want %d", o.OutsidePyTorchBytes, o.OutsidePyTorchLowerBound, o.DeviceTotalBytes-o.ReservedBytes-o.DeviceFreeBytes)
			}
			if o.Unwound {
				t.Errorf("unwound without events after the OOM")
			}
		})
	}
}

// TestOOMInferenceExact: the simulated inference OOM's figures and fixes, with the device size.
func TestOOMInferenceExact(t *testing.T) {
	r, err := OOMReport(context.Background(), inferenceOOM(t, false), OOMOptions{DeviceTotalBytes: 2 * gib})
	if err != nil {
		t.Fatal(err)
	}
	o := r.OOMs[0]
	want := map[string]int64{
		"requested": 512 * mib, "allocated": 1024*mib + 3*288*mib, "reserved": 1024*mib + 3*288*mib,
		"device free": 2*gib - (1024*mib + 3*288*mib), "outside": 0,
		"parameter": 1024 * mib,
	}
	got := map[string]int64{
		"requested": o.RequestedBytes, "allocated": o.AllocatedBytes, "reserved": o.ReservedBytes,
		"device free": o.DeviceFreeBytes, "outside": o.OutsidePyTorchBytes,
		"parameter": o.DominantBytes,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d, want %d", k, got[k], v)
		}
	}
	if o.OutsidePyTorchLowerBound || o.DeviceTotalSource != "option" {
		t.Errorf("device size given: lower bound %v, source %s", o.OutsidePyTorchLowerBound, o.DeviceTotalSource)
	}
	fx := fixesText(o)
	for _, w := range []string{"weights hold 1.0 GiB, 54% of live memory", "attention code (attention.py:31) holds 576 MiB, 30% of live memory"} {
		if !strings.Contains(fx, w) {
			t.Errorf("fixes lack %q:\n%s", w, fx)
		}
	}
	for _, bad := range []string{"checkpoint", "8-bit Adam", "ZeRO", "LoRA", "gradient accumulation"} {
		if strings.Contains(fx, bad) {
			t.Errorf("inference OOM advised %q:\n%s", bad, fx)
		}
	}
}

// TestOOMUnwound: a file written after the OOM holds the unwound pass; the report says so and
// takes the live sites from the replay up to the OOM event.
func TestOOMUnwound(t *testing.T) {
	r, err := OOMReport(context.Background(), inferenceOOM(t, true), OOMOptions{})
	if err != nil {
		t.Fatal(err)
	}
	o := r.OOMs[0]
	if o.StateSource != "replay" || !o.Unwound || o.UnwoundBlocks != 6 || o.UnwoundBytes != 3*288*mib {
		t.Fatalf("source %s unwound %v: %d blocks, %d bytes", o.StateSource, o.Unwound, o.UnwoundBlocks, o.UnwoundBytes)
	}
	if o.AllocatedBytes != 1024*mib+3*288*mib {
		t.Errorf("allocated at the OOM %d", o.AllocatedBytes)
	}
	if !o.PassUnwound || o.StillLiveBytes != 1024*mib || !strings.Contains(r.Text(), "the file was written after the OOM: its final state is after the exception unwound the pass (6 blocks, 864 MiB freed after the OOM event)") {
		t.Errorf("pass unwound %v, still live %d, text:\n%s", o.PassUnwound, o.StillLiveBytes, r.Text())
	}
}

// TestOOMPinnedByTraceback: after the OOM only one 192 MiB block of the 864 MiB pass is freed
// (a kept traceback pins the rest): the report never says the pass unwound.
func TestOOMPinnedByTraceback(t *testing.T) {
	r, err := OOMReport(context.Background(), inferenceOOMFreeing(t, 1), OOMOptions{})
	if err != nil {
		t.Fatal(err)
	}
	o := r.OOMs[0]
	if !o.Unwound || o.PassUnwound || o.UnwoundBytes != 192*mib || o.StillLiveBytes != 1024*mib+672*mib {
		t.Fatalf("unwound %v pass unwound %v: %d bytes freed, %d still live", o.Unwound, o.PassUnwound, o.UnwoundBytes, o.StillLiveBytes)
	}
	txt := r.Text()
	if strings.Contains(txt, "unwound the pass") || !strings.Contains(txt, "the file was written after the OOM, but the pass's tensors are still live at its end (1.7 GiB allocated; only 192 MiB freed after the OOM event): a kept traceback or exception pins them") {
		t.Errorf("text:\n%s", txt)
	}
}

// TestOOMTrainingCheckpointing: a training step (backward visible) whose OOM is dominated by
// activations gets checkpointing with the bytes it would save.
func TestOOMTrainingCheckpointing(t *testing.T) {
	s := sim.New(sim.Config{Capacity: 1 * sim.GiB})
	fwd := sim.Op("linear", sim.Py(sim.ModelPy, 41, "forward"), sim.Py(sim.TrainPy, 88, "train_step"))
	// Step 1: forward then backward (frees the activations).
	var acts []uint64
	for i := 0; i < 4; i++ {
		p, err := s.Alloc(64*sim.MiB, 0, fwd)
		if err != nil {
			t.Fatal(err)
		}
		acts = append(acts, p)
	}
	g, err := s.Alloc(64*sim.MiB, 0, sim.Backward("AddmmBackward0"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range append(acts, g) {
		if err := s.Free(p, sim.BackwardFree("AddmmBackward0")); err != nil {
			t.Fatal(err)
		}
	}
	// Step 2: a bigger batch runs out of memory in the forward.
	for {
		if _, err := s.Alloc(128*sim.MiB, 0, fwd); err != nil {
			break
		}
	}
	r, err := OOMReport(context.Background(), s.Snapshot(), OOMOptions{})
	if err != nil {
		t.Fatal(err)
	}
	o := r.OOMs[0]
	if !o.HasBackward || o.Verdict != VerdictCapacity {
		t.Fatalf("backward %v verdict %s", o.HasBackward, o.Verdict)
	}
	if !strings.Contains(o.Fixes[0], "activation checkpointing") || !strings.Contains(o.Fixes[0], "hold 1.0 GiB, 100% of live memory") {
		t.Errorf("first fix %q", o.Fixes[0])
	}
}
