package sim

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// Framework scenarios: one training or inference run per mainstream framework shape
// (Lightning, HF Trainer + accelerate, DeepSpeed ZeRO-2, vLLM, autocast, HF generate,
// torch.compile), with stacks modelled on those projects' real source. Every allocation is
// tagged when it is made with its ground truth: the site (innermost model-code frame: a file
// of the user's, or a model-defining library file such as transformers'
// models/llama/modeling_llama.py or vllm/model_executor/models/llama.py), the user site
// (innermost frame in the user's own files, under ProjDir) and the role. The truth tables
// are computed from those tags, so they are exact; scenarios_frameworks_test.go recomputes
// the bytes and blocks per site from the snapshot itself.
//
// Every size is a multiple of 512 B, so requested and block sizes agree and the replayed
// allocated peak is the same whichever of the two a replay sums.

// Roles of an allocation.
const (
	RoleParameter         = "parameter"
	RoleGradient          = "gradient"
	RoleOptimizerState    = "optimizer_state"
	RoleActivation        = "activation"
	RoleTemporary         = "temporary"
	RoleBackwardTemporary = "backward_temporary"
	RoleCommunication     = "communication"
	RoleKVCache           = "kv_cache"
	RoleAutocastCache     = "autocast_cache"
	RoleWorkspace         = "workspace"
	RoleUserContainer     = "user_container"
	RoleOther             = "other"
)

// FwRow is one line of a ground-truth table: the live blocks of one (site, user site, role).
// Site and UserSite are "path:line function" (Site's form); "" means no such frame.
type FwRow struct {
	Site, UserSite, Role string
	Bytes, Blocks        int64
}

// FwTruth is the ground truth of one framework scenario.
type FwTruth struct {
	Name      string // fixture file name
	Workload  string // "training", "inference" or "unknown"
	Forwards  int    // forward passes (for inference: model forwards, the profiling dummy run excluded)
	Backwards int    // backward passes
	OptSteps  int    // optimizer steps
	Point     string // where the snapshot was taken
	Final     []FwRow
	Peak      []FwRow // live at the replayed allocated peak (first event that reaches it)
	PeakBytes int64
	PeakEvent int // index in device_traces[0] of the alloc event that reaches the peak
	// Steps are the [first, last] event indexes of each iteration (training step, or
	// generation/engine step for inference), in order.
	Steps [][2]int
}

// Paths of the simulated framework installations.
const (
	SitePackages = "/usr/lib/python3.11/site-packages"
	litDir       = SitePackages + "/lightning/pytorch"
	fabricDir    = SitePackages + "/lightning/fabric"
	tfDir        = SitePackages + "/transformers"
	accDir       = SitePackages + "/accelerate"
	dsDir        = SitePackages + "/deepspeed"
	vllmDir      = SitePackages + "/vllm"
	// Torch29Dir is the torch of the torch.compile scenario (a venv with PyTorch 2.9, whose
	// frame lines are those of a real 2.9 compiled training snapshot).
	Torch29Dir = "/opt/venv/lib/python3.12/site-packages/torch"
	// InductorDir is inductor's cache of generated code for user alice.
	InductorDir = "/tmp/torchinductor_alice"
)

type fwTag struct{ site, user, role string }

// fwRun drives a Sim and keeps the ground truth of every live allocation.
type fwRun struct {
	s         *Sim
	tags      map[uint64]fwTag
	sizes     map[uint64]int64
	cur, peak int64
	peakRows  []FwRow
	peakEvent int
	steps     [][2]int
	stepStart int
}

func newFwRun(cfg Config) *fwRun {
	return &fwRun{s: New(cfg), tags: map[uint64]fwTag{}, sizes: map[uint64]int64{}}
}

func (r *fwRun) alloc(n int64, st Stack, t fwTag) uint64 {
	if n%MinBlockSize != 0 {
		panic(fmt.Sprintf("sim fw scenario: size %d is not a multiple of 512", n))
	}
	a, err := r.s.Alloc(n, 0, st)
	if err != nil {
		panic(fmt.Sprintf("sim fw scenario: %v", err))
	}
	r.tags[a], r.sizes[a] = t, n
	r.cur += n
	if r.cur > r.peak {
		r.peak, r.peakEvent, r.peakRows = r.cur, len(r.s.events)-1, r.rows()
	}
	return a
}

func (r *fwRun) free(a uint64, st Stack) {
	if err := r.s.Free(a, st); err != nil {
		panic(fmt.Sprintf("sim fw scenario: %v", err))
	}
	r.cur -= r.sizes[a]
	delete(r.tags, a)
	delete(r.sizes, a)
}

func (r *fwRun) freeAll(as []uint64, st Stack) {
	for _, a := range as {
		r.free(a, st)
	}
}

func (r *fwRun) rows() []FwRow {
	m := map[fwTag]*FwRow{}
	for a, t := range r.tags {
		row := m[t]
		if row == nil {
			row = &FwRow{Site: t.site, UserSite: t.user, Role: t.role}
			m[t] = row
		}
		row.Bytes += r.sizes[a]
		row.Blocks++
	}
	out := make([]FwRow, 0, len(m))
	for _, row := range m {
		out = append(out, *row)
	}
	slices.SortFunc(out, func(a, b FwRow) int {
		return cmp.Or(cmp.Compare(a.Site, b.Site), cmp.Compare(a.UserSite, b.UserSite), cmp.Compare(a.Role, b.Role))
	})
	return out
}

func (r *fwRun) beginStep() { r.stepStart = len(r.s.events) }

func (r *fwRun) endStep() {
	r.steps = append(r.steps, [2]int{r.stepStart, len(r.s.events) - 1})
	r.s.Advance(StepUS)
}

func (r *fwRun) finish(t *FwTruth) *snapshot.Snapshot {
	t.Final, t.Peak, t.PeakBytes, t.PeakEvent, t.Steps = r.rows(), r.peakRows, r.peak, r.peakEvent, r.steps
	return r.s.Snapshot()
}

// nativeStack is an allocation made under the given native frames (innermost first, below
// the allocator's own frames) from Python frames py.
func nativeStack(native []snapshot.Frame, py ...[]snapshot.Frame) Stack {
	return Stack{Native: Chain(allocChain, native), Python: Chain(py...)}
}

// opIn is Op with the Python frames given as parts.
func opIn(op string, py ...[]snapshot.Frame) Stack { return Op(op, Chain(py...)...) }

// engineStack is an allocation made by the autograd engine thread while running native node
// code (no Python frames).
func engineStack(node string) Stack { return Backward(node) }

// enginePython is an allocation made on the autograd engine thread by Python code the engine
// calls (a custom Function's backward, a gradient hook): the Python frames sit between the
// native allocation frames and the engine's own frames, with no user frame from the main
// thread below them (so no interpreter main frames either).
func enginePython(native, py []snapshot.Frame, bridge snapshot.Frame) Stack {
	return Stack{Native: Chain(allocChain, native, py, []snapshot.Frame{bridge}, autogradTail)}
}

var (
	pyNodeApply    = Cpp("torch::autograd::PyNode::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)")
	pyPostHookCall = Cpp("torch::autograd::PyFunctionPostHook::operator()(std::vector<at::Tensor, std::allocator<at::Tensor> > const&, std::vector<at::Tensor, std::allocator<at::Tensor> > const&)")
)

// modelMLP describes the user's residual MLP (model.py, as in scenarios.go): L blocks of
// Linear(H,4H), GELU, Linear(4H,H) and a residual add, then a Linear(H,V) head; elem bytes per
// activation element, pelem bytes per parameter element, N tokens.
type modelMLP struct {
	H, N, V, L  int64
	elem, pelem int64
	paramSizes  []int64 // fc1_0, fc2_0, ..., head
}

func newMLP(H, N, V, L, elem, pelem int64) *modelMLP {
	m := &modelMLP{H: H, N: N, V: V, L: L, elem: elem, pelem: pelem}
	for i := int64(0); i < L; i++ {
		m.paramSizes = append(m.paramSizes, H*4*H*pelem, 4*H*H*pelem)
	}
	m.paramSizes = append(m.paramSizes, V*H*pelem)
	return m
}

// User-model sites (model.py, shared with scenarios.go).
var (
	siteFC1  = Site(ModelPy, 41, "forward")
	siteGELU = Site(ModelPy, 42, "forward")
	siteFC2  = Site(ModelPy, 43, "forward")
	siteRes  = Site(ModelPy, 44, "forward")
	siteHead = Site(ModelPy, 58, "forward")
	siteLoss = Site(ModelPy, 60, "forward") // return F.cross_entropy(logits, y) (models that return their loss)
)

// blockFrames is Block.forward at model.py:line called from Model.forward model.py:57, called
// through module.py from the frames outer.
func blockFrames(line int64, outer []snapshot.Frame) []snapshot.Frame {
	return Chain([]snapshot.Frame{Py(ModelPy, line, "forward")}, ModuleCall(), []snapshot.Frame{Py(ModelPy, 57, "forward")}, ModuleCall(), outer)
}

func modelFrames(line int64, outer []snapshot.Frame) []snapshot.Frame {
	return Chain([]snapshot.Frame{Py(ModelPy, line, "forward")}, ModuleCall(), outer)
}

func linearAt(py []snapshot.Frame) []snapshot.Frame {
	return Chain([]snapshot.Frame{Py(linearPy, 125, "forward")}, ModuleCall(), py)
}

// moduleTo is nn.Module.to / .cuda() converting every parameter, called from outer.
func moduleTo(method string, outer ...[]snapshot.Frame) Stack {
	line := int64(1343)
	if method == "cuda" {
		line = 1053
	}
	return opIn("to", []snapshot.Frame{Py(modulePy, 1329, "convert"), Py(modulePy, 928, "_apply"), Py(modulePy, 901, "_apply"),
		Py(modulePy, 901, "_apply"), Py(modulePy, line, method)}, Chain(outer...))
}

// ---------------------------------------------------------------------------------------
// Native frames of framework-specific allocations.

var (
	accumulateGradNative = []snapshot.Frame{Cpp("torch::autograd::AccumulateGrad::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)")}

	foreachSqrtNative = []snapshot.Frame{
		Cpp("at::native::foreach_tensor_sqrt_cuda(c10::ArrayRef<at::Tensor>)"),
		Cpp("at::_ops::_foreach_sqrt::call(c10::ArrayRef<at::Tensor>)"),
		{Filename: "python_torch_functions_0.cpp", Name: "torch::autograd::THPVariable__foreach_sqrt(_object*, _object*, _object*)"},
	}

	// cuBLAS workspace (real frames: pt2.5-2.7 torch-compile snapshot).
	cublasWorkspaceNative = []snapshot.Frame{
		{Filename: "", Name: "at::cuda::getNewWorkspace()"},
		Cpp("at::cuda::getCurrentCUDABlasHandle()"),
		{Filename: "", Name: "void at::cuda::blas::gemm_internal_cublas<float>(char, char, long, long, long, at::OpMathType<float>::type, float const*, long, float const*, long, at::OpMathType<float>::type, float*, long)"},
		{Filename: "", Name: "void at::cuda::blas::gemm<float>(char, char, long, long, long, at::OpMathType<float>::type, float const*, long, float const*, long, at::OpMathType<float>::type, float*, long)"},
		{Filename: "Blas.cpp", Name: "at::native::(anonymous namespace)::addmm_out_cuda_impl(at::Tensor&, at::Tensor const&, at::Tensor const&, at::Tensor const&, c10::Scalar const&, c10::Scalar const&, bool)"},
	}

	// autocast: the cast of a weight through at::autocast::cached_cast (aten/src/ATen/autocast_mode.cpp).
	autocastLinearWrap = []snapshot.Frame{
		Cpp("at::autocast::WrapFunction_<(at::autocast::CastPolicy)0, (c10::DeviceType)1, at::Tensor (at::Tensor const&, at::Tensor const&, std::optional<at::Tensor> const&), &at::linear, at::Tensor, c10::guts::typelist::typelist<at::Tensor const&, at::Tensor const&, std::optional<at::Tensor> const&> >::call(at::Tensor const&, at::Tensor const&, std::optional<at::Tensor> const&)"),
		Cpp("c10::impl::wrap_kernel_functor_unboxed_<c10::impl::detail::WrapFunctionIntoRuntimeFunctor_<at::Tensor (*)(at::Tensor const&, at::Tensor const&, std::optional<at::Tensor> const&), at::Tensor, c10::guts::typelist::typelist<at::Tensor const&, at::Tensor const&, std::optional<at::Tensor> const&> >, at::Tensor (at::Tensor const&, at::Tensor const&, std::optional<at::Tensor> const&)>::call(c10::OperatorKernel*, c10::DispatchKeySet, at::Tensor const&, at::Tensor const&, std::optional<at::Tensor> const&)"),
		Cpp("at::_ops::linear::call(at::Tensor const&, at::Tensor const&, std::optional<at::Tensor> const&)"),
		{Filename: "python_nn_functions.cpp", Name: "torch::autograd::THPVariable_linear(_object*, _object*, _object*)"},
	}
	autocastCastNative = Chain([]snapshot.Frame{
		Cpp("at::native::_to_copy(at::Tensor const&, std::optional<c10::ScalarType>, std::optional<c10::Layout>, std::optional<c10::Device>, std::optional<bool>, bool, std::optional<c10::MemoryFormat>)"),
		Cpp("at::_ops::_to_copy::call(at::Tensor const&, std::optional<c10::ScalarType>, std::optional<c10::Layout>, std::optional<c10::Device>, std::optional<bool>, bool, std::optional<c10::MemoryFormat>)"),
		Cpp("at::native::to(at::Tensor const&, c10::ScalarType, bool, bool, std::optional<c10::MemoryFormat>)"),
		Cpp("at::_ops::to_dtype::call(at::Tensor const&, c10::ScalarType, bool, bool, std::optional<c10::MemoryFormat>)"),
		{Filename: "autocast_mode.cpp", Name: "at::autocast::cached_cast(c10::ScalarType, at::Tensor const&, c10::DeviceType)"},
	}, autocastLinearWrap)
	autocastLinearOutNative = Chain([]snapshot.Frame{
		Cpp("at::native::addmm_out_cuda_impl(at::Tensor&, at::Tensor const&, at::Tensor const&, at::Tensor const&, c10::Scalar const&, c10::Scalar const&, bool)"),
		Cpp("at::native::addmm_cuda(at::Tensor const&, at::Tensor const&, at::Tensor const&, c10::Scalar const&, c10::Scalar const&)"),
		Cpp("at::_ops::addmm::call(at::Tensor const&, at::Tensor const&, at::Tensor const&, c10::Scalar const&, c10::Scalar const&)"),
		Cpp("at::native::linear(at::Tensor const&, at::Tensor const&, std::optional<at::Tensor> const&)"),
		Cpp("at::_ops::linear::redispatch(c10::DispatchKeySet, at::Tensor const&, at::Tensor const&, std::optional<at::Tensor> const&)"),
	}, autocastLinearWrap)

	// ProcessGroupNCCL::allgather flattening its outputs (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp newLikeFlat).
	ncclAllgatherNative = []snapshot.Frame{
		Cpp("at::empty(c10::ArrayRef<long>, c10::TensorOptions, std::optional<c10::MemoryFormat>)"),
		{Filename: "ProcessGroupNCCL.cpp", Name: "c10d::newLikeFlat(std::vector<at::Tensor, std::allocator<at::Tensor> >&)"},
		{Filename: "ProcessGroupNCCL.cpp", Name: "c10d::ProcessGroupNCCL::allgather(std::vector<std::vector<at::Tensor, std::allocator<at::Tensor> >, std::allocator<std::vector<at::Tensor, std::allocator<at::Tensor> > > >&, std::vector<at::Tensor, std::allocator<at::Tensor> >&, c10d::AllgatherOptions const&)"},
		{Filename: "Ops.cpp", Name: "c10d::ops::(anonymous namespace)::allgather_CUDA(std::vector<std::vector<at::Tensor, std::allocator<at::Tensor> >, std::allocator<std::vector<at::Tensor, std::allocator<at::Tensor> > > > const&, c10::ArrayRef<at::Tensor>, c10::intrusive_ptr<c10d::ProcessGroup, c10::detail::intrusive_target_default_null_type<c10d::ProcessGroup> > const&, long)"},
		Cpp("c10d::ProcessGroup::allgather(std::vector<std::vector<at::Tensor, std::allocator<at::Tensor> >, std::allocator<std::vector<at::Tensor, std::allocator<at::Tensor> > > >&, std::vector<at::Tensor, std::allocator<at::Tensor> >&, c10d::AllgatherOptions const&)"),
		{Filename: "init.cpp", Name: "pybind11::cpp_function::dispatcher(_object*, _object*, _object*)"},
	}

	// inductor-generated code allocating a buffer (empty_strided_cuda; real frames).
	inductorEmptyNative = []snapshot.Frame{
		{Filename: "", Name: "at::TensorBase at::detail::_empty_strided_generic<c10::ArrayRef<long> >(c10::ArrayRef<long>, c10::ArrayRef<long>, c10::Allocator*, c10::DispatchKeySet, c10::ScalarType)"},
		Cpp("at::detail::empty_strided_generic(c10::ArrayRef<long>, c10::ArrayRef<long>, c10::Allocator*, c10::DispatchKeySet, c10::ScalarType)"),
		Cpp("at::detail::empty_strided_cuda(c10::ArrayRef<long>, c10::ArrayRef<long>, c10::ScalarType, std::optional<c10::Device>)"),
		{Filename: "guards.cpp", Name: "torch::dynamo::(anonymous namespace)::_empty_strided_device(_object*, _object*, c10::DeviceType) [clone .isra.0]"},
		Cpp("cfunction_call"),
	}
	inductorMMWorkspaceNative = Chain([]snapshot.Frame{
		{Filename: "", Name: "at::cuda::getNewWorkspace()"},
		Cpp("at::cuda::getCurrentCUDABlasHandle()"),
		{Filename: "", Name: "void at::cuda::blas::gemm_internal_cublas<float>(char, char, long, long, long, at::OpMathType<float>::type, float const*, long, float const*, long, at::OpMathType<float>::type, float*, long)"},
		{Filename: "", Name: "void at::cuda::blas::gemm<float>(char, char, long, long, long, at::OpMathType<float>::type, float const*, long, float const*, long, at::OpMathType<float>::type, float*, long)"},
		{Filename: "Blas.cpp", Name: "at::native::(anonymous namespace)::addmm_out_cuda_impl(at::Tensor&, at::Tensor const&, at::Tensor const&, at::Tensor const&, c10::Scalar const&, c10::Scalar const&, bool)"},
		Cpp("at::native::structured_mm_out_cuda::impl(at::Tensor const&, at::Tensor const&, at::Tensor const&)"),
		{Filename: "RegisterCUDA.cpp", Name: "at::(anonymous namespace)::wrapper_CUDA_mm_out_out(at::Tensor const&, at::Tensor const&, at::Tensor&)"},
		Cpp("at::_ops::mm_out::call(at::Tensor const&, at::Tensor const&, at::Tensor&)"),
		{Filename: "python_torch_functions_2.cpp", Name: "torch::autograd::THPVariable_mm(_object*, _object*, _object*)"},
		Cpp("cfunction_call"),
	})
)

// ---------------------------------------------------------------------------------------
// 1. Lightning: training_step inside the closure that torch.optim.Adam.step calls.

// LitPy is the user's Lightning script (LightningModule + Trainer.fit).
const LitPy = ProjDir + "/lit_train.py"

var (
	litAutomatic = litDir + "/loops/optimization/automatic.py"
	litCall      = litDir + "/trainer/call.py"
	litStrategy  = litDir + "/strategies/strategy.py"
	litTrainer   = litDir + "/trainer/trainer.py"
	adamPy       = TorchDir + "/optim/adam.py"
	contextlibPy = TorchDir + "/utils/_contextlib.py"
)

// litFit is Trainer.fit down from the user's trainer.fit call (lit_train.py:88) to the
// training-epoch loop.
func litFit() []snapshot.Frame {
	return []snapshot.Frame{
		Py(litDir+"/loops/training_epoch_loop.py", 250, "advance"),
		Py(litDir+"/loops/training_epoch_loop.py", 140, "run"),
		Py(litDir+"/loops/fit_loop.py", 355, "advance"),
		Py(litDir+"/loops/fit_loop.py", 205, "run"),
		Py(litTrainer, 1056, "_run_stage"),
		Py(litTrainer, 1012, "_run"),
		Py(litTrainer, 599, "_fit_impl"),
		Py(litCall, 48, "_call_and_handle_interrupt"),
		Py(litTrainer, 561, "fit"),
		Py(LitPy, 88, "main"),
		Py(LitPy, 95, "<module>"),
	}
}

// litOptStep is the automatic-optimization path from the epoch loop into torch.optim:
// _AutomaticOptimization.run → optimizer_step hook → LightningOptimizer.step →
// Strategy.optimizer_step → Precision.optimizer_step → Optimizer.step wrapper.
func litOptStep() []snapshot.Frame {
	return Chain([]snapshot.Frame{
		Py(optimizerPy, 79, "_use_grad"),
		Py(optimizerPy, 487, "wrapper"),
		Py(litDir+"/plugins/precision/precision.py", 123, "optimizer_step"),
		Py(litStrategy, 239, "optimizer_step"),
		Py(litDir+"/core/optimizer.py", 154, "step"),
		Py(litDir+"/core/module.py", 1306, "optimizer_step"),
		Py(litCall, 176, "_call_lightning_module_hook"),
		Py(litAutomatic, 270, "_optimizer_step"),
		Py(litAutomatic, 192, "run"),
	}, litFit())
}

// litClosure is the training_step call chain inside the closure that Adam.step calls
// (adam.py:213 `loss = closure()`), from LitModel.training_step at lit_train.py:line.
func litClosure(line int64) []snapshot.Frame {
	return Chain([]snapshot.Frame{
		Py(LitPy, line, "training_step"),
		Py(litStrategy, 390, "training_step"),
		Py(litCall, 319, "_call_strategy_hook"),
		Py(litAutomatic, 318, "_training_step"),
		Py(litAutomatic, 129, "closure"),
		Py(contextlibPy, 116, "decorate_context"),
		Py(litAutomatic, 144, "__call__"),
		Py(litDir+"/plugins/precision/precision.py", 108, "_wrap_closure"),
		Py(adamPy, 213, "step"),
	}, litOptStep())
}

// mlpState runs eager forwards and backwards of the user's MLP and keeps what the autograd
// graph holds.
type mlpState struct {
	r      *fwRun
	m      *modelMLP
	params []uint64
	grads  []uint64
	saved  []uint64
	nodes  []string
	logits uint64
	lsm    uint64
	casts  []uint64 // autocast weight casts (index = param)
	// onGrad, when set, runs right after parameter p's .grad is produced (a gradient hook).
	onGrad func(p int)
}

func (st *mlpState) save(a uint64, node string) {
	st.saved = append(st.saved, a)
	st.nodes = append(st.nodes, node)
}

// forward allocates the activations of one forward of the model (the loss is the caller's).
// x is the (saved) input batch. With autocast, each weight is cast once (cached) and the
// linear outputs carry the autocast wrapper frames. The logits are left in st.logits.
func (st *mlpState) forward(outer []snapshot.Frame, x uint64, autocast bool) {
	r, m := st.r, st.m
	st.saved, st.nodes = nil, nil
	st.save(x, "")
	act := func(site string) fwTag { return fwTag{site, site, RoleActivation} }
	tmp := func(site string) fwTag { return fwTag{site, site, RoleTemporary} }
	linear := func(n int64, py []snapshot.Frame, site string, p int, tag fwTag) uint64 {
		if autocast {
			if st.casts[p] == 0 {
				st.casts[p] = r.alloc(m.paramSizes[p]/2, nativeStack(autocastCastNative, linearAt(py)), fwTag{site, site, RoleAutocastCache})
			}
			return r.alloc(n, nativeStack(autocastLinearOutNative, linearAt(py)), tag)
		}
		return r.alloc(n, opIn("linear", linearAt(py)), tag)
	}
	for i := int64(0); i < m.L; i++ {
		fc1 := linear(m.N*4*m.H*m.elem, blockFrames(41, outer), siteFC1, int(2*i), act(siteFC1))
		st.save(fc1, "GeluBackward0")
		g := r.alloc(m.N*4*m.H*m.elem, Op("gelu", blockFrames(42, outer)...), act(siteGELU))
		st.save(g, "MmBackward0")
		fc2 := linear(m.N*m.H*m.elem, blockFrames(43, outer), siteFC2, int(2*i+1), tmp(siteFC2))
		res := r.alloc(m.N*m.H*m.elem, Op("add", blockFrames(44, outer)...), act(siteRes))
		r.free(fc2, FreeAt(blockFrames(44, outer)...))
		st.save(res, "MmBackward0")
	}
	st.logits = linear(m.N*m.V*m.elem, modelFrames(58, outer), siteHead, len(m.paramSizes)-1, tmp(siteHead))
}

// loss allocates cross_entropy's log_softmax output (saved for backward) of n bytes.
func (st *mlpState) loss(n int64, lossFrames []snapshot.Frame, tag fwTag) {
	ce := Chain([]snapshot.Frame{Py(functionalPy, 3479, "cross_entropy")}, lossFrames)
	st.lsm = st.r.alloc(n, Op("cross_entropy", ce...), tag)
	st.save(st.lsm, "NllLossBackward0")
}

// backward runs loss.backward() on the engine thread: activation-gradient temporaries, .grad
// tensors through AccumulateGrad (when absent), saved tensors and autocast casts released.
func (st *mlpState) backward(wsFirst bool) {
	r, m := st.r, st.m
	bt := fwTag{"", "", RoleBackwardTemporary}
	gt := fwTag{"", "", RoleGradient}
	release := func(k int) {
		if k >= 1 { // saved[0] is the input batch
			r.free(st.saved[k], BackwardFree(st.nodes[k]))
		}
	}
	gradOf := func(p int) {
		if st.grads[p] == 0 {
			st.grads[p] = r.alloc(m.paramSizes[p], nativeStack(Chain(accumulateGradNative, autogradTail)), gt)
		}
		if st.onGrad != nil {
			st.onGrad(p)
		}
	}
	castFree := func(p int) {
		if st.casts != nil && st.casts[p] != 0 {
			r.free(st.casts[p], BackwardFree("MmBackward0"))
			st.casts[p] = 0
		}
	}
	tmp := r.alloc(r.sizes[st.lsm], engineStack("NllLossBackward0"), bt)
	release(len(st.saved) - 1)
	if wsFirst {
		// The engine thread has its own cuBLAS handle: a second workspace, no Python frames.
		r.alloc(cublasWorkspaceBytes, Stack{Native: Chain(allocChain, cublasWorkspaceNative,
			[]snapshot.Frame{Cpp("at::native::mm(at::Tensor const&, at::Tensor const&)"),
				Cpp("torch::autograd::generated::MmBackward0::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)")}, autogradTail)},
			fwTag{"", "", RoleWorkspace})
	}
	nh := len(m.paramSizes) - 1
	gradOf(nh)
	castFree(nh)
	release(len(st.saved) - 2)
	r.free(tmp, BackwardFree("MmBackward0"))
	for i := m.L - 1; i >= 0; i-- {
		g := r.alloc(m.N*4*m.H*m.elem, engineStack("GeluBackward0"), bt)
		for _, p := range []int{int(2*i + 1), int(2 * i)} {
			gradOf(p)
			castFree(p)
		}
		base := 1 + 3*int(i)
		release(base + 1)
		release(base)
		if i > 0 {
			release(base - 1)
		}
		r.free(g, BackwardFree("GeluBackward0"))
	}
}

// cublasWorkspaceBytes is the default cuBLAS workspace on Hopper ("4096:2:16:8": 2 × 4 MiB + 8 × 16 KiB).
const cublasWorkspaceBytes = 2*4*MiB + 8*16*1024

// adamState allocates Adam/AdamW exp_avg and exp_avg_sq (torch/optim/<file>.py _init_group)
// for every parameter, under outer.
func (st *mlpState) adamState(file string, lines [2]int64, outer []snapshot.Frame, tag fwTag) []uint64 {
	var out []uint64
	for _, n := range st.m.paramSizes { // zeros_like(p): the parameter's dtype
		for _, l := range lines {
			out = append(out, st.r.alloc(n, opIn("zeros_like", []snapshot.Frame{Py(file, l, "_init_group")}, outer), tag))
		}
	}
	return out
}

// foreachTemps allocates and frees the foreach-Adam temporaries (torch._foreach_sqrt of
// exp_avg_sq, one per parameter).
func (st *mlpState) foreachTemps(file string, outer []snapshot.Frame, tag fwTag) {
	py := Chain([]snapshot.Frame{Py(file, 600, "_multi_tensor_adam"), Py(file, 880, "adam")}, outer)
	var ts []uint64
	for _, n := range st.m.paramSizes {
		ts = append(ts, st.r.alloc(n, nativeStack(foreachSqrtNative, py), tag))
	}
	st.r.freeAll(ts, FreeAt(py...))
}

// LightningClosure returns a Lightning (lightning.pytorch 2.x) training run: Trainer.fit of a
// LightningModule wrapping the user's MLP (model.py) with torch.optim.Adam (foreach), three
// optimizer steps, snapshot dumped by a callback's on_train_batch_end after the third step.
// training_step runs inside the closure that Adam.step calls, so every forward stack has
// torch/optim/adam.py step, optimizer.py wrapper, LightningOptimizer.step and the fit loop
// OUTSIDE the model call: activations with torch/optim frames that are not optimizer state.
// training_step also keeps `self.train_preds.append(logits.argmax(-1))` (lit_train.py:33), a
// user container growing by 2 KiB per step.
func LightningClosure() (*snapshot.Snapshot, FwTruth) {
	r := newFwRun(Config{})
	m := newMLP(512, 1024, 4096, 2, 4, 4)
	st := &mlpState{r: r, m: m}
	fit := Site(LitPy, 88, "main")
	// Strategy.setup → model_to_device → module.to(root_device).
	toStack := moduleTo("to", []snapshot.Frame{
		Py(fabricDir+"/utilities/device_dtype_mixin.py", 55, "to"),
		Py(litDir+"/strategies/single_device.py", 79, "model_to_device"),
		Py(litStrategy, 151, "setup"),
		Py(litTrainer, 978, "_run"),
		Py(litTrainer, 599, "_fit_impl"),
		Py(litCall, 48, "_call_and_handle_interrupt"),
		Py(litTrainer, 561, "fit"),
		Py(LitPy, 88, "main"), Py(LitPy, 95, "<module>")})
	for _, n := range m.paramSizes {
		st.params = append(st.params, r.alloc(n, toStack, fwTag{fit, fit, RoleParameter}))
	}
	st.grads = make([]uint64, len(st.params))
	// Batches: Strategy.batch_to_device → move_data_to_device → tensor.to(device).
	batchPy := Chain([]snapshot.Frame{
		Py(fabricDir+"/utilities/apply_func.py", 103, "batch_to"),
		Py(SitePackages+"/lightning_utilities/core/apply_func.py", 64, "apply_to_collection"),
		Py(fabricDir+"/utilities/apply_func.py", 109, "move_data_to_device"),
		Py(litStrategy, 272, "batch_to_device"),
		Py(litDir+"/core/module.py", 330, "_apply_batch_transfer_handler"),
		Py(litCall, 319, "_call_strategy_hook")}, litFit())
	batchTag := fwTag{fit, fit, RoleOther}
	var state []uint64
	var x, y uint64
	for step := 1; step <= 3; step++ {
		r.beginStep()
		nx := r.alloc(m.N*m.H*4, opIn("to", batchPy), batchTag)
		ny := r.alloc(m.N*8, opIn("to", batchPy), batchTag)
		if x != 0 {
			r.free(x, FreeAt(litFit()...))
			r.free(y, FreeAt(litFit()...))
		}
		x, y = nx, ny
		// closure: training_step (lit_train.py:31 logits = self.model(x); :32 loss; :33 preds).
		st.forward(litClosure(31), x, false)
		st.loss(m.N*m.V*4, litClosure(32), fwTag{Site(LitPy, 32, "training_step"), Site(LitPy, 32, "training_step"), RoleActivation})
		// self.train_preds holds every step's argmax: never freed.
		r.alloc(m.N*8, Op("argmax", litClosure(33)...), fwTag{Site(LitPy, 33, "training_step"), Site(LitPy, 33, "training_step"), RoleUserContainer})
		r.free(st.logits, FreeAt(litClosure(34)...)) // training_step returns: logits released
		// zero_grad (set_to_none) inside the closure, then backward.
		zg := FreeAt(Chain([]snapshot.Frame{Py(optimizerPy, 987, "zero_grad"), Py(litDir+"/core/module.py", 1335, "optimizer_zero_grad"),
			Py(litCall, 176, "_call_lightning_module_hook"), Py(litAutomatic, 297, "_optimizer_zero_grad"), Py(litAutomatic, 210, "zero_grad_fn"),
			Py(litAutomatic, 135, "closure"), Py(contextlibPy, 116, "decorate_context"), Py(litAutomatic, 144, "__call__"),
			Py(litDir+"/plugins/precision/precision.py", 108, "_wrap_closure"), Py(adamPy, 213, "step")}, litOptStep())...)
		for i, g := range st.grads {
			if g != 0 {
				r.free(g, zg)
				st.grads[i] = 0
			}
		}
		st.backward(false)
		// Adam.step after the closure: state on the first step, foreach temporaries every step.
		outer := Chain([]snapshot.Frame{Py(adamPy, 226, "step")}, litOptStep())
		if state == nil {
			state = st.adamState(adamPy, [2]int64{150, 153}, outer, fwTag{fit, fit, RoleOptimizerState})
		}
		st.foreachTemps(adamPy, Chain([]snapshot.Frame{Py(adamPy, 247, "step")}, litOptStep()), fwTag{fit, fit, RoleTemporary})
		r.endStep()
	}
	tr := FwTruth{Name: "fw_lightning_closure.pickle", Workload: "training", Forwards: 3, Backwards: 3, OptSteps: 3,
		Point: "after the third optimizer step (a callback's on_train_batch_end), gradients not yet zeroed"}
	return r.finish(&tr), tr
}

// ---------------------------------------------------------------------------------------
// 2. HF Trainer + accelerate (transformers 4.38-era LlamaForCausalLM, device_map="auto").

// FinetunePy is the user's HF Trainer script.
const FinetunePy = ProjDir + "/finetune.py"

var (
	modelingLlama = tfDir + "/models/llama/modeling_llama.py"
	tfTrainer     = tfDir + "/trainer.py"
	accHooks      = accDir + "/hooks.py"
)

// hfCall is a module call wrapped by accelerate's AlignDevicesHook (hooks.py new_forward).
func hfCall() []snapshot.Frame {
	return Chain([]snapshot.Frame{Py(accHooks, 166, "new_forward")}, ModuleCall())
}

// hfTrain is Trainer.train → _inner_training_loop from the user's trainer.train() (finetune.py:47).
func hfTrain(loopLine int64) []snapshot.Frame {
	return []snapshot.Frame{Py(tfTrainer, loopLine, "_inner_training_loop"), Py(tfTrainer, 1624, "train"),
		Py(FinetunePy, 47, "main"), Py(FinetunePy, 52, "<module>")}
}

// hfCausalAt is LlamaForCausalLM.forward at modeling_llama.py:line, called by
// Trainer.compute_loss (`outputs = model(**inputs)`) through accelerate's hook.
func hfCausalAt(line int64) []snapshot.Frame {
	return Chain([]snapshot.Frame{Py(modelingLlama, line, "forward")}, hfCall(),
		[]snapshot.Frame{Py(tfTrainer, 2925, "compute_loss"), Py(tfTrainer, 2902, "training_step")}, hfTrain(1961))
}

// hfModelAt is LlamaModel.forward at line (925 embed_tokens, 968 decoder layer call, 999 norm).
func hfModelAt(line int64) []snapshot.Frame {
	return Chain([]snapshot.Frame{Py(modelingLlama, line, "forward")}, hfCall(), hfCausalAt(1164))
}

// hfLayer is frames inner (innermost first; e.g. LlamaMLP.forward) called from
// LlamaDecoderLayer.forward at layerLine through a hooked module call.
func hfLayer(inner []snapshot.Frame, layerLine int64) []snapshot.Frame {
	return Chain(inner, hfCall(), []snapshot.Frame{Py(modelingLlama, layerLine, "forward")}, hfCall(), hfModelAt(968))
}

// HFTrainerAccelerate returns two steps of transformers' Trainer fine-tuning a small
// LlamaForCausalLM (bf16, 2 layers, hidden 512, intermediate 1536, vocab 8192; batch 2×256
// tokens) loaded with from_pretrained(device_map="auto"): every module forward is wrapped by
// accelerate/hooks.py new_forward. Weights go to the GPU through modeling_utils.py
// from_pretrained → accelerate set_module_tensor_to_device `value.to(device)`: role
// parameter, site the user's from_pretrained line (modeling_utils.py is not model code).
// Batches are moved by Trainer._prepare_input `.to()` (role other). Forward sites are
// modeling_llama.py lines (never hooks.py); their user site is finetune.py:47
// `trainer.train()`. AdamW state (torch.optim.adamw, bf16) is created by the first step.
// Snapshot: a TrainerCallback's on_step_end after step 2 (model.zero_grad() already done).
func HFTrainerAccelerate() (*snapshot.Snapshot, FwTruth) {
	r := newFwRun(Config{})
	const H, I, V, L, N = 512, 1536, 8192, 2, 512
	train := Site(FinetunePy, 47, "main")
	load := Site(FinetunePy, 21, "main")
	loadPy := []snapshot.Frame{
		Py(accDir+"/utils/modeling.py", 329, "set_module_tensor_to_device"),
		Py(tfDir+"/modeling_utils.py", 749, "_load_state_dict_into_meta_model"),
		Py(tfDir+"/modeling_utils.py", 3965, "_load_pretrained_model"),
		Py(tfDir+"/modeling_utils.py", 3531, "from_pretrained"),
		Py(tfDir+"/models/auto/auto_factory.py", 561, "from_pretrained"),
		Py(FinetunePy, 21, "main"), Py(FinetunePy, 52, "<module>")}
	var psizes []int64
	psizes = append(psizes, V*H*2) // embed_tokens
	for i := 0; i < L; i++ {
		psizes = append(psizes, H*H*2, H*H*2, H*H*2, H*H*2, H*I*2, H*I*2, I*H*2, H*2, H*2)
	}
	psizes = append(psizes, H*2, V*H*2) // norm, lm_head
	for _, n := range psizes {
		r.alloc(n, opIn("to", loadPy), fwTag{load, load, RoleParameter})
	}
	ml := func(line int64) string { return Site(modelingLlama, line, "forward") }
	act := func(line int64) fwTag { return fwTag{ml(line), train, RoleActivation} }
	tmpT := func(line int64) fwTag { return fwTag{ml(line), train, RoleTemporary} }
	linearL := func(inner int64, layer int64) Stack {
		return opIn("linear", Chain([]snapshot.Frame{Py(linearPy, 114, "forward")}, hfCall()), hfLayer([]snapshot.Frame{Py(modelingLlama, inner, "forward")}, layer))
	}
	inAttn := func(line int64) []snapshot.Frame {
		return hfLayer([]snapshot.Frame{Py(modelingLlama, line, "forward")}, 713)
	}
	rms := func(layer int64) Stack { // LlamaRMSNorm.forward `return self.weight * hidden_states.to(input_dtype)`
		if layer == 0 { // final norm: LlamaModel.forward
			return Op("mul", Chain([]snapshot.Frame{Py(modelingLlama, 89, "forward")}, hfCall(), hfModelAt(999))...)
		}
		return Op("mul", hfLayer([]snapshot.Frame{Py(modelingLlama, 89, "forward")}, layer)...)
	}
	prep := Chain([]snapshot.Frame{Py(tfTrainer, 2844, "_prepare_input"), Py(tfTrainer, 2836, "_prepare_input"), Py(tfTrainer, 2862, "_prepare_inputs"),
		Py(tfTrainer, 2900, "training_step")}, hfTrain(1961))
	optOuter := Chain([]snapshot.Frame{Py(adamwPy, 209, "step"), Py(optimizerPy, 79, "_use_grad"), Py(optimizerPy, 487, "wrapper"),
		Py(TorchDir+"/optim/lr_scheduler.py", 75, "wrapper"), Py(accDir+"/optimizer.py", 145, "step")}, hfTrain(2013))
	grads := make([]uint64, len(psizes))
	var state, batch []uint64
	for step := 1; step <= 2; step++ {
		r.beginStep()
		if batch != nil {
			r.freeAll(batch, FreeAt(hfTrain(1900)...))
		}
		batch = nil
		for k := 0; k < 3; k++ { // input_ids, attention_mask, labels (int64)
			batch = append(batch, r.alloc(N*8, opIn("to", prep), fwTag{train, train, RoleOther}))
		}
		// Forward.
		type sv struct {
			a    uint64
			node string
		}
		var saved []sv
		save := func(a uint64, node string) { saved = append(saved, sv{a, node}) }
		emb := r.alloc(N*H*2, opIn("embedding", []snapshot.Frame{Py(functionalPy, 2233, "embedding"), Py(TorchDir+"/nn/modules/sparse.py", 162, "forward")}, hfCall(),
			hfModelAt(925)), act(925))
		save(emb, "EmbeddingBackward0")
		for l := 0; l < L; l++ {
			save(r.alloc(N*H*2, rms(710), act(89)), "MulBackward0")
			save(r.alloc(N*H*2, linearL(615, 713), act(615)), "MmBackward0")
			save(r.alloc(N*H*2, linearL(616, 713), act(616)), "MmBackward0")
			save(r.alloc(N*H*2, linearL(617, 713), act(617)), "MmBackward0")
			save(r.alloc(N*H*2, Op("scaled_dot_product_attention", inAttn(649)...), act(649)), "ScaledDotProductEfficientAttentionBackward0")
			save(r.alloc(N*H*2, linearL(661, 713), act(661)), "AddBackward0")
			save(r.alloc(N*H*2, rms(726), act(89)), "MulBackward0")
			save(r.alloc(N*I*2, linearL(216, 727), act(216)), "SiluBackward0")
			save(r.alloc(N*I*2, linearL(216, 727), act(216)), "MulBackward0")
			save(r.alloc(N*I*2, Op("silu", Chain([]snapshot.Frame{Py(functionalPy, 2072, "silu"), Py(TorchDir+"/nn/modules/activation.py", 393, "forward")}, ModuleCall(),
				hfLayer([]snapshot.Frame{Py(modelingLlama, 216, "forward")}, 727))...), act(216)), "MulBackward0")
			save(r.alloc(N*I*2, Op("mul", hfLayer([]snapshot.Frame{Py(modelingLlama, 216, "forward")}, 727)...), act(216)), "MmBackward0")
			down := r.alloc(N*H*2, linearL(216, 727), tmpT(216))
			save(r.alloc(N*H*2, Op("add", hfLayer(nil, 728)[len(hfCall()):]...), act(728)), "MulBackward0")
			r.free(down, FreeAt(hfLayer(nil, 728)[len(hfCall()):]...))
		}
		save(r.alloc(N*H*2, rms(0), act(89)), "MmBackward0")
		logits16 := r.alloc(N*V*2, opIn("linear", []snapshot.Frame{Py(linearPy, 114, "forward")}, hfCall(), hfCausalAt(1174)), tmpT(1174))
		logits := r.alloc(N*V*4, opIn("to", hfCausalAt(1175)), tmpT(1175))
		r.free(logits16, FreeAt(hfCausalAt(1175)...))
		lsm := r.alloc(N*V*4, opIn("cross_entropy", []snapshot.Frame{Py(functionalPy, 3053, "cross_entropy"), Py(TorchDir+"/nn/modules/loss.py", 1179, "forward")}, ModuleCall(),
			hfCausalAt(1184)), act(1184))
		r.free(logits, FreeAt(Py(tfTrainer, 2925, "compute_loss"), Py(tfTrainer, 2902, "training_step"))) // outputs dropped when compute_loss returns
		// accelerator.backward(loss): engine thread.
		bt := fwTag{"", "", RoleBackwardTemporary}
		gl := r.alloc(N*V*4, engineStack("LogSoftmaxBackward0"), bt)
		r.free(lsm, BackwardFree("NllLossBackward0"))
		gl16 := r.alloc(N*V*2, engineStack("ToCopyBackward0"), bt)
		r.free(gl, BackwardFree("ToCopyBackward0"))
		gi := 0
		nextGrad := func() {
			p := len(psizes) - 1 - gi
			gi++
			if grads[p] == 0 {
				grads[p] = r.alloc(psizes[p], nativeStack(Chain(accumulateGradNative, autogradTail)), fwTag{"", "", RoleGradient})
			}
		}
		nextGrad() // lm_head
		r.free(gl16, BackwardFree("MmBackward0"))
		nextGrad() // final norm
		for k := len(saved) - 1; k >= 0; k-- {
			var tmp uint64
			if saved[k].node == "SiluBackward0" || saved[k].node == "MmBackward0" {
				tmp = r.alloc(N*H*2, engineStack(saved[k].node), bt)
			}
			r.free(saved[k].a, BackwardFree(saved[k].node))
			if gi < len(psizes) && saved[k].node != "EmbeddingBackward0" {
				nextGrad()
			}
			if tmp != 0 {
				r.free(tmp, BackwardFree(saved[k].node))
			}
		}
		for gi < len(psizes) {
			nextGrad()
		}
		// optimizer.step() through accelerate's AcceleratedOptimizer and the LR scheduler's wrapper.
		if state == nil {
			for _, n := range psizes {
				state = append(state, r.alloc(n, opIn("zeros_like", []snapshot.Frame{Py(adamwPy, 113, "_init_group")}, optOuter), fwTag{train, train, RoleOptimizerState}),
					r.alloc(n, opIn("zeros_like", []snapshot.Frame{Py(adamwPy, 116, "_init_group")}, optOuter), fwTag{train, train, RoleOptimizerState}))
			}
		}
		zg := FreeAt(Chain([]snapshot.Frame{Py(modulePy, 2620, "zero_grad")}, hfTrain(2030))...)
		for i, g := range grads {
			if g != 0 {
				r.free(g, zg)
				grads[i] = 0
			}
		}
		r.endStep()
	}
	tr := FwTruth{Name: "fw_hf_trainer_accelerate.pickle", Workload: "training", Forwards: 2, Backwards: 2, OptSteps: 2,
		Point: "TrainerCallback.on_step_end after step 2 (after optimizer.step() and model.zero_grad())"}
	return r.finish(&tr), tr
}

// ---------------------------------------------------------------------------------------
// 3. DeepSpeed ZeRO stage 2 (bf16, contiguous_gradients, overlap_comm), rank 0 of 2.

// DsTrainPy is the user's DeepSpeed script.
const DsTrainPy = ProjDir + "/ds_train.py"

var (
	dsEngine = dsDir + "/runtime/engine.py"
	dsZero   = dsDir + "/runtime/zero/stage_1_and_2.py"
)

func dsMain(line int64) []snapshot.Frame {
	return []snapshot.Frame{Py(DsTrainPy, line, "main"), Py(DsTrainPy, 64, "<module>")}
}

// dsInit is deepspeed.initialize → DeepSpeedEngine.__init__ → _configure_optimizer →
// _configure_zero_optimizer → DeepSpeedZeroOptimizer.__init__ (at stage_1_and_2.py:zline).
func dsInit(zline int64, zfn string) []snapshot.Frame {
	return Chain([]snapshot.Frame{Py(dsZero, zline, zfn)}, dsInitOuter())
}

func dsInitOuter() []snapshot.Frame {
	return Chain([]snapshot.Frame{
		Py(dsEngine, 1587, "_configure_zero_optimizer"),
		Py(dsEngine, 1311, "_configure_optimizer"),
		Py(dsEngine, 307, "__init__"),
		Py(dsDir+"/__init__.py", 193, "initialize")}, dsMain(40))
}

// zeroHook is the gradient hook ZeRO-2 registers on every parameter's grad accumulator
// (reduce_partition_and_remove_grads): it runs on the autograd engine thread, so no user frame.
func zeroHook(inner ...snapshot.Frame) Stack {
	py := Chain(inner, []snapshot.Frame{
		Py(dsZero, 919, "reduce_ipg_grads"),
		Py(dsZero, 985, "reduce_independent_p_g_buckets_and_remove_grads"),
		Py(dsZero, 1402, "reduce_ready_partitions_and_remove_grads"),
		Py(dsZero, 886, "reduce_partition_and_remove_grads")})
	return enginePython(opFrames["empty"], py, pyPostHookCall)
}

// DeepSpeedZero2 returns rank 0 of a 2-rank DeepSpeed ZeRO-2 run of the user's MLP (bf16):
// deepspeed.initialize (ds_train.py:40) moves the model to the GPU, then ZeRO flattens the
// bf16 parameters into one buffer (parameter) and keeps this rank's fp32 master partition and
// FusedAdam's exp_avg/exp_avg_sq (optimizer_state; initialize_optimizer_states runs one step
// on a zero gradient, a temporary). Each of 3 iterations: the batch (ds_train.py:51 `.to()`,
// other), engine.forward (activations with deepspeed/runtime/engine.py frames outside the
// model), engine.backward: ZeRO's IPG bucket buffers (communication, stage_1_and_2.py
// backward) and, from the grad hooks on the engine thread, the bf16 gradient partition
// grads_in_partition (gradient, no user frame); the per-parameter .grad tensors
// (AccumulateGrad) are copied into the bucket and freed by the hook. engine.step: the fp32
// gradient partition (gradient), then the IPG buffers and grads_in_partition released, then
// all_gather_dp_groups through torch.distributed all_gather, whose ProcessGroupNCCL::allgather
// flattens its outputs (c10d::newLikeFlat: communication, freed when done). Snapshot after
// the third iteration's backward, before model_engine.step() (ds_train.py:54).
func DeepSpeedZero2() (*snapshot.Snapshot, FwTruth) {
	r := newFwRun(Config{})
	m := newMLP(512, 256, 4096, 2, 2, 2)
	st := &mlpState{r: r, m: m}
	ini := Site(DsTrainPy, 40, "main")
	var total int64
	for _, n := range m.paramSizes {
		total += n
	}
	part := total / 2 // this rank's partition, bf16 bytes
	// DeepSpeedEngine._configure_distributed_model: module.to(device).
	toStack := moduleTo("to", []snapshot.Frame{Py(dsEngine, 1203, "_configure_distributed_model"), Py(dsEngine, 279, "__init__"),
		Py(dsDir+"/__init__.py", 193, "initialize")}, dsMain(40))
	for _, n := range m.paramSizes {
		st.params = append(st.params, r.alloc(n, toStack, fwTag{ini, ini, RoleParameter}))
	}
	// ZeRO: move_to_cpu(bit16_groups), flatten on CPU, flat buffer to the GPU.
	r.freeAll(st.params, FreeAt(Chain([]snapshot.Frame{Py(dsDir+"/runtime/utils.py", 1053, "move_to_cpu"), Py(dsZero, 337, "__init__")}, dsInitOuter())...))
	r.alloc(total, opIn("to", dsInit(363, "__init__")), fwTag{ini, ini, RoleParameter})
	// fp32 master partition: partition.to(device).clone().float().detach().
	cl := r.alloc(part, opIn("detach_clone", dsInit(410, "__init__")), fwTag{ini, ini, RoleTemporary})
	r.alloc(part*2, opIn("to", dsInit(410, "__init__")), fwTag{ini, ini, RoleOptimizerState})
	r.free(cl, FreeAt(dsInit(410, "__init__")...))
	// initialize_optimizer_states: a zero fp32 grad partition, one FusedAdam step creating state.
	ios := Chain([]snapshot.Frame{Py(dsZero, 648, "initialize_optimizer_states"), Py(dsZero, 541, "__init__")}, dsInitOuter())
	zg := r.alloc(part*2, opIn("zeros", ios), fwTag{ini, ini, RoleTemporary})
	fused := Chain([]snapshot.Frame{Py(optimizerPy, 487, "wrapper")}, ios)
	for _, l := range []int64{154, 156} {
		r.alloc(part*2, opIn("zeros_like", []snapshot.Frame{Py(dsDir+"/ops/adam/fused_adam.py", l, "step")}, fused), fwTag{ini, ini, RoleOptimizerState})
	}
	r.free(zg, FreeAt(ios...))
	st.grads = make([]uint64, len(st.params))
	fwdOuter := Chain([]snapshot.Frame{Py(dsEngine, 1899, "forward"), Py(dsDir+"/utils/nvtx.py", 18, "wrapped_fn")}, ModuleCall(), dsMain(52))
	// The model returns its loss (model.py:60 return F.cross_entropy(logits, y)).
	lossSite := siteLoss
	bwOuter := Chain([]snapshot.Frame{Py(dsZero, 2060, "backward"), Py(dsEngine, 2050, "backward"), Py(dsDir+"/utils/nvtx.py", 18, "wrapped_fn")}, dsMain(53))
	stepIn := func(line int64) []snapshot.Frame { // DeepSpeedZeroOptimizer.step at stage_1_and_2.py:line
		return Chain([]snapshot.Frame{Py(dsZero, line, "step"), Py(dsEngine, 2160, "_take_model_step"), Py(dsEngine, 2264, "step"),
			Py(dsDir+"/utils/nvtx.py", 18, "wrapped_fn")}, dsMain(54))
	}
	var x, y uint64
	var ipg []uint64
	var gip uint64
	for it := 1; it <= 3; it++ {
		r.beginStep()
		if x != 0 {
			r.free(x, FreeAt(dsMain(51)...))
			r.free(y, FreeAt(dsMain(51)...))
		}
		x = r.alloc(m.N*m.H*2, Op("to", dsMain(51)...), fwTag{Site(DsTrainPy, 51, "main"), Site(DsTrainPy, 51, "main"), RoleOther})
		y = r.alloc(m.N*8, Op("to", dsMain(51)...), fwTag{Site(DsTrainPy, 51, "main"), Site(DsTrainPy, 51, "main"), RoleOther})
		st.forward(fwdOuter, x, false)
		st.loss(m.N*m.V*4, modelFrames(60, fwdOuter), fwTag{lossSite, lossSite, RoleActivation})
		r.free(st.logits, FreeAt(modelFrames(60, fwdOuter)...)) // forward returns the loss: logits released
		// backward: IPG buckets (reduce_bucket_size 2e6 elements... rounded to 2 Mi elements, bf16), ×2 for overlap_comm.
		ipg = []uint64{r.alloc(4*MiB, opIn("empty", bwOuter), fwTag{Site(DsTrainPy, 53, "main"), Site(DsTrainPy, 53, "main"), RoleCommunication}),
			r.alloc(4*MiB, opIn("empty", bwOuter), fwTag{Site(DsTrainPy, 53, "main"), Site(DsTrainPy, 53, "main"), RoleCommunication})}
		// The grad hooks copy each .grad into the bucket as soon as it is produced, reduce it and
		// keep this rank's partition in grads_in_partition (allocated at the first reduction),
		// then free the .grad.
		hookFree := Stack{Native: freeChain, Python: []snapshot.Frame{Py(dsZero, 1410, "reduce_ready_partitions_and_remove_grads"), Py(dsZero, 886, "reduce_partition_and_remove_grads")}}
		st.onGrad = func(p int) {
			if gip == 0 {
				gip = r.alloc(part, zeroHook(Py(dsZero, 960, "copy_grads_in_partition")), fwTag{"", "", RoleGradient})
			}
			r.free(st.grads[p], hookFree)
			st.grads[p] = 0
		}
		st.backward(false)
		if it == 3 {
			break
		}
		// engine.step(): fp32 gradient partition, release IPG buffers, Adam, all_gather the bf16 partitions.
		fg := r.alloc(part*2, opIn("to", stepIn(1950)), fwTag{Site(DsTrainPy, 54, "main"), Site(DsTrainPy, 54, "main"), RoleGradient})
		rel := FreeAt(Chain([]snapshot.Frame{Py(dsZero, 1700, "_release_ipg_buffers")}, stepIn(1968))...)
		r.freeAll(ipg, rel)
		r.free(gip, rel)
		gip = 0
		r.free(fg, FreeAt(stepIn(1990)...))
		ag := Chain([]snapshot.Frame{
			Py(TorchDir+"/distributed/distributed_c10d.py", 3255, "all_gather"),
			Py(TorchDir+"/distributed/c10d_logger.py", 83, "wrapper"),
			Py(dsDir+"/comm/torch.py", 227, "all_gather"),
			Py(dsDir+"/comm/comm.py", 117, "log_wrapper"),
			Py(dsDir+"/comm/comm.py", 326, "all_gather"),
			Py(dsDir+"/runtime/utils.py", 1002, "all_gather_dp_groups")}, stepIn(2001))
		flat := r.alloc(total, nativeStack(ncclAllgatherNative, ag), fwTag{Site(DsTrainPy, 54, "main"), Site(DsTrainPy, 54, "main"), RoleCommunication})
		r.free(flat, FreeAt(ag...))
		r.endStep()
	}
	r.endStep()
	tr := FwTruth{Name: "fw_deepspeed_zero2.pickle", Workload: "training", Forwards: 3, Backwards: 3, OptSteps: 2,
		Point: "after the third iteration's model_engine.backward(loss), before model_engine.step()"}
	return r.finish(&tr), tr
}

// ---------------------------------------------------------------------------------------
// 4. vLLM (V1 engine, in-process: VLLM_ENABLE_V1_MULTIPROCESSING=0, enforce_eager=True).

// ServePy is the user's vLLM script.
const ServePy = ProjDir + "/serve.py"

var (
	vllmLlama  = vllmDir + "/model_executor/models/llama.py"
	vllmRunner = vllmDir + "/v1/worker/gpu_model_runner.py"
	vllmWorker = vllmDir + "/v1/worker/gpu_worker.py"
)

// vllmRPC is collective_rpc(method) of the uniprocess executor, from EngineCore at core.py:line
// (fn), constructed by LLM(...) at serve.py:9.
func vllmRPC(coreLine int64, coreFn string) []snapshot.Frame {
	return Chain([]snapshot.Frame{
		Py(vllmDir+"/utils/__init__.py", 2736, "run_method"),
		Py(vllmDir+"/executor/uniproc_executor.py", 58, "collective_rpc"),
	}, vllmCore(coreLine, coreFn))
}

func vllmCore(coreLine int64, coreFn string) []snapshot.Frame {
	out := []snapshot.Frame{Py(vllmDir+"/v1/engine/core.py", coreLine, coreFn)}
	if coreFn != "__init__" {
		out = append(out, Py(vllmDir+"/v1/engine/core.py", 83, "__init__"))
	}
	return Chain(out, []snapshot.Frame{
		Py(vllmDir+"/v1/engine/core_client.py", 245, "__init__"),
		Py(vllmDir+"/v1/engine/core_client.py", 92, "make_client"),
		Py(vllmDir+"/v1/engine/llm_engine.py", 104, "__init__"),
		Py(vllmDir+"/v1/engine/llm_engine.py", 170, "from_engine_args"),
		Py(vllmDir+"/entrypoints/llm.py", 243, "__init__"),
		Py(ServePy, 9, "main"), Py(ServePy, 20, "<module>")})
}

// vllmModelInit is a weight created while LlamaForCausalLM is constructed under the target
// device (model_loader initialize_model), innermost model frame models/llama.py:line in fn.
func vllmModelInit(inner []snapshot.Frame) []snapshot.Frame {
	return Chain(inner, []snapshot.Frame{
		Py(vllmDir+"/model_executor/models/utils.py", 627, "make_layers"),
		Py(vllmLlama, 347, "__init__"),
		Py(vllmDir+"/compilation/decorators.py", 151, "__init__"),
		Py(vllmLlama, 545, "_init_model"),
		Py(vllmLlama, 524, "__init__"),
		Py(vllmDir+"/model_executor/model_loader/utils.py", 64, "initialize_model"),
		Py(vllmDir+"/model_executor/model_loader/base_loader.py", 44, "load_model"),
		Py(vllmRunner, 1785, "load_model"),
		Py(vllmWorker, 186, "load_model"),
	}, vllmRPC(71, "_init_executor")[:2], []snapshot.Frame{
		Py(vllmDir+"/executor/uniproc_executor.py", 55, "_init_executor"),
		Py(vllmDir+"/executor/executor_base.py", 53, "__init__")}, vllmCore(80, "__init__"))
}

func vllmWeight(layerFrames []snapshot.Frame, create []snapshot.Frame) Stack {
	return opIn("empty", []snapshot.Frame{Py(TorchDir+"/utils/_device.py", 104, "__torch_function__")}, create, layerFrames)
}

// VLLMKVCache returns an in-process vLLM V1 inference run of a small Llama (bf16, 2 layers,
// hidden 512, intermediate 1536, vocab 8192): LLM(...) at serve.py:9 builds the model (weights
// created in LlamaForCausalLM's __init__ under the device context: role parameter, site the
// models/llama.py line creating the layer, user site serve.py:9), GPUModelRunner's persistent
// positions buffer (other), a profiling dummy run (temporaries), then
// gpu_model_runner.py _allocate_kv_cache_tensors: one 64 MiB int8 buffer per layer (kv_cache,
// site serve.py:9: no model frame). llm.generate (serve.py:12) runs one prefill (8 × 64
// tokens) and 3 decode steps under inference_mode: temporaries at models/llama.py lines, user
// site serve.py:12. No backward, no optimizer: inference. Snapshot after generate returns.
func VLLMKVCache() (*snapshot.Snapshot, FwTruth) {
	r := newFwRun(Config{})
	const H, I, V, L = 512, 1536, 8192, 2
	ctor := Site(ServePy, 9, "main")
	gen := Site(ServePy, 12, "main")
	ll := func(line int64, fn string) string { return Site(vllmLlama, line, fn) }
	param := func(line int64, fn string) fwTag { return fwTag{ll(line, fn), ctor, RoleParameter} }
	colCreate := []snapshot.Frame{Py(vllmDir+"/model_executor/layers/linear.py", 193, "create_weights"), Py(vllmDir+"/model_executor/layers/linear.py", 456, "__init__")}
	rowCreate := []snapshot.Frame{Py(vllmDir+"/model_executor/layers/linear.py", 193, "create_weights"), Py(vllmDir+"/model_executor/layers/linear.py", 1268, "__init__")}
	normCreate := []snapshot.Frame{Py(TorchDir+"/nn/parameter.py", 46, "__new__"), Py(vllmDir+"/model_executor/layers/layernorm.py", 104, "__init__")}
	// inLayer: created at models/llama.py:line in LlamaAttention/LlamaMLP.__init__, called from
	// LlamaDecoderLayer.__init__ at callLine (273 self_attn, 287 mlp), from make_layers' lambda.
	inLayer := func(line, callLine int64, inner ...snapshot.Frame) []snapshot.Frame {
		return vllmModelInit(Chain(inner, []snapshot.Frame{Py(vllmLlama, line, "__init__"), Py(vllmLlama, callLine, "__init__"), Py(vllmLlama, 350, "<lambda>")}))
	}
	// embed_tokens (LlamaModel.__init__ llama.py:333), then per layer qkv/o (LlamaAttention.__init__),
	// gate_up/down (LlamaMLP.__init__), two RMSNorms (LlamaDecoderLayer.__init__), final norm, lm_head.
	embInit := vllmModelInit(nil)[1:] // drop make_layers: embed_tokens is created in LlamaModel.__init__ itself
	r.alloc(V*H*2, vllmWeight(Chain([]snapshot.Frame{Py(vllmDir+"/model_executor/layers/vocab_parallel_embedding.py", 38, "create_weights"),
		Py(vllmDir+"/model_executor/layers/vocab_parallel_embedding.py", 274, "__init__"), Py(vllmLlama, 333, "__init__")}, embInit[1:]), nil), param(333, "__init__"))
	for l := 0; l < L; l++ {
		r.alloc(H*(H+2*H/2)*2, vllmWeight(inLayer(143, 273, Chain(colCreate, []snapshot.Frame{Py(vllmDir+"/model_executor/layers/linear.py", 862, "__init__")})...), nil), param(143, "__init__"))
		r.alloc(H*H*2, vllmWeight(inLayer(151, 273, rowCreate...), nil), param(151, "__init__"))
		r.alloc(H*2*I*2, vllmWeight(inLayer(76, 287, Chain(colCreate, []snapshot.Frame{Py(vllmDir+"/model_executor/layers/linear.py", 563, "__init__")})...), nil), param(76, "__init__"))
		r.alloc(I*H*2, vllmWeight(inLayer(83, 287, rowCreate...), nil), param(83, "__init__"))
		r.alloc(H*2, opIn("ones", normCreate, []snapshot.Frame{Py(vllmLlama, 297, "__init__"), Py(vllmLlama, 350, "<lambda>")}, vllmModelInit(nil)), param(297, "__init__"))
		r.alloc(H*2, opIn("ones", normCreate, []snapshot.Frame{Py(vllmLlama, 299, "__init__"), Py(vllmLlama, 350, "<lambda>")}, vllmModelInit(nil)), param(299, "__init__"))
	}
	r.alloc(H*2, opIn("ones", normCreate, []snapshot.Frame{Py(vllmLlama, 356, "__init__")}, embInit[1:]), param(356, "__init__"))
	r.alloc(V*H*2, vllmWeight(Chain([]snapshot.Frame{Py(vllmDir+"/model_executor/layers/vocab_parallel_embedding.py", 38, "create_weights"),
		Py(vllmDir+"/model_executor/layers/vocab_parallel_embedding.py", 274, "__init__"), Py(vllmDir+"/model_executor/layers/vocab_parallel_embedding.py", 467, "__init__"),
		Py(vllmLlama, 551, "__init__")}, embInit[4:]), nil), param(551, "__init__"))
	// GPUModelRunner.__init__ persistent buffers (Worker.init_device).
	r.alloc(8192*8, opIn("zeros", []snapshot.Frame{Py(vllmRunner, 312, "__init__"), Py(vllmWorker, 171, "init_device")}, vllmRPC(71, "_init_executor")[:2],
		[]snapshot.Frame{Py(vllmDir+"/executor/uniproc_executor.py", 54, "_init_executor"), Py(vllmDir+"/executor/executor_base.py", 53, "__init__")}, vllmCore(80, "__init__")),
		fwTag{ctor, ctor, RoleOther})
	// forward runs the model on T tokens; outer are the frames outside `self.model(...)` in the runner.
	forward := func(T int64, outer []snapshot.Frame, user string) {
		fw := func(inner ...snapshot.Frame) []snapshot.Frame {
			return Chain(inner, ModuleCall(), []snapshot.Frame{Py(vllmLlama, 319, "forward")}, ModuleCall(), []snapshot.Frame{Py(vllmLlama, 392, "forward"),
				Py(vllmDir+"/compilation/decorators.py", 223, "__call__"), Py(vllmLlama, 583, "forward")}, ModuleCall(), outer)
		}
		lin := func(line int64, fn string) Stack {
			return opIn("linear", []snapshot.Frame{Py(vllmDir+"/model_executor/layers/utils.py", 97, "default_unquantized_gemm"), Py(vllmDir+"/model_executor/layers/linear.py", 234, "apply"),
				Py(vllmDir+"/model_executor/layers/linear.py", 518, "forward")}, ModuleCall(), fw(Py(vllmLlama, line, fn)))
		}
		tmp := func(line int64, fn string) fwTag { return fwTag{ll(line, fn), user, RoleTemporary} }
		for l := 0; l < L; l++ {
			qkv := r.alloc(T*2*H*2, lin(208, "forward"), tmp(208, "forward"))
			attn := r.alloc(T*H*2, opIn("empty", []snapshot.Frame{Py(vllmDir+"/attention/layer.py", 265, "forward")}, ModuleCall(), fw(Py(vllmLlama, 210, "forward"))), tmp(210, "forward"))
			r.free(qkv, FreeAt(fw(Py(vllmLlama, 210, "forward"))...))
			o := r.alloc(T*H*2, lin(211, "forward"), tmp(211, "forward"))
			r.free(attn, FreeAt(fw(Py(vllmLlama, 211, "forward"))...))
			gu := r.alloc(T*2*I*2, lin(96, "forward"), tmp(96, "forward"))
			a := r.alloc(T*I*2, opIn("silu_and_mul", []snapshot.Frame{Py(vllmDir+"/model_executor/layers/activation.py", 84, "forward_cuda"), Py(vllmDir+"/model_executor/custom_op.py", 44, "forward")},
				ModuleCall(), fw(Py(vllmLlama, 97, "forward"))), tmp(97, "forward"))
			r.free(gu, FreeAt(fw(Py(vllmLlama, 97, "forward"))...))
			d := r.alloc(T*H*2, lin(98, "forward"), tmp(98, "forward"))
			r.free(a, FreeAt(fw(Py(vllmLlama, 98, "forward"))...))
			r.free(o, FreeAt(outer...))
			r.free(d, FreeAt(outer...))
		}
	}
	// Profiling dummy run (Worker.determine_available_memory → profile_run → _dummy_run).
	prof := Chain([]snapshot.Frame{Py(vllmRunner, 2405, "_dummy_run"), Py(contextlibPy, 116, "decorate_context"), Py(vllmRunner, 2620, "profile_run"),
		Py(vllmWorker, 232, "determine_available_memory"), Py(contextlibPy, 116, "decorate_context")}, vllmRPC(195, "_initialize_kv_caches"))
	forward(2048, prof, ctor)
	// KV cache: initialize_from_config → initialize_kv_cache → initialize_kv_cache_tensors → _allocate_kv_cache_tensors.
	kv := opIn("zeros", []snapshot.Frame{Py(vllmRunner, 2731, "_allocate_kv_cache_tensors"), Py(vllmRunner, 2858, "initialize_kv_cache_tensors"),
		Py(vllmRunner, 2893, "initialize_kv_cache"), Py(vllmWorker, 262, "initialize_from_config")}, vllmRPC(208, "_initialize_kv_caches"))
	for l := 0; l < L; l++ {
		r.alloc(64*MiB, kv, fwTag{ctor, ctor, RoleKVCache})
	}
	// llm.generate: one engine step per forward (prefill of 8×64 tokens, then 3 decode steps of 8).
	for _, T := range []int64{512, 8, 8, 8} {
		r.beginStep()
		outer := []snapshot.Frame{Py(vllmRunner, 1512, "execute_model"), Py(contextlibPy, 116, "decorate_context"),
			Py(vllmWorker, 352, "execute_model"), Py(vllmDir+"/utils/__init__.py", 2736, "run_method"),
			Py(vllmDir+"/executor/uniproc_executor.py", 58, "collective_rpc"), Py(vllmDir+"/v1/executor/abstract.py", 87, "execute_model"),
			Py(vllmDir+"/v1/engine/core.py", 237, "execute_model_with_error_logging"), Py(vllmDir+"/v1/engine/core.py", 270, "step"),
			Py(vllmDir+"/v1/engine/core_client.py", 253, "get_output"), Py(vllmDir+"/v1/engine/llm_engine.py", 243, "step"),
			Py(vllmDir+"/entrypoints/llm.py", 1522, "_run_engine"), Py(vllmDir+"/entrypoints/llm.py", 410, "generate"),
			Py(ServePy, 12, "main"), Py(ServePy, 20, "<module>")}
		forward(T, outer, gen)
		// compute_logits: logits of the 8 sampled rows (fp32), freed after sampling.
		lg := r.alloc(8*V*4, opIn("linear", []snapshot.Frame{Py(vllmDir+"/model_executor/layers/logits_processor.py", 107, "_get_logits"),
			Py(vllmDir+"/model_executor/layers/logits_processor.py", 68, "forward")}, ModuleCall(), []snapshot.Frame{Py(vllmLlama, 594, "compute_logits"),
			Py(vllmRunner, 1540, "execute_model")}, outer[1:]), fwTag{ll(594, "compute_logits"), gen, RoleTemporary})
		r.free(lg, FreeAt(Chain([]snapshot.Frame{Py(vllmRunner, 1600, "execute_model")}, outer[1:])...))
		r.endStep()
	}
	tr := FwTruth{Name: "fw_vllm_kv_cache.pickle", Workload: "inference", Forwards: 4, Backwards: 0, OptSteps: 0,
		Point: "after llm.generate returns (1 prefill + 3 decode engine steps; plus 1 profiling dummy run at start-up)"}
	return r.finish(&tr), tr
}

// ---------------------------------------------------------------------------------------
// 5. autocast: bf16 autocast training with the weights cast through at::autocast::cached_cast.

// AmpPy is the user's autocast training script.
const AmpPy = ProjDir + "/amp_train.py"

// AutocastBF16 returns an eager training loop of the user's MLP (fp32 weights,
// torch.optim.AdamW foreach) whose forward runs under torch.autocast("cuda", torch.bfloat16)
// (amp_train.py:40) on a bf16 batch: each linear casts its fp32 weight to bf16 once per
// forward through at::autocast::cached_cast (autocast_cache, site the model.py line of the
// linear; released when the backward no longer needs it, or at autocast exit for fc1 of block
// 0, whose input does not require grad), while the linear outputs carry the autocast wrapper
// frames (activations: not the cache). The first linear also allocates the cuBLAS workspace
// (workspace, model.py:41); the backward's engine thread gets its own (workspace, no Python
// frame). The loss line amp_train.py:41 `loss = F.cross_entropy(model(x).float(), y)`:
// bf16 logits (temporary, model.py:58), the fp32 copy (temporary) and log_softmax (activation).
// Snapshot dumped inside the autocast region of step 3, after the loss (amp_train.py:42).
func AutocastBF16() (*snapshot.Snapshot, FwTruth) {
	r := newFwRun(Config{})
	m := newMLP(512, 256, 4096, 2, 2, 4)
	st := &mlpState{r: r, m: m}
	main := func(line int64) []snapshot.Frame {
		return []snapshot.Frame{Py(AmpPy, line, "main"), Py(AmpPy, 50, "<module>")}
	}
	siteAt := func(line int64) string { return Site(AmpPy, line, "main") }
	for _, n := range m.paramSizes {
		st.params = append(st.params, r.alloc(n, moduleTo("cuda", main(30)), fwTag{siteAt(30), siteAt(30), RoleParameter}))
	}
	st.grads = make([]uint64, len(st.params))
	x := r.alloc(m.N*m.H*2, Op("randn", main(34)...), fwTag{siteAt(34), siteAt(34), RoleOther})
	r.alloc(m.N*8, Op("empty", main(35)...), fwTag{siteAt(35), siteAt(35), RoleOther})
	optOuter := Chain([]snapshot.Frame{Py(adamwPy, 209, "step"), Py(optimizerPy, 79, "_use_grad"), Py(optimizerPy, 487, "wrapper")}, main(44))
	var state []uint64
	for step := 1; step <= 3; step++ {
		r.beginStep()
		st.casts = make([]uint64, len(st.params))
		st.forward(main(41), x, true)
		if step == 1 {
			// cuBLAS workspace: created by the first matmul on this thread (block 0 fc1).
			r.alloc(cublasWorkspaceBytes, nativeStack(Chain(cublasWorkspaceNative, autocastLinearOutNative[1:]), linearAt(blockFrames(41, main(41)))),
				fwTag{siteFC1, siteFC1, RoleWorkspace})
		}
		f32 := r.alloc(m.N*m.V*4, Op("to", main(41)...), fwTag{siteAt(41), siteAt(41), RoleTemporary})
		r.free(st.logits, FreeAt(main(41)...))
		st.logits = 0
		st.loss(m.N*m.V*4, main(41), fwTag{siteAt(41), siteAt(41), RoleActivation})
		r.free(f32, FreeAt(main(41)...))
		if step == 3 {
			break
		}
		// autocast __exit__ clears the cache: casts not saved by autograd are freed (block 0 fc1).
		r.free(st.casts[0], FreeAt(Py(TorchDir+"/amp/autocast_mode.py", 397, "__exit__"), Py(AmpPy, 40, "main"), Py(AmpPy, 50, "<module>")))
		st.casts[0] = 0
		st.backward(step == 1)
		if state == nil {
			state = st.adamState(adamwPy, [2]int64{113, 116}, optOuter, fwTag{siteAt(44), siteAt(44), RoleOptimizerState})
		}
		st.foreachTemps(adamwPy, optOuter, fwTag{siteAt(44), siteAt(44), RoleTemporary})
		zg := FreeAt(Py(optimizerPy, 987, "zero_grad"), Py(AmpPy, 45, "main"), Py(AmpPy, 50, "<module>"))
		for i, g := range st.grads {
			if g != 0 {
				r.free(g, zg)
				st.grads[i] = 0
			}
		}
		r.endStep()
	}
	r.endStep()
	tr := FwTruth{Name: "fw_autocast_bf16.pickle", Workload: "training", Forwards: 3, Backwards: 2, OptSteps: 2,
		Point: "inside the autocast region of step 3, after the loss (before backward)"}
	return r.finish(&tr), tr
}

// ---------------------------------------------------------------------------------------
// 6. HF generate with a DynamicCache (transformers 4.56-era: DynamicLayer.update torch.cat).

// GeneratePy is the user's generation script.
const GeneratePy = ProjDir + "/generate.py"

var (
	modelingLlamaNew = tfDir + "/models/llama/modeling_llama.py"
	cacheUtils       = tfDir + "/cache_utils.py"
	genUtils         = tfDir + "/generation/utils.py"
)

// HFGenerate returns greedy generation with transformers: the model is loaded on the CPU and
// moved with `.to("cuda")` (generate.py:14, through modeling_utils.py PreTrainedModel.to:
// role parameter, site generate.py:14); the tokenizer's BatchEncoding.to (generate.py:16,
// other); generate(**inputs, past_key_values=cache, max_new_tokens=4) at generate.py:18 with
// a user-owned DynamicCache (generate.py:17), so the cache outlives generate. generate runs
// under no_grad (torch/utils/_contextlib.py decorate_context) → _sample: one prefill (4 × 64
// tokens) and 3 decode forwards. Every cache update goes through cache_utils.py
// DynamicLayer.update `torch.cat` (kv_cache, site modeling_llama.py LlamaAttention.forward,
// user site generate.py:18); each decode step allocates the grown cache and frees the old one.
// All other forward allocations are temporaries. No backward, no optimizer: inference.
// Snapshot after generate returns.
func HFGenerate() (*snapshot.Snapshot, FwTruth) {
	r := newFwRun(Config{})
	const H, I, V, L, B, P = 512, 1536, 8192, 2, 4, 64
	user := func(line int64) []snapshot.Frame {
		return []snapshot.Frame{Py(GeneratePy, line, "main"), Py(GeneratePy, 25, "<module>")}
	}
	gsite := Site(GeneratePy, 18, "main")
	load := Site(GeneratePy, 14, "main")
	toW := moduleTo("to", []snapshot.Frame{Py(tfDir+"/modeling_utils.py", 4343, "to")}, user(14))
	var psizes []int64
	psizes = append(psizes, V*H*2)
	for i := 0; i < L; i++ {
		psizes = append(psizes, H*H*2, H*H*2, H*H*2, H*H*2, H*I*2, H*I*2, I*H*2, H*2, H*2)
	}
	psizes = append(psizes, H*2, V*H*2)
	for _, n := range psizes {
		r.alloc(n, toW, fwTag{load, load, RoleParameter})
	}
	enc := Site(GeneratePy, 16, "main")
	for k := 0; k < 2; k++ { // input_ids, attention_mask (int64)
		r.alloc(B*P*8, opIn("to", []snapshot.Frame{Py(tfDir+"/tokenization_utils_base.py", 810, "<dictcomp>"), Py(tfDir+"/tokenization_utils_base.py", 810, "to")}, user(16)),
			fwTag{enc, enc, RoleOther})
	}
	genOuter := func(line int64) []snapshot.Frame {
		return Chain([]snapshot.Frame{Py(genUtils, line, "_sample"), Py(genUtils, 2539, "generate"), Py(contextlibPy, 116, "decorate_context")}, user(18))
	}
	ml := func(line int64) string { return Site(modelingLlamaNew, line, "forward") }
	// fwd: frames inner called from LlamaDecoderLayer.forward at layerLine (0: LlamaModel.forward
	// directly at modelLine), then LlamaForCausalLM.forward and _sample's `outputs = self(**model_inputs)`.
	causal := func(line int64) []snapshot.Frame {
		return Chain([]snapshot.Frame{Py(modelingLlamaNew, line, "forward"), Py(tfDir+"/utils/generic.py", 959, "wrapper")}, ModuleCall(), genOuter(3614))
	}
	model := func(line int64) []snapshot.Frame {
		return Chain([]snapshot.Frame{Py(modelingLlamaNew, line, "forward"), Py(tfDir+"/utils/generic.py", 1083, "wrapper")}, ModuleCall(), causal(459))
	}
	layer := func(inner []snapshot.Frame, layerLine int64) []snapshot.Frame {
		return Chain(inner, ModuleCall(), []snapshot.Frame{Py(modelingLlamaNew, layerLine, "forward"), Py(tfDir+"/utils/deprecation.py", 172, "wrapped_func"),
			Py(tfDir+"/modeling_layers.py", 94, "__call__")}, model(395))
	}
	attn := func(line int64) []snapshot.Frame {
		return layer([]snapshot.Frame{Py(modelingLlamaNew, line, "forward"), Py(tfDir+"/utils/deprecation.py", 172, "wrapped_func")}, 291)
	}
	lin := func(py []snapshot.Frame) Stack {
		return opIn("linear", []snapshot.Frame{Py(linearPy, 125, "forward")}, ModuleCall(), py)
	}
	cacheAt := func(l int64) Stack { // DynamicLayer.update torch.cat ← Cache.update ← LlamaAttention.forward:254
		return opIn("cat", []snapshot.Frame{Py(cacheUtils, l, "update"), Py(cacheUtils, 776, "update")}, attn(254))
	}
	kvTag := fwTag{ml(254), gsite, RoleKVCache}
	tmp := func(line int64) fwTag { return fwTag{ml(line), gsite, RoleTemporary} }
	cache := make([][2]uint64, L)
	for step := 0; step < 4; step++ {
		r.beginStep()
		T := int64(P)
		if step > 0 {
			T = 1
		}
		ctx := int64(P) + int64(step) // cache length after this forward's update
		if step == 0 {
			ctx = P
		}
		h := r.alloc(B*T*H*2, opIn("embedding", []snapshot.Frame{Py(functionalPy, 2551, "embedding"), Py(TorchDir+"/nn/modules/sparse.py", 190, "forward")}, ModuleCall(), model(379)), tmp(379))
		for l := 0; l < L; l++ {
			n := r.alloc(B*T*H*2, Op("mul", layer([]snapshot.Frame{Py(modelingLlamaNew, 66, "forward")}, 278)...), tmp(66))
			q := r.alloc(B*T*H*2, lin(attn(236)), tmp(236))
			k := r.alloc(B*T*H*2, lin(attn(237)), tmp(237))
			v := r.alloc(B*T*H*2, lin(attn(238)), tmp(238))
			r.free(n, FreeAt(layer(nil, 291)[len(ModuleCall()):]...))
			qe := r.alloc(B*T*H*2, Op("add", layer([]snapshot.Frame{Py(modelingLlamaNew, 142, "apply_rotary_pos_emb"), Py(modelingLlamaNew, 241, "forward")}, 291)...), tmp(142))
			ke := r.alloc(B*T*H*2, Op("add", layer([]snapshot.Frame{Py(modelingLlamaNew, 143, "apply_rotary_pos_emb"), Py(modelingLlamaNew, 241, "forward")}, 291)...), tmp(143))
			r.free(q, FreeAt(attn(241)...))
			r.free(k, FreeAt(attn(241)...))
			// Cache update: keys then values.
			nk := r.alloc(B*ctx*H*2, cacheAt(121), kvTag)
			nv := r.alloc(B*ctx*H*2, cacheAt(122), kvTag)
			if cache[l][0] != 0 {
				r.free(cache[l][0], FreeAt(Py(cacheUtils, 121, "update"), Py(cacheUtils, 776, "update")))
				r.free(cache[l][1], FreeAt(Py(cacheUtils, 122, "update"), Py(cacheUtils, 776, "update")))
			}
			cache[l] = [2]uint64{nk, nv}
			r.free(ke, FreeAt(attn(254)...))
			r.free(v, FreeAt(attn(254)...))
			ao := r.alloc(B*T*H*2, Op("scaled_dot_product_attention", Chain([]snapshot.Frame{Py(tfDir+"/integrations/sdpa_attention.py", 96, "sdpa_attention_forward")}, attn(265))...), tmp(265))
			r.free(qe, FreeAt(attn(265)...))
			o := r.alloc(B*T*H*2, lin(attn(276)), tmp(276))
			r.free(ao, FreeAt(attn(276)...))
			h2 := r.alloc(B*T*H*2, Op("add", layer(nil, 297)[len(ModuleCall()):]...), tmp(297))
			r.free(o, FreeAt(layer(nil, 297)[len(ModuleCall()):]...))
			r.free(h, FreeAt(layer(nil, 297)[len(ModuleCall()):]...))
			mlp := func(line int64) []snapshot.Frame {
				return layer([]snapshot.Frame{Py(modelingLlamaNew, line, "forward")}, 302)
			}
			g := r.alloc(B*T*I*2, lin(mlp(155)), tmp(155))
			u := r.alloc(B*T*I*2, lin(mlp(155)), tmp(155))
			a := r.alloc(B*T*I*2, Op("silu", mlp(155)...), tmp(155))
			r.free(g, FreeAt(mlp(155)...))
			mm := r.alloc(B*T*I*2, Op("mul", mlp(155)...), tmp(155))
			r.free(a, FreeAt(mlp(155)...))
			r.free(u, FreeAt(mlp(155)...))
			d := r.alloc(B*T*H*2, lin(mlp(155)), tmp(155))
			r.free(mm, FreeAt(mlp(155)...))
			h = r.alloc(B*T*H*2, Op("add", layer(nil, 303)[len(ModuleCall()):]...), tmp(303))
			r.free(d, FreeAt(layer(nil, 303)[len(ModuleCall()):]...))
			r.free(h2, FreeAt(layer(nil, 303)[len(ModuleCall()):]...))
		}
		// final norm, lm_head on the last position only (logits_to_keep=1), fp32 copy in _sample.
		nf := r.alloc(B*T*H*2, Op("mul", Chain([]snapshot.Frame{Py(modelingLlamaNew, 66, "forward")}, ModuleCall(), model(402))...), tmp(66))
		r.free(h, FreeAt(model(402)...))
		lg := r.alloc(B*V*2, lin(causal(472)), tmp(472))
		r.free(nf, FreeAt(causal(478)...))
		nl := r.alloc(B*V*4, Op("to", genOuter(3620)...), fwTag{Site(GeneratePy, 18, "main"), gsite, RoleTemporary})
		r.free(lg, FreeAt(genOuter(3628)...))
		r.free(nl, FreeAt(genOuter(3660)...))
		r.endStep()
	}
	tr := FwTruth{Name: "fw_hf_generate.pickle", Workload: "inference", Forwards: 4, Backwards: 0, OptSteps: 0,
		Point: "after model.generate returns; the user's DynamicCache (67 positions) is still referenced"}
	return r.finish(&tr), tr
}

// ---------------------------------------------------------------------------------------
// 7. torch.compile training step (PyTorch 2.9 frames, as in a real compiled snapshot).

// CompilePy is the user's torch.compile training script.
const CompilePy = ProjDir + "/compile_train.py"

// Generated code of the compiled forward and backward graphs.
var (
	InductorFwdPy = InductorDir + "/k3/ck3xq2mwb7fzvye4lnd5jbgxq6rdfr2ho3rw4nnbqcl6mzk5kpxa.py"
	InductorBwdPy = InductorDir + "/p7/cp7ufg5dqa4kvuqbq6n3e2wjm7xhswzqz4n3tci2yfwt5h3lkx2d.py"
)

// CompiledTraining returns two steps of a torch.compile'd training loop of the user's MLP
// (fp32; the model returns its loss, so the whole forward including cross_entropy is one
// graph). Frames follow a real PyTorch 2.9 compiled snapshot: the generated module's `call`
// (InductorFwdPy / InductorBwdPy under /tmp/torchinductor_alice) followed by the ORIGINAL
// model frames (model.py:41 forward, model.py:57 forward, ...), then torch/_inductor/utils.py
// run, output_code.py __call__, AOTAutograd's runtime_wrappers.py / CompiledFunction.forward,
// dynamo's eval_frame.py _fn, the interpreter frame of Model.forward (model.py:55), and
// eval_frame.py compile_wrapper. The generated file is never the site: the site and user site
// are the model line after `call`. Compiled backward allocations (engine thread, Python frames
// of CompiledFunction.backward) have model.py sites too: weight gradients (gradient) and
// activation gradients (backward_temporary). The first mm of the forward allocates the cuBLAS
// workspace (workspace, model.py:41), the compiled backward's first mm another (engine thread,
// model.py:58). AdamW (eager, foreach) state from compile_train.py:34. Snapshot after the second
// forward (compile_train.py:32 dumps it before loss.backward()).
func CompiledTraining() (*snapshot.Snapshot, FwTruth) {
	r := newFwRun(Config{})
	m := newMLP(512, 256, 4096, 2, 4, 4)
	td := Torch29Dir
	main := func(line int64, fn string) []snapshot.Frame {
		return []snapshot.Frame{Py(CompilePy, line, fn), Py(CompilePy, 44, "main"), Py(CompilePy, 48, "<module>")}
	}
	mod29 := []snapshot.Frame{Py(td+"/nn/modules/module.py", 1787, "_call_impl")}
	fwdRuntime := Chain([]snapshot.Frame{
		Py(td+"/_inductor/utils.py", 3220, "run"),
		Py(td+"/_inductor/output_code.py", 638, "__call__"),
		Py(td+"/_functorch/_aot_autograd/runtime_wrappers.py", 729, "inner_fn"),
		Py(td+"/_functorch/_aot_autograd/runtime_wrappers.py", 531, "wrapper"),
		Py(td+"/_functorch/_aot_autograd/utils.py", 134, "call_func_at_runtime_with_args"),
		Py(td+"/_functorch/_aot_autograd/runtime_wrappers.py", 2152, "forward"),
		Py(td+"/autograd/function.py", 583, "apply"),
		Py(td+"/_functorch/_aot_autograd/utils.py", 108, "g"),
		Py(td+"/_functorch/_aot_autograd/utils.py", 134, "call_func_at_runtime_with_args"),
		Py(td+"/_functorch/_aot_autograd/runtime_wrappers.py", 343, "runtime_wrapper"),
		Py(td+"/_functorch/aot_autograd.py", 1148, "forward"),
		Py(td+"/_dynamo/eval_frame.py", 1181, "_fn"),
		Py(ModelPy, 55, "forward")}, mod29, []snapshot.Frame{
		Py(td+"/_dynamo/eval_frame.py", 953, "compile_wrapper"),
		Py(td+"/nn/modules/module.py", 1774, "_wrapped_call_impl")}, main(30, "train_step"))
	bwdRuntime := []snapshot.Frame{
		Py(td+"/_inductor/utils.py", 3220, "run"),
		Py(td+"/_inductor/output_code.py", 638, "__call__"),
		Py(td+"/_dynamo/eval_frame.py", 1181, "_fn"),
		Py(td+"/_functorch/_aot_autograd/utils.py", 134, "call_func_at_runtime_with_args"),
		Py(td+"/_functorch/_aot_autograd/runtime_wrappers.py", 2494, "_backward_impl"),
		Py(td+"/_functorch/_aot_autograd/runtime_wrappers.py", 2324, "impl_fn"),
		Py(td+"/_functorch/_aot_autograd/runtime_wrappers.py", 2338, "backward"),
		Py(td+"/autograd/function.py", 317, "apply")}
	// Original-source frames recorded after the generated call: Block.forward line, then
	// Model.forward's `x = blk(x)` (model.py:57); head and loss lines are in Model.forward.
	orig := func(line int64) []snapshot.Frame {
		if line >= 55 {
			return []snapshot.Frame{Py(ModelPy, line, "forward")}
		}
		return []snapshot.Frame{Py(ModelPy, line, "forward"), Py(ModelPy, 57, "forward")}
	}
	fwdAt := func(gl, line int64) Stack {
		return nativeStack(inductorEmptyNative, []snapshot.Frame{Py(InductorFwdPy, gl, "call")}, orig(line), fwdRuntime)
	}
	bwdAt := func(gl, line int64) Stack {
		return enginePython(inductorEmptyNative, Chain([]snapshot.Frame{Py(InductorBwdPy, gl, "call")}, orig(line), bwdRuntime), pyNodeApply)
	}
	freeFwd := func(gl int64) Stack {
		return FreeAt(Chain([]snapshot.Frame{Py(InductorFwdPy, gl, "call")}, fwdRuntime)...)
	}
	freeBwd := func(gl int64) Stack {
		return FreeAt(Chain([]snapshot.Frame{Py(InductorBwdPy, gl, "call")}, bwdRuntime)...)
	}
	tag := func(line int64, role string) fwTag {
		s := Site(ModelPy, line, "forward")
		return fwTag{s, s, role}
	}
	params := Site(CompilePy, 20, "main")
	var psz []int64 = m.paramSizes
	for _, n := range psz {
		r.alloc(n, moduleTo("cuda", []snapshot.Frame{Py(CompilePy, 20, "main"), Py(CompilePy, 48, "<module>")}), fwTag{params, params, RoleParameter})
	}
	bx := Site(CompilePy, 28, "train_step")
	r.alloc(m.N*m.H*4, Op("randn", main(28, "train_step")...), fwTag{bx, bx, RoleOther})
	r.alloc(m.N*8, Op("randint", main(29, "train_step")...), fwTag{Site(CompilePy, 29, "train_step"), Site(CompilePy, 29, "train_step"), RoleOther})
	// r.alloc above keeps the batch for the whole run (allocated once, reused every step).
	optOuter := Chain([]snapshot.Frame{Py(td+"/optim/adamw.py", 209, "step"), Py(td+"/optim/optimizer.py", 79, "_use_grad"), Py(td+"/optim/optimizer.py", 526, "wrapper")}, main(34, "train_step"))
	grads := make([]uint64, len(psz))
	var state []uint64
	for step := 1; step <= 2; step++ {
		r.beginStep()
		// Compiled forward: per block buf0 = mm (fc1, saved), buf1 = gelu (saved), buf2 = mm (fc2,
		// deleted in call), buf3 = add (saved); then the head mm (deleted), log_softmax (saved).
		var saved []uint64
		gl := int64(96)
		for i := int64(0); i < m.L; i++ {
			fc1 := r.alloc(m.N*4*m.H*4, fwdAt(gl, 41), tag(41, RoleActivation))
			if step == 1 && i == 0 {
				r.alloc(cublasWorkspaceBytes, nativeStack(inductorMMWorkspaceNative, []snapshot.Frame{Py(InductorFwdPy, gl+1, "call")}, orig(41), fwdRuntime),
					tag(41, RoleWorkspace))
			}
			g := r.alloc(m.N*4*m.H*4, fwdAt(gl+3, 42), tag(42, RoleActivation))
			fc2 := r.alloc(m.N*m.H*4, fwdAt(gl+6, 43), tag(43, RoleTemporary))
			res := r.alloc(m.N*m.H*4, fwdAt(gl+9, 44), tag(44, RoleActivation))
			r.free(fc2, freeFwd(gl+11))
			saved = append(saved, fc1, g, res)
			gl += 14
		}
		logits := r.alloc(m.N*m.V*4, fwdAt(gl, 58), tag(58, RoleTemporary))
		lsm := r.alloc(m.N*m.V*4, fwdAt(gl+3, 60), tag(60, RoleActivation))
		r.free(logits, freeFwd(gl+5))
		if step == 2 {
			break
		}
		// Compiled backward (engine thread): d_logits, head grad, per block activation grads and
		// weight grads; saved activations are deleted as the generated code goes.
		bl := int64(54)
		dl := r.alloc(m.N*m.V*4, bwdAt(bl, 60), tag(60, RoleBackwardTemporary))
		r.free(lsm, freeBwd(bl+1))
		if step == 1 {
			r.alloc(cublasWorkspaceBytes, enginePython(inductorMMWorkspaceNative, Chain([]snapshot.Frame{Py(InductorBwdPy, bl+3, "call")}, orig(58), bwdRuntime), pyNodeApply),
				tag(58, RoleWorkspace))
		}
		nh := len(psz) - 1
		grads[nh] = r.alloc(psz[nh], bwdAt(bl+3, 58), tag(58, RoleGradient))
		dx := r.alloc(m.N*m.H*4, bwdAt(bl+5, 58), tag(58, RoleBackwardTemporary))
		r.free(dl, freeBwd(bl+6))
		bl += 8
		for i := m.L - 1; i >= 0; i-- {
			base := 3 * int(i)
			grads[2*i+1] = r.alloc(psz[2*i+1], bwdAt(bl, 43), tag(43, RoleGradient))
			dg := r.alloc(m.N*4*m.H*4, bwdAt(bl+2, 43), tag(43, RoleBackwardTemporary))
			r.free(saved[base+2], freeBwd(bl+3))
			dh := r.alloc(m.N*4*m.H*4, bwdAt(bl+5, 42), tag(42, RoleBackwardTemporary))
			r.free(dg, freeBwd(bl+6))
			r.free(saved[base+1], freeBwd(bl+6))
			grads[2*i] = r.alloc(psz[2*i], bwdAt(bl+8, 41), tag(41, RoleGradient))
			ndx := r.alloc(m.N*m.H*4, bwdAt(bl+10, 41), tag(41, RoleBackwardTemporary))
			r.free(dh, freeBwd(bl+11))
			r.free(saved[base], freeBwd(bl+11))
			r.free(dx, freeBwd(bl+12))
			dx = ndx
			bl += 14
		}
		r.free(dx, freeBwd(bl))
		// AdamW (eager, foreach) and zero_grad(set_to_none=True).
		if state == nil {
			for _, n := range psz {
				for _, l := range []int64{113, 116} {
					state = append(state, r.alloc(n, opIn("zeros_like", []snapshot.Frame{Py(td+"/optim/adamw.py", l, "_init_group")}, optOuter),
						fwTag{Site(CompilePy, 34, "train_step"), Site(CompilePy, 34, "train_step"), RoleOptimizerState}))
				}
			}
		}
		py := Chain([]snapshot.Frame{Py(td+"/optim/adamw.py", 600, "_multi_tensor_adam"), Py(td+"/optim/adamw.py", 880, "adam")}, optOuter)
		var ts []uint64
		for _, n := range psz {
			ts = append(ts, r.alloc(n, nativeStack(foreachSqrtNative, py), fwTag{Site(CompilePy, 34, "train_step"), Site(CompilePy, 34, "train_step"), RoleTemporary}))
		}
		r.freeAll(ts, FreeAt(py...))
		zg := FreeAt(Chain([]snapshot.Frame{Py(td+"/optim/optimizer.py", 1031, "zero_grad")}, main(35, "train_step"))...)
		for i, g := range grads {
			r.free(g, zg)
			grads[i] = 0
		}
		r.endStep()
	}
	r.endStep()
	tr := FwTruth{Name: "fw_torch_compile.pickle", Workload: "training", Forwards: 2, Backwards: 1, OptSteps: 1,
		Point: "after the second compiled forward (compile_train.py:32), before loss.backward()"}
	return r.finish(&tr), tr
}

// FrameworkScenarios returns every framework scenario with its ground truth, in a fixed order.
func FrameworkScenarios() []func() (*snapshot.Snapshot, FwTruth) {
	return []func() (*snapshot.Snapshot, FwTruth){
		LightningClosure, HFTrainerAccelerate, DeepSpeedZero2, VLLMKVCache, AutocastBF16, HFGenerate, CompiledTraining,
	}
}
