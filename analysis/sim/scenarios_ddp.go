package sim

import (
	"fmt"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

var (
	ddpPy       = TorchDir + "/nn/parallel/distributed.py"
	fsdpPy      = TorchDir + "/distributed/fsdp/fully_sharded_data_parallel.py"
	flatParamPy = TorchDir + "/distributed/fsdp/_flat_param.py"
	fsdpRtPy    = TorchDir + "/distributed/fsdp/_runtime_utils.py"
)

// Per-rank ground truth of DDPRanks (each rank holds all of it).
const (
	DDPParamBytes     = 24 * MiB // 5 tensors: 4 × 4 MiB (fc weights) + 8 MiB (head), train.py:112
	DDPBucketBytes    = 24 * MiB // 2 gradient buckets (8 MiB, 16 MiB) allocated by DDP's Reducer, train.py:113
	DDPGradBytes      = 24 * MiB // 5 .grad tensors (AccumulateGrad), live after backward
	DDPOptimizerBytes = 48 * MiB // AdamW exp_avg + exp_avg_sq: 10 tensors, train.py:91
	DDPBatchBytes     = 512 * 1024
)

var ddpParamSizes = []int64{4 * MiB, 4 * MiB, 4 * MiB, 4 * MiB, 8 * MiB}

// accumulateGrad is the stack of a .grad allocated by the autograd engine's AccumulateGrad node.
func accumulateGrad() Stack {
	return Stack{Native: Chain(allocChain,
		[]snapshot.Frame{Cpp("torch::autograd::AccumulateGrad::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)")},
		autogradTail)}
}

func moveToDevice() Stack {
	return Op("to", Chain([]snapshot.Frame{
		Py(modulePy, 1329, "convert"), Py(modulePy, 928, "_apply"), Py(modulePy, 901, "_apply"),
		Py(modulePy, 1343, "to")}, []snapshot.Frame{Py(TrainPy, 112, "main"), Py(TrainPy, 131, "<module>")})...)
}

func adamState(line int64) Stack {
	outer := Chain([]snapshot.Frame{Py(adamwPy, 209, "step"), Py(optimizerPy, 79, "_use_grad"), Py(optimizerPy, 487, "wrapper")}, stepAt(91))
	return Op("zeros_like", Chain([]snapshot.Frame{Py(adamwPy, line, "_init_group")}, outer)...)
}

// dataParallelRank runs two steps of a data-parallel loop on one rank and snapshots after the
// second opt.step(), before zero_grad (so the gradients are live). Without fsdp every rank holds
// everything (DDP); with it each rank holds 1/n of parameters, gradients and optimizer state.
func dataParallelRank(rank, n int, fsdp bool) *snapshot.Snapshot {
	s := New(Config{Device: rank, NumDevices: n, BaseAddr: DefaultBase + uint64(rank)<<36})
	must := func(a uint64, err error) uint64 {
		if err != nil {
			panic(fmt.Sprintf("sim scenario: %v", err))
		}
		return a
	}
	shard := func(b int64) int64 {
		if fsdp {
			return b / int64(n)
		}
		return b
	}
	if fsdp {
		// FullyShardedDataParallel(model): one FlatParameter shard per rank.
		st := Op("empty", Py(flatParamPy, 751, "flatten_tensors_into_flat_param"), Py(flatParamPy, 612, "_init_flat_param_and_metadata"),
			Py(flatParamPy, 566, "__init__"), Py(fsdpPy, 483, "__init__"), Py(TrainPy, 113, "main"), Py(TrainPy, 131, "<module>"))
		must(s.Alloc(shard(DDPParamBytes), 0, st))
	} else {
		for _, p := range ddpParamSizes {
			must(s.Alloc(p, 0, moveToDevice()))
		}
		// DistributedDataParallel(model): the Reducer allocates the gradient buckets.
		bucket := Stack{Native: Chain(allocChain, []snapshot.Frame{
			Cpp("c10d::Reducer::initialize_buckets(std::vector<std::vector<unsigned long, std::allocator<unsigned long> >, std::allocator<std::vector<unsigned long, std::allocator<unsigned long> > > >)"),
			Cpp("c10d::Reducer::Reducer(std::vector<at::Tensor, std::allocator<at::Tensor> >, std::vector<std::vector<unsigned long, std::allocator<unsigned long> >, std::allocator<std::vector<unsigned long, std::allocator<unsigned long> > > >, c10::intrusive_ptr<c10d::ProcessGroup>)")}),
			Python: []snapshot.Frame{Py(ddpPy, 1190, "_ddp_init_helper"), Py(ddpPy, 877, "__init__"), Py(TrainPy, 113, "main"), Py(TrainPy, 131, "<module>")}}
		must(s.Alloc(8*MiB, 0, bucket))
		must(s.Alloc(16*MiB, 0, bucket))
	}
	must(s.Alloc(DDPBatchBytes, 0, Op("randn", Py(TrainPy, 115, "main"), Py(TrainPy, 131, "<module>"))))
	var grads, state []uint64
	for step := 1; step <= 2; step++ {
		act := must(s.Alloc(8*MiB, 0, linearIn(inBlock(41))))
		if err := s.Free(act, BackwardFree("GeluBackward0")); err != nil {
			panic(err)
		}
		if fsdp {
			st := Op("empty", Py(fsdpRtPy, 1120, "_reduce_grad"), Py(fsdpRtPy, 1012, "_post_backward_hook"))
			grads = append(grads, must(s.Alloc(shard(DDPGradBytes), 0, st)))
		} else {
			for _, p := range ddpParamSizes {
				grads = append(grads, must(s.Alloc(p, 0, accumulateGrad())))
			}
		}
		if state == nil {
			if fsdp {
				state = append(state, must(s.Alloc(shard(DDPParamBytes), 0, adamState(113))), must(s.Alloc(shard(DDPParamBytes), 0, adamState(116))))
			} else {
				for _, p := range ddpParamSizes {
					state = append(state, must(s.Alloc(p, 0, adamState(113))), must(s.Alloc(p, 0, adamState(116))))
				}
			}
		}
		if step == 2 {
			break
		}
		for _, g := range grads { // opt.zero_grad()
			if err := s.Free(g, FreeAt(Chain([]snapshot.Frame{Py(optimizerPy, 987, "zero_grad")}, stepAt(92))...)); err != nil {
				panic(err)
			}
		}
		grads = nil
		s.Advance(StepUS)
	}
	return s.Snapshot()
}

// DDPRanks returns n rank snapshots (device = rank) of a DistributedDataParallel loop taken
// after the second opt.step(), before zero_grad. Ground truth, identical on every rank:
// parameters DDPParamBytes (5 blocks, module.to frames), DDP gradient buckets DDPBucketBytes
// (2 blocks, torch/nn/parallel/distributed.py and c10d::Reducer frames), gradients
// DDPGradBytes (5 blocks, AccumulateGrad frames), AdamW state DDPOptimizerBytes (10 blocks,
// torch/optim/adamw.py) and the batch (512 KiB); no FSDP or ZeRO frame anywhere. Full
// sharding over n ranks would save (n-1)/n of parameters, gradients and optimizer state per rank.
func DDPRanks(n int) []*snapshot.Snapshot {
	out := make([]*snapshot.Snapshot, n)
	for r := range out {
		out[r] = dataParallelRank(r, n, false)
	}
	return out
}

// FSDPRanks is DDPRanks with FullyShardedDataParallel: each rank holds one FlatParameter shard
// (DDPParamBytes/n, torch/distributed/fsdp/_flat_param.py frames), a gradient shard
// (DDPGradBytes/n, FSDP's _reduce_grad) and AdamW state for its shard (2 blocks of
// DDPParamBytes/n); no DDP buckets.
func FSDPRanks(n int) []*snapshot.Snapshot {
	out := make([]*snapshot.Snapshot, n)
	for r := range out {
		out[r] = dataParallelRank(r, n, true)
	}
	return out
}
