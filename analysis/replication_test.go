package analysis

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis/sim"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

func asRanks(snaps []*snapshot.Snapshot) []snapshot.Rank {
	out := make([]snapshot.Rank, len(snaps))
	for i, s := range snaps {
		out[i] = snapshot.Rank{Rank: i, File: fmt.Sprintf("rank%d.pickle", i), Snap: s}
	}
	return out
}

func TestReplicationDDP(t *testing.T) {
	for _, n := range []int{2, 4} {
		r, err := Replication(context.Background(), asRanks(sim.DDPRanks(n)), ReplicationOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Verdict != ReplicationReplicated || r.Ranks != n || len(r.PerRank) != n {
			t.Fatalf("n=%d: verdict %s: %s", n, r.Verdict, r.Text())
		}
		for _, st := range r.PerRank {
			want := RankModelState{Rank: st.Rank, File: st.File, AllocatedBytes: sim.DDPParamBytes + sim.DDPBucketBytes + sim.DDPGradBytes + sim.DDPOptimizerBytes + sim.DDPBatchBytes,
				ParameterBytes: sim.DDPParamBytes, GradientBytes: sim.DDPGradBytes, OptimizerStateBytes: sim.DDPOptimizerBytes,
				DDPBucketBytes: sim.DDPBucketBytes, DDPFrame: "torch/nn/parallel/distributed.py:1190 in _ddp_init_helper", HasStacks: true}
			if st != want {
				t.Errorf("n=%d rank %d = %+v\nwant %+v", n, st.Rank, st, want)
			}
		}
		model := int64(sim.DDPParamBytes + sim.DDPGradBytes + sim.DDPOptimizerBytes)
		if r.ModelStateBytes != model || !r.Dominates || r.ModelStatePercent != 79.7 {
			t.Errorf("n=%d: model state %d (%.1f%%) dominates %v", n, r.ModelStateBytes, r.ModelStatePercent, r.Dominates)
		}
		k := int64(n)
		wantSave := []int64{sim.DDPOptimizerBytes * (k - 1) / k, (sim.DDPOptimizerBytes + sim.DDPGradBytes) * (k - 1) / k, model * (k - 1) / k}
		for i, s := range r.Savings {
			if s.Bytes != wantSave[i] {
				t.Errorf("n=%d: saving %s = %d, want %d", n, s.Strategy, s.Bytes, wantSave[i])
			}
		}
		if len(r.Savings) != 3 || !strings.Contains(r.Recommendation, "FSDP") || !strings.Contains(r.Recommendation, "ZeRO-3") ||
			!strings.Contains(r.Recommendation, FormatBytes(wantSave[2])+" per rank") || !strings.Contains(r.Evidence, "DistributedDataParallel") {
			t.Errorf("n=%d: %s", n, r.Text())
		}
		notes, err := ReplicationNotes(context.Background(), asRanks(sim.DDPRanks(n)), ReplicationOptions{})
		if err != nil || len(notes) != 2 || notes[0] != r.Evidence || notes[1] != r.Recommendation {
			t.Errorf("notes = %v, %v", notes, err)
		}
	}
}

func TestReplicationOthers(t *testing.T) {
	noStacks := func() []*snapshot.Snapshot {
		var out []*snapshot.Snapshot
		for r := 0; r < 2; r++ {
			s := sim.New(sim.Config{Device: r, NumDevices: 2, Context: "none"})
			if _, err := s.Alloc(4*sim.MiB, 0, sim.Op("empty")); err != nil {
				t.Fatal(err)
			}
			out = append(out, s.Snapshot())
		}
		return out
	}
	tests := []struct {
		name     string
		snaps    []*snapshot.Snapshot
		verdict  string
		evidence string
	}{
		{"fsdp", sim.FSDPRanks(4), ReplicationSharded, "rank 0 shows a sharding frame (torch/distributed/fsdp/_flat_param.py:751 in flatten_tensors_into_flat_param)"},
		{"single rank", sim.DDPRanks(1), ReplicationSingleRank, "fewer than two rank snapshots"},
		{"no stacks", noStacks(), ReplicationUnknown, "no rank file records stacks"},
		// plain data parallel without DDP frames: replicated; the outlier rank's 1.5 GiB of
		// gathered predictions do not decide (the median rank does): model state dominates.
		{"multirank outlier", sim.MultiRank(4), ReplicationReplicated, "data-parallel replication (DDP style)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Replication(context.Background(), asRanks(tc.snaps), ReplicationOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if r.Verdict != tc.verdict || !strings.Contains(r.Evidence, tc.evidence) {
				t.Errorf("verdict %s evidence %q, want %s %q", r.Verdict, r.Evidence, tc.verdict, tc.evidence)
			}
			switch tc.verdict {
			case ReplicationReplicated:
				// median rank: params 24 MiB + AdamW 48 MiB + 5×512 B step tensors of 72.5 MiB
				if !r.Dominates || r.ModelStateBytes != 72*mib+5*512 || r.Savings[2].Bytes != (72*mib+5*512)*3/4 ||
					!strings.Contains(r.Recommendation, "FSDP") || !strings.Contains(strings.Join(r.Notes, " "), "no gradients are alive") {
					t.Errorf("model state %d, recommendation %q, notes %v", r.ModelStateBytes, r.Recommendation, r.Notes)
				}
			default:
				if len(r.Savings) != 0 || r.Recommendation != "" {
					t.Errorf("savings %v recommendation %q", r.Savings, r.Recommendation)
				}
			}
			if r.Text() == "" {
				t.Error("empty text")
			}
		})
	}
	// Replicated but dominated by other memory (1 GiB of activations on each rank).
	ddp := sim.DDPRanks(2)
	for _, s := range ddp {
		fwd := snapshot.StackID(len(s.Stacks)) // a forward allocation: model.py:41 through linear.py
		s.Frames = append(s.Frames, fr("/usr/lib/python3.11/site-packages/torch/nn/modules/linear.py", 125, "forward"), fr("/workspace/proj/model.py", 41, "forward"))
		s.Stacks = append(s.Stacks, []snapshot.FrameID{snapshot.FrameID(len(s.Frames) - 2), snapshot.FrameID(len(s.Frames) - 1)})
		s.Segments = append(s.Segments, snapshot.Segment{Device: s.Segments[0].Device, Address: 1 << 50, TotalSize: gib, SegmentType: "large",
			Blocks: []snapshot.Block{{Address: 1 << 50, Size: gib, RequestedSize: gib, State: snapshot.StateActiveAllocated, Stack: fwd}}})
	}
	r, err := Replication(context.Background(), asRanks(ddp), ReplicationOptions{})
	// model state 96 MiB of 1 GiB + 120.5 MiB allocated: 8.4%
	if err != nil || r.Verdict != ReplicationReplicated || r.Dominates || r.ModelStatePercent != 8.4 ||
		!strings.Contains(r.Recommendation, "other memory (activations, buffers) dominates") {
		t.Errorf("dominated by other memory: %v %s", err, r.Text())
	}
	if _, err := Replication(context.Background(), []snapshot.Rank{{Rank: 0}, {Rank: 1}}, ReplicationOptions{}); err == nil {
		t.Error("nil snapshots: no error")
	}
}
