package sim

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// The tests recompute, straight from each snapshot's frames, the site (innermost model-code
// frame: a file under ProjDir, transformers' models/<arch>/modeling_<arch>.py or vLLM's
// model_executor/models/) and the user site (innermost frame under ProjDir) of every live block
// and of every block live at the replayed peak, and compare bytes and blocks per (site, user
// site) with the scenario's own ground truth.

func isModelFile(path string) bool {
	if strings.HasPrefix(path, ProjDir+"/") {
		return true
	}
	if i := strings.Index(path, "/transformers/models/"); i >= 0 {
		base := path[strings.LastIndex(path, "/")+1:]
		return strings.HasPrefix(base, "modeling_")
	}
	return strings.Contains(path, "/vllm/model_executor/models/")
}

func fwSites(frames []snapshot.Frame) (site, user string) {
	for _, f := range frames {
		if site == "" && isModelFile(f.Filename) {
			site = Site(f.Filename, f.Line, f.Name)
		}
		if user == "" && strings.HasPrefix(f.Filename, ProjDir+"/") {
			user = Site(f.Filename, f.Line, f.Name)
		}
	}
	return site, user
}

type fwKey struct{ site, user string }
type fwVal struct{ bytes, blocks int64 }

func fwGroup(rows []FwRow) map[fwKey]fwVal {
	out := map[fwKey]fwVal{}
	for _, r := range rows {
		v := out[fwKey{r.Site, r.UserSite}]
		v.bytes += r.Bytes
		v.blocks += r.Blocks
		out[fwKey{r.Site, r.UserSite}] = v
	}
	return out
}

func fwDump(m map[fwKey]fwVal) string {
	var ks []string
	for k, v := range m {
		ks = append(ks, fmt.Sprintf("  %s | %s | %d B | %d", k.site, k.user, v.bytes, v.blocks))
	}
	sort.Strings(ks)
	return strings.Join(ks, "\n")
}

// fwFinal groups the snapshot's active_allocated blocks.
func fwFinal(sn *snapshot.Snapshot) map[fwKey]fwVal {
	out := map[fwKey]fwVal{}
	for _, seg := range sn.Segments {
		for _, b := range seg.Blocks {
			if b.State != snapshot.StateActiveAllocated {
				continue
			}
			s, u := fwSites(sn.StackFrames(b.Stack))
			v := out[fwKey{s, u}]
			v.bytes += b.Size
			v.blocks++
			out[fwKey{s, u}] = v
		}
	}
	return out
}

// fwReplayPeak replays device 0's trace (alloc adds, free_completed removes) and groups the
// blocks live at the first event reaching the maximum allocated bytes.
func fwReplayPeak(sn *snapshot.Snapshot) (peak int64, at int, live map[fwKey]fwVal) {
	type blk struct {
		size  int64
		stack snapshot.StackID
	}
	cur := int64(0)
	alive := map[uint64]blk{}
	var best map[uint64]blk
	for i, ev := range sn.DeviceTraces[0] {
		switch ev.Action {
		case snapshot.ActionAlloc:
			alive[ev.Addr] = blk{ev.Size, ev.Stack}
			cur += ev.Size
			if cur > peak {
				peak, at = cur, i
				best = map[uint64]blk{}
				for a, b := range alive {
					best[a] = b
				}
			}
		case snapshot.ActionFreeCompleted:
			cur -= alive[ev.Addr].size
			delete(alive, ev.Addr)
		}
	}
	live = map[fwKey]fwVal{}
	for _, b := range best {
		s, u := fwSites(sn.StackFrames(b.stack))
		v := live[fwKey{s, u}]
		v.bytes += b.size
		v.blocks++
		live[fwKey{s, u}] = v
	}
	return peak, at, live
}

func TestFrameworkScenariosGroundTruth(t *testing.T) {
	names := map[string]bool{}
	for _, fn := range FrameworkScenarios() {
		sn, tr := fn()
		if names[tr.Name] || !strings.HasPrefix(tr.Name, "fw_") {
			t.Errorf("bad or duplicate name %q", tr.Name)
		}
		names[tr.Name] = true
		if err := CheckInvariants(sn); err != nil {
			t.Fatalf("%s: %v", tr.Name, err)
		}
		if got, want := fwFinal(sn), fwGroup(tr.Final); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: final state by site\n got:\n%s\nwant:\n%s", tr.Name, fwDump(got), fwDump(want))
		}
		peak, at, live := fwReplayPeak(sn)
		if peak != tr.PeakBytes || at != tr.PeakEvent {
			t.Errorf("%s: replayed peak %d at event %d, truth %d at %d", tr.Name, peak, at, tr.PeakBytes, tr.PeakEvent)
		}
		if want := fwGroup(tr.Peak); !reflect.DeepEqual(live, want) {
			t.Errorf("%s: live at peak by site\n got:\n%s\nwant:\n%s", tr.Name, fwDump(live), fwDump(want))
		}
		var sum int64
		for _, r := range tr.Peak {
			sum += r.Bytes
		}
		if sum != tr.PeakBytes {
			t.Errorf("%s: peak rows sum to %d, peak %d", tr.Name, sum, tr.PeakBytes)
		}
		// Every block is a multiple of 512 B: requested == block size everywhere.
		for _, seg := range sn.Segments {
			for _, b := range seg.Blocks {
				if b.State == snapshot.StateActiveAllocated && b.RequestedSize != b.Size {
					t.Errorf("%s: block %#x requested %d size %d", tr.Name, b.Address, b.RequestedSize, b.Size)
				}
			}
		}
		// Workload shape: inference files have no backward and no torch.optim frame at all.
		optim := false
		for _, f := range sn.Frames {
			if strings.Contains(f.Filename, "/torch/optim/") || strings.Contains(f.Name, "AccumulateGrad") {
				optim = true
			}
		}
		if (tr.Workload == "inference") == optim || (tr.Workload == "inference") != (tr.Backwards == 0) {
			t.Errorf("%s: workload %s but optimizer/backward frames %v", tr.Name, tr.Workload, optim)
		}
		// Steps are ordered, disjoint ranges of the trace.
		last := -1
		for _, r := range tr.Steps {
			if r[0] <= last || r[1] < r[0] || r[1] >= len(sn.DeviceTraces[0]) {
				t.Errorf("%s: step range %v after %d", tr.Name, r, last)
			}
			last = r[1]
		}
	}
}

// TestFrameworkSiteRules checks the framework-specific site claims on the frames themselves.
func TestFrameworkSiteRules(t *testing.T) {
	for _, fn := range FrameworkScenarios() {
		sn, tr := fn()
		for _, seg := range sn.Segments {
			for _, b := range seg.Blocks {
				if b.State != snapshot.StateActiveAllocated {
					continue
				}
				frames := sn.StackFrames(b.Stack)
				site, _ := fwSites(frames)
				for _, bad := range []string{"/accelerate/hooks.py", "/modeling_utils.py", "/tmp/torchinductor_", "/lightning/", "/deepspeed/"} {
					if strings.Contains(site, bad) {
						t.Errorf("%s: site %s", tr.Name, site)
					}
				}
			}
		}
		roles := map[string]bool{}
		for _, r := range append(append([]FwRow{}, tr.Final...), tr.Peak...) {
			roles[r.Role] = true
		}
		switch tr.Name {
		case "fw_lightning_closure.pickle":
			// Activations at the peak have torch/optim frames outside the model call.
			_, at, _ := fwReplayPeak(sn)
			found := false
			for _, ev := range sn.DeviceTraces[0][:at+1] {
				fr := sn.StackFrames(ev.Stack)
				if ev.Action == snapshot.ActionAlloc && len(fr) > 0 && strings.Contains(fmt.Sprint(fr), "model.py") && strings.Contains(fmt.Sprint(fr), "/torch/optim/adam.py") {
					found = true
				}
			}
			if !found || !roles[RoleActivation] || !roles[RoleUserContainer] {
				t.Errorf("%s: no activation under torch/optim frames, roles %v", tr.Name, roles)
			}
		case "fw_vllm_kv_cache.pickle", "fw_hf_generate.pickle":
			if !roles[RoleKVCache] || roles[RoleUserContainer] || tr.Workload != "inference" {
				t.Errorf("%s: roles %v", tr.Name, roles)
			}
		case "fw_autocast_bf16.pickle":
			if !roles[RoleAutocastCache] || !roles[RoleWorkspace] {
				t.Errorf("%s: roles %v", tr.Name, roles)
			}
		case "fw_deepspeed_zero2.pickle":
			if !roles[RoleCommunication] || !roles[RoleOptimizerState] {
				t.Errorf("%s: roles %v", tr.Name, roles)
			}
		}
	}
	// Every role has a positive case somewhere.
	all := map[string]bool{}
	for _, fn := range FrameworkScenarios() {
		_, tr := fn()
		for _, r := range append(tr.Final, tr.Peak...) {
			all[r.Role] = true
		}
	}
	for _, r := range []string{RoleParameter, RoleGradient, RoleOptimizerState, RoleActivation, RoleTemporary, RoleBackwardTemporary,
		RoleCommunication, RoleKVCache, RoleAutocastCache, RoleWorkspace, RoleUserContainer, RoleOther} {
		if !all[r] {
			t.Errorf("no positive case for role %s", r)
		}
	}
}

func TestFrameworkScenariosDeterministic(t *testing.T) {
	for _, fn := range FrameworkScenarios() {
		a, ta := fn()
		b, tb := fn()
		if fmt.Sprint(a.Segments, a.DeviceTraces, a.Stacks, a.Frames) != fmt.Sprint(b.Segments, b.DeviceTraces, b.Stacks, b.Frames) || !reflect.DeepEqual(ta, tb) {
			t.Errorf("%s differs between runs", ta.Name)
		}
	}
}
