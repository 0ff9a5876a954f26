package sim

import (
	"fmt"
	"strings"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// Paths of the simulated user program.
const (
	ProjDir = "/workspace/proj"
	TrainPy = ProjDir + "/train.py"
	ModelPy = ProjDir + "/model.py"
	// SideStream is the raw cudaStream_t of the simulated side (prefetch/communication) stream.
	SideStream uint64 = 94_613_442_304_016
	// StepUS is the simulated wall time of one training step.
	StepUS = 85_000
)

var (
	linearPy     = TorchDir + "/nn/modules/linear.py"
	modulePy     = TorchDir + "/nn/modules/module.py"
	functionalPy = TorchDir + "/nn/functional.py"
	adamwPy      = TorchDir + "/optim/adamw.py"
	optimizerPy  = TorchDir + "/optim/optimizer.py"
)

// mainFrames are the outermost user frames: train.py main() called from the module body.
func mainFrames() []snapshot.Frame {
	return []snapshot.Frame{Py(TrainPy, 120, "main"), Py(TrainPy, 131, "<module>")}
}

// stepAt is train.py:line inside train_step, then main.
func stepAt(line int64) []snapshot.Frame {
	return Chain([]snapshot.Frame{Py(TrainPy, line, "train_step")}, mainFrames())
}

// inBlock is Block.forward at model.py:line, called from Model.forward (model.py:57
// `x = blk(x)`), called from train.py:88 `logits = model(x)`.
func inBlock(line int64) []snapshot.Frame {
	return Chain([]snapshot.Frame{Py(ModelPy, line, "forward")}, ModuleCall(),
		[]snapshot.Frame{Py(ModelPy, 57, "forward")}, ModuleCall(), stepAt(88))
}

// inModel is Model.forward at model.py:line, called from train.py:88.
func inModel(line int64) []snapshot.Frame {
	return Chain([]snapshot.Frame{Py(ModelPy, line, "forward")}, ModuleCall(), stepAt(88))
}

// linearIn is an nn.Linear call made from the given Python frames.
func linearIn(outer []snapshot.Frame) Stack {
	return Op("linear", Chain([]snapshot.Frame{Py(linearPy, 125, "forward")}, ModuleCall(), outer)...)
}

// Site names a user allocation site the way ground truth is stated: "file:line function".
func Site(path string, line int64, fn string) string { return fmt.Sprintf("%s:%d %s", path, line, fn) }

// Ground-truth sites of the training-loop scenarios (innermost user frame of each stack).
var (
	SiteFC1      = Site(ModelPy, 41, "forward") // h = self.fc1(x)         (linear, saved for backward)
	SiteGELU     = Site(ModelPy, 42, "forward") // h = F.gelu(h)           (saved for backward)
	SiteFC2      = Site(ModelPy, 43, "forward") // out = self.fc2(h)       (freed at block return)
	SiteResidual = Site(ModelPy, 44, "forward") // return x + out          (saved by the next linear)
	SiteHead     = Site(ModelPy, 58, "forward") // logits = self.head(x)
	SiteLoss     = Site(TrainPy, 89, "train_step")
	SiteStep     = Site(TrainPy, 91, "train_step") // opt.step(): AdamW state (torch/optim/adamw.py _init_group)
	SiteHistory  = Site(TrainPy, 97, "train_step") // history.append(logits.detach().clone())
	SiteParams   = Site(TrainPy, 112, "main")      // model = Model(cfg).to(device)
	SiteBatchX   = Site(TrainPy, 115, "main")      // x = torch.randn(..., device=device)
	SiteBatchY   = Site(TrainPy, 116, "main")      // y = torch.empty(..., device=device).random_(V)
)

// dims sizes the simulated model: a residual MLP stack (L blocks of Linear(H,4H), GELU,
// Linear(4H,H), no biases) and a Linear(H,V) head, fp32, N tokens per batch.
type dims struct{ H, N, V, L int64 }

var smallDims = dims{H: 512, N: 256, V: 4096, L: 2}

// trainer drives a training loop through a Sim. All byte counts are requested sizes.
type trainer struct {
	s          *Sim
	d          dims
	stream     uint64
	params     []uint64 // fc1_0, fc2_0, fc1_1, fc2_1, ..., head
	psize      []int64
	grads      []uint64
	state      []uint64 // AdamW exp_avg, exp_avg_sq per param, then fused step tensors
	x, y       uint64
	retain     bool // loss.backward(retain_graph=True) + losses.append(loss)
	history    bool // history.append(logits.detach().clone())
	pinned     []uint64
	saved      []uint64 // tensors saved for backward by the current step
	savedNodes []string
	logits     uint64
	loss       uint64
}

func newTrainer(s *Sim, d dims) *trainer { return &trainer{s: s, d: d} }

func (t *trainer) must(a uint64, err error) uint64 {
	if err != nil {
		panic(fmt.Sprintf("sim scenario: unexpected allocation failure: %v", err)) // scenarios are sized to fit
	}
	return a
}

func (t *trainer) alloc(n int64, st Stack) uint64 { return t.must(t.s.Alloc(n, t.stream, st)) }

func (t *trainer) free(a uint64, st Stack) {
	if err := t.s.Free(a, st); err != nil {
		panic(fmt.Sprintf("sim scenario: %v", err))
	}
}

// setup allocates parameters and the (reused) synthetic batch.
func (t *trainer) setup() {
	d := t.d
	toStack := Op("to", Chain([]snapshot.Frame{
		Py(modulePy, 1329, "convert"), Py(modulePy, 928, "_apply"), Py(modulePy, 901, "_apply"),
		Py(modulePy, 901, "_apply"), Py(modulePy, 1343, "to")}, []snapshot.Frame{Py(TrainPy, 112, "main"), Py(TrainPy, 131, "<module>")})...)
	for i := int64(0); i < d.L; i++ {
		t.psize = append(t.psize, d.H*4*d.H*4, 4*d.H*d.H*4)
	}
	t.psize = append(t.psize, d.V*d.H*4)
	for _, n := range t.psize {
		t.params = append(t.params, t.alloc(n, toStack))
	}
	t.x = t.alloc(d.N*d.H*4, Op("randn", Py(TrainPy, 115, "main"), Py(TrainPy, 131, "<module>")))
	t.y = t.alloc(d.N*8, Op("empty", Py(TrainPy, 116, "main"), Py(TrainPy, 131, "<module>")))
	t.grads = make([]uint64, len(t.params))
}

func (t *trainer) save(a uint64, node string) {
	t.saved = append(t.saved, a)
	t.savedNodes = append(t.savedNodes, node)
}

// forward runs Model.forward and the loss; it fails (returning the error) only when asked to
// run on a device that is too small.
func (t *trainer) forward() error {
	d := t.d
	t.saved, t.savedNodes = nil, nil
	t.save(t.x, "") // the input batch is saved by block 0's fc1 (never freed)
	for i := int64(0); i < d.L; i++ {
		fc1, err := t.s.Alloc(d.N*4*d.H*4, t.stream, linearIn(inBlock(41)))
		if err != nil {
			return err
		}
		t.save(fc1, "GeluBackward0")
		gelu, err := t.s.Alloc(d.N*4*d.H*4, t.stream, Op("gelu", inBlock(42)...))
		if err != nil {
			return err
		}
		t.save(gelu, "MmBackward0")
		fc2, err := t.s.Alloc(d.N*d.H*4, t.stream, linearIn(inBlock(43)))
		if err != nil {
			return err
		}
		res, err := t.s.Alloc(d.N*d.H*4, t.stream, Op("add", inBlock(44)...))
		if err != nil {
			return err
		}
		t.free(fc2, FreeAt(inBlock(44)...))
		t.save(res, "MmBackward0")
	}
	var err error
	if t.logits, err = t.s.Alloc(d.N*d.V*4, t.stream, linearIn(inModel(58))); err != nil {
		return err
	}
	ce := Chain([]snapshot.Frame{Py(functionalPy, 3479, "cross_entropy")}, stepAt(89))
	lsm, err := t.s.Alloc(d.N*d.V*4, t.stream, Op("cross_entropy", ce...))
	if err != nil {
		return err
	}
	t.save(lsm, "NllLossBackward0")
	if t.loss, err = t.s.Alloc(4, t.stream, Op("cross_entropy", ce...)); err != nil {
		return err
	}
	return nil
}

// backward runs loss.backward(): gradient buffers (first time after zero_grad), temporary
// activation gradients, and the release of saved tensors unless the graph is retained.
func (t *trainer) backward() {
	d := t.d
	freeSaved := func(k int) {
		if a := t.saved[k]; a != t.x && !t.retain {
			t.free(a, BackwardFree(t.savedNodes[k]))
		}
	}
	tmp := t.alloc(d.N*d.V*4, Backward("NllLossBackward0"))
	freeSaved(len(t.saved) - 1) // log_softmax output
	nh := len(t.params) - 1
	if t.grads[nh] == 0 {
		t.grads[nh] = t.alloc(t.psize[nh], Backward("MmBackward0"))
	}
	freeSaved(len(t.saved) - 2) // last residual (head input)
	t.free(tmp, BackwardFree("MmBackward0"))
	for i := d.L - 1; i >= 0; i-- {
		g := t.alloc(d.N*4*d.H*4, Backward("GeluBackward0"))
		for _, p := range []int{int(2*i + 1), int(2 * i)} {
			if t.grads[p] == 0 {
				t.grads[p] = t.alloc(t.psize[p], Backward("MmBackward0"))
			}
		}
		base := 1 + 3*int(i) // saved: x, then per block fc1, gelu, res
		freeSaved(base + 1)  // gelu out
		freeSaved(base)      // fc1 out
		if i > 0 {
			freeSaved(base - 1) // previous block's residual (this block's input)
		}
		t.free(g, BackwardFree("GeluBackward0"))
	}
}

// optStep runs the fused AdamW step: state is created lazily on the first step.
func (t *trainer) optStep() {
	if t.state != nil {
		return
	}
	outer := Chain([]snapshot.Frame{Py(adamwPy, 209, "step"), Py(optimizerPy, 79, "_use_grad"), Py(optimizerPy, 487, "wrapper")}, stepAt(91))
	var steps []uint64
	for i, p := range t.params {
		_ = p
		steps = append(steps, t.alloc(4, Op("empty", Chain([]snapshot.Frame{Py(adamwPy, 106, "_init_group")}, outer)...)))
		t.state = append(t.state,
			t.alloc(t.psize[i], Op("zeros_like", Chain([]snapshot.Frame{Py(adamwPy, 113, "_init_group")}, outer)...)),
			t.alloc(t.psize[i], Op("zeros_like", Chain([]snapshot.Frame{Py(adamwPy, 116, "_init_group")}, outer)...)))
	}
	t.state = append(t.state, steps...)
}

// zeroGrad is opt.zero_grad() (set_to_none=True): every gradient is freed.
func (t *trainer) zeroGrad() {
	st := FreeAt(Chain([]snapshot.Frame{Py(optimizerPy, 987, "zero_grad")}, stepAt(92))...)
	for i, g := range t.grads {
		if g != 0 {
			t.free(g, st)
			t.grads[i] = 0
		}
	}
}

// endStep ends train_step: optional history clone, then logits and (unless kept in losses)
// the loss are released when the function returns.
func (t *trainer) endStep() {
	if t.history {
		t.pinned = append(t.pinned, t.alloc(t.d.N*t.d.V*4, Op("detach_clone", stepAt(97)...)))
	}
	ret := FreeAt(Py(TrainPy, 121, "main"), Py(TrainPy, 131, "<module>"))
	t.free(t.logits, ret)
	if t.retain {
		t.pinned = append(t.pinned, t.loss)
	} else {
		t.free(t.loss, ret)
	}
	t.s.Advance(StepUS)
}

// step runs one full training step.
func (t *trainer) step() {
	if err := t.forward(); err != nil {
		panic(fmt.Sprintf("sim scenario: %v", err))
	}
	t.backward()
	t.optStep()
	t.zeroGrad()
	t.endStep()
}

// loopPair runs a loop and snapshots at the end of steps a and b (1-based).
func loopPair(cfg Config, a, b int, tweak func(*trainer)) (*snapshot.Snapshot, *snapshot.Snapshot) {
	t := newTrainer(New(cfg), smallDims)
	if tweak != nil {
		tweak(t)
	}
	t.setup()
	var first *snapshot.Snapshot
	for i := 1; i <= b; i++ {
		t.step()
		if i == a {
			first = t.s.Snapshot()
		}
	}
	return first, t.s.Snapshot()
}

// RetainedGraphPair returns snapshots at the end of step 5 and step 50 of a loop that calls
// loss.backward(retain_graph=True) (train.py:90) and keeps every loss in a list
// (train.py:93 losses.append(loss)), so each step's autograd graph and its saved activations
// stay alive. Ground truth, per step (2 blocks of the model):
//   - model.py:41 forward (fc1 output):      2 blocks, 4 MiB
//   - model.py:42 forward (gelu output):     2 blocks, 4 MiB
//   - model.py:44 forward (residual output): 2 blocks, 1 MiB
//   - train.py:89 train_step (cross_entropy: log_softmax output 4 MiB + the loss, 4 B
//     requested in a 512 B block): 2 blocks, 4 MiB + 4 B requested (4 MiB + 512 B rounded)
//
// So from step 5 to step 50: +45 steps × (8 blocks, 13 MiB + 4 B requested), i.e. +360
// blocks and +585 MiB + 180 B requested (585 MiB + 22.5 KiB rounded). Nothing else grows:
// params (24 MiB), AdamW state and the batch are equal in both.
func RetainedGraphPair() (step5, step50 *snapshot.Snapshot) {
	return loopPair(Config{}, 5, 50, func(t *trainer) { t.retain = true })
}

// GrowingContainerPair returns snapshots at the end of step 5 and step 50 of a loop that
// keeps a GPU copy of every step's logits: train.py:97 `history.append(logits.detach().clone())`.
// Ground truth: only train.py:97 train_step grows, by one 4 MiB block per step (5 blocks /
// 20 MiB at step 5, 50 blocks / 200 MiB at step 50: +45 blocks, +180 MiB). Everything else is
// equal in both snapshots.
func GrowingContainerPair() (step5, step50 *snapshot.Snapshot) {
	return loopPair(Config{}, 5, 50, func(t *trainer) { t.history = true })
}

// NoGrowthPair returns snapshots at the end of step 5 and step 50 of a correct training loop.
// Ground truth: identical live blocks (same sites, sizes and counts): params 24 MiB (5
// blocks, train.py:112), batch (train.py:115 512 KiB, train.py:116 2 KiB), AdamW state 48 MiB
// + 5 step tensors (train.py:91 via torch/optim/adamw.py); no site grows.
func NoGrowthPair() (step5, step50 *snapshot.Snapshot) {
	return loopPair(Config{}, 5, 50, nil)
}

// OptimizerFirstStepPair returns a snapshot taken right before the first opt.step() (step 1,
// after backward) and one at the same point of step 10. Ground truth: the only difference is
// the AdamW state created by the first step: 10 blocks of exp_avg/exp_avg_sq (48 MiB,
// stacks through torch/optim/adamw.py:113 and :116 _init_group) plus 5 fused step tensors
// (adamw.py:106, 4 B requested each in 512 B blocks), all under train.py:91 `opt.step()`.
// It appears once and stays flat — not a leak. Grads (5 blocks, 24 MiB, backward: no Python
// frames), logits (model.py:58, 4 MiB) and loss (train.py:89, 4 B) are live in both.
func OptimizerFirstStepPair() (before, after *snapshot.Snapshot) {
	t := newTrainer(New(Config{}), smallDims)
	t.setup()
	for i := 1; i <= 10; i++ {
		if err := t.forward(); err != nil {
			panic(err)
		}
		t.backward()
		switch i {
		case 1:
			before = t.s.Snapshot()
		case 10:
			after = t.s.Snapshot()
		}
		t.optStep()
		t.zeroGrad()
		t.endStep()
	}
	return before, after
}

// BackwardNoPythonFrames returns a snapshot recorded with stacks="python", taken after the
// third step's backward (before opt.step()). Ground truth: every allocation made by the
// autograd engine has an EMPTY frames list — the 5 live gradient blocks (24 MiB) and, in the
// trace, per step 5 gradient allocs (steps 1..3) plus 3 activation-gradient temporaries: 24
// alloc events with empty frames; forward allocations have Python-only frames (no C++).
func BackwardNoPythonFrames() *snapshot.Snapshot {
	t := newTrainer(New(Config{Stacks: "python"}), smallDims)
	t.setup()
	for i := 1; i <= 3; i++ {
		if err := t.forward(); err != nil {
			panic(err)
		}
		t.backward()
		if i == 3 {
			return t.s.Snapshot()
		}
		t.optStep()
		t.zeroGrad()
		t.endStep()
	}
	return nil
}

// OOMTruth is the ground truth of an OOM scenario, computed by the simulation itself.
type OOMTruth struct {
	Site        string // innermost user frame of the failing allocation
	Requested   int64  // rounded request in the oom event
	DeviceFree  int64  // device_free in the oom event
	Reserved    int64  // bytes in segments at the OOM
	Allocated   int64  // bytes in allocated blocks at the OOM
	Inactive    int64  // reserved - active: cached free bytes
	LargestFree int64  // largest inactive block
	Verdict     string // "capacity", "fragmentation" or "outside"
}

// UserSite returns "file:line function" of the innermost frame of stack id under ProjDir
// (the simulated user program), or "" when there is none.
func UserSite(sn *snapshot.Snapshot, id snapshot.StackID) string {
	for _, f := range sn.StackFrames(id) {
		if strings.HasPrefix(f.Filename, ProjDir+"/") {
			return Site(f.Filename, f.Line, f.Name)
		}
	}
	return ""
}

// oomTruth reads the ground truth off the snapshot dumped right after the OOM: the site comes
// from the oom event's frames.
func oomTruth(sn *snapshot.Snapshot, e *OOMError, verdict string) OOMTruth {
	var site string
	for _, ev := range sn.DeviceTraces[sn.Segments[0].Device] {
		if ev.Action == snapshot.ActionOOM {
			site = UserSite(sn, ev.Stack)
		}
	}
	tr := OOMTruth{Site: site, Requested: e.Requested, DeviceFree: e.DeviceFree, Reserved: e.Reserved, Allocated: e.Allocated, Verdict: verdict}
	for _, seg := range sn.Segments {
		for _, b := range seg.Blocks {
			if b.State == snapshot.StateInactive {
				tr.Inactive += b.Size
				tr.LargestFree = max(tr.LargestFree, b.Size)
			}
		}
	}
	return tr
}

// ActivationOOM returns the snapshot dumped after an OOM in the first forward pass of a model
// whose activations do not fit: 8 blocks (H=1024, 4096 tokens, V=8192) on a 940 MiB device.
// Parameters take 288 MiB and the batch 16 MiB + 32 KiB (in a 2 MiB small segment); each block
// saves 144 MiB of activations (fc1 64 MiB, gelu 64 MiB, residual 16 MiB) and frees a 16 MiB
// fc2 temporary. The fifth block's fc1 (model.py:41) asks for 64 MiB: cudaMalloc fails, the
// allocator releases the one cached segment (the 16 MiB fc2 temporary: a segment_free right
// before the oom event), retries and fails. Ground truth (verdict "capacity"): requested
// 64 MiB, device_free 58 MiB, reserved 882 MiB, allocated 880 MiB + 32 KiB, cached free
// 2 MiB − 32 KiB (the small segment's tail), nothing outside PyTorch.
func ActivationOOM() (*snapshot.Snapshot, OOMTruth) {
	t := newTrainer(New(Config{Capacity: 940 * MiB}), dims{H: 1024, N: 4096, V: 8192, L: 8})
	t.setup()
	err := t.forward()
	e, ok := err.(*OOMError)
	if !ok {
		panic(fmt.Sprintf("sim scenario ActivationOOM: expected OOM, got %v", err))
	}
	sn := t.s.Snapshot()
	return sn, oomTruth(sn, e, "capacity")
}

// FragmentationOOM returns the snapshot dumped after an OOM caused by fragmentation: a
// decoding loop (generate.py) whose per-step activations (9.5 MiB, model.py:41) are freed but
// whose KV-cache entries (9.5 MiB requested, model.py:71 `self.cache.append(kv)`, each taking
// the 10.5 MiB rest of its 20 MiB segment) stay, so 50 segments each hold a 9.5 MiB hole. Then
// a 32 MiB logits buffer (model.py:58) fails: 475 MiB is cached free, but no hole is larger
// than 9.5 MiB and no segment is entirely free to release. Device 1 GiB. Verdict
// "fragmentation".
func FragmentationOOM() (*snapshot.Snapshot, OOMTruth) {
	s := New(Config{Capacity: GiB})
	gen := func(line int64, fn string) []snapshot.Frame {
		return []snapshot.Frame{Py(ProjDir+"/generate.py", line, fn), Py(ProjDir+"/generate.py", 140, "<module>")}
	}
	inDecode := func(line int64) []snapshot.Frame {
		return Chain([]snapshot.Frame{Py(ModelPy, line, "forward")}, ModuleCall(), gen(77, "decode"))
	}
	var acts []uint64
	for i := 0; i < 50; i++ {
		a, err := s.Alloc(9*MiB+MiB/2, 0, linearIn(inDecode(41)))
		if err != nil {
			panic(err)
		}
		acts = append(acts, a)
		if _, err := s.Alloc(9*MiB+MiB/2, 0, Op("detach_clone", inDecode(71)...)); err != nil {
			panic(err)
		}
		s.Advance(2_000)
	}
	for _, a := range acts {
		if err := s.Free(a, FreeAt(gen(79, "decode")...)); err != nil {
			panic(err)
		}
	}
	_, err := s.Alloc(32*MiB, 0, linearIn(inDecode(58)))
	e, ok := err.(*OOMError)
	if !ok {
		panic(fmt.Sprintf("sim scenario FragmentationOOM: expected OOM, got %v", err))
	}
	sn := s.Snapshot()
	return sn, oomTruth(sn, e, "fragmentation")
}

// OutsidePyTorchOOM returns the snapshot dumped after an OOM where another process holds
// all but 128 MiB of the 16 GiB device: PyTorch has reserved only what one
// training step of the small model needs, yet a 1 GiB request (train.py:103 `buf =
// torch.empty(...)`) fails with device_free far below it. Verdict "outside": reserved +
// device_free is much less than capacity.
func OutsidePyTorchOOM() (*snapshot.Snapshot, OOMTruth) {
	t := newTrainer(New(Config{Capacity: 16 * GiB, OutsideBytes: 16*GiB - 128*MiB}), smallDims)
	t.setup()
	t.step()
	_, err := t.s.Alloc(GiB, 0, Op("empty", stepAt(103)...))
	e, ok := err.(*OOMError)
	if !ok {
		panic(fmt.Sprintf("sim scenario OutsidePyTorchOOM: expected OOM, got %v", err))
	}
	sn := t.s.Snapshot()
	return sn, oomTruth(sn, e, "outside")
}

// CrossStreamPendingFrees returns a snapshot of a loop that prefetches each batch on the
// default stream and hands it to a side stream (SideStream) with record_stream; the
// side-stream work of the last two batches has not finished when the snapshot is taken.
// Ground truth: 2 blocks in state active_pending_free (train.py:64 prefetch, 2 MiB each,
// stream 0), whose free_requested events have no free_completed yet; the 4 earlier batches'
// free_completed events come after later events (delayed). The side stream also has its own
// segment (a 512 KiB reduction buffer at train.py:71, stream SideStream, still allocated).
func CrossStreamPendingFrees() *snapshot.Snapshot {
	s := New(Config{})
	pre := Op("to", Py(ProjDir+"/train.py", 64, "prefetch"), Py(TrainPy, 120, "main"), Py(TrainPy, 131, "<module>"))
	red, err := s.Alloc(512*1024, SideStream, Op("empty", Py(TrainPy, 71, "reduce_on_side"), Py(TrainPy, 120, "main"), Py(TrainPy, 131, "<module>")))
	if err != nil {
		panic(err)
	}
	_ = red
	var pending []uint64
	for i := 0; i < 6; i++ {
		b, err := s.Alloc(2*MiB, 0, pre)
		if err != nil {
			panic(err)
		}
		if err := s.RecordStream(b, SideStream); err != nil {
			panic(err)
		}
		if err := s.Free(b, FreeAt(Py(TrainPy, 66, "prefetch"), Py(TrainPy, 120, "main"), Py(TrainPy, 131, "<module>"))); err != nil {
			panic(err)
		}
		pending = append(pending, b)
		s.Advance(StepUS)
		if len(pending) > 2 { // the side stream finished the batch two steps back
			if err := s.Complete(pending[0]); err != nil {
				panic(err)
			}
			pending = pending[1:]
		}
	}
	return s.Snapshot()
}

// MultiRank returns n rank snapshots (device = rank, n visible devices) of the small training
// loop after 3 steps. Rank MultiRankOutlier(n) additionally keeps every step's gathered
// predictions (train.py:143 `all_preds.append(gathered)`, 512 MiB per step: +1.5 GiB);
// every other rank is identical up to addresses and device.
func MultiRank(n int) []*snapshot.Snapshot {
	out := make([]*snapshot.Snapshot, n)
	for r := 0; r < n; r++ {
		t := newTrainer(New(Config{Device: r, NumDevices: n, BaseAddr: DefaultBase + uint64(r)<<36}), smallDims)
		t.setup()
		for i := 0; i < 3; i++ {
			t.step()
			if r == MultiRankOutlier(n) {
				t.alloc(512*MiB, Op("empty", Py(TrainPy, 143, "gather_predictions"), Py(TrainPy, 122, "main"), Py(TrainPy, 131, "<module>")))
			}
		}
		out[r] = t.s.Snapshot()
	}
	return out
}

// MultiRankOutlier is the rank that uses more memory in MultiRank(n): 1 when n > 1, else 0.
func MultiRankOutlier(n int) int {
	if n > 1 {
		return 1
	}
	return 0
}

// SummarizeBasic returns a small but rich snapshot: 3 profiled steps of the small model
// (annotations ProfilerStep#1..3 START/END), a side stream with its own small-pool segment, a
// CUDA-graph private pool (pool id (1, 0)) holding a static 8 MiB input, small and large
// pools, and default allocator settings. Ground truth: 5 param blocks (24 MiB), 2 batch blocks,
// 15 AdamW blocks, 1 side-stream block of 256 KiB (stream SideStream, train.py:71) and 1
// private-pool block of 8 MiB (train.py:118 graph capture, pool (1, 0)) are live.
func SummarizeBasic() *snapshot.Snapshot {
	s := New(Config{})
	t := newTrainer(s, smallDims)
	t.setup()
	if _, err := s.AllocPool(8*MiB, 0, snapshot.PoolID{1, 0}, Op("empty", Py(TrainPy, 118, "main"), Py(TrainPy, 131, "<module>"))); err != nil {
		panic(err)
	}
	if _, err := s.Alloc(256*1024, SideStream, Op("empty", Py(TrainPy, 71, "reduce_on_side"), Py(TrainPy, 120, "main"), Py(TrainPy, 131, "<module>"))); err != nil {
		panic(err)
	}
	for i := 1; i <= 3; i++ {
		s.Annotate(fmt.Sprintf("ProfilerStep#%d", i), "START")
		t.step()
		s.Annotate(fmt.Sprintf("ProfilerStep#%d", i), "END")
	}
	return s.Snapshot()
}
