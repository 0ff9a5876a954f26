package analysis

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis/load"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

const (
	realOptimizerAnnotation = "pt2.9plus_cs336-compile_optimizer-annotation_no-segment-events.pickle"
	realCompileForward      = "pt2.5-2.7_torch-compile_cpp-frames_cs336-fwd.pickle"
	realWindows             = "pt2.10_user-metadata_windows_cs336.pickle"
)

// TestStagesOnRealFiles: DIAGNOSIS.md #15 is one step whose optimizer step (an Optimizer.step
// annotation, events ≈1816–6478) sets the peak (3.59 GiB at event 1843) while forward and
// backward peak at 3.08 GiB (event 399); #9 is one forward (peak at event 1402, in log_softmax)
// and one backward.
func TestStagesOnRealFiles(t *testing.T) {
	type stage struct {
		name, source string
		peakEvent    int
	}
	cases := []struct {
		file   string
		stages []stage
	}{
		{realOptimizerAnnotation, []stage{{"forward", "phases", 348}, {"backward", "phases", 399}, {"optimizer", "annotations", 1843}}},
		{realWindows, []stage{{"forward", "phases", 1402}, {"backward", "phases", 1420}}},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			snap := realFile(t, tc.file)
			r, err := ReplayDevice(context.Background(), snap, ReplayOptions{Device: 0})
			if err != nil {
				t.Fatal(err)
			}
			var got []stage
			for _, s := range r.Stages {
				got = append(got, stage{s.Name, s.Source, s.PeakEvent})
				if s.Step != 0 || s.StartEvent > s.PeakEvent || s.PeakEvent > s.EndEvent {
					t.Errorf("stage %+v", s)
				}
			}
			if !slices.Equal(got, tc.stages) || r.StagesTotal != len(tc.stages) {
				t.Fatalf("stages %+v (total %d), want %+v", got, r.StagesTotal, tc.stages)
			}
			last := r.Stages[len(r.Stages)-1]
			if tc.file == realOptimizerAnnotation && (last.PeakAllocatedBytes != r.PeakAllocatedBytes || r.Stages[1].PeakAllocatedBytes != r.PeakOutsideOptimizerBytes) {
				t.Fatalf("optimizer stage peak %d vs replay peak %d; backward peak %d vs outside-optimizer peak %d",
					last.PeakAllocatedBytes, r.PeakAllocatedBytes, r.Stages[1].PeakAllocatedBytes, r.PeakOutsideOptimizerBytes)
			}
		})
	}
}

// TestGroupByAnnotationOnRealFiles: in #15 the AdamW state re-allocated inside
// Optimizer.step#AdamW.step is attributed to that range; in #5 the 1,794 dynamo_timed compile
// spans allocate (and free) everything they allocate, and the forward's live activations fall
// outside any range.
func TestGroupByAnnotationOnRealFiles(t *testing.T) {
	snap := realFile(t, realOptimizerAnnotation)
	r, err := TopStacks(snap, TopStacksOptions{GroupBy: "annotation", Device: AllDevices})
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]TopSite{}
	for _, s := range r.Sites {
		rows[s.Site] = s
	}
	opt := rows["Optimizer.step#AdamW.step"]
	if opt.Blocks != 222 || opt.Category != CategoryOptimizerState || opt.Kind != SiteKindAnnotation || opt.TraceAllocs == 0 {
		t.Errorf("Optimizer.step row %+v", opt)
	}
	if pre := rows[LabelPreTrace]; pre.Blocks != 225 || pre.TraceAllocs != 0 {
		t.Errorf("pre-trace row %+v", pre)
	}
	if r.TotalBlocks != 447 {
		t.Errorf("total blocks %d", r.TotalBlocks)
	}

	snap = realFile(t, realCompileForward)
	r, err = TopStacks(snap, TopStacksOptions{GroupBy: "annotation", Device: AllDevices})
	if err != nil {
		t.Fatal(err)
	}
	rows = map[string]TopSite{}
	for _, s := range r.Sites {
		rows[s.Site] = s
	}
	if none := rows[LabelNone]; none.Blocks != 645 || none.Category != CategoryActivation {
		t.Errorf("<none> row %+v", none)
	}
	joint := rows["_recursive_joint_graph_passes (dynamo_timed)"]
	if joint.Blocks != 0 || joint.TraceAllocs != 659 || joint.TraceAllocBytes != 2584 {
		t.Errorf("joint graph passes row %+v", joint)
	}
}

func TestAnnotationLabelsOrphans(t *testing.T) {
	snap := &snapshot.Snapshot{Annotations: []snapshot.Annotation{
		{Name: "lost", Stage: "END", TimeUS: 5},
		{Name: "step", Stage: "START", TimeUS: 10},
		{Name: "inner", Stage: "START", TimeUS: 20},
		{Name: "inner", Stage: "END", TimeUS: 30},
		{Name: "tail", Stage: "START", TimeUS: 40},
	}}
	evs := []snapshot.Event{{TimeUS: 1}, {TimeUS: 15}, {TimeUS: 25}, {TimeUS: 35}, {TimeUS: 45}, {TimeUS: 0}}
	l := annotationLabels(snap, 0, evs)
	var got []string
	for i := range evs {
		got = append(got, l.label(i))
	}
	want := []string{LabelNone, "step", "inner", "step", "tail", LabelNoTime}
	if !slices.Equal(got, want) {
		t.Fatalf("labels %q, want %q", got, want)
	}
	if len(l.notes) != 3 || !strings.Contains(l.notes[0], "1 annotation END without a matching START") ||
		!strings.Contains(l.notes[1], "2 annotation STARTs never closed (step, tail)") {
		t.Fatalf("notes %q", l.notes)
	}
}

func TestParseRules(t *testing.T) {
	cases := []struct {
		name, doc string
		names     []string
		err       string
	}{
		{"mapping in file order", "b_second: 'x'\na_first: 'y'\n", []string{"b_second", "a_first"}, ""},
		{"under rules", "rules:\n  data: 'loader\\.py'\n  attn: 'attention'\n", []string{"data", "attn"}, ""},
		{"list", "- {name: data, pattern: loader}\n- {name: attn, pattern: attention}\n", []string{"data", "attn"}, ""},
		{"bad regex", "data: 'loader(('\n", nil, `rule "data": bad regular expression "loader((": error parsing regexp: missing closing ): ` + "`loader((`"},
		{"not a string", "data: [a, b]\n", nil, `line 1: rule "data": the value must be a regular expression string`},
		{"empty", "", nil, "no rules: expected a mapping of name to regular expression"},
		{"duplicate", "- {name: a, pattern: x}\n- {name: a, pattern: y}\n", nil, `rule "a" appears twice`},
		{"not yaml", "a: 'x\n", nil, "not YAML: yaml: line 2: found unexpected end of stream"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rules, err := ParseRules([]byte(tc.doc))
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, r := range rules {
				names = append(names, r.Name)
			}
			if !slices.Equal(names, tc.names) {
				t.Fatalf("names %q, want %q", names, tc.names)
			}
		})
	}
}

// TestRulesOnScenario: the growing-container fixture at step 50 (train.py:97 history.append of
// 50 × 4 MiB logits, AdamW state under train.py:91). A rule on train_step gathers both under its
// name (one row per role); frames no rule matches keep their sites.
func TestRulesOnScenario(t *testing.T) {
	snap, err := load.File(context.Background(), "../testdata/scenarios/growing_container_step50.pickle", load.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rules, err := ParseRules([]byte("history: 'train\\.py:train_step$'\nmlp: 'model\\.py:forward$'\n"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := TopStacks(snap, TopStacksOptions{Device: AllDevices, Attribution: AttributionOptions{Rules: rules}})
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		site, rule, cat string
		bytes           int64
		blocks          int
	}
	var got []row
	for _, s := range r.Sites {
		got = append(got, row{s.Site, s.Rule, s.Category, s.Bytes, s.Blocks})
	}
	want := []row{
		{"history", "history", CategoryOther, 209715200, 50},
		{"history", "history", CategoryOptimizerState, 50334208, 15},
		{"train.py:112", "", CategoryParameter, 25165824, 5},
		{"train.py:115", "", CategoryOther, 524288, 1},
		{"train.py:116", "", CategoryOther, 2048, 1},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("rows\n got %+v\nwant %+v", got, want)
	}
	if !strings.HasPrefix(r.Sites[0].Stack[0], "rule history matched workspace/proj/train.py:97 in train_step") {
		t.Fatalf("stack %q", r.Sites[0].Stack)
	}
}

func TestParseBytes(t *testing.T) {
	cases := []struct {
		in   string
		want int64
		err  bool
	}{
		{"20GiB", 20 << 30, false}, {"512MiB", 512 << 20, false}, {"1.5GB", 1500000000, false},
		{"4096", 4096, false}, {"64 KiB", 64 << 10, false}, {"2g", 2 << 30, false},
		{"", 0, true}, {"GiB", 0, true}, {"-1GiB", 0, true}, {"12 parsecs", 0, true}, {"1e30TiB", 0, true},
	}
	for _, tc := range cases {
		got, err := ParseBytes(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d (error %v)", tc.in, got, err, tc.want, tc.err)
		}
	}
}

// TestCheckGate: the no-growth fixture at step 50 peaks at 111,675,416 B (its replay), holds
// 101 MiB at the end; the growing container grows against its step-5 snapshot.
func TestCheckGate(t *testing.T) {
	ctx := context.Background()
	dir := "../testdata/scenarios/"
	loadF := func(name string) *snapshot.Snapshot {
		s, err := load.File(ctx, dir+name, load.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	steady := loadF("no_growth_step50.pickle")
	rp, err := ReplayDevice(ctx, steady, ReplayOptions{Device: 0})
	if err != nil {
		t.Fatal(err)
	}
	peak := rp.PeakAllocatedBytes
	r, err := Check(ctx, steady, CheckOptions{MaxPeakBytes: peak, MaxAllocatedBytes: rp.FinalAllocatedBytes, MaxGrowthPercent: -1, Device: AllDevices})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Pass || len(r.Budgets) != 2 || r.Budgets[0].Measure != "peak_allocated" || r.Budgets[0].ValueBytes != peak {
		t.Fatalf("at the budget: %+v", r)
	}
	r, err = Check(ctx, steady, CheckOptions{MaxPeakBytes: peak - 1, MaxGrowthPercent: -1, Device: AllDevices})
	if err != nil {
		t.Fatal(err)
	}
	b := r.Budgets[0]
	if r.Pass || b.Pass || b.TopSite != rp.PeakSites[0].Site || !strings.Contains(r.Text(), "FAIL device 0: peak allocated") ||
		!strings.Contains(b.Message, "exceeds --max-peak") || !strings.Contains(b.Message, "by 1 B; top site at the peak (event") {
		t.Fatalf("one byte over: %+v\n%s", b, r.Text())
	}

	grown, base := loadF("growing_container_step50.pickle"), loadF("growing_container_step5.pickle")
	r, err = Check(ctx, grown, CheckOptions{Baseline: base, MaxGrowthPercent: 10, Device: AllDevices})
	if err != nil {
		t.Fatal(err)
	}
	g := r.Budgets[0]
	if r.Pass || g.Budget != "max-growth" || g.Measure != "peak_growth" || g.ValuePercent <= 10 || g.BaselineBytes == 0 {
		t.Fatalf("growth: %+v", g)
	}
	if _, err := Check(ctx, grown, CheckOptions{MaxGrowthPercent: -1, Device: AllDevices}); err == nil || !strings.Contains(err.Error(), "no budget given") {
		t.Fatalf("no budget: %v", err)
	}
}

func TestCompileLabels(t *testing.T) {
	snap := &snapshot.Snapshot{EventExtras: []snapshot.EventExtra{{}, {CompileContext: "N/A"}, {CompileContext: "0/0"}, {CompileContext: "1/0"}}}
	var evs []snapshot.Event
	for _, x := range []uint32{0, 1, 2, 3, 2, 9} {
		evs = append(evs, snapshot.Event{Extra: snapshot.MakeExtraID(x)})
	}
	l := compileLabels(snap, evs)
	var got []string
	for i := range evs {
		got = append(got, l.label(i))
	}
	if want := []string{LabelNone, LabelNone, "0/0", "1/0", "0/0", LabelNone}; !slices.Equal(got, want) {
		t.Fatalf("labels %q, want %q", got, want)
	}
	if l.label(-1) != LabelPreTrace {
		t.Fatalf("a block without an alloc event: %q", l.label(-1))
	}
}

// TestStagesTextStepLabel: a stage before the first step start (Step -1 in the JSON) reads
// "before step 0" in the text when later stages have steps, and carries no step when none has
// (the multistream validation and qwen2 inference files), in both the per-stage list and the
// per-kind summary.
func TestStagesTextStepLabel(t *testing.T) {
	pre := Stage{Name: "forward", Step: -1, Source: "phases", StartEvent: 0, EndEvent: 9, PeakAllocatedBytes: 1 << 20, PeakEvent: 4}
	first := Stage{Name: "backward", Step: 0, Source: "phases", StartEvent: 10, EndEvent: 19, PeakAllocatedBytes: 2 << 20, PeakEvent: 12}
	cases := []struct {
		name   string
		stages []Stage
		want   []string
	}{
		{"list", []Stage{pre, first}, []string{
			"    before step 0 forward   events 0–9: 0 B → peak 1.0 MiB (event 4) → 0 B  [phases]",
			"    step 0 backward  events 10–19: 0 B → peak 2.0 MiB (event 12) → 0 B  [phases]",
		}},
		{"per kind", append(slices.Repeat([]Stage{pre}, 9), first), []string{
			"    forward   1.0 MiB at event 4 (before step 0)",
			"    backward  2.0 MiB at event 12 (step 0)",
		}},
		{"list without steps", []Stage{pre}, []string{
			"    forward   events 0–9: 0 B → peak 1.0 MiB (event 4) → 0 B  [phases]",
		}},
		{"per kind without steps", slices.Repeat([]Stage{pre}, 10), []string{
			"    forward   1.0 MiB at event 4",
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := stagesText(tc.stages, len(tc.stages))
			for _, w := range tc.want {
				if !strings.Contains(got, w+"\n") {
					t.Errorf("missing %q in\n%s", w, got)
				}
			}
			if strings.Contains(got, "step -1") || (!slices.ContainsFunc(tc.stages, func(s Stage) bool { return s.Step >= 0 }) && strings.Contains(got, "step")) {
				t.Errorf("step -1 in\n%s", got)
			}
		})
	}
}
