package sim

import (
	"fmt"
	"slices"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// Evidence scenarios: each pattern of a wrong inference memsnap must not make, with a positive
// scenario (the pattern is there) and a negative one (it is not), modelled on the frameworks'
// own source:
//   - torch.autograd.functional.jvp inside a forward (torch/autograd/functional.py jvp: the
//     double-backward trick, zeros_like(out, requires_grad=True) then two _autograd_grad calls,
//     whose graph runs on the autograd engine's device thread: C++ frames only);
//   - an OOM in a Lightning training_step, then the exception unwinding and Trainer._teardown
//     (lightning/pytorch/trainer/call.py _call_and_handle_interrupt → trainer._teardown →
//     Strategy.teardown → lightning_module.cpu(); CUDAAccelerator.teardown → _clear_cuda_memory
//     → torch.cuda.empty_cache);
//   - a zeroth-order loop (MeZO: forwards under torch.no_grad, an SGD step recorded by
//     torch/optim/optimizer.py as Optimizer.step#SGD.step, no backward) with use_cache=True;
//   - FSDP2 (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py foreach_all_gather's
//     staging buffer, _fsdp_param.py alloc_all_gather_outputs' unsharded parameters freed at
//     reshard, foreach_reduce's reduce-scatter input and its output kept as the sharded grad),
//     with DTensor's op dispatch between the model and its ops;
//   - Megatron's _ParamAndGradBuffer (megatron/core/distributed/param_and_grad_buffer.py:
//     param_data, then grad_data);
//   - a no_grad benchmark (memory flat over the layers) and the same model trained.
// Every size is a multiple of 512 B.

var (
	autogradFunctionalPy = TorchDir + "/autograd/functional.py"
	autogradInitPy       = TorchDir + "/autograd/__init__.py"
	autogradGraphPy      = TorchDir + "/autograd/graph.py"
	tensorPy             = TorchDir + "/_tensor.py"
	sgdPy                = TorchDir + "/optim/sgd.py"
	fsdp2Dir             = TorchDir + "/distributed/fsdp/_fully_shard"
	dtensorDispatchPy    = TorchDir + "/distributed/tensor/_dispatch.py"
	dtensorAPIPy         = TorchDir + "/distributed/tensor/_api.py"
	megatronBufferPy     = "/workspace/Megatron-LM/megatron/core/distributed/param_and_grad_buffer.py"
	megatronDDPPy        = "/workspace/Megatron-LM/megatron/core/distributed/distributed_data_parallel.py"
	megatronLangPy       = "/workspace/Megatron-LM/megatron/core/models/common/language_module/language_module.py"
	megatronGPTPy        = "/workspace/Megatron-LM/megatron/core/models/gpt/gpt_model.py"
)

// EvidenceTruth is the ground truth of an evidence scenario.
type EvidenceTruth struct {
	Workload string
	// Stages are the stage names memsnap must find, in order (forward, backward, optimizer,
	// unwind).
	Stages []string
	// Steps is the number of training steps (0: none).
	Steps int
	// GradMode is on, off or unknown.
	GradMode string
	// Roles: the role of the memory allocated at each user site ("file.py:line"), by the
	// stack's innermost user frame, for the blocks alive at the end.
	Roles map[string]string
	// LiveBytes are the bytes alive at the end per role.
	LiveBytes map[string]int64
	// Teardown lists the teardown frames after the OOM (nil: no OOM).
	Teardown []string
	// OOMEvent is the index of the oom event (-1: none).
	OOMEvent int
}

// evRun is a scenario run with ground-truth bookkeeping of the live blocks' roles.
type evRun struct {
	s    *Sim
	role map[uint64]string
	// pendingReshard: FSDP2's unsharded parameters to free at the next reshard
	pendingReshard []uint64
}

func newEvRun(cfg Config) *evRun { return &evRun{s: New(cfg), role: map[uint64]string{}} }

func (r *evRun) alloc(n int64, st Stack, role string) uint64 {
	a, err := r.s.Alloc(n, 0, st)
	if err != nil {
		panic(fmt.Sprintf("sim scenario: %v", err))
	}
	r.role[a] = role
	return a
}

func (r *evRun) free(a uint64, st Stack) {
	if err := r.s.Free(a, st); err != nil {
		panic(fmt.Sprintf("sim scenario: %v", err))
	}
	delete(r.role, a)
}

// live sums the live bytes per role (block sizes).
func (r *evRun) live() map[string]int64 {
	out := map[string]int64{}
	for a, role := range r.role {
		if m := r.s.live[a]; m != nil {
			out[role] += m.b.Size()
		}
	}
	return out
}

const evPy = ProjDir + "/ev_train.py"

// evStep is ev_train.py:line in train_step, called from main.
func evStep(line int64) []snapshot.Frame {
	return []snapshot.Frame{Py(evPy, line, "train_step"), Py(evPy, 140, "main"), Py(evPy, 150, "<module>")}
}

// evLayer is Block.forward at model.py:line, called from Model.forward (model.py:57), called
// from ev_train.py:60 `out = model(x)`.
func evLayer(line int64) []snapshot.Frame {
	return Chain([]snapshot.Frame{Py(ModelPy, line, "forward")}, ModuleCall(),
		[]snapshot.Frame{Py(ModelPy, 57, "forward")}, ModuleCall(), evStep(60))
}

// lossBackward is the Python part of loss.backward() at ev_train.py:line down to the engine:
// torch/_tensor.py backward → torch/autograd/__init__.py backward → _engine_run_backward.
func lossBackward(line int64) []snapshot.Frame {
	return Chain([]snapshot.Frame{Py(autogradGraphPy, 825, "_engine_run_backward"), Py(autogradInitPy, 347, "backward"),
		Py(tensorPy, 581, "backward")}, evStep(line))
}

// makeGrads is the allocation of the seed gradient (torch.ones_like(loss)) in
// torch/autograd/__init__.py _make_grads, under the backward call python.
func makeGrads(python []snapshot.Frame) Stack {
	return Op("empty", Chain([]snapshot.Frame{Py(autogradInitPy, 220, "_make_grads")}, python[1:])...)
}

// sgdStep is the stack of an SGD momentum buffer (torch/optim/sgd.py) from ev_train.py:line.
func sgdStep(line int64) Stack {
	return Op("zeros_like", Chain([]snapshot.Frame{Py(sgdPy, 99, "_init_group"), Py(sgdPy, 120, "step"),
		Py(optimizerPy, 79, "_use_grad"), Py(optimizerPy, 487, "wrapper")}, evStep(line))...)
}

// JVPInForward runs two training steps of a 4-layer model whose forward computes a JVP
// regulariser with torch.autograd.functional.jvp (model.py:70): jvp's grad_outputs
// (zeros_like, requires_grad=True) are made under the forward, and the double backward's
// allocations run on the autograd engine's thread (C++ frames only) and are freed before the
// forward goes on. Then loss.backward() (ev_train.py:64) frees the saved activations and
// makes the gradients, and optimizer.step() (ev_train.py:66) runs under an
// Optimizer.step#SGD.step annotation. With jvp=false the forward has no regulariser (the
// negative case). Snapshot after the second step; the gradients stay (no zero_grad).
func JVPInForward(jvp bool) (*snapshot.Snapshot, EvidenceTruth) {
	r := newEvRun(Config{})
	const L, P, A = 4, 4 * MiB, 2 * MiB
	var params, grads, mom []uint64
	for range L {
		params = append(params, r.alloc(P, moveToDeviceAt(evStep(20)), "parameter"))
	}
	jvpFrames := func() []snapshot.Frame {
		return Chain([]snapshot.Frame{Py(autogradFunctionalPy, 1034, "jvp")}, []snapshot.Frame{Py(ModelPy, 70, "forward")}, ModuleCall(), evStep(60))
	}
	stages := []string{}
	for step := range 2 {
		var saved []uint64
		for l := range L {
			saved = append(saved, r.alloc(A, linearIn(evLayer(41)), "activation"))
			if l == 1 && jvp {
				gOut := r.alloc(A, Op("zeros_like", jvpFrames()...), "temporary")
				var dbl []uint64
				for range 3 {
					dbl = append(dbl, r.alloc(A, Backward("MulBackward0"), "temporary"))
				}
				for _, d := range dbl {
					r.free(d, BackwardFree("MulBackward0"))
				}
				r.free(gOut, FreeAt(jvpFrames()...))
			}
		}
		stages = append(stages, "forward")
		seed := r.alloc(512, makeGrads(lossBackward(64)), "backward_temporary")
		for l := L - 1; l >= 0; l-- {
			tmp := r.alloc(A, Backward("AddmmBackward0"), "backward_temporary")
			if step == 0 {
				grads = append(grads, r.alloc(P, accumulateGrad(), "gradient"))
			}
			r.free(tmp, BackwardFree("AddmmBackward0"))
			r.free(saved[l], BackwardFree("AddmmBackward0"))
		}
		r.free(seed, BackwardFree("AddmmBackward0"))
		stages = append(stages, "backward")
		r.s.Annotate("Optimizer.step#SGD.step", "START")
		if step == 0 {
			for range L {
				mom = append(mom, r.alloc(P, sgdStep(66), "optimizer_state"))
			}
			stages = append(stages, "optimizer")
		}
		r.s.Annotate("Optimizer.step#SGD.step", "END")
		r.s.Advance(StepUS)
	}
	_ = params
	_ = grads
	_ = mom
	sn := r.s.Snapshot()
	return sn, EvidenceTruth{Workload: "training", Stages: stages, Steps: 2, GradMode: "on", LiveBytes: r.live(), OOMEvent: -1}
}

// moveToDeviceAt is model.to("cuda") (torch/nn/modules/module.py) from the given frames.
func moveToDeviceAt(outer []snapshot.Frame) Stack {
	return Op("to", Chain([]snapshot.Frame{Py(modulePy, 1329, "convert"), Py(modulePy, 928, "_apply"), Py(modulePy, 1343, "to")}, outer)...)
}

// litStepAt is LitModel.training_step at lit_train.py:line inside Lightning's closure.
func litStepAt(line int64) []snapshot.Frame { return litClosure(line) }

// LightningOOMTeardown: a Lightning fit whose training_step OOMs in the forward of its second
// step. The first step is whole (forward, backward, Adam step); in the second, 6 layers save
// 1 GiB activations each (lit_train.py:30 inside the closure) and the seventh asks for more
// than the device has: an oom event. The exception unwinds the closure, freeing 4 of the 6
// activations (the traceback the logger keeps pins the other 2, which stay alive), and
// Trainer._teardown moves the LightningModule to the CPU (its parameters are freed under
// Strategy.teardown → Module.cpu) and CUDAAccelerator.teardown calls _clear_cuda_memory →
// torch.cuda.empty_cache. With oom=false the second step ends like the first (the negative
// case): no unwinding.
func LightningOOMTeardown(oom bool) (*snapshot.Snapshot, EvidenceTruth) {
	r := newEvRun(Config{Capacity: 10 * GiB})
	const L, P, A = 6, 64 * MiB, 1 * GiB
	act := func() Stack { return linearIn(litStepAt(30)) }
	var params, grads, state []uint64
	fitFrames := litFit()
	for range 2 {
		params = append(params, r.alloc(P, moveToDeviceAt(fitFrames[5:]), "parameter"))
	}
	stages := []string{}
	backward := func(saved []uint64) {
		bw := Chain([]snapshot.Frame{Py(autogradGraphPy, 825, "_engine_run_backward"), Py(autogradInitPy, 347, "backward"),
			Py(tensorPy, 581, "backward"), Py(litDir+"/core/module.py", 1088, "backward"),
			Py(litDir+"/plugins/precision/precision.py", 73, "backward"), Py(litStrategy, 213, "backward"),
			Py(litAutomatic, 333, "backward_fn")}, litStepAt(30)[1:])
		seed := r.alloc(512, Op("empty", Chain([]snapshot.Frame{Py(autogradInitPy, 220, "_make_grads")}, bw[1:])...), "backward_temporary")
		for l := len(saved) - 1; l >= 0; l-- {
			if grads == nil || len(grads) < len(params) {
				grads = append(grads, r.alloc(P, accumulateGrad(), "gradient"))
			}
			r.free(saved[l], BackwardFree("AddmmBackward0"))
		}
		r.free(seed, BackwardFree("AddmmBackward0"))
		stages = append(stages, "backward")
	}
	adamAt := Op("zeros_like", Chain([]snapshot.Frame{Py(adamPy, 99, "_init_group"), Py(adamPy, 223, "step")}, litOptStep())...)
	var saved []uint64
	for range L {
		saved = append(saved, r.alloc(A, act(), "activation"))
	}
	stages = append(stages, "forward")
	backward(saved)
	for range params {
		state = append(state, r.alloc(P, adamAt, "optimizer_state"))
	}
	stages = append(stages, "optimizer")
	r.s.Advance(StepUS)
	saved = nil
	for range L {
		saved = append(saved, r.alloc(A, act(), "activation"))
	}
	stages = append(stages, "forward")
	truth := EvidenceTruth{Workload: "training", GradMode: "on", OOMEvent: -1, Steps: 2}
	if !oom {
		backward(saved)
		stages = append(stages, "optimizer")
		// the state exists: Adam's step allocates no more
		truth.Stages = []string{"forward", "backward", "optimizer", "forward", "backward"}
		truth.LiveBytes = r.live()
		return r.s.Snapshot(), truth
	}
	if _, err := r.s.Alloc(4*GiB, 0, act()); err == nil {
		panic("sim scenario: the OOM did not happen")
	}
	truth.OOMEvent = len(r.s.events) - 1
	unwind := FreeAt(Py(litCall, 48, "_call_and_handle_interrupt"), Py(litTrainer, 561, "fit"), Py(LitPy, 88, "main"), Py(LitPy, 95, "<module>"))
	for _, a := range saved[2:] {
		r.free(a, unwind)
	}
	teardown := FreeAt(Py(modulePy, 1006, "cpu"), Py(litStrategy, 530, "teardown"), Py(litTrainer, 1020, "_teardown"),
		Py(litCall, 65, "_interrupt"), Py(litCall, 60, "_call_and_handle_interrupt"), Py(litTrainer, 561, "fit"), Py(LitPy, 88, "main"), Py(LitPy, 95, "<module>"))
	for _, a := range params {
		r.free(a, teardown)
	}
	r.s.EmptyCache()
	truth.Stages = []string{"forward", "backward", "optimizer", "forward", "unwind"}
	truth.Teardown = []string{"Module.cpu", "teardown", "_teardown"}
	truth.LiveBytes = r.live()
	_ = state
	return r.s.Snapshot(), truth
}

// ZerothOrder runs three MeZO-style steps of a causal LM on the forward passes alone: each
// step perturbs the weights in place, runs two forwards under torch.no_grad (zo_train.py:40
// calls model(**batch, use_cache=True): the model's transformers DynamicCache stores keys and
// values through cache_utils.py, freed with the outputs), and applies the projected gradient
// with an SGD step recorded as Optimizer.step#SGD.step. No backward pass. With annotations
// false the same forwards run with no optimizer at all (the negative case: inference with a
// KV cache).
func ZerothOrder(annotations bool) (*snapshot.Snapshot, EvidenceTruth) {
	r := newEvRun(Config{})
	zoPy := ProjDir + "/zo_train.py"
	user := func(line int64) []snapshot.Frame {
		return []snapshot.Frame{Py(contextlibPy, 116, "decorate_context"), Py(zoPy, line, "zo_forward"), Py(zoPy, 80, "train"), Py(zoPy, 99, "<module>")}
	}
	layer := func(line int64) []snapshot.Frame {
		return Chain([]snapshot.Frame{Py(modelingLlamaNew, line, "forward")}, ModuleCall(), user(40))
	}
	for range 4 {
		r.alloc(8*MiB, moveToDeviceAt([]snapshot.Frame{Py(zoPy, 20, "main"), Py(zoPy, 99, "<module>")}), "parameter")
	}
	for range 3 {
		for range 2 {
			var tmp []uint64
			for range 4 {
				kv := r.alloc(1*MiB, Op("empty", Chain([]snapshot.Frame{Py(cacheUtils, 120, "update")}, layer(300))...), "kv_cache")
				h := r.alloc(2*MiB, linearIn(layer(260)), "temporary")
				h2 := r.alloc(2*MiB, linearIn(layer(262)), "temporary")
				r.free(h, FreeAt(layer(263)...))
				tmp = append(tmp, kv, h2)
			}
			for _, a := range tmp {
				r.free(a, FreeAt(user(41)...))
			}
		}
		if annotations {
			r.s.Annotate("Optimizer.step#SGD.step", "START")
			r.s.Annotate("Optimizer.step#SGD.step", "END")
		}
		r.s.Advance(StepUS)
	}
	w := "inference"
	if annotations {
		w = "training"
	}
	return r.s.Snapshot(), EvidenceTruth{Workload: w, GradMode: "off", LiveBytes: r.live(), OOMEvent: -1}
}

// NoGradBenchmark runs a 12-layer forward three times under `with torch.no_grad():` (no frame:
// a with-block leaves none) from bench.py:30; each layer's intermediates are freed as the next
// op runs, so memory is flat over the layers. With train=true the same model runs forward with
// grad enabled, each layer saving its activation, and loss.backward() frees them (the negative
// case).
func NoGradBenchmark(train bool) (*snapshot.Snapshot, EvidenceTruth) {
	r := newEvRun(Config{})
	benchPy := ProjDir + "/bench.py"
	outer := []snapshot.Frame{Py(benchPy, 30, "run"), Py(benchPy, 50, "<module>")}
	layer := func(line int64) []snapshot.Frame {
		return Chain([]snapshot.Frame{Py(ModelPy, line, "forward")}, ModuleCall(), []snapshot.Frame{Py(ModelPy, 57, "forward")}, ModuleCall(), outer)
	}
	for range 12 {
		r.alloc(4*MiB, moveToDeviceAt([]snapshot.Frame{Py(benchPy, 12, "main"), Py(benchPy, 50, "<module>")}), "parameter")
	}
	truth := EvidenceTruth{Workload: "inference", GradMode: "off", OOMEvent: -1}
	for range 3 {
		var prev uint64
		var saved []uint64
		for l := range 12 {
			a := r.alloc(2*MiB, linearIn(layer(41)), "temporary")
			b := r.alloc(2*MiB, Op("gelu", Chain([]snapshot.Frame{Py(functionalPy, 1700, "gelu")}, layer(42))...), "temporary")
			r.free(a, FreeAt(layer(43)...))
			if train {
				saved = append(saved, b)
				continue
			}
			if l > 0 {
				r.free(prev, FreeAt(layer(43)...))
			}
			prev = b
		}
		if !train {
			r.free(prev, FreeAt(outer...))
			continue
		}
		bw := Chain([]snapshot.Frame{Py(autogradGraphPy, 825, "_engine_run_backward"), Py(autogradInitPy, 347, "backward"),
			Py(tensorPy, 581, "backward"), Py(benchPy, 32, "run"), Py(benchPy, 50, "<module>")})
		seed := r.alloc(512, Op("empty", Chain([]snapshot.Frame{Py(autogradInitPy, 220, "_make_grads")}, bw[1:])...), "backward_temporary")
		for l := len(saved) - 1; l >= 0; l-- {
			r.free(saved[l], BackwardFree("GeluBackward0"))
		}
		r.free(seed, BackwardFree("GeluBackward0"))
	}
	if train {
		truth.Workload, truth.GradMode = "training", "on"
	}
	truth.LiveBytes = r.live()
	return r.s.Snapshot(), truth
}

// FSDP2Step runs one training step of a 2-block model wrapped with fully_shard on rank 0 of 2,
// with tensor-parallel DTensor ops (torch/distributed/tensor/_dispatch.py between the model
// and its ops). Per block, forward: foreach_all_gather stages the all-gather in one flat
// buffer (communication, freed after the copy-out), alloc_all_gather_outputs resizes the
// unsharded parameters (parameter, freed at reshard after forward), the silu output is saved
// for backward (activation, model.py:80 through DTensor dispatch). The loss upcasts the logits
// (.float() at ev_train.py:62, through DTensor's __torch_dispatch__: saved for backward).
// Backward: all-gather again, then foreach_reduce stages the reduce-scatter input
// (communication, freed) and keeps its output as the new sharded gradient (gradient, alive at
// the snapshot), and optimizer.step() makes SGD momentum buffers for the shards. Sharded
// parameters were made at fully_shard time (parameter).
func FSDP2Step() (*snapshot.Snapshot, EvidenceTruth) {
	r := newEvRun(Config{})
	const shard, full, act = 8 * MiB, 16 * MiB, 4 * MiB
	wrap := Chain([]snapshot.Frame{Py(fsdp2Dir+"/_fsdp_param.py", 300, "_init_sharded_param"), Py(fsdp2Dir+"/_fsdp_param.py", 220, "__init__"),
		Py(fsdp2Dir+"/fully_shard.py", 190, "fully_shard")}, evStep(15))
	for range 2 {
		r.alloc(shard, Op("empty", wrap...), "parameter")
	}
	pre := func(outer []snapshot.Frame) []snapshot.Frame {
		return Chain([]snapshot.Frame{Py(fsdp2Dir+"/_fsdp_param_group.py", 280, "unshard"), Py(fsdp2Dir+"/_fsdp_state.py", 230, "_pre_forward")}, outer)
	}
	allGather := func(outer []snapshot.Frame) {
		staging := r.alloc(full, Op("empty", Chain([]snapshot.Frame{Py(fsdp2Dir+"/_fsdp_collectives.py", 250, "foreach_all_gather")}, pre(outer))...), "communication")
		unsharded := r.alloc(full, Op("empty", Chain([]snapshot.Frame{Py(fsdp2Dir+"/_fsdp_param.py", 640, "alloc_all_gather_outputs"),
			Py(fsdp2Dir+"/_fsdp_collectives.py", 330, "foreach_all_gather_copy_out")}, pre(outer))...), "parameter")
		r.free(staging, FreeAt(Chain([]snapshot.Frame{Py(fsdp2Dir+"/_fsdp_collectives.py", 340, "foreach_all_gather_copy_out")}, pre(outer))...))
		r.role[unsharded] = "parameter"
		r.pendingReshard = append(r.pendingReshard, unsharded)
	}
	reshard := func() {
		for _, a := range r.pendingReshard {
			r.free(a, FreeAt(Py(fsdp2Dir+"/_fsdp_param.py", 660, "free_unsharded_param"), Py(fsdp2Dir+"/_fsdp_param_group.py", 320, "reshard")))
		}
		r.pendingReshard = nil
	}
	dtensor := func(line int64) []snapshot.Frame {
		return Chain([]snapshot.Frame{Py(dtensorDispatchPy, 210, "dispatch"), Py(dtensorAPIPy, 350, "__torch_dispatch__"),
			Py(ModelPy, line, "forward")}, ModuleCall(), evStep(60))
	}
	var saved []uint64
	for range 2 {
		allGather(evStep(60))
		saved = append(saved, r.alloc(act, Op("gelu", dtensor(80)...), "activation"))
		reshard()
	}
	logits := r.alloc(32*MiB, Op("to", Chain([]snapshot.Frame{Py(dtensorDispatchPy, 210, "dispatch"), Py(dtensorAPIPy, 350, "__torch_dispatch__")}, evStep(62))...), "activation")
	seed := r.alloc(512, makeGrads(lossBackward(64)), "backward_temporary")
	r.free(logits, BackwardFree("ToCopyBackward0"))
	for l := 1; l >= 0; l-- {
		allGather(lossBackward(64))
		r.free(saved[l], BackwardFree("GeluBackward0"))
		rs := func(line int64) []snapshot.Frame {
			return Chain([]snapshot.Frame{Py(fsdp2Dir+"/_fsdp_collectives.py", line, "foreach_reduce"), Py(fsdp2Dir+"/_fsdp_param_group.py", 450, "post_backward")}, lossBackward(64))
		}
		in := r.alloc(full, Op("empty", rs(420)...), "communication")
		r.alloc(shard, Op("empty", rs(433)...), "gradient")
		r.free(in, FreeAt(rs(440)...))
		reshard()
	}
	r.free(seed, BackwardFree("GeluBackward0"))
	// optimizer.step() on the sharded parameters (ev_train.py:66): momentum buffers
	for range 2 {
		r.alloc(shard, sgdStep(66), "optimizer_state")
	}
	return r.s.Snapshot(), EvidenceTruth{Workload: "training", GradMode: "on", LiveBytes: r.live(), OOMEvent: -1}
}

// MegatronBuffers builds Megatron's DDP buffers for a GPT model whose layers live in the
// Megatron-LM checkout (not site-packages): _ParamAndGradBuffer.__init__ allocates param_data
// (line 620, only with the distributed optimizer) and grad_data (line 627); the model's
// embedding is made in language_module.py (library model code, never the user's). A state-only
// file (context "state"): roles come from the frames. With distOpt false only grad_data exists
// (the negative case for param_data).
func MegatronBuffers(distOpt bool) (*snapshot.Snapshot, EvidenceTruth) {
	r := newEvRun(Config{Context: "state"})
	pretrain := []snapshot.Frame{Py(ProjDir+"/pretrain_gpt.py", 200, "main"), Py(ProjDir+"/pretrain_gpt.py", 250, "<module>")}
	buf := func(line int64) Stack {
		return Op("zeros_like", Chain([]snapshot.Frame{Py(megatronBufferPy, line, "__init__"), Py(megatronDDPPy, 160, "_allocate_buffers_for_parameters"),
			Py(megatronDDPPy, 90, "__init__")}, pretrain)...)
	}
	r.alloc(64*MiB, Op("empty", Chain([]snapshot.Frame{Py(TorchDir+"/nn/modules/sparse.py", 160, "__init__"), Py(megatronLangPy, 60, "setup_embeddings_and_output_layer"),
		Py(megatronGPTPy, 120, "__init__")}, pretrain)...), "parameter")
	if distOpt {
		r.alloc(256*MiB, buf(620), "parameter")
	}
	r.alloc(512*MiB, buf(627), "gradient")
	return r.s.Snapshot(), EvidenceTruth{Workload: "unknown", LiveBytes: r.live(), OOMEvent: -1}
}

// MergeDevices puts the per-device snapshots of one process into one file: frames and stacks
// interned anew, segments and traces kept per device (each part's Config.Device).
func MergeDevices(parts ...*snapshot.Snapshot) *snapshot.Snapshot {
	out := &snapshot.Snapshot{Format: snapshot.Format{Encoding: "pickle", Protocol: 4}, EventExtras: []snapshot.EventExtra{{}}}
	in := snapshot.NewInterner()
	n := 0
	for _, p := range parts {
		n = max(n, len(p.DeviceTraces))
	}
	out.DeviceTraces = make([][]snapshot.Event, n)
	out.DroppedEvents = make([]int64, n)
	for _, p := range parts {
		remap := map[snapshot.StackID]snapshot.StackID{snapshot.NoStack: snapshot.NoStack, snapshot.EmptyStack: snapshot.EmptyStack}
		re := func(id snapshot.StackID) snapshot.StackID {
			if v, ok := remap[id]; ok {
				return v
			}
			ids := make([]snapshot.FrameID, len(p.Stacks[id]))
			for i, f := range p.Stacks[id] {
				ids[i] = in.Frame(p.Frames[f])
			}
			v := in.Stack(ids)
			remap[id] = v
			return v
		}
		for _, sg := range p.Segments {
			sg.Stack = re(sg.Stack)
			sg.Blocks = slices.Clone(sg.Blocks)
			for i := range sg.Blocks {
				sg.Blocks[i].Stack = re(sg.Blocks[i].Stack)
			}
			out.Segments = append(out.Segments, sg)
		}
		for d, evs := range p.DeviceTraces {
			for _, ev := range evs {
				ev.Stack = re(ev.Stack)
				out.DeviceTraces[d] = append(out.DeviceTraces[d], ev)
			}
		}
		out.Annotations = append(out.Annotations, p.Annotations...)
		out.Settings = p.Settings
	}
	out.Frames, out.Stacks = in.Frames, in.Stacks
	out.Caps = caps(out, false, false, 0)
	return out
}

// DataParallelUneven: torch.nn.DataParallel over 3 GPUs (torch/nn/parallel/data_parallel.py
// forward → replicate → comm.broadcast_coalesced for the replicas' weights, scatter for the
// inputs, parallel_apply for the forwards, gather to output_device 0). Device 0 holds the
// module (4 units of 64 MiB), its replica's activations and the outputs gathered from every
// replica (74 units: 78 in all); device 1 a weight copy and its activations (4 + 16 = 20);
// device 2 a weight copy and a smaller batch (4 + 4 = 8). Snapshot after the forward. With
// even=true every device holds 4 + 16 units (the negative case). The map gives each device's
// live bytes.
func DataParallelUneven(even bool) (*snapshot.Snapshot, map[int]int64) {
	dpPy := TorchDir + "/nn/parallel/data_parallel.py"
	replPy := TorchDir + "/nn/parallel/replicate.py"
	commPy := TorchDir + "/nn/parallel/comm.py"
	parPy := TorchDir + "/nn/parallel/parallel_apply.py"
	pygPy := ProjDir + "/pyg_train.py"
	const unit = 64 * MiB
	dp := func(line int64, fn string, inner ...snapshot.Frame) []snapshot.Frame {
		return Chain(inner, []snapshot.Frame{Py(dpPy, line, fn), Py(modulePy, 1747, "_call_impl"), Py(pygPy, 70, "train"), Py(pygPy, 99, "<module>")})
	}
	acts := map[int]int64{0: 74, 1: 16, 2: 4}
	if even {
		acts = map[int]int64{0: 16, 1: 16, 2: 16}
	}
	live := map[int]int64{}
	var parts []*snapshot.Snapshot
	for dev := range 3 {
		r := newEvRun(Config{Device: dev, NumDevices: 3, Capacity: 80 * GiB, BaseAddr: DefaultBase + uint64(dev)<<38})
		if dev == 0 {
			r.alloc(4*unit, moveToDeviceAt([]snapshot.Frame{Py(pygPy, 20, "main"), Py(pygPy, 99, "<module>")}), "parameter")
		} else {
			r.alloc(4*unit, Op("empty", dp(171, "replicate", Py(commPy, 67, "broadcast_coalesced"), Py(replPy, 30, "_broadcast_coalesced_reshape"), Py(replPy, 120, "replicate"))...), "parameter")
		}
		r.alloc(acts[dev]*unit, linearIn(Chain([]snapshot.Frame{Py(ProjDir+"/gnn.py", 40, "forward")}, ModuleCall(), dp(193, "parallel_apply", Py(parPy, 80, "_worker")))), "activation")
		live[dev] = (4 + acts[dev]) * unit
		parts = append(parts, r.s.Snapshot())
	}
	return MergeDevices(parts...), live
}
