package analysis

// The frameworks a file shows, each with the frame that proves it, and the framework rules
// that need the whole file rather than one stack.

import (
	"slices"
	"strings"
	"sync"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// Framework is one framework the file's frames show, with the first frame that proves it.
type Framework struct {
	Name     string `json:"name"`
	Evidence string `json:"evidence"`
}

// frameworkMarkers: a path fragment of each framework's own source, in report order.
var frameworkMarkers = []struct{ name, frag string }{
	{"Lightning", "/lightning/pytorch/"},
	{"Lightning", "/pytorch_lightning/"},
	{"Lightning Fabric", "/lightning/fabric/"},
	{"HF Trainer", "/transformers/trainer.py"},
	{"Accelerate", "/accelerate/"},
	{"FSDP2", "torch/distributed/fsdp/_fully_shard/"},
	{"FSDP1", "torch/distributed/fsdp/fully_sharded_data_parallel.py"},
	{"FSDP1", "torch/distributed/fsdp/_flat_param.py"},
	{"DDP", "torch/nn/parallel/distributed.py"},
	{"DDP", "distributed/c10d/reducer.cpp"}, // DDP's C++ Reducer (gradient buckets)
	{"DataParallel", "torch/nn/parallel/data_parallel.py"},
	{"DeepSpeed", "/deepspeed/"},
	{"Megatron", "/megatron/core/"},
	{"vLLM", "/vllm/"},
	{"SGLang", "/sglang/"},
	{"PyG", "/torch_geometric/"},
	{"torch.compile", "torch/_dynamo/"},
	{"torch.compile", "torchinductor_"},
}

// Frameworks lists the frameworks the file's frames show (one entry per name, in the order of
// frameworkMarkers), each with the first frame that proves it.
func (r *Roles) Frameworks() []Framework {
	r.fwOnce.Do(func() {
		r.frameworks = []Framework{}
		found := map[string]string{}
		infos := r.attrs.frames.infos
		for i := range infos {
			p := infos[i].t.p
			for _, m := range frameworkMarkers {
				if _, ok := found[m.name]; !ok && strings.Contains(p, m.frag) {
					found[m.name] = infos[i].str
				}
			}
		}
		for _, m := range frameworkMarkers {
			if ev, ok := found[m.name]; ok && !slices.ContainsFunc(r.frameworks, func(f Framework) bool { return f.Name == m.name }) {
				r.frameworks = append(r.frameworks, Framework{Name: m.name, Evidence: ev})
			}
		}
	})
	return r.frameworks
}

// megatronBuffer tells Megatron's two contiguous buffers apart. _ParamAndGradBuffer.__init__
// (megatron/core/distributed/param_and_grad_buffer.py) allocates self.param_data, only with
// the distributed optimizer, and then self.grad_data (torch.zeros(self.numel, dtype=
// self.grad_dtype, …)): in any version the gradient buffer is the later line of the two, and
// the only one without the distributed optimizer. gradLine is that line (0: no such frame).
type megatronBuffer struct {
	once     sync.Once
	gradLine int64
	lines    int
}

// megatronBufferLine is the line of the frame of megatron's buffer constructor on stack id,
// and the line of its gradient buffer in the file; ok is false when the stack has none.
func (r *Roles) megatronBufferLine(id snapshot.StackID) (line, gradLine int64, ok bool) {
	r.megatron.once.Do(func() {
		var lines []int64
		for i := range r.attrs.frames.infos {
			f := &r.attrs.frames.infos[i]
			if megatronBufferFrame(f) && !slices.Contains(lines, f.f.Line) {
				lines = append(lines, f.f.Line)
			}
		}
		r.megatron.lines = len(lines)
		if len(lines) > 0 {
			r.megatron.gradLine = slices.Max(lines)
		}
	})
	if r.megatron.lines == 0 {
		return 0, 0, false
	}
	for _, f := range r.attrs.frames.stackInfos(r.snap, id) {
		if megatronBufferFrame(f) {
			return f.f.Line, r.megatron.gradLine, true
		}
	}
	return 0, 0, false
}

func megatronBufferFrame(f *frameInfo) bool {
	return strings.HasSuffix(f.t.p, "/megatron/core/distributed/param_and_grad_buffer.py") && (f.t.n == "__init__" || strings.Contains(f.t.n, "allocate"))
}
