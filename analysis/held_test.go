package analysis

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis/load"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// heldStacks interns stacks given outermost first as "file:line:function" frames, with the
// torch module-call frame PyTorch puts between a caller and a module's forward.
func heldStacks(t *testing.T, stacks ...[]string) *snapshot.Snapshot {
	t.Helper()
	in := snapshot.NewInterner()
	for _, st := range stacks {
		var ids []snapshot.FrameID
		for i := len(st) - 1; i >= 0; i-- { // innermost first
			parts := strings.Split(st[i], ":")
			var line int64
			for _, c := range parts[1] {
				line = line*10 + int64(c-'0')
			}
			ids = append(ids, in.Frame(snapshot.Frame{Filename: parts[0], Line: line, Name: parts[2]}))
			if i > 0 && parts[2] == "forward" {
				ids = append(ids, in.Frame(snapshot.Frame{Filename: "/usr/lib/python3/site-packages/torch/nn/modules/module.py", Line: 1747, Name: "_call_impl"}))
			}
		}
		in.Stack(ids)
	}
	return &snapshot.Snapshot{Frames: in.Frames, Stacks: in.Stacks}
}

func TestReentered(t *testing.T) {
	const (
		main  = "/work/proj/eval.py:63:validate"
		model = "/usr/lib/python3/site-packages/transformers/models/llama/modeling_llama.py"
	)
	cases := []struct {
		name      string
		made, cur []string
		held      bool
		caller    string
	}{
		{"next batch's forward while the logits live",
			[]string{main, model + ":856:forward"},
			[]string{main, model + ":838:forward", model + ":646:forward"}, true, "eval.py:63 in validate"},
		{"later in the same forward call",
			[]string{main, model + ":838:forward", model + ":646:forward"},
			[]string{main, model + ":856:forward"}, false, ""},
		{"a layer's output alive in the next layer (caller is a forward)",
			[]string{main, model + ":838:forward", model + ":722:forward", model + ":430:forward"},
			[]string{main, model + ":838:forward", model + ":722:forward", model + ":408:forward"}, false, ""},
		{"a different function at an earlier line",
			[]string{main, "/work/proj/model.py:90:forward"},
			[]string{main, "/work/proj/loss.py:12:forward"}, false, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			snap := heldStacks(t, tc.made, tc.cur)
			r := rolesWith(snap, DefaultAttributor())
			ev, ok := r.reentered(1, 2)
			if ok != tc.held {
				t.Fatalf("reentered = %v (%q), want %v", ok, ev, tc.held)
			}
			if ok && !strings.Contains(ev, "held by its caller") || !strings.Contains(ev, tc.caller) {
				t.Errorf("evidence %q does not name the caller %q", ev, tc.caller)
			}
		})
	}
}

func TestOptimizerAdvice(t *testing.T) {
	r := &ReplayResult{PeakAllocatedBytes: 4 * gib, PeakAllocatedEvent: 1843, PeakOutsideOptimizerBytes: 3 * gib, HasTrace: true, PeakPhase: "optimizer"}
	optimizerAdvice := func(r *ReplayResult, mix peakMix) string {
		for _, it := range advise("replay", &adviceIn{replay: r, mix: mix}) {
			if strings.HasPrefix(it.Rule, "replay.optimizer.") {
				return it.Text
			}
		}
		return ""
	}
	cases := []struct {
		name string
		mix  peakMix
		want string // "" = no advice; else a substring
	}{
		{"own out-of-place update", peakMix{optTemp: 442 * mib, optNew: 294 * mib, optSite: "optimizer.py:78", optOwn: true},
			"The update at optimizer.py:78 is out of place: update the state in place"},
		{"torch's foreach AdamW", peakMix{optTemp: 600 * mib, optSite: "train.py:91"}, "Use the fused implementation"},
		{"under a tenth of the peak", peakMix{optTemp: 400 * mib, optSite: "train.py:91"}, ""},
		{"under 64 MiB", peakMix{optTemp: 60 * mib, optSite: "train.py:91"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := optimizerAdvice(r, tc.mix)
			if tc.want == "" {
				if got != "" {
					t.Fatalf("advice %q, want none", got)
				}
				return
			}
			if !strings.Contains(got, tc.want) || !strings.Contains(got, "4.0 GiB at event 1843; 3.0 GiB outside optimizer steps") {
				t.Fatalf("advice %q, want %q", got, tc.want)
			}
		})
	}
}

// TestPhaseRunsAndBackwardPasses: the phase runs, and the backward passes backwardRuns reads
// off them and the trace's oom events: each pass ends at its last backward event, and one with
// an oom event inside is not finished (the OOM unwound it).
func TestPhaseRunsAndBackwardPasses(t *testing.T) {
	const (
		train = "/work/proj/train.py:40:main"
		model = "/work/proj/model.py:12:forward"
		bw    = "/usr/lib/python3/site-packages/torch/autograd/graph.py:825:_engine_run_backward"
	)
	// Stack ids in order (0 is the empty stack): 1 forward, 2 backward.
	snap := heldStacks(t, []string{train, model}, []string{train, bw})
	const fwd, back = snapshot.StackID(1), snapshot.StackID(2)
	alloc := func(s snapshot.StackID) snapshot.Event {
		return snapshot.Event{Action: snapshot.ActionAlloc, Stack: s, Size: 512, Addr: 1 << 20}
	}
	oom := snapshot.Event{Action: snapshot.ActionOOM, Stack: back, Size: 1 << 30}
	free := snapshot.Event{Action: snapshot.ActionFreeCompleted, Size: 512, Addr: 1 << 20, Stack: snapshot.NoStack}
	cases := []struct {
		name      string
		evs       []snapshot.Event
		runStarts []int
		runPhases []phase
		passes    []bwRun
	}{
		{"two passes, the second unwound by an OOM",
			[]snapshot.Event{alloc(fwd), free, alloc(back), free, alloc(fwd), alloc(back), oom, free, alloc(fwd)},
			// The OOM and the free after it are the unwinding (a run of their own) until the
			// next forward allocates.
			[]int{0, 0, 2, 4, 5, 6, 8}, []phase{phaseNone, phaseForward, phaseBackward, phaseForward, phaseBackward, phaseUnwind, phaseForward},
			[]bwRun{{start: 2, end: 3, finished: true}, {start: 5, end: 5, finished: false}}},
		{"the trace ends in backward; an OOM before it",
			[]snapshot.Event{free, oom, alloc(fwd), alloc(back), free},
			[]int{0, 1, 2, 3}, []phase{phaseNone, phaseUnwind, phaseForward, phaseBackward},
			[]bwRun{{start: 3, end: 4, finished: true}}},
		{"no backward",
			[]snapshot.Event{alloc(fwd), free, alloc(fwd)},
			[]int{0, 0}, []phase{phaseNone, phaseForward}, []bwRun{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := *snap
			s.DeviceTraces = [][]snapshot.Event{tc.evs}
			s.Caps.HasTrace = true
			r := rolesWith(&s, DefaultAttributor())
			d := r.device(0)
			passes := d.backwardRuns()
			if !slices.Equal(d.runStarts, tc.runStarts) || !slices.Equal(d.runPhases, tc.runPhases) {
				t.Fatalf("runs start %v in phases %v, want %v in %v", d.runStarts, d.runPhases, tc.runStarts, tc.runPhases)
			}
			if !slices.Equal(passes, tc.passes) {
				t.Errorf("backward passes %+v, want %+v", passes, tc.passes)
			}
		})
	}
}

// TestPhasePassSplit: a phase pass done in two halves at once gives every event, count and
// first frame the pass in one piece gives, on every fixture and shared real file (the halves
// forced at any length) and on short traces whose second half starts without a phase.
func TestPhasePassSplit(t *testing.T) {
	defer func(n int) { minSplitPhasePass = n }(minSplitPhasePass)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	// pass runs the phase pass of every device, in order, on one role table (a stack's context
	// cached by an earlier device gives no first frame again).
	pass := func(snap *snapshot.Snapshot, split bool) []*deviceRoles {
		minSplitPhasePass = 1 << 62
		if split {
			minSplitPhasePass = 1
		}
		r := rolesWith(snap, DefaultAttributor())
		var out []*deviceRoles
		for dev := range snap.DeviceTraces {
			out = append(out, r.device(dev))
		}
		return out
	}
	check := func(t *testing.T, snap *snapshot.Snapshot) {
		t.Helper()
		ones, twos := pass(snap, false), pass(snap, true)
		for dev := range snap.DeviceTraces {
			one, two := ones[dev], twos[dev]
			if !slices.Equal(one.phases, two.phases) || one.allocs != two.allocs || one.firstFrame != two.firstFrame ||
				!slices.Equal(one.allocsByStack, two.allocsByStack) {
				t.Errorf("device %d: in two halves allocs %v, first frames %q (phases equal: %v), in one %v, %q",
					dev, two.allocs, two.firstFrame, slices.Equal(one.phases, two.phases), one.allocs, one.firstFrame)
			}
		}
	}
	paths, _ := filepath.Glob("../testdata/scenarios/*.pickle")
	if ents, err := os.ReadDir(realDir); err == nil {
		for _, e := range ents {
			if !strings.HasSuffix(e.Name(), ".md") {
				paths = append(paths, filepath.Join(realDir, e.Name()))
			}
		}
	}
	for _, path := range paths {
		t.Run(filepath.Base(path), func(t *testing.T) {
			snap, err := load.File(context.Background(), path, load.Options{})
			if err != nil {
				t.Fatal(err)
			}
			check(t, snap)
		})
	}
	const (
		train = "/work/proj/train.py:40:main"
		model = "/work/proj/model.py:12:forward"
		bw    = "/usr/lib/python3/site-packages/torch/autograd/graph.py:825:_engine_run_backward"
	)
	base := heldStacks(t, []string{train, model}, []string{train, bw}, []string{train})
	const fwd, back, user = snapshot.StackID(1), snapshot.StackID(2), snapshot.StackID(3)
	alloc := func(s snapshot.StackID) snapshot.Event { return snapshot.Event{Action: snapshot.ActionAlloc, Stack: s} }
	free := snapshot.Event{Action: snapshot.ActionFreeCompleted, Stack: snapshot.NoStack}
	for name, evs := range map[string][]snapshot.Event{
		"second half starts with frees and allocs of no phase": {alloc(fwd), alloc(back), free, alloc(user), free, alloc(user), alloc(fwd), free},
		"no phase in the second half":                          {alloc(user), alloc(back), alloc(user), free, alloc(user), free},
		"no phase at all":                                      {alloc(user), free, alloc(snapshot.NoStack), free},
		"a phase only in the second half":                      {alloc(user), free, alloc(fwd), alloc(back)},
		"one event":                                            {alloc(back)},
	} {
		t.Run(name, func(t *testing.T) {
			s := *base
			s.DeviceTraces = [][]snapshot.Event{evs}
			check(t, &s)
		})
	}
	t.Run("a second device whose stacks the first met", func(t *testing.T) {
		s := *base
		s.DeviceTraces = [][]snapshot.Event{
			{alloc(fwd), alloc(back), free},
			{alloc(user), free, alloc(user), alloc(user), alloc(back), alloc(fwd), alloc(fwd), free},
		}
		check(t, &s)
	})
}

// TestTopStacksRetainedGraph: on the QLoRA notebook (a cell keeps outputs and loss, whose
// graph holds the forward's activations after backward), top-stacks marks the groups of the
// retained graph, sums them in a note, and shows why under each material row.
func TestTopStacksRetainedGraph(t *testing.T) {
	files := realFiles(t)
	_ = files
	snap, err := load.File(context.Background(), filepath.Join(realDir, "pt2.1_hf-qlora-bnb-accelerate-llama-train_ftcourse.pickle"), load.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := TopStacks(snap, TopStacksOptions{Device: AllDevices})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	var sum int64
	for _, s := range r.Sites {
		if s.RetainedGraph {
			got = append(got, fmt.Sprintf("%s %d", s.Site, s.Bytes))
			sum += s.Bytes
			if s.Category != CategoryActivation {
				t.Errorf("%s: %s", s.Site, s.Category)
			}
		}
	}
	want := []string{"modeling_llama.py:216 495616000", "modeling_llama.py:89 364380160", "modeling_llama.py:649 180224000",
		"modeling_llama.py:1183 128000000", "modeling_llama.py:925 8192000", "modeling_llama.py:1197 512"}
	if !slices.Equal(got, want) || sum != 1176412672 {
		t.Errorf("retained groups %q (%d B), want %q", got, sum, want)
	}
	note := "a retained autograd graph: 1.1 GiB of forward activations in 6 groups (retained_graph) are still alive after the backward pass that followed them, like the per-layer activations of that pass, where backward frees what the graph saved: a reference your code keeps to the loss or the outputs holds the graph; del outputs and loss after backward and keep loss.item()"
	if len(r.Notes) == 0 || r.Notes[0] != note {
		t.Errorf("notes %q", r.Notes)
	}
	// Rows of 1% or more show why; the 512 B one does not.
	text := r.Text()
	if n := strings.Count(text, "      why: allocated in the forward pass"); n != 4 {
		t.Errorf("%d why lines:\n%s", n, text)
	}
	// The parameters before the trace are not part of it.
	if r.Sites[0].Site != SiteNoStack || r.Sites[0].RetainedGraph {
		t.Errorf("first row %+v", r.Sites[0])
	}
}

// TestReplayTextShowsHeldOutput: on the multistream Llama validation, the logits of the
// previous call are still alive at the peak, held by the validation loop: the replay's text
// says so under that row (the answer key's finding), and under no other.
func TestReplayTextShowsHeldOutput(t *testing.T) {
	files := realFiles(t)
	_ = files
	snap, err := load.File(context.Background(), filepath.Join(realDir, "pt2.1_multistream_llama-selectn.pickle"), load.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Replay(context.Background(), snap, 0)
	if err != nil {
		t.Fatal(err)
	}
	text := r.Text()
	want := "        why: the output of an earlier call of forward (made at models/llama/modeling_llama.py:856 in forward), still alive while the next call runs (now at models/llama/modeling_llama.py:838 in forward): held by its caller mcx/select_n/validate_old.py:63 in validate; if nothing later reads it, del it before the next call"
	if !strings.Contains(text, want) || strings.Count(text, "why:") != 1 {
		t.Errorf("text:\n%s", text)
	}
}
