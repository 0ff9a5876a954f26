package sim

import "github.com/memsnap/memsnap/analysis/snapshot"

// Stack is the call stack captured for one allocator call, innermost first, split into its
// native (C++) part and its Python part. With Config.Stacks "all" the recorded frames are
// Native, then Python, then the interpreter's own native frames (when Python is non-empty);
// with "python" only Python is recorded. Work done by the autograd engine (the backward pass)
// runs on a C++ thread and has no Python frames at all: its Python part is empty, so under
// Stacks "python" it is recorded as an empty frames list, as PyTorch does.
type Stack struct {
	Native []snapshot.Frame
	Python []snapshot.Frame
}

// TorchDir is the site-packages torch directory used in simulated torch-internal frames.
const TorchDir = "/usr/lib/python3.11/site-packages/torch"

// Py returns a Python frame.
func Py(path string, line int64, name string) snapshot.Frame {
	return snapshot.Frame{Filename: path, Line: line, Name: name}
}

// Cpp returns a native frame the way PyTorch symbolizes most of them: filename "??", line 0.
func Cpp(name string) snapshot.Frame {
	return snapshot.Frame{Filename: "??", Line: 0, Name: name}
}

// Chain concatenates frame lists (innermost part first) into a new slice.
func Chain(parts ...[]snapshot.Frame) []snapshot.Frame {
	var out []snapshot.Frame
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// ModuleCall returns the torch/nn/modules/module.py frames that sit between a module's
// forward and the code that called the module, innermost first.
func ModuleCall() []snapshot.Frame {
	return []snapshot.Frame{
		Py(TorchDir+"/nn/modules/module.py", 1747, "_call_impl"),
		Py(TorchDir+"/nn/modules/module.py", 1736, "_wrapped_call_impl"),
	}
}

// allocChain is the innermost native part of every allocation stack.
var allocChain = []snapshot.Frame{
	Cpp("torch::unwind::unwind()"),
	Cpp("torch::CapturedTraceback::gather(bool, bool, bool)"),
	{Filename: "memory_snapshot.cpp", Line: 0, Name: "torch::cuda::(anonymous namespace)::gather_with_cpp()"},
	{Filename: "CUDACachingAllocator.cpp", Line: 0, Name: "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)"},
	{Filename: "", Line: 0, Name: "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::malloc(void**, signed char, unsigned long, CUstream_st*)"},
	{Filename: "", Line: 0, Name: "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)"},
	Cpp("at::detail::empty_generic(c10::ArrayRef<long>, c10::Allocator*, c10::DispatchKeySet, c10::ScalarType, std::optional<c10::MemoryFormat>)"),
	Cpp("at::detail::empty_cuda(c10::ArrayRef<long>, c10::ScalarType, std::optional<c10::Device>, std::optional<c10::MemoryFormat>)"),
	Cpp("at::native::empty_cuda(c10::ArrayRef<long>, std::optional<c10::ScalarType>, std::optional<c10::Layout>, std::optional<c10::Device>, std::optional<bool>, std::optional<c10::MemoryFormat>)"),
	{Filename: "RegisterCUDA.cpp", Line: 0, Name: "at::(anonymous namespace)::(anonymous namespace)::wrapper_CUDA_memory_format_empty(c10::ArrayRef<c10::SymInt>, std::optional<c10::ScalarType>, std::optional<c10::Layout>, std::optional<c10::Device>, std::optional<bool>, std::optional<c10::MemoryFormat>)"},
	Cpp("at::_ops::empty_memory_format::call(c10::ArrayRef<c10::SymInt>, std::optional<c10::ScalarType>, std::optional<c10::Layout>, std::optional<c10::Device>, std::optional<bool>, std::optional<c10::MemoryFormat>)"),
}

// freeChain is the native part of a free (tensor storage released).
var freeChain = []snapshot.Frame{
	Cpp("torch::unwind::unwind()"),
	Cpp("torch::CapturedTraceback::gather(bool, bool, bool)"),
	{Filename: "memory_snapshot.cpp", Line: 0, Name: "torch::cuda::(anonymous namespace)::gather_with_cpp()"},
	{Filename: "CUDACachingAllocator.cpp", Line: 0, Name: "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::free(c10::cuda::CUDACachingAllocator::Native::(anonymous namespace)::Block*)"},
	{Filename: "", Line: 0, Name: "c10::cuda::CUDACachingAllocator::Native::local_raw_delete(void*)"},
	Cpp("c10::StorageImpl::~StorageImpl()"),
	Cpp("c10::TensorImpl::~TensorImpl()"),
	Cpp("c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>::reset_()"),
	Cpp("THPVariable_clear(THPVariable*)"),
	Cpp("THPVariable_subclass_dealloc(_object*)"),
}

// opFrames are the native frames of each simulated ATen operator, innermost first, ending at
// the Python binding.
var opFrames = map[string][]snapshot.Frame{
	"empty": {Cpp("at::empty(c10::ArrayRef<long>, c10::TensorOptions, std::optional<c10::MemoryFormat>)"),
		{Filename: "python_torch_functions_0.cpp", Name: "torch::autograd::THPVariable_empty(_object*, _object*, _object*)"}},
	"randn": {Cpp("at::native::randn(c10::ArrayRef<long>, std::optional<at::Generator>, std::optional<c10::ScalarType>, std::optional<c10::Layout>, std::optional<c10::Device>, std::optional<bool>)"),
		Cpp("at::_ops::randn::call(c10::ArrayRef<c10::SymInt>, std::optional<c10::ScalarType>, std::optional<c10::Layout>, std::optional<c10::Device>, std::optional<bool>)"),
		{Filename: "python_torch_functions_2.cpp", Name: "torch::autograd::THPVariable_randn(_object*, _object*, _object*)"}},
	"zeros_like": {Cpp("at::native::zeros_like(at::Tensor const&, std::optional<c10::ScalarType>, std::optional<c10::Layout>, std::optional<c10::Device>, std::optional<bool>, std::optional<c10::MemoryFormat>)"),
		Cpp("at::_ops::zeros_like::call(at::Tensor const&, std::optional<c10::ScalarType>, std::optional<c10::Layout>, std::optional<c10::Device>, std::optional<bool>, std::optional<c10::MemoryFormat>)"),
		{Filename: "python_torch_functions_1.cpp", Name: "torch::autograd::THPVariable_zeros_like(_object*, _object*, _object*)"}},
	"linear": {Cpp("at::native::addmm_out_cuda_impl(at::Tensor&, at::Tensor const&, at::Tensor const&, at::Tensor const&, c10::Scalar const&, c10::Scalar const&, bool)"),
		Cpp("at::native::addmm_cuda(at::Tensor const&, at::Tensor const&, at::Tensor const&, c10::Scalar const&, c10::Scalar const&)"),
		Cpp("at::_ops::addmm::call(at::Tensor const&, at::Tensor const&, at::Tensor const&, c10::Scalar const&, c10::Scalar const&)"),
		Cpp("at::native::linear(at::Tensor const&, at::Tensor const&, std::optional<at::Tensor> const&)"),
		Cpp("at::_ops::linear::call(at::Tensor const&, at::Tensor const&, std::optional<at::Tensor> const&)"),
		{Filename: "python_nn_functions.cpp", Name: "torch::autograd::THPVariable_linear(_object*, _object*, _object*)"}},
	"gelu": {Cpp("at::native::structured_gelu_out_cuda::impl(at::Tensor const&, c10::basic_string_view<char>, at::Tensor const&)"),
		Cpp("at::_ops::gelu::call(at::Tensor const&, c10::basic_string_view<char>)"),
		{Filename: "python_nn_functions.cpp", Name: "torch::autograd::THPVariable_gelu(_object*, _object*, _object*)"}},
	"softmax": {Cpp("at::native::structured_softmax_cuda_out::impl(at::Tensor const&, long, bool, at::Tensor const&)"),
		Cpp("at::_ops::_softmax::call(at::Tensor const&, long, bool)"),
		Cpp("at::native::softmax(at::Tensor const&, long, std::optional<c10::ScalarType>)"),
		{Filename: "python_variable_methods.cpp", Name: "torch::autograd::THPVariable_softmax(_object*, _object*, _object*)"}},
	"add": {Cpp("at::native::structured_add_out::impl(at::Tensor const&, at::Tensor const&, c10::Scalar const&, at::Tensor const&)"),
		Cpp("at::_ops::add_Tensor::call(at::Tensor const&, at::Tensor const&, c10::Scalar const&)"),
		{Filename: "python_variable_methods.cpp", Name: "torch::autograd::TypeError_to_NotImplemented_<&torch::autograd::THPVariable_add>(_object*, _object*, _object*)"}},
	"cross_entropy": {Cpp("at::native::log_softmax_cuda_out(at::Tensor const&, long, bool, at::Tensor const&)"),
		Cpp("at::_ops::_log_softmax::call(at::Tensor const&, long, bool)"),
		Cpp("at::native::cross_entropy_loss_symint(at::Tensor const&, at::Tensor const&, std::optional<at::Tensor> const&, long, c10::SymInt, double)"),
		{Filename: "python_nn_functions.cpp", Name: "torch::autograd::THPVariable_cross_entropy_loss(_object*, _object*, _object*)"}},
	"detach_clone": {Cpp("at::native::clone(at::Tensor const&, std::optional<c10::MemoryFormat>)"),
		Cpp("at::_ops::clone::call(at::Tensor const&, std::optional<c10::MemoryFormat>)"),
		{Filename: "python_variable_methods.cpp", Name: "torch::autograd::THPVariable_clone(_object*, _object*, _object*)"}},
	"to": {Cpp("at::native::_to_copy(at::Tensor const&, std::optional<c10::ScalarType>, std::optional<c10::Layout>, std::optional<c10::Device>, std::optional<bool>, bool, std::optional<c10::MemoryFormat>)"),
		Cpp("at::_ops::_to_copy::call(at::Tensor const&, std::optional<c10::ScalarType>, std::optional<c10::Layout>, std::optional<c10::Device>, std::optional<bool>, bool, std::optional<c10::MemoryFormat>)"),
		{Filename: "python_variable_methods.cpp", Name: "torch::autograd::THPVariable_to(_object*, _object*, _object*)"}},
	"foreach": {Cpp("at::native::foreach_tensor_add_scalar_kernel_cuda(c10::ArrayRef<at::Tensor>, c10::Scalar const&)"),
		Cpp("at::_ops::_foreach_add_Scalar::call(c10::ArrayRef<at::Tensor>, c10::Scalar const&)"),
		{Filename: "python_torch_functions_2.cpp", Name: "torch::autograd::THPVariable__foreach_add(_object*, _object*, _object*)"}},
}

// interpreterTail are the native frames below the outermost Python frame.
var interpreterTail = []snapshot.Frame{
	{Filename: "/usr/local/src/conda/python-3.11.9/Python/ceval.c", Line: 5740, Name: "_PyEval_EvalFrameDefault"},
	{Filename: "/usr/local/src/conda/python-3.11.9/Python/pythonrun.c", Line: 1741, Name: "run_mod"},
	{Filename: "/usr/local/src/conda/python-3.11.9/Modules/main.c", Line: 763, Name: "Py_BytesMain"},
	Cpp("__libc_start_main"),
	Cpp("_start"),
}

// autogradTail are the native frames of the autograd engine's worker thread.
var autogradTail = []snapshot.Frame{
	Cpp("torch::autograd::Engine::evaluate_function(std::shared_ptr<torch::autograd::GraphTask>&, torch::autograd::Node*, torch::autograd::InputBuffer&, std::shared_ptr<torch::autograd::ReadyQueue> const&)"),
	Cpp("torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)"),
	Cpp("torch::autograd::Engine::thread_init(int, std::shared_ptr<torch::autograd::ReadyQueue> const&, bool)"),
	Cpp("torch::autograd::python::PythonEngine::thread_init(int, std::shared_ptr<torch::autograd::ReadyQueue> const&, bool)"),
	Cpp("execute_native_thread_routine"),
	Cpp("start_thread"),
	Cpp("clone"),
}

// Op returns the stack of an allocation made by ATen operator op ("empty", "randn",
// "zeros_like", "linear", "gelu", "softmax", "add", "cross_entropy", "detach_clone", "to",
// "foreach"; anything else gets only the allocator frames) called from Python frames python
// (innermost first).
func Op(op string, python ...snapshot.Frame) Stack {
	return Stack{Native: Chain(allocChain, opFrames[op]), Python: python}
}

// Backward returns the stack of an allocation made by the autograd engine while running the
// backward of node (e.g. "AddmmBackward0"): native frames only, no Python frames.
func Backward(node string) Stack {
	return Stack{Native: Chain(allocChain,
		[]snapshot.Frame{Cpp("torch::autograd::generated::" + node + "::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)")},
		autogradTail)}
}

// FreeAt returns the stack of a free caused by Python code python (a tensor's last reference
// dropped there), innermost first.
func FreeAt(python ...snapshot.Frame) Stack {
	return Stack{Native: freeChain, Python: python}
}

// BackwardFree returns the stack of a free done by the autograd engine (saved tensors released
// after their backward node ran): native frames only.
func BackwardFree(node string) Stack {
	return Stack{Native: Chain(freeChain,
		[]snapshot.Frame{Cpp("torch::autograd::generated::" + node + "::release_variables()")},
		autogradTail)}
}

// frames renders the stack for the given Stacks mode ("all" or "python").
func (st Stack) frames(mode string) []snapshot.Frame {
	if mode == "python" {
		return st.Python
	}
	out := Chain(st.Native, st.Python)
	if len(st.Python) > 0 {
		out = append(out, interpreterTail...)
	}
	return out
}
