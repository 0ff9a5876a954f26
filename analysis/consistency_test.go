package analysis

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis/load"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// consistencyMaxBytes: files larger than this are left out, to keep the suite fast.
const consistencyMaxBytes = 50 << 20

// consistencyFiles is every snapshot the repository and ../shared hold: the real files, the
// scenarios and the loader's test files.
func consistencyFiles(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, root := range []string{realDir, filepath.Join("..", "testdata"), "testdata", filepath.Join("load", "testdata")} {
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return nil
			}
			n := d.Name()
			if !(strings.HasSuffix(n, ".pickle") || strings.HasSuffix(n, ".pkl") || strings.HasSuffix(n, ".json") || strings.HasSuffix(n, ".gz")) {
				return nil
			}
			if fi, err := d.Info(); err != nil || fi.Size() > consistencyMaxBytes {
				return nil
			}
			out = append(out, p)
			return nil
		})
	}
	if len(out) == 0 {
		t.Skip("no snapshots found")
	}
	return out
}

// textFromStruct: the text rendered from the result decoded from its own JSON is the text of
// the result: the text reads nothing the JSON (and MCP structuredContent) lacks.
func textFromStruct[E any, P interface {
	*E
	Text() string
}](t *testing.T, what string, r P) {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatalf("%s: marshal: %v", what, err)
	}
	var back E
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("%s: unmarshal: %v", what, err)
	}
	if got, want := P(&back).Text(), r.Text(); got != want {
		t.Errorf("%s: the text reads more than the result struct holds:\nfrom JSON:\n%s\nfrom the result:\n%s", what, got, want)
	}
}

// adviceOf checks items against the table: each names a rule of command, and the text is the
// one the result carries.
func checkRules(t *testing.T, what, command string, items []AdviceItem) {
	t.Helper()
	for _, it := range items {
		r, ok := ruleByID(it.Rule)
		switch {
		case !ok:
			t.Errorf("%s: advice %q names no rule (%q)", what, it.Text, it.Rule)
		case r.Command != command:
			t.Errorf("%s: advice rule %s belongs to %s", what, it.Rule, r.Command)
		case it.Text == "":
			t.Errorf("%s: rule %s gave no text", what, it.Rule)
		}
	}
}

// checkBursts: the gates of the segment-release rules hold on the numbers beside them.
func checkBursts(t *testing.T, what string, snap *snapshot.Snapshot, bursts []SegmentBurst) {
	t.Helper()
	for _, b := range bursts {
		if _, ok := ruleByID(b.AdviceRule); !ok {
			t.Errorf("%s: burst advice names no rule: %+v", what, b)
			continue
		}
		in := &adviceIn{burst: &b, gcThreshold: snap.Settings.GCThreshold, settingsKnown: snap.Settings.Present}
		if r, _ := ruleByID(b.AdviceRule); !r.when(in) {
			t.Errorf("%s: burst advice %s beside numbers its gate rejects: %+v", what, b.AdviceRule, b)
		}
		if b.AdviceRule == "bursts.empty-cache.churn" && b.ReReservedBytes*100 < b.Bytes*cameBackShare {
			t.Errorf("%s: 'bought nothing' though only %d of %d bytes came back", what, b.ReReservedBytes, b.Bytes)
		}
		if strings.Contains(b.Advice, "garbage_collection_threshold:") && snap.Settings.GCThreshold <= 0 {
			t.Errorf("%s: garbage_collection_threshold named as a cause with the file's setting %g", what, snap.Settings.GCThreshold)
		}
		if b.Events == 1 && strings.Contains(b.Advice, "burst") {
			t.Errorf("%s: one segment free called a burst: %s", what, b.Advice)
		}
	}
}

// contradictedCaveats are caveats the data can disprove: func(snap) says whether it does.
var contradictedCaveats = []struct {
	phrase string
	false_ func(*snapshot.Snapshot) bool
}{
	{"recorded without context", func(s *snapshot.Snapshot) bool { return s.Caps.FramesOnAllocs }},
	{"record history with context before the first snapshot", func(s *snapshot.Snapshot) bool { return s.Caps.FramesOnAllocs }},
	{"history was not recorded with context", func(s *snapshot.Snapshot) bool { return s.Caps.FramesOnAllocs }},
	{"no stack frames (history recorded without context", func(s *snapshot.Snapshot) bool { return s.Caps.FramesOnAllocs || s.Caps.FramesOnBlocks }},
}

func checkCaveats(t *testing.T, what string, snap *snapshot.Snapshot, text string) {
	t.Helper()
	for _, c := range contradictedCaveats {
		if strings.Contains(text, c.phrase) && c.false_(snap) {
			t.Errorf("%s: caveat %q that the data contradicts", what, c.phrase)
		}
	}
}

// TestConsistency runs every command over every snapshot and checks what must hold between
// them, with no answer key: advice only from the table and only where its gate holds; text
// rendered from the result struct alone; one workload per device across commands; no caveat
// the data contradicts.
func TestConsistency(t *testing.T) {
	ctx := context.Background()
	for _, path := range consistencyFiles(t) {
		t.Run(strings.ReplaceAll(path, string(filepath.Separator), "_"), func(t *testing.T) {
			snap, err := load.File(ctx, path, load.Options{})
			if err != nil {
				t.Skipf("does not load: %v", err)
			}
			checkConsistency(t, snap)
		})
	}
	// The fuzz corpus (snapshots FuzzAnalyses builds from bytes) and traces with every oddity.
	corpus, _ := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzAnalyses", "*"))
	for _, path := range corpus {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		data, ok := fuzzCorpusBytes(string(b))
		if !ok {
			continue
		}
		t.Run("fuzz_"+filepath.Base(path), func(t *testing.T) { checkConsistency(t, fuzzSnapshot(data)) })
	}
	for seed := uint64(1); seed <= 5; seed++ {
		t.Run(fmt.Sprintf("random_%d", seed), func(t *testing.T) { checkConsistency(t, randomTrace(seed, 300)) })
	}
}

// fuzzCorpusBytes reads a go fuzz corpus file holding one []byte value.
func fuzzCorpusBytes(s string) ([]byte, bool) {
	_, rest, ok := strings.Cut(s, "[]byte(")
	if !ok {
		return nil, false
	}
	q, err := strconv.Unquote(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), ")")))
	if err != nil {
		return nil, false
	}
	return []byte(q), true
}

// checkConsistency runs every command on snap and checks the invariants between them.
func checkConsistency(t *testing.T, snap *snapshot.Snapshot) {
	t.Helper()
	ctx := context.Background()
	{
		{
			sum, err := Summarize(ctx, snap, SummaryOptions{})
			if err != nil {
				t.Fatalf("summarize: %v", err)
			}
			textFromStruct(t, "summarize", sum)
			checkCaveats(t, "summarize", snap, sum.Text())
			if b := sum.DeviceBalance; b != nil {
				checkRules(t, "summarize", "summarize", b.Advice)
				for _, it := range b.Advice {
					if b.Outlier < 0 || b.ExtraSite == "" || b.ExtraBytes <= 0 {
						t.Errorf("summarize: %s without an outlier device and the site that makes the difference", it.Rule)
					}
				}
			}
			// One workload per process: every device that holds memory or records events says
			// the same.
			workload := ""
			for _, d := range sum.Devices {
				if d.ReservedBytes == 0 && d.Trace.Events == 0 {
					continue
				}
				if workload == "" {
					workload = d.Workload
				} else if d.Workload != workload {
					t.Errorf("summarize: device %d's workload is %s, another device's %s: one process has one workload", d.Device, d.Workload, workload)
				}
			}

			ts, err := TopStacks(snap, TopStacksOptions{Device: AllDevices})
			if err != nil {
				t.Fatalf("top-stacks: %v", err)
			}
			textFromStruct(t, "top-stacks", ts)
			checkCaveats(t, "top-stacks", snap, ts.Text())
			// One role per block across commands: top-stacks' rows and diff's role table sum
			// the final state's live blocks by the same roles (the roles layer decides them).
			if all, err := TopStacks(snap, TopStacksOptions{Device: AllDevices, Limit: 1 << 20}); err == nil {
				byRole := map[string]int64{}
				for _, st := range all.Sites {
					byRole[st.Category] += st.Bytes
				}
				if d, err := Diff(snap, snap, DiffOptions{Device: AllDevices, Limit: 1 << 20}); err == nil {
					diffRole := map[string]int64{}
					for _, x := range d.Roles {
						if x.BytesAfter != 0 {
							diffRole[x.Category] = x.BytesAfter
						}
					}
					for c, b := range byRole {
						if b == 0 {
							delete(byRole, c)
						}
					}
					if !reflect.DeepEqual(byRole, diffRole) {
						t.Errorf("one role per block: top-stacks sums %v by role, diff %v", byRole, diffRole)
					}
				}
			}

			rep, err := ReplaySnapshot(ctx, snap, nil, ReplayOptions{Device: AllDevices})
			if err != nil {
				t.Fatalf("replay: %v", err)
			}
			textFromStruct(t, "replay", rep)
			checkCaveats(t, "replay", snap, rep.Text())
			for _, r := range rep.Devices {
				checkRules(t, "replay", "replay", r.Advice)
				checkBursts(t, "replay", snap, r.SegmentBursts)
				for _, it := range r.Advice {
					switch it.Rule {
					case "replay.checkpointing", "replay.forward-only":
						if r.ActivationBytesAtPeak < 512*mib {
							t.Errorf("replay: %s with %d bytes of activations at the peak", it.Rule, r.ActivationBytesAtPeak)
						}
						if it.Rule == "replay.forward-only" && (r.GradMode == nil || r.GradMode.Mode != GradOn) {
							t.Errorf("replay: inference_mode advised with grad mode %v", r.GradMode)
						}
					case "replay.gc-cycles":
						if r.GCFrees.Count == 0 {
							t.Errorf("replay: gc advice without gc frees")
						}
					}
				}
				// One workload, one peak definition and one verdict on the final state per
				// device: summarize says what replay says.
				for _, d := range sum.Devices {
					if d.Device != r.Device || !r.HasTrace {
						continue
					}
					if d.Workload != "" && r.Workload != "" && d.Workload != r.Workload {
						t.Errorf("device %d: summarize says workload %s, replay %s", d.Device, d.Workload, r.Workload)
					}
					if !d.Trace.PeaksAreFinalState && (d.Trace.PeakAllocatedBytes != r.PeakAllocatedBytes || d.Trace.PeakAllocatedBasis != r.PeakAllocatedBasis) {
						t.Errorf("device %d: summarize's peak %d (%s), replay's %d (%s)", d.Device, d.Trace.PeakAllocatedBytes, d.Trace.PeakAllocatedBasis, r.PeakAllocatedBytes, r.PeakAllocatedBasis)
					}
					if d.Trace.LandsOnFinalState != r.Consistent {
						t.Errorf("device %d: summarize says the trace lands on the final state: %v, replay: %v", d.Device, d.Trace.LandsOnFinalState, r.Consistent)
					}
				}
				if r.PeakAllocatedBasis != sizeBasis(r.SizesAreRequested) {
					t.Errorf("replay: peak basis %q with sizes_are_requested %v", r.PeakAllocatedBasis, r.SizesAreRequested)
				}
			}

			oom, err := OOMReport(ctx, snap, OOMOptions{})
			if err != nil {
				t.Fatalf("oom: %v", err)
			}
			textFromStruct(t, "oom", oom)
			checkCaveats(t, "oom", snap, oom.Text())
			if strings.Contains(oom.Text(), "unwound the pass") && !slices.ContainsFunc(oom.OOMs, func(o OOMEvent) bool { return o.PassUnwound }) {
				t.Errorf("oom: says the exception unwound the pass while its tensors are still live")
			}
			for i := range oom.OOMs {
				o := &oom.OOMs[i]
				checkRules(t, "oom", "oom", o.Advice)
				if !reflect.DeepEqual(o.Fixes, adviceTexts(o.Advice)) {
					t.Errorf("oom: fixes %q are not the advice's texts", o.Fixes)
				}
				// The items are exactly what the table gives on the final numbers: nothing
				// rewrote a fix after its gate was read.
				if o.adv != nil {
					if again := advise("oom", o.adv); !reflect.DeepEqual(again, o.Advice) {
						t.Errorf("oom: advice %v, the table now gives %v", o.Advice, again)
					}
				}
				// "The exception unwound the pass" only when the unwinding freed it.
				if pass := o.RoleBytes[CategoryActivation] + o.RoleBytes[CategoryTemporary] + o.RoleBytes[CategoryBackwardTemporary]; o.Unwound && o.PassUnwound != (o.UnwoundBytes*2 >= pass) {
					t.Errorf("oom: pass_unwound %v with %d bytes unwound of %d in the pass", o.PassUnwound, o.UnwoundBytes, pass)
				}
				live := o.AllocatedBytes
				for _, b := range o.RoleBytes {
					live = max(live, b)
				}
				for _, it := range o.Advice {
					switch {
					case (it.Rule == "oom.cap.forward-no-backward" || it.Rule == "oom.cap.inference-activations") && o.GradMode != GradOn && strings.Contains(it.Text, "inference_mode"):
						t.Errorf("oom: %s says inference_mode with grad mode %q", it.Rule, o.GradMode)
					case it.Rule == "oom.cap.communication" && len(bucketKnobs(o.Frameworks)) == 0:
						t.Errorf("oom: bucket sizes advised with frameworks %v", o.Frameworks)
					case it.Rule == "oom.cap.shard-model":
						if st := o.RoleBytes[CategoryParameter] + o.RoleBytes[CategoryGradient] + o.RoleBytes[CategoryOptimizerState]; !material(st, live) {
							t.Errorf("oom: shard the model with the model's state at %d of %d live bytes", st, live)
						}
					case strings.HasPrefix(it.Rule, "oom.frag.expandable") && o.Verdict != VerdictFragmentation:
						t.Errorf("oom: %s under verdict %s", it.Rule, o.Verdict)
					case it.Rule == "oom.frag.expandable" && o.ExpandableWhatIf != nil && o.ExpandableWhatIf.BaselineReproduced && !o.ExpandableWhatIf.Avoided:
						t.Errorf("oom: expandable segments advised where the what-if shows they do not avoid the OOM")
					}
				}
			}

			fr, err := Fragmentation(snap, FragOptions{Device: AllDevices})
			if err != nil {
				t.Fatalf("fragmentation: %v", err)
			}
			textFromStruct(t, "fragmentation", fr)
			checkCaveats(t, "fragmentation", snap, fr.Text())
			if !reflect.DeepEqual(fr.Advice, adviceTexts(fr.AdviceItems)) {
				t.Errorf("fragmentation: advice %q is not the items' texts", fr.Advice)
			}
			for _, it := range fr.AdviceItems {
				if r, ok := ruleByID(it.Rule); !ok || (r.Command != "fragmentation" && r.Command != "bursts") {
					t.Errorf("fragmentation: advice %q from rule %q", it.Text, it.Rule)
				}
				if fr.Verdict == FragLittleFree && strings.Contains(it.Text, "expandable_segments:True") {
					t.Errorf("fragmentation: expandable segments advised under %s: %s", fr.Verdict, it.Text)
				}
			}
			checkBursts(t, "fragmentation", snap, fr.SegmentBursts)
			// fragmentation's trace peak is replay's.
			if fr.TracePeakAllocatedBytes > 0 {
				for _, r := range rep.Devices {
					if r.Device == fr.TracePeakDevice && (r.PeakAllocatedBytes != fr.TracePeakAllocatedBytes || r.PeakAllocatedEvent != fr.TracePeakEvent || r.PeakAllocatedBasis != fr.TracePeakAllocatedBasis) {
						t.Errorf("fragmentation's trace peak %d at event %d (%s), replay's %d at event %d (%s)", fr.TracePeakAllocatedBytes, fr.TracePeakEvent, fr.TracePeakAllocatedBasis, r.PeakAllocatedBytes, r.PeakAllocatedEvent, r.PeakAllocatedBasis)
					}
				}
			}

			if c, err := Check(ctx, snap, CheckOptions{MaxPeakBytes: 1 << 40, MaxReservedBytes: 1 << 40, Device: AllDevices}); err == nil {
				textFromStruct(t, "check", c)
				checkCaveats(t, "check", snap, c.Text())
				// check's peak is replay's, in the basis it says.
				for _, b := range c.Budgets {
					if b.Budget != "max-peak" || b.Measure != "peak_allocated" {
						continue
					}
					for _, r := range rep.Devices {
						if r.Device == b.Device && r.HasTrace && b.ValueBasis == r.PeakAllocatedBasis && b.ValueBytes != r.PeakAllocatedBytes {
							t.Errorf("check's peak on device %d is %d (%s), replay's %d", b.Device, b.ValueBytes, b.ValueBasis, r.PeakAllocatedBytes)
						}
					}
				}
			}
			if snap.Caps.HasTrace {
				wi, err := WhatIf(ctx, snap, nil, WhatIfOptions{Settings: []WhatIfSetting{{Key: "expandable_segments", Value: "True"}}})
				if err == nil {
					textFromStruct(t, "whatif", wi)
					checkCaveats(t, "whatif", snap, wi.Text())
					// whatif's recorded peak is replay's, labelled alike; its runs count rounded bytes.
					for _, d := range wi.Devices {
						if d.PeakAllocatedBasis != "rounded" {
							t.Errorf("whatif device %d: runs' peaks not labelled rounded", d.Device)
						}
						for _, r := range rep.Devices {
							f := d.Fidelity
							if r.Device == d.Device && f.RecordedPeakAllocatedBytes > 0 && (f.RecordedPeakAllocatedBytes != r.PeakAllocatedBytes || f.RecordedPeakAllocatedBasis != r.PeakAllocatedBasis) {
								t.Errorf("whatif device %d: recorded peak %d (%s), replay's %d (%s)", d.Device, f.RecordedPeakAllocatedBytes, f.RecordedPeakAllocatedBasis, r.PeakAllocatedBytes, r.PeakAllocatedBasis)
							}
						}
					}
				}
			}
		}
	}
}

// TestConsistencyDiff: diff of two files that are not one run never tells the user to take
// two snapshots of one process but once, as a note, and leads with the peaks when both have them.
func TestConsistencyDiff(t *testing.T) {
	ctx := context.Background()
	pairs := [][2]string{
		{"pt2.5-2.7_pair-A-fp32-forward_cs336-silmont.pickle", "pt2.5-2.7_pair-B-bf16-forward_cs336-silmont.pickle"},
		{"pt2.5-2.7_small-full-trace_cs336.pickle", "pt2.5-2.7_torch-compile_cpp-frames_cs336-fwd.pickle"},
	}
	for _, p := range pairs {
		a, err := load.File(ctx, filepath.Join(realDir, p[0]), load.Options{})
		if err != nil {
			t.Skipf("real snapshots not available: %v", err)
		}
		b, err := load.File(ctx, filepath.Join(realDir, p[1]), load.Options{})
		if err != nil {
			t.Fatal(err)
		}
		r, err := Diff(a, b, DiffOptions{Device: AllDevices})
		if err != nil {
			t.Fatal(err)
		}
		textFromStruct(t, "diff", r)
		checkRules(t, "diff", "diff", r.Advice)
		text := r.Text()
		if r.sameRun() {
			continue
		}
		if n := strings.Count(text, "take two snapshots of the same process"); n != 1 {
			t.Errorf("%s vs %s: 'take two snapshots' said %d times:\n%s", p[0], p[1], n, text)
		}
		if r.PeakBeforeBytes != nil && r.PeakAfterBytes != nil && !strings.HasPrefix(text, "peak ") {
			t.Errorf("%s vs %s: a comparison of two runs does not lead with the peaks:\n%s", p[0], p[1], text)
		}
		checkCaveats(t, "diff", a, text)
	}
}
