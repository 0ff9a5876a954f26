package analysis

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// ReplicationOptions tunes Replication.
type ReplicationOptions struct {
	Attribution AttributionOptions `json:"attribution"`
}

// Replication verdicts.
const (
	ReplicationReplicated = "replicated"  // full-size model state on every rank, no sharding frames (DDP style)
	ReplicationSharded    = "sharded"     // FSDP / ZeRO / DeepSpeed frames found
	ReplicationSingleRank = "single_rank" // fewer than two ranks
	ReplicationUnknown    = "unknown"     // the files cannot tell (no stacks, ranks differ)
)

// RankModelState is the model state one rank holds in its final state, by category.
type RankModelState struct {
	Rank                int    `json:"rank"`
	File                string `json:"file"`
	AllocatedBytes      int64  `json:"allocated_bytes"`
	ParameterBytes      int64  `json:"parameter_bytes"`
	GradientBytes       int64  `json:"gradient_bytes"`
	OptimizerStateBytes int64  `json:"optimizer_state_bytes"`
	// DDPBucketBytes: blocks allocated by DistributedDataParallel's Reducer (gradient buckets).
	DDPBucketBytes int64 `json:"ddp_bucket_bytes"`
	// ShardingFrame / DDPFrame: the first frame of the file naming FSDP/ZeRO or DDP (evidence).
	ShardingFrame string `json:"sharding_frame,omitempty"`
	DDPFrame      string `json:"ddp_frame,omitempty"`
	HasStacks     bool   `json:"has_stacks"`
}

// ShardingSaving is the memory per rank a sharding strategy would save.
type ShardingSaving struct {
	Strategy string `json:"strategy"`
	Shards   string `json:"shards"`
	Bytes    int64  `json:"bytes"`
}

// ReplicationResult says whether data-parallel ranks replicate the full model state.
type ReplicationResult struct {
	Ranks   int              `json:"ranks"`
	PerRank []RankModelState `json:"per_rank"`
	Verdict string           `json:"verdict"`
	// Evidence explains the verdict with numbers and frames.
	Evidence string `json:"evidence"`
	// ModelStateBytes is parameters + gradients + optimizer state on the median rank (by
	// allocated memory, so one outlier rank does not decide); ModelStatePercent its share of
	// that rank's allocated memory.
	ModelStateBytes   int64   `json:"model_state_bytes"`
	ModelStatePercent float64 `json:"model_state_percent"`
	// Dominates: model state is at least half of allocated memory.
	Dominates bool `json:"dominates"`
	// Savings per rank of sharding over the ranks present ((N-1)/N of the sharded bytes), for
	// a replicated run.
	Savings        []ShardingSaving `json:"savings"`
	Recommendation string           `json:"recommendation"`
	Notes          []string         `json:"notes"`
}

var shardingMarkers = []string{"torch/distributed/fsdp/", "torch/distributed/_composable/fsdp", "torch/distributed/_composable/fully_shard",
	"deepspeed/runtime/zero", "_flat_param", "FlatParameter", "fully_shard", "FullyShardedDataParallel", "ZeroRedundancyOptimizer",
	"torch/distributed/optim/zero_redundancy_optimizer"}

var ddpMarkers = []string{"torch/nn/parallel/distributed.py", "c10d::Reducer", "DistributedDataParallel"}

func frameHas(f snapshot.Frame, markers []string) bool {
	p := normPath(f.Filename)
	for _, m := range markers {
		if strings.Contains(p, m) || strings.Contains(f.Name, m) {
			return true
		}
	}
	return false
}

// rankModelState reads one rank's final state.
func rankModelState(ctx context.Context, r snapshot.Rank, a *Attributor) (RankModelState, error) {
	st := RankModelState{Rank: r.Rank, File: r.File}
	snap := r.Snap
	if snap == nil {
		return st, fmt.Errorf("replication: rank %d (%s): no snapshot", r.Rank, r.File)
	}
	// Evidence frames: a Python frame when there is one, else a C++ frame.
	for _, python := range []bool{true, false} {
		for _, f := range snap.Frames {
			if snapshot.IsCppFrame(f) == python {
				continue
			}
			if st.ShardingFrame == "" && frameHas(f, shardingMarkers) {
				st.ShardingFrame = frameString(f)
			}
			if st.DDPFrame == "" && frameHas(f, ddpMarkers) {
				st.DDPFrame = frameString(f)
			}
		}
	}
	st.HasStacks = snap.Caps.FramesOnBlocks
	ddpStack := map[snapshot.StackID]bool{}
	roles := rolesWith(snap, a)
	for si := range snap.Segments {
		if si&0xfff == 0 {
			if err := ctx.Err(); err != nil {
				return st, fmt.Errorf("replication: %w", err)
			}
		}
		for _, b := range snap.Segments[si].Blocks {
			if b.State != snapshot.StateActiveAllocated {
				continue
			}
			st.AllocatedBytes += b.Size
			isDDP, ok := ddpStack[b.Stack]
			if !ok {
				for _, f := range snap.StackFrames(b.Stack) {
					if frameHas(f, ddpMarkers) {
						isDDP = true
						break
					}
				}
				ddpStack[b.Stack] = isDDP
			}
			if isDDP {
				st.DDPBucketBytes += b.Size
				continue
			}
			switch roles.Block(snap.Segments[si].Device, b).Category {
			case CategoryParameter:
				st.ParameterBytes += b.Size
			case CategoryGradient:
				st.GradientBytes += b.Size
			case CategoryOptimizerState:
				st.OptimizerStateBytes += b.Size
			}
		}
	}
	return st, nil
}

// equalish: every value within 1% of the largest.
func equalish(v []int64) bool {
	lo, hi := slices.Min(v), slices.Max(v)
	return hi-lo <= hi/100
}

// Replication compares the model state of data-parallel ranks (one snapshot per rank, as from
// load.Dir). When every rank holds the same full-size parameters (and gradients, optimizer
// state) and no file shows an FSDP / ZeRO / DeepSpeed frame, the run replicates the model
// (DistributedDataParallel style); when that model state is at least half of the memory it
// recommends sharding, with the saving per rank: (N-1)/N of the sharded bytes for N ranks.
func Replication(ctx context.Context, ranks []snapshot.Rank, opt ReplicationOptions) (*ReplicationResult, error) {
	a, err := NewAttributor(opt.Attribution)
	if err != nil {
		return nil, fmt.Errorf("replication: %w", err)
	}
	r := &ReplicationResult{Ranks: len(ranks), PerRank: []RankModelState{}, Savings: []ShardingSaving{}, Notes: []string{}, Verdict: ReplicationUnknown}
	for _, rk := range ranks {
		st, err := rankModelState(ctx, rk, a)
		if err != nil {
			return nil, err
		}
		r.PerRank = append(r.PerRank, st)
	}
	n := len(r.PerRank)
	if n < 2 {
		r.Verdict = ReplicationSingleRank
		r.Evidence = "fewer than two rank snapshots: replication across ranks cannot be judged"
		return r, nil
	}
	var params, grads, opts []int64
	noStacks := 0
	for _, st := range r.PerRank {
		params = append(params, st.ParameterBytes)
		grads = append(grads, st.GradientBytes)
		opts = append(opts, st.OptimizerStateBytes)
		if !st.HasStacks {
			noStacks++
		}
		if st.ShardingFrame != "" && r.Verdict != ReplicationSharded {
			r.Verdict = ReplicationSharded
			r.Evidence = fmt.Sprintf("rank %d shows a sharding frame (%s): parameters, gradients or optimizer state are sharded (FSDP / ZeRO)", st.Rank, st.ShardingFrame)
		}
	}
	byAlloc := slices.Clone(r.PerRank)
	slices.SortStableFunc(byAlloc, func(x, y RankModelState) int { return cmp.Compare(x.AllocatedBytes, y.AllocatedBytes) })
	big := byAlloc[(n-1)/2]
	r.ModelStateBytes = big.ParameterBytes + big.GradientBytes + big.OptimizerStateBytes
	r.ModelStatePercent = pct(r.ModelStateBytes, big.AllocatedBytes)
	r.Dominates = big.AllocatedBytes > 0 && 2*r.ModelStateBytes >= big.AllocatedBytes
	if noStacks > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d of %d rank files have no stacks on their blocks: parameters, gradients and optimizer state cannot be told apart there", noStacks, n))
	}
	for _, rk := range ranks {
		if rk.Snap != nil && rk.Snap.Caps.PythonOnly {
			r.Notes = append(r.Notes, "Python-only stacks: gradients allocated by the autograd engine have no frame and are not counted as gradients")
			break
		}
	}
	r.Notes = append(r.Notes, fmt.Sprintf("assumes the %d files are every rank of one data-parallel job (world size %d); savings scale with the real world size", n, n))
	if r.Verdict == ReplicationSharded {
		return r, nil
	}
	switch {
	case noStacks == n:
		r.Evidence = "no rank file records stacks: the files cannot tell whether the model state is replicated"
		return r, nil
	case slices.Max(params) == 0:
		r.Evidence = "no parameter memory recognised on any rank (no frames of model construction or .to()): replication cannot be judged"
		return r, nil
	case !equalish(params):
		r.Evidence = fmt.Sprintf("parameter bytes differ across ranks (%s to %s): not a plain data-parallel replica", FormatBytes(slices.Min(params)), FormatBytes(slices.Max(params)))
		return r, nil
	}
	r.Verdict = ReplicationReplicated
	ev := fmt.Sprintf("every one of the %d ranks holds the same full-size model state: %s of parameters", n, FormatBytes(big.ParameterBytes))
	if equalish(grads) && big.GradientBytes > 0 {
		ev += fmt.Sprintf(", %s of gradients", FormatBytes(big.GradientBytes))
	}
	if equalish(opts) && big.OptimizerStateBytes > 0 {
		ev += fmt.Sprintf(", %s of optimizer state", FormatBytes(big.OptimizerStateBytes))
	}
	if big.DDPBucketBytes > 0 {
		ev += fmt.Sprintf(", plus %s of DDP gradient buckets", FormatBytes(big.DDPBucketBytes))
	}
	ev += "; no FSDP / ZeRO / DeepSpeed frame in any file"
	if big.DDPFrame != "" {
		ev += fmt.Sprintf("; DistributedDataParallel frames (%s): DDP replicates the model on every rank", big.DDPFrame)
	} else {
		ev += ": data-parallel replication (DDP style)"
	}
	r.Evidence = ev
	if slices.Max(grads) == 0 {
		r.Notes = append(r.Notes, "no gradients are alive in these snapshots (taken after zero_grad or before backward): during backward each rank also holds full-size gradients, as much again as the parameters")
	}
	f := func(b int64) int64 { return b * int64(n-1) / int64(n) }
	r.Savings = []ShardingSaving{
		{Strategy: "ZeRO-1 (shard optimizer state: DeepSpeed stage 1, ZeroRedundancyOptimizer)", Shards: "optimizer state", Bytes: f(big.OptimizerStateBytes)},
		{Strategy: "ZeRO-2 (also shard gradients: DeepSpeed stage 2, FSDP SHARD_GRAD_OP)", Shards: "optimizer state, gradients", Bytes: f(big.OptimizerStateBytes + big.GradientBytes)},
		{Strategy: "ZeRO-3 / FSDP FULL_SHARD (also shard parameters)", Shards: "optimizer state, gradients, parameters", Bytes: f(r.ModelStateBytes)},
	}
	if r.Dominates {
		r.Recommendation = fmt.Sprintf("parameters, gradients and optimizer state are %.0f%% of the median rank's allocated memory (%s of %s) and every rank holds a full copy: shard them with FSDP (FULL_SHARD) or DeepSpeed ZeRO-3 to save about %s per rank ((N-1)/N with N=%d; ZeRO-1 alone saves %s, ZeRO-2 %s)",
			r.ModelStatePercent, FormatBytes(r.ModelStateBytes), FormatBytes(big.AllocatedBytes), FormatBytes(r.Savings[2].Bytes), n,
			FormatBytes(r.Savings[0].Bytes), FormatBytes(r.Savings[1].Bytes))
		if big.DDPBucketBytes > 0 {
			r.Recommendation += fmt.Sprintf("; FSDP also drops DDP's %s of gradient buckets", FormatBytes(big.DDPBucketBytes))
		}
	} else {
		r.Recommendation = fmt.Sprintf("model state is only %.0f%% of allocated memory: sharding it would save about %s per rank, but other memory (activations, buffers) dominates",
			r.ModelStatePercent, FormatBytes(r.Savings[2].Bytes))
	}
	return r, nil
}

// Text renders the verdict.
func (r *ReplicationResult) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "data-parallel replication over %d ranks: %s\n", r.Ranks, r.Verdict)
	for _, st := range r.PerRank {
		fmt.Fprintf(&b, "  rank %d: allocated %s; parameters %s, gradients %s, optimizer state %s",
			st.Rank, FormatBytes(st.AllocatedBytes), FormatBytes(st.ParameterBytes), FormatBytes(st.GradientBytes), FormatBytes(st.OptimizerStateBytes))
		if st.DDPBucketBytes > 0 {
			fmt.Fprintf(&b, ", DDP buckets %s", FormatBytes(st.DDPBucketBytes))
		}
		b.WriteString("\n")
	}
	if r.Evidence != "" {
		fmt.Fprintf(&b, "  %s\n", r.Evidence)
	}
	for _, s := range r.Savings {
		fmt.Fprintf(&b, "  %s: saves about %s per rank\n", s.Strategy, FormatBytes(s.Bytes))
	}
	if r.Recommendation != "" {
		fmt.Fprintf(&b, "  recommendation: %s\n", r.Recommendation)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	return b.String()
}

// ReplicationNotes is Replication reduced to notes for a summary: the verdict's evidence and
// recommendation for a replicated or sharded run, nothing otherwise.
func ReplicationNotes(ctx context.Context, ranks []snapshot.Rank, opt ReplicationOptions) ([]string, error) {
	r, err := Replication(ctx, ranks, opt)
	if err != nil {
		return nil, err
	}
	switch r.Verdict {
	case ReplicationReplicated:
		return []string{r.Evidence, r.Recommendation}, nil
	case ReplicationSharded:
		return []string{r.Evidence}, nil
	}
	return []string{}, nil
}
