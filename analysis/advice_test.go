package analysis

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var updateAdviceDoc = flag.Bool("update", false, "rewrite docs/advice.md from the advice table")

// TestAdviceDoc: docs/advice.md is the table's rendering; -update rewrites it.
func TestAdviceDoc(t *testing.T) {
	path := filepath.Join("..", "docs", "advice.md")
	want := AdviceDoc()
	if *updateAdviceDoc {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./analysis -run TestAdviceDoc -update)", err)
	}
	if string(got) != want {
		t.Fatalf("docs/advice.md is stale: run go test ./analysis -run TestAdviceDoc -update")
	}
	for _, r := range adviceRules {
		if !strings.Contains(want, "`"+r.ID+"`") {
			t.Errorf("rule %s missing from the doc", r.ID)
		}
	}
}

// TestAdviceRuleIDs: ids are unique, and every rule has a gate, a sentence and a description.
func TestAdviceRuleIDs(t *testing.T) {
	seen := map[string]bool{}
	idRe := regexp.MustCompile(`^[a-z]+(\.[a-z0-9-]+)+$`)
	for _, r := range adviceRules {
		if seen[r.ID] {
			t.Errorf("duplicate rule id %s", r.ID)
		}
		seen[r.ID] = true
		if !idRe.MatchString(r.ID) || !strings.HasPrefix(r.ID, strings.SplitN(r.Command, ".", 2)[0][:3]) {
			t.Errorf("rule id %q does not read as <command>.<name>", r.ID)
		}
		if r.when == nil || r.text == nil || r.Gate == "" || r.Says == "" {
			t.Errorf("rule %s lacks a gate, a sentence or its words", r.ID)
		}
	}
}

// adviceSentences are phrases only advice says: outside advice.go no report may build them.
var adviceSentences = []string{
	"shard the model", "expandable_segments:True so", "remove the empty_cache", "take two snapshots",
	"activation checkpointing (", "use a GPU with more memory", "reduce the batch size", "garbage_collection_threshold:",
	"XLA_PYTHON_CLIENT_PREALLOCATE", "NCCL_BUFFSIZE", "warn_tensor_cycles", "AdamW(fused=True)", "deque(maxlen",
	"bucket_cap_mb", "CUBLAS_WORKSPACE_CONFIG (", "nothing to change", "roundup_power2_divisions or padding",
	"torch.inference_mode() (or", "store loss.detach()", "max_split_size_mb (e.g.",
}

// TestAdviceOnlyInTable: no other file of the package words advice (the table is the one place).
func TestAdviceOnlyInTable(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if f == "advice.go" || strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range adviceSentences {
			if strings.Contains(string(b), s) {
				t.Errorf("%s words advice (%q): move it into the table in advice.go", f, s)
			}
		}
	}
	src, _ := os.ReadFile("advice.go")
	for _, s := range adviceSentences {
		if !strings.Contains(string(src), s) {
			t.Errorf("advice.go no longer says %q: update adviceSentences", s)
		}
	}
}

func oomIn(verdict, workload string, backward bool, byCat map[string]int64) *adviceIn {
	live := int64(0)
	for _, b := range byCat {
		live += b
	}
	o := &OOMEvent{Verdict: verdict, Workload: workload, HasBackward: backward, AllocatedBytes: live}
	return &adviceIn{oom: o, byCat: byCat, live: live}
}

func with(in *adviceIn, f func(*adviceIn)) *adviceIn { f(in); return in }

// ruleCase: an input on which the rule must speak (pos) and one, close to it, on which it must not (neg).
type ruleCase struct{ pos, neg *adviceIn }

func adviceCases() map[string]ruleCase {
	acts := map[string]int64{CategoryActivation: 6 * gib, CategoryParameter: 2 * gib, CategoryGradient: 2 * gib}
	fewParams := map[string]int64{CategoryActivation: 9 * gib, CategoryParameter: 60 * mib}
	frag := func(exp bool, w *OOMWhatIf) *adviceIn {
		in := oomIn(VerdictFragmentation, WorkloadTraining, true, acts)
		in.oom.Expandable, in.oom.ExpandableWhatIf = exp, w
		return in
	}
	fails := &OOMWhatIf{BaselineReproduced: true, Avoided: false, HeadroomBytes: -gib}
	fits := &OOMWhatIf{BaselineReproduced: true, Avoided: true, HeadroomBytes: gib}
	ec := func(bytes, back int64) *adviceIn {
		return &adviceIn{burst: &SegmentBurst{Kind: BurstEmptyCache, Bursts: 28, Events: 420, Bytes: bytes, ReReservedBytes: back, ReReserved: 27, Site: "x.py:104"}}
	}
	rel := func(events int, gc float64) *adviceIn {
		return &adviceIn{burst: &SegmentBurst{Kind: BurstRelease, Bursts: 1, Events: events, Bytes: 2 * mib}, gcThreshold: gc, settingsKnown: true}
	}
	fr := func(f *FragmentationResult, exp bool, ms int64) *adviceIn {
		return &adviceIn{frag: f, fragExp: exp, maxSplit: ms, returns: "empty_cache() would return 0 B", limit: "at its limit"}
	}
	fragmented := &FragmentationResult{Verdict: FragFragmented, DeviceAtLimit: true, ReservedBytes: 10 * gib, StrandedBytes: 3 * gib}
	little := &FragmentationResult{Verdict: FragLittleFree, DeviceAtLimit: true, ReservedBytes: 10 * gib, StrandedBytes: 500 * mib}
	notAtLimit := &FragmentationResult{Verdict: FragFragmented, ReservedBytes: 10 * gib, StrandedBytes: 3 * gib}
	cache := &FragmentationResult{Verdict: FragCache, ReservedBytes: 10 * gib, StrandedBytes: gib}
	cacheFew := &FragmentationResult{Verdict: FragCache, ReservedBytes: 10 * gib, StrandedBytes: 10 * mib}
	small := &FragmentationResult{Verdict: FragSmall, ReservedBytes: 100 * mib}
	smallBig := &FragmentationResult{Verdict: FragSmall, ReservedBytes: 10 * gib}
	page := &FragmentationResult{Verdict: FragPageGranularity, ReservedBytes: 10 * gib}
	waste := &FragmentationResult{Verdict: FragSmall, ReservedBytes: 10 * gib, AllocatedBytes: gib, InternalWasteBytes: 200 * mib, LargestBlockBytes: 100 * mib}
	noWaste := &FragmentationResult{Verdict: FragSmall, ReservedBytes: 10 * gib, AllocatedBytes: 8 * gib, InternalWasteBytes: 200 * mib, LargestBlockBytes: 600 * mib}
	one, two := true, false
	sameRun, otherRun := &one, &two
	pk := func(b int64) *int64 { return &b }
	diff := func(pattern string, same *bool, delta int64, f func(*adviceIn)) *adviceIn {
		in := &adviceIn{diff: &DiffResult{SameRun: same, DeltaBytes: delta, PeakBeforeBytes: pk(gib), PeakAfterBytes: pk(2 * gib)}, pattern: pattern, patSite: "train.py:9"}
		if f != nil {
			f(in)
		}
		return in
	}
	rp := func(phase, workload string, act, peak int64, bwd bool, mix peakMix) *adviceIn {
		return &adviceIn{replay: &ReplayResult{HasTrace: true, PeakPhase: phase, Workload: workload, ActivationBytesAtPeak: act, PeakAllocatedBytes: peak}, hasBwd: bwd, mix: mix, idiom: "torch.utils.checkpoint"}
	}
	optMix := peakMix{optTemp: 600 * mib, optSite: "opt.py:3"}
	outlierBal := &DeviceBalance{Outlier: 0, ExtraSite: "gnn.py:40", ExtraCategory: CategoryActivation, ExtraBytes: 3 * gib}
	evenBal := &DeviceBalance{Outlier: -1}
	return map[string]ruleCase{
		"oom.outside.other-processes":    {oomIn(VerdictOutsidePyTorch, "", false, acts), oomIn(VerdictCapacity, "", false, acts)},
		"oom.outside.nccl-workspaces":    {oomIn(VerdictOutsidePyTorch, "", false, acts), oomIn(VerdictFragmentation, "", false, acts)},
		"oom.outside.other-frameworks":   {oomIn(VerdictOutsidePyTorch, "", false, acts), oomIn(VerdictCapacity, "", false, acts)},
		"oom.frag.expandable":            {frag(false, fits), frag(false, fails)},
		"oom.frag.expandable-not-enough": {frag(false, fails), frag(false, fits)},
		"oom.frag.expandable-already-on": {frag(true, nil), frag(false, nil)},
		"oom.frag.max-split":             {with(frag(false, nil), func(in *adviceIn) { in.largestSeg = gib }), with(frag(false, nil), func(in *adviceIn) { in.largestSeg = gib; in.maxSplit = 512 * mib })},
		"oom.frag.preallocate":           {frag(false, nil), oomIn(VerdictCapacity, "", false, acts)},
		"oom.cap.checkpointing":          {oomIn(VerdictCapacity, WorkloadTraining, true, acts), oomIn(VerdictCapacity, WorkloadInference, false, acts)},
		"oom.cap.fused-attention": {with(oomIn(VerdictCapacity, "", false, acts), func(in *adviceIn) { in.attnBytes, in.attnSite = 4*gib, "attn.py:5" }),
			with(oomIn(VerdictCapacity, "", false, acts), func(in *adviceIn) { in.attnBytes, in.attnSite = 100*mib, "attn.py:5" })},
		"oom.cap.optimizer-state": {oomIn(VerdictCapacity, WorkloadTraining, true, map[string]int64{CategoryOptimizerState: 4 * gib, CategoryActivation: 4 * gib}),
			oomIn(VerdictCapacity, WorkloadTraining, true, map[string]int64{CategoryOptimizerState: 100 * mib, CategoryActivation: 4 * gib})},
		"oom.cap.kv-cache": {oomIn(VerdictCapacity, WorkloadInference, false, map[string]int64{CategoryKVCache: 4 * gib, CategoryParameter: 4 * gib}),
			oomIn(VerdictCapacity, WorkloadTraining, false, map[string]int64{CategoryKVCache: 4 * gib, CategoryParameter: 4 * gib})},
		"oom.cap.inference-weights": {oomIn(VerdictCapacity, WorkloadInference, false, map[string]int64{CategoryParameter: 4 * gib}),
			oomIn(VerdictCapacity, WorkloadInference, false, fewParams)},
		"oom.cap.inference-activations": {oomIn(VerdictCapacity, WorkloadInference, false, fewParams),
			oomIn(VerdictCapacity, WorkloadInference, false, map[string]int64{CategoryParameter: 4 * gib})},
		"oom.cap.params-grads": {oomIn(VerdictCapacity, WorkloadTraining, true, acts), oomIn(VerdictCapacity, WorkloadTraining, true, fewParams)},
		"oom.cap.params": {oomIn(VerdictCapacity, "", false, map[string]int64{CategoryParameter: 4 * gib, CategoryActivation: 4 * gib}),
			oomIn(VerdictCapacity, "", false, fewParams)},
		"oom.cap.autocast":            {oomIn(VerdictCapacity, WorkloadTraining, true, acts), oomIn(VerdictCapacity, WorkloadInference, false, acts)},
		"oom.cap.forward-no-backward": {oomIn(VerdictCapacity, WorkloadUnknown, false, fewParams), oomIn(VerdictCapacity, WorkloadTraining, true, fewParams)},
		"oom.cap.workspace": {oomIn(VerdictCapacity, "", false, map[string]int64{CategoryWorkspace: gib, CategoryActivation: gib}),
			oomIn(VerdictCapacity, "", false, map[string]int64{CategoryWorkspace: 8 * mib, CategoryActivation: gib})},
		"oom.cap.user-container": {oomIn(VerdictCapacity, "", false, map[string]int64{CategoryUserContainer: gib, CategoryActivation: gib}),
			oomIn(VerdictCapacity, "", false, map[string]int64{CategoryUserContainer: 8 * mib, CategoryActivation: gib})},
		"oom.cap.autocast-cache": {oomIn(VerdictCapacity, "", false, map[string]int64{CategoryAutocastCache: gib, CategoryActivation: gib}),
			oomIn(VerdictCapacity, "", false, map[string]int64{CategoryAutocastCache: 8 * mib, CategoryActivation: gib})},
		"oom.cap.communication": {fwOOM(oomIn(VerdictCapacity, "", false, map[string]int64{CategoryCommunication: gib, CategoryActivation: gib}), "DDP"),
			oomIn(VerdictCapacity, "", false, map[string]int64{CategoryCommunication: 8 * mib, CategoryActivation: gib})},
		"oom.cap.smaller-batch": {oomIn(VerdictCapacity, WorkloadTraining, true, map[string]int64{CategoryOther: gib}), oomIn(VerdictCapacity, WorkloadTraining, true, acts)},
		"oom.cap.largest-sites": {oomIn(VerdictCapacity, "", false, acts), oomIn(VerdictOutsidePyTorch, "", false, acts)},
		// Pattern 8 of issue 31: parameters at 0.6% of live memory are no case for sharding.
		"oom.cap.shard-model": {oomIn(VerdictCapacity, WorkloadTraining, true, acts), oomIn(VerdictCapacity, WorkloadTraining, true, fewParams)},
		"oom.cap.split-model": {oomIn(VerdictCapacity, WorkloadInference, false, map[string]int64{CategoryParameter: 4 * gib}), oomIn(VerdictCapacity, WorkloadInference, false, fewParams)},
		"oom.cap.bigger-gpu":  {oomIn(VerdictCapacity, WorkloadTraining, true, fewParams), oomIn(VerdictCapacity, WorkloadTraining, true, acts)},
		// Pattern 8: 46.5 GiB released and 20.7 GiB back is not "bought nothing".
		"bursts.empty-cache.churn":     {ec(5*gib, 5*gib), ec(46*gib+512*mib, 20*gib+716*mib)},
		"bursts.empty-cache.partial":   {ec(46*gib+512*mib, 20*gib+716*mib), ec(5*gib, 5*gib)},
		"bursts.empty-cache.kept-free": {ec(5*gib, 0), ec(5*gib, gib)},
		"bursts.malloc-retry":          {&adviceIn{burst: &SegmentBurst{Kind: BurstMallocRetry, Bursts: 3, Events: 9, Bytes: gib}}, ec(gib, 0)},
		// Pattern 8: garbage_collection_threshold is no cause when the file's own setting is 0.
		"bursts.release.gc-threshold":     {rel(1, 0.8), rel(1, 0)},
		"bursts.release.unmarked":         {rel(1, 0), rel(1, 0.8)},
		"bursts.release.settings-unknown": {with(rel(3, 0), func(in *adviceIn) { in.settingsKnown = false }), rel(3, 0)},
		"frag.empty":                      {fr(&FragmentationResult{Verdict: FragEmpty}, false, 0), fr(small, false, 0)},
		// Pattern 8: never expandable segments under "too little memory for the split to matter".
		"frag.expandable":           {fr(fragmented, false, 0), fr(little, false, 0)},
		"frag.expandable-if-oom":    {fr(notAtLimit, false, 0), fr(fragmented, false, 0)},
		"frag.cache":                {fr(cache, false, 0), fr(small, false, 0)},
		"frag.cache-stranded":       {fr(cache, false, 0), fr(cacheFew, false, 0)},
		"frag.small":                {fr(small, false, 0), fr(smallBig, false, 0)},
		"frag.page-granularity":     {fr(page, true, 0), fr(fragmented, false, 0)},
		"frag.max-split.expandable": {fr(small, true, 128*mib), fr(small, false, 128*mib)},
		"frag.max-split.no-effect":  {fr(waste, false, 512*mib), fr(noWaste, false, 512*mib)},
		"frag.internal-waste":       {fr(waste, false, 0), fr(noWaste, false, 0)},
		"frag.nothing":              {fr(smallBig, false, 0), fr(small, false, 0)},
		"diff.retained-graph":       {diff(PatternRetainedGraph, sameRun, gib, nil), diff(PatternGrowingContainer, sameRun, gib, nil)},
		"diff.growing-container":    {diff(PatternGrowingContainer, sameRun, gib, nil), diff(PatternRetainedGraph, sameRun, gib, nil)},
		"diff.optimizer-first-step": {diff(PatternOptimizerFirstStp, sameRun, gib, nil), diff(PatternNoGrowth, sameRun, 0, nil)},
		"diff.moved-not-grown":      {diff(PatternNoGrowth, sameRun, 0, func(in *adviceIn) { in.moved = true }), diff(PatternNoGrowth, sameRun, 0, nil)},
		"diff.dropped":              {diff(PatternNoGrowth, sameRun, -gib, nil), diff(PatternNoGrowth, sameRun, 0, nil)},
		"diff.unexplained-growth":   {diff(PatternUnexplainedGrowth, sameRun, gib, nil), diff(PatternNoGrowth, sameRun, gib, nil)},
		"diff.small-growth":         {diff(PatternNoGrowth, sameRun, 1024, nil), diff(PatternNoGrowth, sameRun, -1024, nil)},
		"diff.same-file":            {diff(PatternNoGrowth, sameRun, 0, func(in *adviceIn) { in.sameFile = true }), diff(PatternNoGrowth, sameRun, 0, nil)},
		"diff.steady":               {diff(PatternNoGrowth, sameRun, 0, nil), diff(PatternNoGrowth, sameRun, 0, func(in *adviceIn) { in.sameFile = true })},
		"diff.within-one-step":      {diff(PatternWithinOneStep, sameRun, gib, nil), diff(PatternNoGrowth, sameRun, 0, nil)},
		"diff.compare-runs":         {diff(PatternNotComparable, otherRun, 0, nil), diff(PatternNoGrowth, sameRun, 0, nil)},
		// Pattern 8: a deliberate A/B diff is not told to take two snapshots of one process,
		// except once, as a note; one run is not told at all.
		"diff.note.one-process":          {diff("", otherRun, 0, nil), diff("", sameRun, 0, nil)},
		"summarize.balance.dataparallel": {&adviceIn{balance: outlierBal, frameworks: []Framework{{Name: "DataParallel"}}}, &adviceIn{balance: evenBal, frameworks: []Framework{{Name: "DataParallel"}}}},
		"summarize.balance.outlier":      {&adviceIn{balance: outlierBal}, &adviceIn{balance: outlierBal, frameworks: []Framework{{Name: "DataParallel"}}}},
		"replay.optimizer.in-place":      {rp("optimizer", WorkloadTraining, 0, 4*gib, true, peakMix{optTemp: 600 * mib, optSite: "opt.py:3", optOwn: true}), rp("optimizer", WorkloadTraining, 0, 4*gib, true, optMix)},
		"replay.optimizer.fused":         {rp("optimizer", WorkloadTraining, 0, 4*gib, true, optMix), rp("backward", WorkloadTraining, 0, 4*gib, true, optMix)},
		"replay.checkpointing":           {rp("backward", WorkloadTraining, 2*gib, 4*gib, true, peakMix{}), rp("forward", WorkloadTraining, 2*gib, 4*gib, false, peakMix{})},
		"replay.forward-only":            {gradReplay(rp("forward", WorkloadTraining, 2*gib, 4*gib, false, peakMix{}), GradOn), rp("forward", WorkloadInference, 2*gib, 4*gib, false, peakMix{})},
		"replay.gc-cycles": {&adviceIn{replay: &ReplayResult{GCFrees: GCFrees{Count: 3}}, gcOnly: true},
			&adviceIn{replay: &ReplayResult{GCFrees: GCFrees{Count: 0}}, gcOnly: true}},
	}
}

// TestAdviceRulesPositiveNegative: every rule speaks on its positive case and stays silent on
// its negative one, and every rule of the table has both.
func TestAdviceRulesPositiveNegative(t *testing.T) {
	cases := adviceCases()
	for _, r := range adviceRules {
		c, ok := cases[r.ID]
		if !ok {
			t.Errorf("rule %s has no positive/negative case", r.ID)
			continue
		}
		t.Run(r.ID, func(t *testing.T) {
			got := advise(r.Command, c.pos)
			if !slices.ContainsFunc(got, func(it AdviceItem) bool { return it.Rule == r.ID && it.Text != "" }) {
				t.Errorf("positive case: rule did not speak; got %v", got)
			}
			if neg := advise(r.Command, c.neg); slices.ContainsFunc(neg, func(it AdviceItem) bool { return it.Rule == r.ID }) {
				t.Errorf("negative case: rule spoke: %v", neg)
			}
		})
	}
	for id := range cases {
		if _, ok := ruleByID(id); !ok {
			t.Errorf("case for unknown rule %s", id)
		}
	}
}

// TestAdviceOrder: a capacity OOM's role-sized fixes come first, most bytes first, then the
// general ones; the fallback speaks only without a sized fix.
func TestAdviceOrder(t *testing.T) {
	got := advise("oom", oomIn(VerdictCapacity, WorkloadTraining, true, map[string]int64{CategoryActivation: 6 * gib, CategoryParameter: 2 * gib, CategoryGradient: 2 * gib}))
	ids := []string{}
	for _, it := range got {
		ids = append(ids, it.Rule)
	}
	want := []string{"oom.cap.checkpointing", "oom.cap.params-grads", "oom.cap.autocast", "oom.cap.largest-sites", "oom.cap.shard-model"}
	if !slices.Equal(ids, want) {
		t.Fatalf("rules %v, want %v", ids, want)
	}
}

// gradOOM, gradReplay and fwOOM set the facts the gates read: grad mode and frameworks.
func gradOOM(in *adviceIn, mode string) *adviceIn { in.oom.GradMode = mode; return in }

func gradReplay(in *adviceIn, mode string) *adviceIn {
	in.replay.GradMode = &GradMode{Mode: mode}
	return in
}

func fwOOM(in *adviceIn, names ...string) *adviceIn {
	for _, n := range names {
		in.oom.Frameworks = append(in.oom.Frameworks, Framework{Name: n})
	}
	return in
}

// TestAdviceFactGates: the gates that read facts speak only when the fact holds. A no_grad
// benchmark (grad off) and a zeroth-order run (training, no backward, grad off) are never told
// to use inference_mode; bucket sizes are named only for the frameworks the file shows.
func TestAdviceFactGates(t *testing.T) {
	const gib = int64(1) << 30
	fewParams := map[string]int64{CategoryParameter: 60 * 1 << 20, CategoryActivation: 9 * gib}
	comm := map[string]int64{CategoryCommunication: gib, CategoryActivation: gib}
	fwd := func(mode string) *adviceIn {
		in := &adviceIn{replay: &ReplayResult{HasTrace: true, PeakPhase: "forward", Workload: WorkloadTraining, ActivationBytesAtPeak: 2 * gib, PeakAllocatedBytes: 4 * gib}}
		if mode != "" {
			in = gradReplay(in, mode)
		}
		return in
	}
	for _, c := range []struct {
		name, rule, command string
		in                  *adviceIn
		speaks              bool
		has, hasNot         string
	}{
		{"forward-only grad on", "replay.forward-only", "replay", fwd(GradOn), true, "inference_mode", ""},
		{"forward-only grad off (zeroth-order)", "replay.forward-only", "replay", fwd(GradOff), false, "", ""},
		{"forward-only grad unknown", "replay.forward-only", "replay", fwd(GradUnknown), false, "", ""},
		{"forward-only no grad fact", "replay.forward-only", "replay", fwd(""), false, "", ""},
		{"oom forward grad on", "oom.cap.forward-no-backward", "oom", gradOOM(oomIn(VerdictCapacity, WorkloadUnknown, false, fewParams), GradOn), true, "inference_mode", ""},
		{"oom forward grad off", "oom.cap.forward-no-backward", "oom", gradOOM(oomIn(VerdictCapacity, WorkloadUnknown, false, fewParams), GradOff), true, "grad already off", "inference_mode"},
		{"oom forward grad unknown", "oom.cap.forward-no-backward", "oom", gradOOM(oomIn(VerdictCapacity, WorkloadUnknown, false, fewParams), GradUnknown), true, "smaller batch", "inference_mode"},
		{"inference activations grad on", "oom.cap.inference-activations", "oom", gradOOM(oomIn(VerdictCapacity, WorkloadInference, false, fewParams), GradOn), true, "torch.inference_mode()", ""},
		{"inference activations no_grad benchmark", "oom.cap.inference-activations", "oom", gradOOM(oomIn(VerdictCapacity, WorkloadInference, false, fewParams), GradOff), true, "bf16 autocast", "inference_mode"},
		{"communication DDP", "oom.cap.communication", "oom", fwOOM(oomIn(VerdictCapacity, "", false, comm), "DDP"), true, "bucket_cap_mb", "FSDP"},
		{"communication FSDP2", "oom.cap.communication", "oom", fwOOM(oomIn(VerdictCapacity, "", false, comm), "FSDP2"), true, "FSDP units", "bucket_cap_mb"},
		{"communication DeepSpeed", "oom.cap.communication", "oom", fwOOM(oomIn(VerdictCapacity, "", false, comm), "DeepSpeed"), true, "reduce_bucket_size", "bucket_cap_mb"},
		{"communication no bucketing framework", "oom.cap.communication", "oom", fwOOM(oomIn(VerdictCapacity, "", false, comm), "Lightning"), false, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := advise(c.command, c.in)
			i := slices.IndexFunc(got, func(it AdviceItem) bool { return it.Rule == c.rule })
			if (i >= 0) != c.speaks {
				t.Fatalf("rule %s spoke: %v, want %v; got %v", c.rule, i >= 0, c.speaks, got)
			}
			if i < 0 {
				return
			}
			if txt := got[i].Text; !strings.Contains(txt, c.has) || (c.hasNot != "" && strings.Contains(txt, c.hasNot)) {
				t.Errorf("text %q: want %q, not %q", txt, c.has, c.hasNot)
			}
		})
	}
}
