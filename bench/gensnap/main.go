// Command gensnap writes a large, deterministic, snapshot-shaped pickle for loader benchmarks:
// by default ~1.5M trace events with C++/torch/user frames on every event, a few thousand
// distinct stacks shared through the memo, one frames list per captured traceback (an alloc
// event and its live block share one), ~2k segments and ~100k blocks that obey the allocator's
// invariants. The file is streamed to disk.
//
// -shape memsnap (the default) writes it through memsnap's own pickle writer; -shape real
// writes it as CPython's pickle writes a PyTorch dump of -version 2.0 to 2.10 (real.go: a new
// object per event where PyTorch makes one, which is what real files cost to read), with
// -frames mixed (C++ and Python frames) or python (Python frames only, most tracebacks empty,
// as on Windows).
//
//	go run ./bench/gensnap -o /tmp/big.pickle
//	go run ./bench/gensnap -shape real -version 2.10 -frames python -o /tmp/real.pickle
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"

	"github.com/memsnap/memsnap/analysis/pickle/writer"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

type params struct {
	events, segments, blocks, stacks int
	depth                            int // mean frames per stack
	seed                             uint64
	protocol                         int
	shape, version, stackKind        string
}

func main() {
	var p params
	out := flag.String("o", "", "output file (required)")
	flag.IntVar(&p.events, "events", 1_600_000, "minimum number of trace events")
	flag.IntVar(&p.segments, "segments", 2000, "number of segments")
	flag.IntVar(&p.blocks, "blocks", 100_000, "number of blocks (about)")
	flag.IntVar(&p.stacks, "stacks", 3000, "number of distinct stacks")
	flag.Uint64Var(&p.seed, "seed", 1, "random seed")
	flag.IntVar(&p.protocol, "protocol", 4, "pickle protocol (-shape memsnap)")
	flag.IntVar(&p.depth, "depth", 40, "mean frames per stack (half to one and a half times it)")
	flag.StringVar(&p.shape, "shape", "memsnap", "memsnap (memsnap's own writer) or real (CPython's, as PyTorch's dumps)")
	flag.StringVar(&p.version, "version", "2.10", "the PyTorch version whose keys -shape real writes (2.0 to 2.10)")
	flag.StringVar(&p.stackKind, "frames", "mixed", "-shape real: mixed (C++ and Python frames) or python (Python frames only)")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "gensnap: -o FILE is required")
		os.Exit(2)
	}
	if err := run(*out, p); err != nil {
		fmt.Fprintln(os.Stderr, "gensnap:", err)
		os.Exit(1)
	}
}

func run(path string, p params) error {
	var v version
	switch p.shape {
	case "memsnap":
	case "real":
		var err error
		if v, err = parseVersion(p.version); err != nil {
			return err
		}
		if p.stackKind != "mixed" && p.stackKind != "python" {
			return fmt.Errorf("-frames %q: want mixed or python", p.stackKind)
		}
	default:
		return fmt.Errorf("-shape %q: want memsnap or real", p.shape)
	}
	snap := generate(p)
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create output: %w", err)
	}
	bw := bufio.NewWriterSize(f, 4<<20)
	if p.shape == "real" {
		err = newRealWriter(writer.NewWriter(bw, writer.Config{Protocol: 4}), snap, v, p.stackKind == "python").write()
	} else {
		err = writer.EncodeTo(context.Background(), bw, snap, writer.Options{Protocol: p.protocol, ListPerTraceback: true})
	}
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("stat output: %w", err)
	}
	n := 0
	for _, evs := range snap.DeviceTraces {
		n += len(evs)
	}
	nb := 0
	for _, s := range snap.Segments {
		nb += len(s.Blocks)
	}
	fmt.Fprintf(os.Stderr, "gensnap: wrote %s: %d bytes, %d events, %d segments, %d blocks, %d stacks, %d frames\n",
		path, st.Size(), n, len(snap.Segments), nb, len(snap.Stacks)-1, len(snap.Frames))
	return nil
}

// frame pools -----------------------------------------------------------------------------

var allocatorHead = []snapshot.Frame{
	{Filename: "??", Name: "torch::unwind::unwind()"},
	{Filename: "??", Name: "torch::CapturedTraceback::gather(bool, bool, bool)"},
	{Filename: "memory_snapshot.cpp", Name: "torch::cuda::(anonymous namespace)::gather_with_cpp()"},
	{Filename: "CUDACachingAllocator.cpp", Name: "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)"},
	{Filename: "", Name: "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::malloc(void**, signed char, unsigned long, CUstream_st*)"},
	{Filename: "", Name: "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)"},
}

var freeHead = []snapshot.Frame{
	{Filename: "??", Name: "torch::unwind::unwind()"},
	{Filename: "??", Name: "torch::CapturedTraceback::gather(bool, bool, bool)"},
	{Filename: "memory_snapshot.cpp", Name: "torch::cuda::(anonymous namespace)::gather_with_cpp()"},
	{Filename: "CUDACachingAllocator.cpp", Name: "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::free(c10::cuda::CUDACachingAllocator::Native::Block*)"},
	{Filename: "", Name: "c10::cuda::CUDACachingAllocator::Native::local_raw_delete(void*)"},
	{Filename: "??", Name: "c10::StorageImpl::~StorageImpl()"},
}

var ops = []string{"add", "mul", "matmul", "bmm", "addmm", "softmax", "layer_norm", "gelu", "cat", "empty",
	"zeros_like", "to_copy", "index_select", "embedding", "scaled_dot_product_attention", "dropout", "sum", "mean",
	"native_layer_norm_backward", "mm_backward", "clone", "contiguous", "transpose", "view", "baddbmm"}

var modules = []string{"nn/modules/module.py", "nn/modules/linear.py", "nn/modules/normalization.py",
	"nn/modules/activation.py", "nn/modules/sparse.py", "nn/functional.py", "autograd/graph.py",
	"_tensor.py", "optim/adamw.py", "optim/optimizer.py", "utils/checkpoint.py", "_dynamo/eval_frame.py"}

var torchNames = []string{"_call_impl", "_wrapped_call_impl", "forward", "linear", "layer_norm", "gelu",
	"scaled_dot_product_attention", "_engine_run_backward", "backward", "step", "_single_tensor_adamw",
	"checkpoint", "_fn", "wrapper"}

var userFiles = []string{"/home/alice/project/model.py", "/home/alice/project/layers/attention.py",
	"/home/alice/project/layers/mlp.py", "/home/alice/project/data.py", "/home/alice/project/train.py"}

var userNames = []string{"forward", "attention", "mlp", "block_forward", "embed", "compute_loss", "train_step",
	"run_epoch", "main", "collate", "<lambda>", "apply_rotary", "project_qkv"}

type gen struct {
	depth int
	r     *rand.Rand
	in    *snapshot.Interner
	cpp   []snapshot.FrameID
	torch []snapshot.FrameID
	user  []snapshot.FrameID
	head  []snapshot.FrameID
	fhead []snapshot.FrameID
	root  []snapshot.FrameID
}

func (g *gen) pools() {
	for _, f := range allocatorHead {
		g.head = append(g.head, g.in.Frame(f))
	}
	for _, f := range freeHead {
		g.fhead = append(g.fhead, g.in.Frame(f))
	}
	files := []string{"??", "", "Loops.cuh", "Blas.cpp", "RegisterCUDA.cpp", "Operators_2.cpp", "VariableType_3.cpp", "libtorch_cuda.so"}
	for i := range 400 {
		op := ops[i%len(ops)]
		var name string
		switch i % 5 {
		case 0:
			name = fmt.Sprintf("at::native::%s_out_cuda_impl_%d(at::Tensor const&, at::Tensor const&, c10::Scalar const&)", op, i)
		case 1:
			name = fmt.Sprintf("at::_ops::%s::call(at::Tensor const&, at::Tensor const&)", op)
		case 2:
			name = fmt.Sprintf("at::(anonymous namespace)::wrapper_CUDA_%s_%d(at::Tensor const&)", op, i)
		case 3:
			name = fmt.Sprintf("torch::autograd::VariableType::(anonymous namespace)::%s_%d(c10::DispatchKeySet, at::Tensor const&)", op, i)
		default:
			name = fmt.Sprintf("c10::impl::wrap_kernel_functor_unboxed_<c10::impl::detail::WrapFunctionIntoFunctor_<c10::CompileTimeFunctionPointer<at::Tensor (at::Tensor const&), &at::%s_%d>, at::Tensor, c10::guts::typelist::typelist<at::Tensor const&> >, at::Tensor (at::Tensor const&)>::call(c10::OperatorKernel*, c10::DispatchKeySet, at::Tensor const&)", op, i)
		}
		g.cpp = append(g.cpp, g.in.Frame(snapshot.Frame{Filename: files[i%len(files)], Name: name}))
	}
	for i := range 300 {
		mod := modules[i%len(modules)]
		g.torch = append(g.torch, g.in.Frame(snapshot.Frame{
			Filename: "/opt/conda/lib/python3.11/site-packages/torch/" + mod,
			Line:     int64(100 + (i*37)%1700),
			Name:     torchNames[(i*7)%len(torchNames)],
		}))
	}
	for i := range 250 {
		g.user = append(g.user, g.in.Frame(snapshot.Frame{
			Filename: userFiles[i%len(userFiles)],
			Line:     int64(10 + (i*13)%600),
			Name:     userNames[(i*5)%len(userNames)],
		}))
	}
	g.root = []snapshot.FrameID{
		g.in.Frame(snapshot.Frame{Filename: "/home/alice/project/train.py", Line: 412, Name: "main"}),
		g.in.Frame(snapshot.Frame{Filename: "/home/alice/project/train.py", Line: 431, Name: "<module>"}),
	}
}

func (g *gen) pick(pool []snapshot.FrameID, n int) []snapshot.FrameID {
	out := make([]snapshot.FrameID, n)
	start := g.r.IntN(len(pool))
	for i := range out {
		// mostly contiguous runs (call chains recur), sometimes a jump
		if g.r.IntN(4) == 0 {
			start = g.r.IntN(len(pool))
		}
		out[i] = pool[(start+i)%len(pool)]
	}
	return out
}

// stack builds one 20–60 frame stack, innermost first.
func (g *gen) stack(free bool) snapshot.StackID {
	ids := append([]snapshot.FrameID{}, g.head...)
	if free {
		ids = append(ids[:0], g.fhead...)
	}
	total := g.depth/2 + g.r.IntN(g.depth+1)
	rest := total - len(ids) - len(g.root)
	nCpp := rest * (3 + g.r.IntN(4)) / 10
	nTorch := (rest - nCpp) / 2
	nUser := rest - nCpp - nTorch
	ids = append(ids, g.pick(g.cpp, nCpp)...)
	ids = append(ids, g.pick(g.torch, nTorch)...)
	ids = append(ids, g.pick(g.user, nUser)...)
	ids = append(ids, g.root...)
	return g.in.Stack(ids)
}

// slot is one block position in a segment.
type slot struct {
	seg       int
	addr      uint64
	size      int64
	requested int64
	allocated bool
	pending   bool // free requested, not completed
	stack     snapshot.StackID
}

func generate(p params) *snapshot.Snapshot {
	g := &gen{depth: max(p.depth, 12), r: rand.New(rand.NewPCG(p.seed, p.seed^0x9e3779b97f4a7c15)), in: snapshot.NewInterner()}
	g.pools()
	allocStacks := make([]snapshot.StackID, 0, p.stacks)
	freeStacks := make([]snapshot.StackID, 0, p.stacks/3+1)
	for range p.stacks {
		allocStacks = append(allocStacks, g.stack(false))
	}
	for range p.stacks / 3 {
		freeStacks = append(freeStacks, g.stack(true))
	}
	// skewed choice: a few sites allocate most
	pickStack := func(pool []snapshot.StackID) snapshot.StackID {
		x := g.r.Float64()
		return pool[int(x*x*x*float64(len(pool)))]
	}

	// segments and block slots
	perSeg := max(1, p.blocks/max(1, p.segments))
	segs := make([]snapshot.Segment, p.segments)
	var slots []slot
	addr := uint64(0x7f0000000000)
	for si := range segs {
		large := g.r.IntN(5) < 2
		total := int64(2 << 20)
		typ := "small"
		if large {
			total, typ = 20<<20, "large"
			if g.r.IntN(4) == 0 {
				total = int64(64+g.r.IntN(448)) << 20
			}
		}
		n := perSeg/2 + g.r.IntN(perSeg+1)
		units := total / 512
		if int64(n) > units {
			n = int(units)
		}
		// n-1 distinct cut points on the 512-byte grid
		cuts := map[int64]bool{}
		for len(cuts) < n-1 {
			cuts[1+g.r.Int64N(units-1)] = true
		}
		points := make([]int64, 0, n+1)
		points = append(points, 0)
		for c := range cuts {
			points = append(points, c)
		}
		points = append(points, units)
		slices.Sort(points)
		var stream uint64
		if g.r.IntN(10) == 0 {
			stream = 94_000_000_000_000 + uint64(g.r.IntN(3))*16
		}
		segs[si] = snapshot.Segment{Device: 0, Address: addr, TotalSize: total, Stream: stream, SegmentType: typ,
			Stack: snapshot.EmptyStack}
		for i := 0; i+1 < len(points); i++ {
			size := (points[i+1] - points[i]) * 512
			slots = append(slots, slot{seg: si, addr: addr + uint64(points[i]*512), size: size,
				requested: size - int64(g.r.IntN(512))})
		}
		addr += uint64(total) + uint64(g.r.IntN(8))<<21
	}

	// trace: allocs and frees on the slots; a segment_alloc right before a segment's first alloc
	mapped := make([]bool, len(segs))
	evs := make([]snapshot.Event, 0, p.events+3*len(slots)+16)
	t := int64(1_772_688_692_000_000)
	tick := func() int64 { t += 1 + g.r.Int64N(40); return t }
	alloc := func(s *slot) {
		st := pickStack(allocStacks)
		if !mapped[s.seg] {
			mapped[s.seg] = true
			sg := &segs[s.seg]
			sg.Stack = st
			evs = append(evs, snapshot.Event{Action: snapshot.ActionSegmentAlloc, Addr: sg.Address, Size: sg.TotalSize,
				Stream: sg.Stream, TimeUS: tick(), Stack: st})
		}
		s.allocated, s.stack = true, st
		evs = append(evs, snapshot.Event{Action: snapshot.ActionAlloc, Addr: s.addr, Size: s.size,
			Stream: segs[s.seg].Stream, TimeUS: tick(), Stack: st})
	}
	free := func(s *slot, complete bool) {
		st := pickStack(freeStacks)
		stream := segs[s.seg].Stream
		evs = append(evs, snapshot.Event{Action: snapshot.ActionFreeRequested, Addr: s.addr, Size: s.size,
			Stream: stream, TimeUS: tick(), Stack: st})
		if complete {
			evs = append(evs, snapshot.Event{Action: snapshot.ActionFreeCompleted, Addr: s.addr, Size: s.size,
				Stream: stream, TimeUS: tick(), Stack: st})
			s.allocated = false
		}
	}
	// churn on a working set of slots so allocs and frees pair up
	for len(evs) < p.events {
		s := &slots[g.r.IntN(len(slots))]
		if s.allocated {
			free(s, true)
		} else {
			alloc(s)
		}
	}
	// final states: 60% allocated, 5% pending free, 35% inactive
	for i := range slots {
		s := &slots[i]
		want := g.r.IntN(100)
		switch {
		case want < 60:
			if !s.allocated {
				alloc(s)
			}
		case want < 65:
			if !s.allocated {
				alloc(s)
			}
			free(s, false)
			s.pending = true
		default:
			if s.allocated {
				free(s, true)
			}
		}
	}
	evs = append(evs, snapshot.Event{Action: snapshot.ActionOOM, Size: 8 << 30,
		TimeUS: tick(), Stack: pickStack(allocStacks)}.WithDeviceFree(1<<28))

	// blocks from the slots
	for i := range slots {
		s := &slots[i]
		b := snapshot.Block{Address: s.addr, Size: s.size, State: snapshot.StateInactive, Stack: snapshot.EmptyStack}
		switch {
		case s.pending:
			b.State, b.Stack, b.RequestedSize = snapshot.StateActivePendingFree, s.stack, s.requested
		case s.allocated:
			b.State, b.Stack, b.RequestedSize = snapshot.StateActiveAllocated, s.stack, s.requested
		}
		sg := &segs[s.seg]
		sg.Blocks = append(sg.Blocks, b)
		if b.State != snapshot.StateInactive {
			sg.ActiveSize += b.Size
		}
		if b.State == snapshot.StateActiveAllocated {
			sg.AllocatedSize += b.Size
			sg.RequestedSize += b.RequestedSize
		}
	}
	var anns []snapshot.Annotation
	for i := 0; i < len(evs); i += 50_000 {
		anns = append(anns,
			snapshot.Annotation{Name: fmt.Sprintf("ProfilerStep#%d", i/50_000), Stage: "START", Device: 0, TimeUS: evs[i].TimeUS},
			snapshot.Annotation{Name: fmt.Sprintf("ProfilerStep#%d", i/50_000), Stage: "END", Device: 0, TimeUS: evs[min(i+49_999, len(evs)-1)].TimeUS})
	}
	return &snapshot.Snapshot{
		Frames:       g.in.Frames,
		Stacks:       g.in.Stacks,
		Segments:     segs,
		DeviceTraces: [][]snapshot.Event{evs, {}, {}, {}},
		Annotations:  anns,
		Settings: snapshot.AllocatorSettings{Present: true, MaxSplitSize: -1, Raw: map[string]any{
			"pinned_num_register_threads":   int64(1),
			"release_lock_on_cudamalloc":    false,
			"pinned_use_cuda_host_register": false,
			"roundup_power2_divisions":      map[string]any{"1": int64(0), "2": int64(0), "4": int64(0), "8": int64(0)},
		}},
	}
}
