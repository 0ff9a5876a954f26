package analysis

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis/sim"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// liveByRole sums the allocated blocks of device dev by the role Roles gives them.
func liveByRole(t *testing.T, snap *snapshot.Snapshot, dev int) map[string]int64 {
	t.Helper()
	r, err := NewRoles(snap, AttributionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, s := range snap.Segments {
		if s.Device != dev {
			continue
		}
		for _, b := range s.Blocks {
			if b.State == snapshot.StateActiveAllocated {
				out[r.Block(dev, b).Category] += b.Size
			}
		}
	}
	return out
}

func stageNames(r *ReplayResult) []string {
	out := []string{}
	for _, s := range r.Stages {
		out = append(out, s.Name)
	}
	return out
}

// TestEvidenceScenarios: each pattern's positive and negative scenario gets the workload,
// stages, steps, grad mode and live bytes per role the scenario's ground truth states.
func TestEvidenceScenarios(t *testing.T) {
	type scen struct {
		name  string
		build func() (*snapshot.Snapshot, sim.EvidenceTruth)
	}
	cases := []scen{
		{"jvp inside the forward", func() (*snapshot.Snapshot, sim.EvidenceTruth) { return sim.JVPInForward(true) }},
		{"no jvp", func() (*snapshot.Snapshot, sim.EvidenceTruth) { return sim.JVPInForward(false) }},
		{"lightning OOM and teardown", func() (*snapshot.Snapshot, sim.EvidenceTruth) { return sim.LightningOOMTeardown(true) }},
		{"lightning without OOM", func() (*snapshot.Snapshot, sim.EvidenceTruth) { return sim.LightningOOMTeardown(false) }},
		{"zeroth-order with SGD annotations", func() (*snapshot.Snapshot, sim.EvidenceTruth) { return sim.ZerothOrder(true) }},
		{"forwards with a KV cache, no optimizer", func() (*snapshot.Snapshot, sim.EvidenceTruth) { return sim.ZerothOrder(false) }},
		{"no_grad benchmark", func() (*snapshot.Snapshot, sim.EvidenceTruth) { return sim.NoGradBenchmark(false) }},
		{"the same model trained", func() (*snapshot.Snapshot, sim.EvidenceTruth) { return sim.NoGradBenchmark(true) }},
		{"FSDP2 step", sim.FSDP2Step},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			snap, truth := tc.build()
			r, err := Replay(context.Background(), snap, 0)
			if err != nil {
				t.Fatal(err)
			}
			if r.Workload != truth.Workload {
				t.Errorf("workload %s (%s), want %s", r.Workload, r.WorkloadEvidence, truth.Workload)
			}
			if truth.Stages != nil && !slices.Equal(stageNames(r), truth.Stages) {
				t.Errorf("stages %v, want %v", stageNames(r), truth.Stages)
			}
			if truth.Steps > 0 && r.Iterations != truth.Steps {
				t.Errorf("%d steps (%s), want %d", r.Iterations, r.IterationSource, truth.Steps)
			}
			if r.GradMode == nil || r.GradMode.Mode != truth.GradMode {
				t.Errorf("grad mode %+v, want %s", r.GradMode, truth.GradMode)
			}
			if got := liveByRole(t, snap, 0); !maps.Equal(got, truth.LiveBytes) {
				t.Errorf("live by role %v, want %v", got, truth.LiveBytes)
			}
			switch {
			case truth.OOMEvent < 0 && len(r.Unwind) != 0:
				t.Errorf("unwind spans %+v, want none", r.Unwind)
			case truth.OOMEvent >= 0 && (len(r.Unwind) != 1 || r.Unwind[0].OOMEvent != truth.OOMEvent || !slices.Equal(r.Unwind[0].Teardown, truth.Teardown)):
				t.Errorf("unwind spans %+v, want one at event %d with teardown %v", r.Unwind, truth.OOMEvent, truth.Teardown)
			}
		})
	}
}

// TestEvidenceMegatronBuffers: Megatron's _ParamAndGradBuffer is the model's parameters and
// gradients, never communication, and its language_module.py (a Megatron-LM checkout) is
// library model code: the site, never the user's.
func TestEvidenceMegatronBuffers(t *testing.T) {
	for _, distOpt := range []bool{true, false} {
		snap, truth := sim.MegatronBuffers(distOpt)
		if got := liveByRole(t, snap, 0); !maps.Equal(got, truth.LiveBytes) {
			t.Errorf("distributed optimizer %v: live by role %v, want %v", distOpt, got, truth.LiveBytes)
		}
		r, err := TopStacks(snap, TopStacksOptions{Device: 0, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Sites) < 2 {
			t.Fatalf("%d sites, want the embedding and the buffers", len(r.Sites))
		}
		for _, s := range r.Sites {
			if s.UserSite != "pretrain_gpt.py:200" {
				t.Errorf("%s: user site %q, want pretrain_gpt.py:200 (Megatron's own files are not the user's)", s.Site, s.UserSite)
			}
			if s.Site == "language_module.py:60" && s.Category != CategoryParameter {
				t.Errorf("the embedding is %s, want parameter", s.Category)
			}
		}
	}
}

// TestEvidenceDeviceBalance: DataParallel's device 0 holding 78 units beside 20 and 8 is
// called out with the site that makes the difference; three even replicas are not.
func TestEvidenceDeviceBalance(t *testing.T) {
	const unit = 64 * mib
	for _, even := range []bool{false, true} {
		snap, live := sim.DataParallelUneven(even)
		s, err := Summarize(context.Background(), snap, SummaryOptions{})
		if err != nil {
			t.Fatal(err)
		}
		b := s.DeviceBalance
		if b == nil || !slices.Equal(b.Devices, []int{0, 1, 2}) {
			t.Fatalf("even %v: balance %+v, want devices 0, 1, 2", even, b)
		}
		if got := []int64{b.AllocatedBytes[0], b.AllocatedBytes[1], b.AllocatedBytes[2]}; !slices.Equal(got, []int64{live[0], live[1], live[2]}) {
			t.Errorf("even %v: allocated %v, want %v", even, got, live)
		}
		if even {
			if b.Outlier != -1 || len(b.Advice) != 0 {
				t.Errorf("even replicas: outlier %d (%s), advice %v, want none", b.Outlier, b.Evidence, b.Advice)
			}
			continue
		}
		wantAdv := "device 0 holds 3.6 GiB more at gnn.py:40 [activation] than any other device: torch.nn.DataParallel gathers every replica's outputs on output_device"
		if len(b.Advice) != 1 || b.Advice[0].Rule != "summarize.balance.dataparallel" || !strings.HasPrefix(b.Advice[0].Text, wantAdv) || !strings.Contains(s.Text(), "advice: "+wantAdv) {
			t.Errorf("advice %v, want balance.dataparallel %q", b.Advice, wantAdv)
		}
		want := "device 0 holds 4.9 GiB allocated, 3.9× the next (device 1 1.2 GiB, device 2 512 MiB); gnn.py:40 [activation] holds 3.6 GiB more there than on any other device"
		if b.Outlier != 0 || b.Evidence != want {
			t.Errorf("outlier %d %q, want 0 %q", b.Outlier, b.Evidence, want)
		}
		if live[0] != 78*unit {
			t.Errorf("scenario: device 0 holds %d", live[0])
		}
	}
}

// TestEvidenceFramelessSizes: memory without frames is read by its block sizes. The answer
// key's state-only OOM dump (#19) is 5 × 3.2 GiB, 12 × 408 MiB … with no product (activations,
// not an embedding); the LLaMA-7B dump (#2) has a 500 MiB block that its 64 × 4096 × 4096 × 4 B
// projections settle as the fp32 32000 × 4096 embedding.
func TestEvidenceFramelessSizes(t *testing.T) {
	cases := []struct {
		file       string
		blocks     int
		first      int // blocks in the largest group
		product    string
		productIdx int
	}{
		{"pt2.5plus_oom-observer_state-only_no-oom-event_equivariant.pickle", 155, 5, "", -1},
		{"pt2.1_multistream_llama-selectn.pickle", 195, 48, "32000 × 4096 × 4 B (fp32)", 2},
	}
	for _, tc := range cases {
		snap := realFile(t, tc.file)
		r, err := TopStacks(snap, TopStacksOptions{Device: AllDevices})
		if err != nil {
			t.Fatal(err)
		}
		fs := r.FramelessSizes
		if fs == nil || fs.Blocks != tc.blocks || fs.Groups[0].Count != tc.first {
			t.Fatalf("%s: frameless sizes %+v, want %d blocks, %d in the largest group", tc.file, fs, tc.blocks, tc.first)
		}
		for i, g := range fs.Groups {
			want := ""
			if i == tc.productIdx {
				want = tc.product
			}
			if g.Product != want {
				t.Errorf("%s: group %d (%d × %d B): product %q, want %q", tc.file, i, g.Count, g.Size, g.Product, want)
			}
		}
	}
}

// TestEvidenceNestedGradRoles: the autograd engine's allocations for a jvp inside the forward
// are the forward's temporaries; the same engine stacks in the loop's loss.backward() stay
// backward temporaries.
func TestEvidenceNestedGradRoles(t *testing.T) {
	snap, _ := sim.JVPInForward(true)
	r, err := NewRoles(snap, AttributionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]int{}
	for i, ev := range snap.DeviceTraces[0] {
		if ev.Action != snapshot.ActionAlloc {
			continue
		}
		fr := snap.StackFrames(ev.Stack)
		if len(fr) == 0 {
			continue
		}
		node := ""
		for _, f := range fr {
			if n := cppOpName(f.Name); n != "" {
				node = n
				break
			}
		}
		if node == "" {
			continue
		}
		at := r.Live(0, ev.Stack, ev.Addr, ev.Size, i, i+1)
		if got[node] == nil {
			got[node] = map[string]int{}
		}
		got[node][at.Category]++
	}
	want := map[string]map[string]int{
		"MulBackward0":   {CategoryTemporary: 6},
		"AddmmBackward0": {CategoryBackwardTemporary: 8},
	}
	for node, w := range want {
		if !maps.Equal(got[node], w) {
			t.Errorf("%s: roles %v, want %v", node, got[node], w)
		}
	}
}

// cppOpName is the autograd node an engine frame runs (MulBackward0, AddmmBackward0), "" for
// any other frame.
func cppOpName(name string) string {
	for _, n := range []string{"MulBackward0", "AddmmBackward0"} {
		if strings.Contains(name, "generated::"+n+"::apply") {
			return n
		}
	}
	return ""
}

// TestEvidencePendingFreeNotWeights: a frameless block pending free (its tensor freed, the
// allocator waiting on another stream) is no one's live memory; a frameless allocated block
// beside it keeps the guess of weights alive since before recording.
func TestEvidencePendingFreeNotWeights(t *testing.T) {
	b := newTB()
	main := b.stack("/w/train.py", 10, "main")
	b.seg(0, 1<<30, 0, blk(64*mib, snapshot.StateActivePendingFree, snapshot.EmptyStack), blk(64*mib, snapshot.StateActiveAllocated, snapshot.EmptyStack),
		blk(2*mib, snapshot.StateActiveAllocated, main))
	snap := b.done()
	snap.Caps.FramesOnBlocks = true
	r, err := NewRoles(snap, AttributionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := []string{}
	for _, blk := range snap.Segments[0].Blocks {
		got = append(got, r.Block(0, blk).Category)
	}
	if want := []string{CategoryOther, CategoryParameter, CategoryOther}; !slices.Equal(got, want) {
		t.Errorf("roles %v, want %v", got, want)
	}
}

// TestEvidenceFrameworks: each framework is named with a frame of its own source.
func TestEvidenceFrameworks(t *testing.T) {
	cases := []struct {
		snap *snapshot.Snapshot
		want []string
	}{
		{first(sim.LightningOOMTeardown(true)), []string{"Lightning"}},
		{first(sim.FSDP2Step()), []string{"FSDP2"}},
		{first(sim.MegatronBuffers(true)), []string{"Megatron"}},
		{first(sim.NoGradBenchmark(false)), []string{}},
	}
	for i, tc := range cases {
		r, err := NewRoles(tc.snap, AttributionOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got := []string{}
		for _, f := range r.Frameworks() {
			got = append(got, f.Name)
			if f.Evidence == "" {
				t.Errorf("case %d: %s without evidence", i, f.Name)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("case %d: frameworks %v, want %v", i, got, tc.want)
		}
	}
}

func first(s *snapshot.Snapshot, _ sim.EvidenceTruth) *snapshot.Snapshot { return s }

// TestEvidenceFacts: the facts of one device, as advice reads them.
func TestEvidenceFacts(t *testing.T) {
	snap, _ := sim.JVPInForward(true)
	r, err := NewRoles(snap, AttributionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f := r.Facts(0)
	if f.Workload != WorkloadTraining || f.OptimizerSteps != 2 || !f.HasBackward || f.GradMode.Mode != GradOn ||
		f.Steps != 2 || f.NestedGradAllocs != 6 || !strings.Contains(f.NestedGrad, "functional.py:1034 in jvp") || len(f.Unwind) != 0 {
		t.Errorf("facts %+v", f)
	}
	snap, _ = sim.ZerothOrder(true)
	r, _ = NewRoles(snap, AttributionOptions{})
	if f := r.Facts(0); f.Workload != WorkloadTraining || f.HasBackward || f.GradMode.Mode != GradOff || f.OptimizerSteps != 3 {
		t.Errorf("zeroth-order facts %+v", f)
	}
}

// TestEvidenceSetupIsNotStepZero: with steps from Optimizer.step# annotations, the first step
// starts at its first forward allocation; the model's setup before it is no step.
func TestEvidenceSetupIsNotStepZero(t *testing.T) {
	snap, _ := sim.ZerothOrder(true)
	r, err := Replay(context.Background(), snap, 0)
	if err != nil {
		t.Fatal(err)
	}
	firstForward := -1
	roles, _ := NewRoles(snap, AttributionOptions{})
	d := roles.device(0)
	for i, p := range d.phases {
		if p == phaseForward {
			firstForward = i
			break
		}
	}
	if r.IterationSource != IterationsFromAnnotations || r.Iterations != 3 || firstForward <= 0 || r.IterationStartEvents[0] != firstForward {
		t.Errorf("%d steps from %s starting at %v, want 3 from annotations, the first at the first forward (event %d)", r.Iterations, r.IterationSource, r.IterationStartEvents, firstForward)
	}
}

// TestEvidenceGapBetweenRuns: a notebook cell run twice (answer key #18: a snapshot action,
// then 36 s idle) is two forward stages, the second a new run; no stage spans both.
func TestEvidenceGapBetweenRuns(t *testing.T) {
	snap := realFile(t, "pt2.5-2.7_snapshot-action_late-recording_octree-nca.pickle")
	r, err := Replay(context.Background(), snap, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Stages) != 2 {
		t.Fatalf("stages %+v, want 2", r.Stages)
	}
	a, b := r.Stages[0], r.Stages[1]
	if a.Name != "forward" || a.EndEvent != 442 || a.AfterGap || a.GapUS != 0 || b.Name != "forward" || b.StartEvent != 443 || !b.AfterGap || b.GapUS != 35909331 {
		t.Errorf("stages %+v, want forward to 442, then forward from 443 after a 35909331 µs gap", r.Stages)
	}
}
