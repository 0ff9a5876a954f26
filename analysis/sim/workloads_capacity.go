package sim

import (
	"errors"
	"fmt"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// Capacity workloads: one small transformer training loop run at any batch size or sequence
// length, so that capacity planning can be checked against runs of the same program at other
// sizes (the truth a prediction must meet).

// CapacityDims sizes the capacity workload: a stack of L transformer blocks (attention with
// Heads heads, eager: the B×Heads×T×T scores are materialised; an MLP of 4H), a Linear(H, V)
// head and cross-entropy, fp32, B sequences of T tokens per step.
type CapacityDims struct{ B, T, H, Heads, L, V int64 }

// CapacityDimsFor is the workload at batch b (dimension "batch", sequence 128) or at sequence
// length t (dimension "seq", batch 4).
func CapacityDimsFor(dimension string, size int64) CapacityDims {
	d := CapacityDims{B: 4, T: 128, H: 256, Heads: 4, L: 3, V: 4096}
	if dimension == "seq" {
		d.T = size
	} else {
		d.B = size
	}
	return d
}

// CapacityRun is one run of the capacity workload.
type CapacityRun struct {
	Snap *snapshot.Snapshot
	// OOM: an allocation failed (the run stopped there; the trace ends with the oom event).
	OOM bool
	// PeakAllocated / PeakReserved: the highest allocated (rounded block bytes, as
	// torch.cuda.max_memory_allocated counts them) and reserved bytes of the run, up to the
	// failure when it failed.
	PeakAllocated int64
	PeakReserved  int64
}

// Sites of the capacity workload (model.py lines of its attention block).
var (
	SiteCapQKV     = Site(ModelPy, 30, "forward") // qkv = self.qkv(x)                  (activation)
	SiteCapScores  = Site(ModelPy, 31, "forward") // scores = q @ k.transpose(-1, -2)   (temporary, B×heads×T×T)
	SiteCapProbs   = Site(ModelPy, 32, "forward") // probs = scores.softmax(-1)         (activation, B×heads×T×T)
	SiteCapAttnOut = Site(ModelPy, 33, "forward") // ctx = probs @ v                    (activation)
	SiteCapLogits  = SiteHead                     // logits = self.head(x)              (model.py:58)
)

// capWorkspaceTokens: at this many tokens per step or more, the attention backward picks an
// algorithm that needs a 32 MiB workspace (allocated and freed in each backward): an
// allocation that exists at the larger sizes only.
const capWorkspaceTokens = 2048

// CapacityTraining runs two training steps of the capacity workload (dims) on a device where
// PyTorch may reserve capacity bytes (0: 64 GiB). The weights are loaded before memory
// history is recorded (recording starts right after model.to(device), as is common), so the
// trace starts with them alive. Per step: the token batch (B×T int64, train.py:115), the
// embedding (activation), per block qkv, scores (freed after the softmax), probs, the attention
// output, its projection (freed), fc1 and gelu (activations), fc2 (freed) and the residual;
// the logits (B×T×V) and log-softmax; then the backward (activation gradients, the scores'
// gradient, weight gradients, the workspace from capWorkspaceTokens tokens), AdamW state on
// the first step, zero_grad(set_to_none=True). The cuBLAS workspace (8,519,680 B) is made by
// the first matmul and kept.
func CapacityTraining(d CapacityDims, capacity int64) CapacityRun {
	return CapacityTrainingWith(d, Config{Capacity: capacity})
}

// CapacityTrainingWith is CapacityTraining recorded with cfg (a ring buffer: MaxEntries; the
// capacity: Capacity, 0 = 64 GiB).
func CapacityTrainingWith(d CapacityDims, cfg Config) CapacityRun {
	if cfg.Capacity == 0 {
		cfg.Capacity = 64 * GiB
	}
	s := New(cfg)
	var run CapacityRun
	stop := errors.New("oom")
	track := func() {
		run.PeakAllocated = max(run.PeakAllocated, s.Allocated())
		run.PeakReserved = max(run.PeakReserved, s.Reserved())
	}
	alloc := func(n int64, st Stack) uint64 {
		a, err := s.Alloc(n, 0, st)
		track()
		if err != nil {
			var oe *OOMError
			if !errors.As(err, &oe) {
				panic(fmt.Sprintf("sim capacity workload: %v", err))
			}
			run.OOM = true
			panic(stop)
		}
		return a
	}
	free := func(a uint64, st Stack) {
		if err := s.Free(a, st); err != nil {
			panic(fmt.Sprintf("sim capacity workload: %v", err))
		}
	}
	func() {
		defer func() {
			if p := recover(); p != nil && p != stop {
				panic(p)
			}
		}()
		capacitySteps(d, s, alloc, free)
	}()
	run.Snap = s.Snapshot()
	return run
}

// capacitySteps is the program of CapacityTraining.
func capacitySteps(d CapacityDims, s *Sim, alloc func(int64, Stack) uint64, free func(uint64, Stack)) {
	const f32 = 4
	N := d.B * d.T
	// Weights, loaded with recording off: per block qkv (3H×H), proj (H×H), fc1 (4H×H),
	// fc2 (H×4H); the embedding (V×H) and the head (V×H).
	s.SetRecording(false)
	toStack := Op("to", Py(TrainPy, 112, "main"), Py(TrainPy, 131, "<module>"))
	var psize []int64
	for i := int64(0); i < d.L; i++ {
		psize = append(psize, 3*d.H*d.H*f32, d.H*d.H*f32, 4*d.H*d.H*f32, 4*d.H*d.H*f32)
	}
	psize = append(psize, d.V*d.H*f32, d.V*d.H*f32)
	for _, n := range psize {
		alloc(n, toStack)
	}
	s.SetRecording(true)
	var state []uint64
	workspace := uint64(0)
	for step := 0; step < 2; step++ {
		tokens := alloc(N*8, Op("to", Py(TrainPy, 115, "main"), Py(TrainPy, 131, "<module>")))
		type saved struct {
			a    uint64
			node string
		}
		var keep []saved
		x := alloc(N*d.H*f32, Op("embedding", inModel(52)...))
		keep = append(keep, saved{x, "EmbeddingBackward0"})
		for l := int64(0); l < d.L; l++ {
			qkv := alloc(N*3*d.H*f32, linearIn(inBlock(30)))
			if workspace == 0 {
				workspace = alloc(8_519_680, Op("linear", Chain([]snapshot.Frame{Cpp("at::cuda::getNewWorkspace()")}, inBlock(30))...))
			}
			keep = append(keep, saved{qkv, "MmBackward0"})
			scores := alloc(d.B*d.Heads*d.T*d.T*f32, Op("matmul", inBlock(31)...))
			probs := alloc(d.B*d.Heads*d.T*d.T*f32, Op("softmax", inBlock(32)...))
			free(scores, FreeAt(inBlock(32)...))
			keep = append(keep, saved{probs, "SoftmaxBackward0"})
			ctx := alloc(N*d.H*f32, Op("matmul", inBlock(33)...))
			keep = append(keep, saved{ctx, "BmmBackward0"})
			proj := alloc(N*d.H*f32, linearIn(inBlock(34)))
			res1 := alloc(N*d.H*f32, Op("add", inBlock(35)...))
			free(proj, FreeAt(inBlock(35)...))
			keep = append(keep, saved{res1, "MmBackward0"})
			fc1 := alloc(N*4*d.H*f32, linearIn(inBlock(41)))
			keep = append(keep, saved{fc1, "GeluBackward0"})
			gelu := alloc(N*4*d.H*f32, Op("gelu", inBlock(42)...))
			keep = append(keep, saved{gelu, "MmBackward0"})
			fc2 := alloc(N*d.H*f32, linearIn(inBlock(43)))
			res2 := alloc(N*d.H*f32, Op("add", inBlock(44)...))
			free(fc2, FreeAt(inBlock(44)...))
			keep = append(keep, saved{res2, "MmBackward0"})
		}
		logits := alloc(N*d.V*f32, linearIn(inModel(58)))
		ce := Chain([]snapshot.Frame{Py(functionalPy, 3479, "cross_entropy")}, stepAt(89))
		lsm := alloc(N*d.V*f32, Op("cross_entropy", ce...))
		loss := alloc(4, Op("cross_entropy", ce...))
		// Backward: the loss gradient, the head's weight gradient, then per block (last first)
		// the activation gradients and weight gradients, releasing what each node saved.
		dl := alloc(N*d.V*f32, Backward("NllLossBackward0"))
		free(lsm, BackwardFree("NllLossBackward0"))
		grads := make([]uint64, len(psize))
		grads[len(psize)-1] = alloc(psize[len(psize)-1], Backward("MmBackward0"))
		dx := alloc(N*d.H*f32, Backward("MmBackward0"))
		free(dl, BackwardFree("MmBackward0"))
		for l := d.L - 1; l >= 0; l-- {
			base := 1 + 7*int(l) // keep: x, then per block qkv, probs, ctx, res1, fc1, gelu, res2
			dh := alloc(N*4*d.H*f32, Backward("GeluBackward0"))
			grads[4*l+3] = alloc(psize[4*l+3], Backward("MmBackward0"))
			grads[4*l+2] = alloc(psize[4*l+2], Backward("MmBackward0"))
			free(keep[base+6].a, BackwardFree(keep[base+6].node))
			free(keep[base+5].a, BackwardFree(keep[base+5].node))
			free(keep[base+4].a, BackwardFree(keep[base+4].node))
			free(dh, BackwardFree("GeluBackward0"))
			dscores := alloc(d.B*d.Heads*d.T*d.T*f32, Backward("SoftmaxBackward0"))
			if N >= capWorkspaceTokens {
				ws := alloc(32*MiB, Backward("BmmBackward0"))
				free(ws, BackwardFree("BmmBackward0"))
			}
			grads[4*l+1] = alloc(psize[4*l+1], Backward("MmBackward0"))
			free(keep[base+3].a, BackwardFree(keep[base+3].node))
			free(keep[base+2].a, BackwardFree(keep[base+2].node))
			free(keep[base+1].a, BackwardFree(keep[base+1].node))
			dqkv := alloc(N*3*d.H*f32, Backward("MmBackward0"))
			free(dscores, BackwardFree("SoftmaxBackward0"))
			grads[4*l] = alloc(psize[4*l], Backward("MmBackward0"))
			free(keep[base].a, BackwardFree(keep[base].node))
			free(dqkv, BackwardFree("MmBackward0"))
		}
		grads[len(psize)-2] = alloc(psize[len(psize)-2], Backward("EmbeddingBackward0"))
		free(keep[0].a, BackwardFree("EmbeddingBackward0"))
		free(dx, BackwardFree("MmBackward0"))
		// AdamW: state on the first step.
		if state == nil {
			outer := Chain([]snapshot.Frame{Py(adamwPy, 209, "step"), Py(optimizerPy, 79, "_use_grad"), Py(optimizerPy, 487, "wrapper")}, stepAt(91))
			for _, n := range psize {
				state = append(state,
					alloc(n, Op("zeros_like", Chain([]snapshot.Frame{Py(adamwPy, 113, "_init_group")}, outer)...)),
					alloc(n, Op("zeros_like", Chain([]snapshot.Frame{Py(adamwPy, 116, "_init_group")}, outer)...)))
			}
		}
		zg := FreeAt(Chain([]snapshot.Frame{Py(optimizerPy, 987, "zero_grad")}, stepAt(92))...)
		for _, g := range grads {
			free(g, zg)
		}
		ret := FreeAt(Py(TrainPy, 121, "main"), Py(TrainPy, 131, "<module>"))
		free(logits, ret)
		free(loss, ret)
		free(tokens, ret)
		s.Advance(StepUS)
	}
}
