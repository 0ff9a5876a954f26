package analysis

import (
	"regexp"
	"strings"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// stackContext is what the frames nearest an allocation say it was made for. Only the frames
// between the allocator and the nearest model/user frame decide it (plus, for user code that is
// itself an optimizer's step, the frame that calls that code): framework wrappers that call user
// code from the outside (Lightning's closure inside optimizer.step, HF Trainer, accelerate hooks,
// DeepSpeed/Megatron engines, dynamo) never do.
type stackContext uint8

const (
	ctxNone          stackContext = iota // no frames: decided from size and timing
	ctxUser                              // the user's code outside any forward, backward or optimizer frame
	ctxForward                           // a forward computation (module forward, functional op, compiled graph)
	ctxBackward                          // the autograd engine or a backward function
	ctxGradient                          // AccumulateGrad: a leaf's .grad
	ctxOptimizer                         // an optimizer step
	ctxParameter                         // building, loading or moving the model
	ctxCommunication                     // collectives (NCCL, c10d)
	ctxKVCache                           // a KV cache (HF cache classes, vLLM/SGLang cache engines)
	ctxAutocast                          // autocast's cast cache
	ctxWorkspace                         // cuBLAS / cuDNN workspace
)

// cublasWorkspaceBytes is the size of one default cuBLAS workspace (CUBLAS_WORKSPACE_CONFIG
// :4096:2:16:8 = 8 MiB + 128 KiB): one per handle (thread and stream), kept for the process.
const cublasWorkspaceBytes = 8519680

// marker recognises one kind of frame.
type marker struct {
	ctx  stackContext
	what string
	// test sees a frame's normalised path, its name, the name in lower case and whether it is
	// native.
	test func(p, n, ln string, cpp bool) bool
}

func containsAny(s string, subs ...string) bool {
	for _, x := range subs {
		if strings.Contains(s, x) {
			return true
		}
	}
	return false
}

// innerMarkers decide the context from the frames between the allocator and the nearest
// model frame, innermost first: the first frame that matches any marker wins.
var innerMarkers = []marker{
	{ctxWorkspace, "a cuBLAS/cuDNN workspace", func(p, n, ln string, cpp bool) bool {
		return cpp && strings.Contains(ln, "workspace") && containsAny(ln, "cublas", "cuda::getnewworkspace", "blas", "cudnn")
	}},
	{ctxAutocast, "autocast's cast cache", func(p, n, ln string, cpp bool) bool {
		return cpp && strings.Contains(n, "autocast") && strings.Contains(n, "cached_cast")
	}},
	{ctxCommunication, "collective communication", func(p, n, ln string, cpp bool) bool {
		return collectiveFrame(p, n, ln, cpp)
	}},
	{ctxGradient, "gradient accumulation into a leaf's .grad", func(p, n, ln string, cpp bool) bool {
		if strings.Contains(p, "/deepspeed/runtime/zero/") {
			return strings.Contains(ln, "grad") // ZeRO's gradient partitions
		}
		if strings.Contains(p, "torch/distributed/fsdp/_runtime_utils.py") {
			// FSDP1's post-backward hook: the reduce-scatter's output is the new sharded
			// gradient (_reduce_grad, _post_backward_hook)
			return containsAny(n, "_reduce_grad", "_post_backward")
		}
		return strings.Contains(n, "AccumulateGrad")
	}},
	{ctxBackward, "the backward pass", func(p, n, ln string, cpp bool) bool {
		if cpp {
			return strings.Contains(n, "autograd::Engine::") || (strings.Contains(n, "Backward") && backwardNodeRe.MatchString(n))
		}
		switch {
		case n == "_engine_run_backward" || n == "_make_grads":
			return true
		case n == "backward" && containsAny(p, "torch/autograd/", "torch/_tensor.py"):
			return true
		case n == "backward" && containsAny(p, "/bitsandbytes/", "torch/utils/checkpoint.py", "torch/autograd/function.py"):
			return true // an autograd.Function's backward
		case strings.Contains(p, "torch/_functorch/") && strings.Contains(ln, "backward"):
			return true // AOTAutograd's compiled backward
		}
		return false
	}},
	{ctxKVCache, "a KV cache", func(p, n, ln string, cpp bool) bool {
		if cpp {
			return false
		}
		return strings.Contains(p, "/transformers/cache_utils.py") ||
			(strings.Contains(p, "/vllm/") && (strings.Contains(p, "cache_engine") || strings.Contains(ln, "kv_cache") || strings.Contains(p, "kv_cache"))) ||
			(strings.Contains(p, "/sglang/") && containsAny(p, "mem_cache", "memory_pool")) ||
			containsAny(ln, "kv_cache", "past_key_value", "allocate_kv")
	}},
	{ctxOptimizer, "the optimizer", func(p, n, ln string, cpp bool) bool {
		if cpp {
			return strings.Contains(n, "fused_adam") || strings.Contains(n, "_fused_adamw")
		}
		return (strings.Contains(p, "torch/optim/") && !strings.Contains(p, "lr_scheduler")) ||
			containsAny(p, "/deepspeed/runtime/zero/stage", "/deepspeed/ops/adam", "/apex/optimizers/",
				"/bitsandbytes/optim/", "/transformers/optimization.py", "/torchao/optim", "/megatron/core/optimizer/")
	}},
	{ctxParameter, "building, loading or moving the model", func(p, n, ln string, cpp bool) bool {
		if cpp {
			return false
		}
		if shardedParamFrame(p, n) {
			return true
		}
		if strings.Contains(p, "torch/nn/modules/module.py") {
			switch n {
			case "_apply", "to", "cuda", "convert", "load_state_dict", "_load_from_state_dict", "half", "float",
				"bfloat16", "double", "type", "to_empty", "register_parameter", "register_buffer":
				return true
			}
			return false
		}
		if containsAny(p, "torch/nn/parameter.py", "torch/nn/init.py", "/transformers/modeling_utils.py",
			"/accelerate/utils/modeling.py", "/accelerate/big_modeling.py", "/safetensors/",
			"/vllm/model_executor/model_loader", "/deepspeed/runtime/zero/partition_parameters.py") {
			return n != "forward"
		}
		if strings.Contains(p, "torch/nn/modules/") && (n == "__init__" || n == "reset_parameters") {
			return true
		}
		return isParamBuildName(ln)
	}},
	{ctxForward, "a forward computation", func(p, n, ln string, cpp bool) bool {
		if cpp {
			return false
		}
		return (strings.Contains(p, "torch/nn/modules/") && n != "__init__") ||
			containsAny(p, "torch/nn/functional.py", "torch/functional.py", "/bitsandbytes/", "/peft/", "/flash_attn/",
				"/xformers/", "torch/utils/checkpoint.py")
	}},
}

// collectiveFrame: a frame whose allocation is a collective's own buffer, the only memory that
// is communication: NCCL and c10d's collectives (torch/distributed/distributed_c10d.py,
// functional collectives, ProcessGroup*::allgather/allreduce/reduce_scatter…, DDP's Reducer
// buckets), FSDP2's all-gather and reduce-scatter staging (torch/distributed/fsdp/
// _fully_shard/_fsdp_collectives.py foreach_all_gather, foreach_reduce), DTensor's
// redistribution, DeepSpeed's comm and ZeRO's reduce buckets (IPG buffers), Megatron's tensor-
// parallel mappings. Any other torch.distributed frame is a wrapper that runs the user's or the
// model's code (FSDP's forward hooks, DTensor's op dispatch, checkpoint_wrapper) and decides
// nothing: the search goes on to the next frame.
func collectiveFrame(p, n, ln string, cpp bool) bool {
	if cpp {
		if strings.Contains(ln, "nccl") || strings.Contains(n, "c10d::Reducer") {
			return true
		}
		return (strings.Contains(n, "c10d::") || strings.Contains(n, "ProcessGroup")) &&
			containsAny(ln, "allgather", "all_gather", "allreduce", "all_reduce", "reduce_scatter", "reducescatter",
				"broadcast", "alltoall", "all_to_all", "::send", "::recv", "::gather", "::scatter", "_coalesced")
	}
	switch {
	case strings.Contains(p, "/deepspeed/runtime/zero/"):
		// ZeRO's gradient buckets (IPG buffers) exist to be reduced
		return containsAny(ln, "ipg", "reduce", "bucket", "allreduce") || n == "backward"
	case containsAny(p, "torch/distributed/distributed_c10d.py", "torch/distributed/_functional_collectives",
		"torch/distributed/nn/functional.py", "torch/distributed/tensor/_redistribute.py",
		"torch/distributed/tensor/_collective_utils.py", "torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py",
		"/deepspeed/comm/", "/megatron/core/tensor_parallel/mappings.py"):
		return true
	}
	return false
}

// shardedParamFrame: a frame that makes a sharded model's parameters, where the memory is
// the parameter however it got there: FSDP2's unsharded parameters are the all-gather's
// outputs, resized in place (torch/distributed/fsdp/_fully_shard/_fsdp_param.py
// init_all_gather_outputs, alloc_all_gather_outputs, init_unsharded_param, to_unsharded),
// FSDP1's flat parameter and its padded unsharded copy (torch/distributed/fsdp/_flat_param.py
// flatten_tensors_into_flat_param, _alloc_padded_unsharded_flat_param, unshard), and
// Megatron's contiguous parameter and gradient buffers (megatron/core/distributed/
// param_and_grad_buffer.py _ParamAndGradBuffer.__init__ allocates param_data, only with the
// distributed optimizer, then grad_data: torch.zeros(self.numel, …); Roles tells them apart).
func shardedParamFrame(p, n string) bool {
	switch {
	case strings.Contains(p, "torch/distributed/fsdp/_fully_shard/_fsdp_param.py"):
		return containsAny(n, "all_gather_output", "unsharded_param", "to_unsharded", "_init_sharded_param")
	case strings.Contains(p, "torch/distributed/fsdp/_flat_param.py"):
		return containsAny(n, "flat_param", "unshard", "__init__", "_init_flat")
	case strings.Contains(p, "/megatron/core/distributed/param_and_grad_buffer.py"):
		return n == "__init__" || strings.Contains(n, "allocate")
	}
	return false
}

// The forward marker is weaker than the others (see classify); innerMarkers ends with it.
var (
	strongMarkers = innerMarkers[:len(innerMarkers)-1]
	forwardMarker = innerMarkers[len(innerMarkers)-1]
)

// markerOf returns the marker of a context.
func markerOf(c stackContext) marker {
	for _, m := range innerMarkers {
		if m.ctx == c {
			return m
		}
	}
	panic("analysis: no marker for a context")
}

// compiledFrame: generated or compiler frames (inductor's call, AOTAutograd, dynamo, FX
// GraphModules) run forward and backward graphs alike: they say "forward" only when no frame
// nearer the model says otherwise.
func compiledFrame(p string) bool {
	return containsAny(p, "torchinductor_", "torch/_functorch/", "torch/_dynamo/", "torch/_inductor/",
		"torch/autograd/function.py") || strings.HasPrefix(p, "<eval_with_key>")
}

// isParamBuildName: a function whose (lower-case) name says it builds or loads weights.
func isParamBuildName(ln string) bool {
	return containsAny(ln, "from_pretrained", "load_state_dict", "reset_parameters", "init_weight", "load_checkpoint",
		"load_weights", "load_model")
}

// transparent frames: wrappers that only pass a call on (module calls, decorators, hooks).
func transparentFrame(p, n string) bool {
	switch {
	case strings.Contains(p, "torch/nn/modules/module.py") && (n == "_call_impl" || n == "_wrapped_call_impl" || n == "__call__"):
		return true
	case containsAny(p, "torch/utils/_contextlib.py", "torch/_dynamo/eval_frame.py", "torch/amp/autocast_mode.py",
		"torch/cuda/amp/autocast_mode.py", "/accelerate/hooks.py", "/accelerate/utils/operations.py",
		"/transformers/utils/generic.py", "/transformers/modeling_layers.py", "torch/autograd/function.py",
		"torch/_functorch/", "torch/utils/checkpoint.py", "torch/_compile.py", "torch/_dynamo/external_utils.py"):
		return true
	}
	return false
}

var backwardNodeRe = regexp.MustCompile(`(autograd::generated::|^)[A-Za-z0-9_]+Backward[0-9]*(::apply|$)`)

// inferenceHint reports a frame that says the process serves or generates (a guess).
func inferenceHint(p, ln string) bool {
	if containsAny(p, "/transformers/generation/", "/vllm/", "/sglang/", "/flexgen/", "/text_generation_server/",
		"/diffusers/pipelines/") {
		return true
	}
	return containsAny(ln, "generate", "infer", "predict", "validat", "evaluat", "sample", "decode_step") ||
		ln == "eval"
}

// nestedGradEntry: a frame of an autograd call that computes derivatives for the caller
// rather than running the training loop's backward: torch.autograd.grad (torch/autograd/
// __init__.py grad), the torch.autograd.functional API (jvp, vjp, jacobian, hessian, hvp,
// vhp: functional.py jvp is the double-backward trick, zeros_like(out, requires_grad=True)
// grad_outputs and two _autograd_grad calls) and torch.func's transforms
// (torch/_functorch/eager_transforms.py vjp, jvp, grad). A training backward is entered by
// loss.backward() (torch/_tensor.py backward → torch/autograd/__init__.py backward), which
// Lightning's precision plugin, Accelerate's Accelerator.backward and
// GradScaler.scale(loss).backward() all call: those are not entries.
func nestedGradEntry(p, n string) bool {
	switch {
	case strings.HasSuffix(p, "torch/autograd/functional.py"):
		return !strings.HasPrefix(n, "_")
	case strings.HasSuffix(p, "torch/autograd/__init__.py"):
		return n == "grad"
	case strings.HasSuffix(p, "torch/_functorch/eager_transforms.py"):
		return n == "vjp" || n == "jvp" || n == "grad" || n == "grad_and_value" || n == "jacrev" || n == "jacfwd"
	}
	return false
}

// nestedGrad is the frame of the autograd call a forward frame makes on this stack (see
// nestedGradEntry): an entry with a forward frame (a module's or model's forward, or a module
// call) further out. Empty when there is none.
func nestedGrad(frames []*frameInfo) string {
	for i, f := range frames {
		if !f.bits.has(fbNestedGradEntry) {
			continue
		}
		for _, g := range frames[i+1:] {
			if g.bits.has(fbForwardCall) {
				return f.str
			}
		}
		return ""
	}
	return ""
}

// frameText is what the markers read of one frame (see frameInfo).
type frameText struct {
	p, n, ln string // normalised path, name, lower-case name
	cpp      bool
}

func (m marker) matches(f frameText) bool { return m.test(f.p, f.n, f.ln, f.cpp) }

// classify sets at's context, default role and evidence from its frames.
func classify(at *Attribution, frames []*frameInfo, modelIdx int, noStack bool, caps snapshot.Capabilities) {
	at.ctx, at.Category = ctxNone, CategoryOther
	switch {
	case noStack:
		at.Evidence = "the file recorded no stack for this memory"
		return
	case len(frames) == 0:
		if caps.PythonOnly || !caps.CppFrames {
			at.Evidence = "empty stack: recorded with stacks=\"python\", where backward-pass allocations have no frame, or allocated before recording started"
		} else {
			at.Evidence = "empty stack in a file that records C++ frames: allocated before memory history recording started"
		}
		return
	}
	for _, f := range frames {
		switch {
		case f.bits.has(fbNoGradDecorator):
			at.noGrad = true
		case !at.gradFn && f.bits.has(fbGradFn):
			at.gradFn, at.gradFnFrame = true, f.str
		}
		if at.hint == "" && f.kind != kindCpp && f.kind != kindRuntime && f.bits.has(fbInferenceHint) {
			at.hint = f.str
		}
	}
	for _, f := range frames {
		if (f.kind != kindCpp && f.kind != kindRuntime) || strings.HasSuffix(f.t.p, ".py") {
			at.pyFrames = true
			break
		}
	}
	at.nestedGrad = nestedGrad(frames)
	decide := func(c stackContext, f *frameInfo, what string) {
		at.ctx, at.frame = c, f.str
		setDefaultRole(at, what)
	}
	inner := len(frames)
	if modelIdx >= 0 {
		inner = modelIdx
	}
	// Strong markers first, innermost first, up to the first module forward: a library
	// kernel (bitsandbytes' dequantize, a functional op) runs in forward and backward alike, so
	// an autograd.Function's backward outside it decides. Forward markers decide only when no
	// strong marker is that near.
	compiled, weak := -1, -1
	for i, f := range frames[:inner] {
		if f.bits.has(fbModuleForward) {
			if weak < 0 {
				weak = i
			}
			break
		}
		if f.strong >= 0 {
			m := strongMarkers[f.strong]
			if m.ctx == ctxBackward && at.nestedGrad != "" {
				// Derivatives a forward computes for itself (a regulariser's autograd.grad, a
				// JVP) are forward work: the training backward is the loop's.
				decide(ctxForward, f, "a forward computation: "+at.nestedGrad+" called inside a forward")
				return
			}
			decide(m.ctx, f, m.what)
			return
		}
		switch {
		case weak >= 0:
		case f.bits.has(fbForwardMarker):
			weak = i
		case compiled < 0 && f.bits.has(fbCompiled):
			compiled = i
		}
	}
	if weak >= 0 {
		decide(ctxForward, frames[weak], forwardMarker.what)
		return
	}
	if compiled >= 0 {
		// Inductor's generated code sits under copies of the model frames it was compiled from,
		// in the forward and the backward graph alike: a backward graph is run by AOTAutograd's
		// backward on the autograd engine's thread, with no user frame outside it.
		for j := len(frames) - 1; modelIdx >= 0 && j > modelIdx && !frames[j].kind.isModel(); j-- {
			if frames[j].bits.has(fbBackwardPy) {
				decide(ctxBackward, frames[j], markerOf(ctxBackward).what+" (a compiled graph)")
				return
			}
		}
		decide(ctxForward, frames[compiled], "a compiled forward graph")
		return
	}
	if modelIdx < 0 {
		at.ctx = ctxUser
		at.Evidence = "no frame near the allocation identifies the kind of memory"
		return
	}
	// The model/user frames and their callers: forward when a model's forward (or a module
	// call) is in the chain; an optimizer step when the user's code is called by the optimizer;
	// model building by name.
	forward := -1
	for j := modelIdx; j < len(frames); j++ {
		f := frames[j]
		switch k := f.kind; {
		case k.isModel():
			if forward < 0 && (f.t.n == "forward" || f.t.n == "__call__") {
				forward = j
			}
			if forward < 0 && (f.bits.has(fbParamBuildName) || (j == modelIdx && f.t.n == "__init__")) {
				decide(ctxParameter, f, "building, loading or moving the model")
				return
			}
			continue
		case k == kindCpp || k == kindRuntime:
			continue
		case f.bits.has(fbTransparent):
			if forward < 0 && f.bits.has(fbModulePy) {
				forward = j - 1 // the module whose forward this call runs
			}
			continue
		}
		// The first frame that is neither the user's nor a wrapper: only an optimizer or a
		// model loader decides here (it called the user's own step or init code).
		if forward < 0 {
			for _, c := range []struct {
				ctx stackContext
				bit frameBits
			}{{ctxOptimizer, fbOptimizerCaller}, {ctxParameter, fbParameterCaller}} {
				if f.bits.has(c.bit) {
					decide(c.ctx, f, markerOf(c.ctx).what)
					at.Evidence += " (it calls this code)"
					return
				}
			}
		}
		break
	}
	if forward >= 0 {
		decide(ctxForward, frames[forward], "a forward computation")
		return
	}
	at.ctx = ctxUser
	at.Evidence = "your code outside any forward, backward or optimizer frame"
}

// ctxRoles is the role each context has before timing refines it.
var ctxRoles = map[stackContext]string{
	ctxWorkspace:     CategoryWorkspace,
	ctxAutocast:      CategoryAutocastCache,
	ctxCommunication: CategoryCommunication,
	ctxGradient:      CategoryGradient,
	ctxBackward:      CategoryBackwardTemporary,
	ctxKVCache:       CategoryKVCache,
	ctxOptimizer:     CategoryOptimizerState,
	ctxParameter:     CategoryParameter,
	ctxForward:       CategoryActivation,
}

// setDefaultRole gives the role a context has before timing refines it.
func setDefaultRole(at *Attribution, what string) {
	at.Category = ctxRoles[at.ctx]
	switch {
	case at.Category == "":
		at.Category = CategoryOther
	case at.ctx == ctxForward && at.noGrad:
		at.Category = CategoryTemporary
	}
	at.Evidence = "allocated in " + what + " (" + at.frame + ")"
}
