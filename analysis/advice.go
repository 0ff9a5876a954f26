package analysis

import (
	"fmt"
	"slices"
	"strings"
)

//go:generate go test -run TestAdviceDoc -update

// Advice is one table of rules (adviceRules): each has an id, a gate over the facts and the
// numbers a report computed, and the sentence it produces. The reports state facts and
// verdicts and hand them to advise; they never word advice of their own (TestAdviceOnlyInTable
// keeps every advice sentence in this file). Every item a report carries names its rule, so a
// reader (and the consistency test) can check the gate against the numbers beside it.
// docs/advice.md is generated from the table (TestAdviceDoc; -update rewrites it).
//
// The table lives inside package analysis, not in a package above the reports, because the
// reports' result structs carry their advice (the JSON contract) and are built in one pass.

// AdviceItem is one piece of advice and the rule that produced it.
type AdviceItem struct {
	Rule string `json:"rule"`
	Text string `json:"text"`
}

// adviceRule is one row of the table.
type adviceRule struct {
	ID      string
	Command string // the report that carries it
	Gate    string // the gate in words, for docs/advice.md
	Says    string // what the sentence says, in words, for docs/advice.md
	when    func(in *adviceIn) bool
	text    func(in *adviceIn) string
	// weight orders a report's items, most first (nil: after the weighted ones, in table order).
	weight func(in *adviceIn) int64
}

// adviceIn is what the gates read: the report's numbers and verdicts. Each report fills the
// part that is its own.
type adviceIn struct {
	// oom
	oom        *OOMEvent
	byCat      map[string]int64
	live       int64
	attnBytes  int64
	attnSite   string
	largestSeg int64
	maxSplit   int64 // allocator_settings max_split_size (0: unset)
	// bursts
	burst         *SegmentBurst
	streams       int
	gcThreshold   float64
	settingsKnown bool // the file records allocator_settings
	// fragmentation
	frag        *FragmentationResult
	fragExp     bool  // expandable segments in use
	largestFree int64 // largest free block of any group
	worstFrag   float64
	returns     string // "empty_cache() would return …"
	limit       string // why the device is at its limit
	// diff
	diff     *DiffResult
	pattern  string // the pattern the fix is for
	patSite  string
	moved    bool // no_growth because memory moved between sites
	sameFile bool
	// summarize: device balance and the file's frameworks
	balance    *DeviceBalance
	frameworks []Framework
	// replay
	replay        *ReplayResult
	mix           peakMix
	idiom         string // how the activations' library turns checkpointing on
	hasBwd        bool
	gcOnly        bool            // only the garbage-collector rule (the walk's result, before the peak is explained)
	fired         map[string]bool // rules already given, for fallbacks
	firedWeighted bool            // a weighted (role-sized) rule has been given
}

func (in *adviceIn) cat(c string) int64 { return in.byCat[c] }

func (in *adviceIn) share(b int64) string {
	return fmt.Sprintf("%s, %.0f%% of live memory", FormatBytes(b), pct(b, in.live))
}

// gradOn: the forward passes kept an autograd graph (read from lifetimes, facts_grad.go).
// Only then can inference_mode or no_grad save anything: a no_grad benchmark has grad off, and
// a zeroth-order run (training without a backward) too.
func (in *adviceIn) gradOn() bool {
	if in.oom != nil {
		return in.oom.GradMode == GradOn
	}
	return in.replay != nil && in.replay.GradMode != nil && in.replay.GradMode.Mode == GradOn
}

// hasFramework: the file's frames show the framework (facts_frameworks.go).
func hasFramework(fws []Framework, names ...string) bool {
	return slices.ContainsFunc(fws, func(f Framework) bool { return slices.Contains(names, f.Name) })
}

// bucketKnobs names the bucket settings of the frameworks the file shows: DDP's
// bucket_cap_mb (torch/nn/parallel/distributed.py, the c10d Reducer's buckets), FSDP's unit
// (one fully_shard / FSDP-wrapped module is gathered and reduced at once) and DeepSpeed
// ZeRO's bucket sizes. Empty when none is shown: no bucket setting is then the user's to turn.
func bucketKnobs(fws []Framework) []string {
	var k []string
	if hasFramework(fws, "DDP") {
		k = append(k, "a smaller DDP bucket_cap_mb")
	}
	if hasFramework(fws, "FSDP1", "FSDP2") {
		k = append(k, "smaller FSDP units (wrap smaller modules: each unit's all-gather and reduce-scatter buffers hold one unit's parameters)")
	}
	if hasFramework(fws, "DeepSpeed") {
		k = append(k, "smaller ZeRO reduce_bucket_size / allgather_bucket_size")
	}
	return k
}

func (in *adviceIn) inference() bool { return in.oom.Workload == WorkloadInference }

func (in *adviceIn) training() bool {
	return !in.inference() && (in.oom.HasBackward || in.oom.Workload == WorkloadTraining)
}

// capacity: a capacity OOM.
func (in *adviceIn) capacity() bool { return in.oom != nil && in.oom.Verdict == VerdictCapacity }

// fragOOM: a fragmentation OOM.
func (in *adviceIn) fragOOM() bool { return in.oom != nil && in.oom.Verdict == VerdictFragmentation }

// expandableReplayFails: the what-if replay with expandable segments reproduces the OOM and
// the request still fails there.
func (in *adviceIn) expandableReplayFails() bool {
	w := in.oom.ExpandableWhatIf
	return w != nil && w.BaselineReproduced && !w.Avoided
}

// modelState: parameters, gradients and optimizer state, the memory sharding divides.
func (in *adviceIn) modelState() int64 {
	return in.cat(CategoryParameter) + in.cat(CategoryGradient) + in.cat(CategoryOptimizerState)
}

// cameBackShare: an empty_cache burst whose released memory was reserved again at least this
// share (percent) is churn: releasing it bought nothing.
const cameBackShare = 90

func (in *adviceIn) churn() bool {
	b := in.burst
	return b != nil && b.Kind == BurstEmptyCache && b.Bytes > 0 && b.ReReservedBytes*100 >= b.Bytes*cameBackShare
}

func (in *adviceIn) burstIs(kind string) bool { return in.burst != nil && in.burst.Kind == kind }

func (in *adviceIn) emptyCacheHead() string {
	b := in.burst
	at := b.Site
	if b.UserSite != "" {
		at = b.UserSite
	}
	if at == "" {
		at = "its caller"
	}
	if b.Bursts == 1 {
		return fmt.Sprintf("an explicit torch.cuda.empty_cache() call from %s released %s in %d cudaFree calls", at, FormatBytes(b.Bytes), b.Events)
	}
	return fmt.Sprintf("%d explicit torch.cuda.empty_cache() calls from %s released %s in %d cudaFree calls", b.Bursts, at, FormatBytes(b.Bytes), b.Events)
}

func (in *adviceIn) emptyCacheAt() string {
	b := in.burst
	if b.UserSite != "" {
		return b.UserSite
	}
	if b.Site != "" {
		return b.Site
	}
	return "its caller"
}

// releaseHead words plain segment releases: one event is a release, not a burst.
func (in *adviceIn) releaseHead() string {
	b := in.burst
	if b.Events == 1 {
		return fmt.Sprintf("one segment free (%s) with no empty_cache frame in its stack and no new segment right after", FormatBytes(b.Bytes))
	}
	return fmt.Sprintf("%s of segment frees (%d events, %s) with no empty_cache frame in their stacks and no new segment right after",
		count(b.Bursts, "burst"), b.Events, FormatBytes(b.Bytes))
}

// oomRule and friends keep the table's rows short.
func oomFix(id, gate, says string, when func(*adviceIn) bool, text func(*adviceIn) string) adviceRule {
	return adviceRule{ID: id, Command: "oom", Gate: gate, Says: says, when: when, text: text}
}

func capFix(id, gate, says string, when func(*adviceIn) bool, bytes func(*adviceIn) int64, text func(*adviceIn) string) adviceRule {
	return adviceRule{ID: id, Command: "oom", Gate: gate, Says: says,
		when: func(in *adviceIn) bool { return in.capacity() && when(in) }, text: text, weight: bytes}
}

func fixed(s string) func(*adviceIn) string { return func(*adviceIn) string { return s } }

func diffFix(id, pattern, gate, says string, when func(*adviceIn) bool, text func(*adviceIn) string) adviceRule {
	return adviceRule{ID: id, Command: "diff", Gate: "pattern " + pattern + gate, Says: says,
		when: func(in *adviceIn) bool { return in.diff != nil && in.pattern == pattern && (when == nil || when(in)) }, text: text}
}

// adviceRules is the table. Within a report, rules with a weight come first (most bytes first),
// then the others in table order.
var adviceRules = []adviceRule{
	// --- oom: memory held outside PyTorch's allocator.
	oomFix("oom.outside.other-processes", "verdict outside_pytorch", "find and stop other processes on the GPU",
		func(in *adviceIn) bool { return in.oom != nil && in.oom.Verdict == VerdictOutsidePyTorch },
		fixed("check other processes on the GPU (nvidia-smi) and stop them or give each its own GPU")),
	oomFix("oom.outside.nccl-workspaces", "verdict outside_pytorch", "NCCL buffers, cuDNN/cuBLAS workspaces and the CUDA context are not counted by PyTorch",
		func(in *adviceIn) bool { return in.oom != nil && in.oom.Verdict == VerdictOutsidePyTorch },
		fixed("NCCL and communication buffers, cuDNN/cuBLAS workspaces and the CUDA context use memory PyTorch does not count: reduce NCCL buffers (NCCL_BUFFSIZE) or the number of communicators")),
	oomFix("oom.outside.other-frameworks", "verdict outside_pytorch", "other frameworks in the process preallocate",
		func(in *adviceIn) bool { return in.oom != nil && in.oom.Verdict == VerdictOutsidePyTorch },
		fixed("limit other frameworks in the same process (TensorFlow/JAX preallocate: XLA_PYTHON_CLIENT_PREALLOCATE=false)")),

	// --- oom: fragmentation.
	oomFix("oom.frag.expandable", "verdict fragmentation, expandable segments off, and no what-if replay that reproduces the OOM shows the request still failing with them",
		"set expandable_segments:True (citing the what-if replay when it shows the request fitting)",
		func(in *adviceIn) bool { return in.fragOOM() && !in.oom.Expandable && !in.expandableReplayFails() },
		func(in *adviceIn) string {
			s := "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True so free memory in a pool stays contiguous"
			if w := in.oom.ExpandableWhatIf; w != nil && w.BaselineReproduced && w.Avoided {
				s += ": " + oomWhatIfSentence(w)
			}
			return s
		}),
	oomFix("oom.frag.expandable-not-enough", "verdict fragmentation, expandable segments off, and the what-if replay (which reproduces the OOM) still fails with them",
		"expandable segments alone do not avoid this OOM: lower the peak",
		func(in *adviceIn) bool { return in.fragOOM() && !in.oom.Expandable && in.expandableReplayFails() },
		func(in *adviceIn) string {
			return fmt.Sprintf("expandable_segments:True is not enough here: %s; lower the peak (the fixes below) or combine it with them", oomWhatIfSentence(in.oom.ExpandableWhatIf))
		}),
	oomFix("oom.frag.expandable-already-on", "verdict fragmentation and expandable segments already on", "holes between long-lived tensors cannot be merged even so",
		func(in *adviceIn) bool { return in.fragOOM() && in.oom.Expandable },
		fixed("expandable segments are already on: holes between long-lived tensors still cannot be merged")),
	oomFix("oom.frag.max-split", "verdict fragmentation, expandable segments off, max_split_size unset, and a segment of at least 256 MiB",
		"set max_split_size_mb:128 so large cached blocks are not split for small requests",
		func(in *adviceIn) bool {
			return in.fragOOM() && !in.oom.Expandable && in.maxSplit <= 0 && in.largestSeg >= 2*maxSplitSuggestion
		},
		fixed(fmt.Sprintf("or set max_split_size_mb (e.g. PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:%d) so cached blocks of %s and more are not split for small requests", maxSplitSuggestion/mib, FormatBytes(maxSplitSuggestion)))),
	oomFix("oom.frag.preallocate", "verdict fragmentation", "allocate long-lived tensors up front",
		func(in *adviceIn) bool { return in.fragOOM() },
		fixed("allocate long-lived tensors (caches, buffers) up front instead of interleaving them with per-step temporaries")),

	// --- oom: capacity; the fixes naming the most bytes first.
	capFix("oom.cap.checkpointing", "capacity; training (a backward pass or training workload); activations ≥ 20% of live memory",
		"activation checkpointing on the repeated blocks",
		func(in *adviceIn) bool {
			a := in.cat(CategoryActivation)
			return in.training() && a > 0 && a*5 >= in.live
		},
		func(in *adviceIn) int64 { return in.cat(CategoryActivation) },
		func(in *adviceIn) string {
			return fmt.Sprintf("activation checkpointing (torch.utils.checkpoint) on the repeated blocks: activations saved for backward hold %s at the OOM, and checkpointing would recompute most of them instead of keeping them", in.share(in.cat(CategoryActivation)))
		}),
	capFix("oom.cap.fused-attention", "capacity; sites whose stacks show attention code hold ≥ 10% of live memory",
		"fused attention (F.scaled_dot_product_attention) instead of materialized scores",
		func(in *adviceIn) bool { return material(in.attnBytes, in.live) },
		func(in *adviceIn) int64 { return in.attnBytes },
		func(in *adviceIn) string {
			return fmt.Sprintf("fused attention (F.scaled_dot_product_attention: flash / memory-efficient kernels) instead of materializing the attention scores and softmax: attention code (%s) holds %s", in.attnSite, in.share(in.attnBytes))
		}),
	capFix("oom.cap.optimizer-state", "capacity; not inference; optimizer state ≥ 10% of live memory",
		"a lower-memory or sharded optimizer",
		func(in *adviceIn) bool { return material(in.cat(CategoryOptimizerState), in.live) && !in.inference() },
		func(in *adviceIn) int64 { return in.cat(CategoryOptimizerState) },
		func(in *adviceIn) string {
			return fmt.Sprintf("optimizer state holds %s: a lower-memory optimizer (8-bit Adam from bitsandbytes, Adafactor) or sharded optimizer state (ZeRO-1/2, FSDP)", in.share(in.cat(CategoryOptimizerState)))
		}),
	capFix("oom.cap.kv-cache", "capacity; inference; KV cache ≥ 10% of live memory", "a smaller or paged/quantized KV cache",
		func(in *adviceIn) bool { return in.inference() && material(in.cat(CategoryKVCache), in.live) },
		func(in *adviceIn) int64 { return in.cat(CategoryKVCache) },
		func(in *adviceIn) string {
			return fmt.Sprintf("the KV cache holds %s: a smaller batch or maximum sequence length, or a paged/quantized KV cache (fp8/int8)", in.share(in.cat(CategoryKVCache)))
		}),
	capFix("oom.cap.inference-weights", "capacity; inference; parameters ≥ 10% of live memory", "lower-precision or quantized weights, or offload",
		func(in *adviceIn) bool { return in.inference() && material(in.cat(CategoryParameter), in.live) },
		func(in *adviceIn) int64 { return in.cat(CategoryParameter) },
		func(in *adviceIn) string {
			return fmt.Sprintf("weights hold %s: bf16/fp16 weights instead of fp32, or quantized weights (8-bit / 4-bit, e.g. bitsandbytes, GPTQ, AWQ), or offload layers to the CPU", in.share(in.cat(CategoryParameter)))
		}),
	capFix("oom.cap.inference-activations", "capacity; inference; activations + temporaries ≥ 10% of live memory (inference_mode named only when grad mode is on)", "smaller batch or chunked inputs, bf16, and inference_mode only if grad was on",
		func(in *adviceIn) bool {
			return in.inference() && material(in.cat(CategoryActivation)+in.cat(CategoryTemporary), in.live)
		},
		func(in *adviceIn) int64 { return in.cat(CategoryActivation) + in.cat(CategoryTemporary) },
		func(in *adviceIn) string {
			s := fmt.Sprintf("forward activations and temporaries hold %s: a smaller batch or shorter inputs (chunk long prompts)", in.share(in.cat(CategoryActivation)+in.cat(CategoryTemporary)))
			if in.gradOn() {
				s += ", run under torch.inference_mode() (the forward kept an autograd graph)"
			}
			return s + ", and bf16 autocast"
		}),
	capFix("oom.cap.params-grads", "capacity; not inference; gradients present; parameters + gradients ≥ 10% of live memory",
		"bf16 weights, FSDP/ZeRO-3, LoRA or CPU offload",
		func(in *adviceIn) bool {
			return !in.inference() && in.cat(CategoryGradient) > 0 && material(in.cat(CategoryParameter)+in.cat(CategoryGradient), in.live)
		},
		func(in *adviceIn) int64 { return in.cat(CategoryParameter) + in.cat(CategoryGradient) },
		func(in *adviceIn) string {
			return fmt.Sprintf("parameters and gradients hold %s: bf16 weights, shard them across GPUs (FSDP / ZeRO-3), LoRA instead of full fine-tuning, or CPU offload", in.share(in.cat(CategoryParameter)+in.cat(CategoryGradient)))
		}),
	capFix("oom.cap.params", "capacity; not inference; no gradients; parameters ≥ 10% of live memory", "bf16 weights, FSDP or CPU offload",
		func(in *adviceIn) bool {
			return !in.inference() && in.cat(CategoryGradient) == 0 && material(in.cat(CategoryParameter), in.live)
		},
		func(in *adviceIn) int64 { return in.cat(CategoryParameter) },
		func(in *adviceIn) string {
			return fmt.Sprintf("parameters hold %s: bf16 weights, shard them across GPUs (FSDP), or CPU offload", in.share(in.cat(CategoryParameter)))
		}),
	capFix("oom.cap.autocast", "capacity; training; activations + backward temporaries ≥ 10% of live memory", "bf16 autocast and a smaller batch with gradient accumulation",
		func(in *adviceIn) bool {
			return in.training() && material(in.cat(CategoryActivation)+in.cat(CategoryBackwardTemporary), in.live)
		},
		func(in *adviceIn) int64 { return (in.cat(CategoryActivation) + in.cat(CategoryBackwardTemporary)) / 2 },
		fixed("bf16/fp16 autocast (torch.autocast) to halve activations, and a smaller batch or sequence length with gradient accumulation to keep the effective batch")),
	capFix("oom.cap.forward-no-backward", "capacity; neither training nor inference shown; activations + temporaries ≥ 10% of live memory (inference_mode named only when grad mode is on)",
		"a smaller batch or bf16; inference_mode if the forward is inference and kept a graph",
		func(in *adviceIn) bool {
			return !in.training() && !in.inference() && material(in.cat(CategoryActivation)+in.cat(CategoryTemporary), in.live)
		},
		func(in *adviceIn) int64 { return in.cat(CategoryActivation) + in.cat(CategoryTemporary) },
		func(in *adviceIn) string {
			held := in.share(in.cat(CategoryActivation) + in.cat(CategoryTemporary))
			switch in.oom.GradMode {
			case GradOn:
				return fmt.Sprintf("forward activations and temporaries hold %s and the trace shows no backward pass: if this forward is inference, run it under torch.inference_mode() (activations are then freed layer by layer); otherwise a smaller batch or sequence length, or bf16 autocast", held)
			case GradOff:
				return fmt.Sprintf("forward activations and temporaries hold %s with grad already off (no graph kept): a smaller batch or sequence length, or bf16 autocast", held)
			}
			return fmt.Sprintf("forward activations and temporaries hold %s and the trace shows no backward pass: a smaller batch or sequence length, or bf16 autocast", held)
		}),
	capFix("oom.cap.workspace", "capacity; cuBLAS/cuDNN workspaces ≥ 10% of live memory", "a smaller CUBLAS_WORKSPACE_CONFIG or fewer streams",
		func(in *adviceIn) bool { return material(in.cat(CategoryWorkspace), in.live) },
		func(in *adviceIn) int64 { return in.cat(CategoryWorkspace) },
		func(in *adviceIn) string {
			return fmt.Sprintf("cuBLAS/cuDNN workspaces hold %s (one per handle: thread and stream): a smaller CUBLAS_WORKSPACE_CONFIG (e.g. :4096:8) or fewer streams", in.share(in.cat(CategoryWorkspace)))
		}),
	capFix("oom.cap.user-container", "capacity; memory your code holds past its pass ≥ 10% of live memory", "store detached CPU copies or bound the container",
		func(in *adviceIn) bool { return material(in.cat(CategoryUserContainer), in.live) },
		func(in *adviceIn) int64 { return in.cat(CategoryUserContainer) },
		func(in *adviceIn) string {
			return fmt.Sprintf("a list, dict or variable in your code keeps %s alive: store x.detach().cpu() or x.item() instead, bound it (collections.deque(maxlen=N)), or del it before the next step", in.share(in.cat(CategoryUserContainer)))
		}),
	capFix("oom.cap.autocast-cache", "capacity; autocast's cast cache ≥ 10% of live memory", "one autocast region per step or bf16 weights",
		func(in *adviceIn) bool { return material(in.cat(CategoryAutocastCache), in.live) },
		func(in *adviceIn) int64 { return in.cat(CategoryAutocastCache) },
		func(in *adviceIn) string {
			return fmt.Sprintf("autocast's cast cache holds %s (low-precision copies of the weights): keep one autocast region per step, or keep the weights in bf16", in.share(in.cat(CategoryAutocastCache)))
		}),
	capFix("oom.cap.communication", "capacity; a collective's own buffers ≥ 10% of live memory; DDP (its c10d Reducer), FSDP or DeepSpeed among the file's frameworks",
		"smaller bucket sizes, named only for the frameworks the file shows",
		func(in *adviceIn) bool {
			return material(in.cat(CategoryCommunication), in.live) && len(bucketKnobs(in.oom.Frameworks)) > 0
		},
		func(in *adviceIn) int64 { return in.cat(CategoryCommunication) },
		func(in *adviceIn) string {
			return fmt.Sprintf("communication buffers hold %s: %s", in.share(in.cat(CategoryCommunication)), strings.Join(bucketKnobs(in.oom.Frameworks), ", or "))
		}),
	oomFix("oom.cap.smaller-batch", "capacity and no role-sized fix above applies", "reduce the batch size",
		func(in *adviceIn) bool { return in.capacity() && !in.firedWeighted },
		fixed("reduce the batch size")),
	oomFix("oom.cap.largest-sites", "capacity", "look at the largest live sites",
		func(in *adviceIn) bool { return in.capacity() },
		fixed("look at the largest sites live at the OOM (listed with it) and free or shrink them")),
	oomFix("oom.cap.shard-model", "capacity; not inference; parameters + gradients + optimizer state ≥ 10% of live memory (sharding divides only those)",
		"shard the model (FSDP / ZeRO) or use a GPU with more memory",
		func(in *adviceIn) bool { return in.capacity() && !in.inference() && material(in.modelState(), in.live) },
		fixed("shard the model (FSDP / ZeRO) or use a GPU with more memory")),
	oomFix("oom.cap.split-model", "capacity; inference; parameters ≥ 10% of live memory", "a bigger GPU or tensor/pipeline parallel",
		func(in *adviceIn) bool {
			return in.capacity() && in.inference() && material(in.cat(CategoryParameter), in.live)
		},
		fixed("use a GPU with more memory or split the model across GPUs (tensor / pipeline parallel)")),
	oomFix("oom.cap.bigger-gpu", "capacity; the model's own state (parameters, gradients, optimizer state) < 10% of live memory, so sharding it would not help",
		"a GPU with more memory, or fewer bytes per step (the fixes above)",
		func(in *adviceIn) bool {
			if !in.capacity() {
				return false
			}
			if in.inference() {
				return !material(in.cat(CategoryParameter), in.live)
			}
			return !material(in.modelState(), in.live)
		},
		fixed("or use a GPU with more memory: the model's weights, gradients and optimizer state are a small share of live memory, so sharding them (FSDP / ZeRO) would not help")),

	// --- segment-release bursts (replay, fragmentation).
	{ID: "bursts.empty-cache.churn", Command: "bursts",
		Gate: fmt.Sprintf("explicit empty_cache() bursts, and at least %d%% of the bytes they released was reserved again later", cameBackShare),
		Says: "remove the empty_cache(): the memory came back, so releasing it bought nothing",
		when: func(in *adviceIn) bool { return in.churn() },
		text: func(in *adviceIn) string {
			b := in.burst
			return in.emptyCacheHead() + fmt.Sprintf("; after %d of them the memory was cudaMalloc'd again (%s of the %s), so releasing it bought nothing: remove the empty_cache() at %s (or call it once at the end); PyTorch reuses its cache by itself, and each call adds synchronizing cudaFree/cudaMalloc calls",
				b.ReReserved, FormatBytes(b.ReReservedBytes), FormatBytes(b.Bytes), in.emptyCacheAt())
		}},
	{ID: "bursts.empty-cache.partial", Command: "bursts",
		Gate: fmt.Sprintf("explicit empty_cache() bursts; some of the released bytes were reserved again later, but less than %d%%", cameBackShare),
		Says: "what came back and what stayed released; keep the call only if another process needs that memory",
		when: func(in *adviceIn) bool {
			return in.burstIs(BurstEmptyCache) && in.burst.ReReservedBytes > 0 && !in.churn()
		},
		text: func(in *adviceIn) string {
			b := in.burst
			return in.emptyCacheHead() + fmt.Sprintf("; %s of it was cudaMalloc'd again later and %s stayed released: the call is worth its synchronizing cudaFree/cudaMalloc calls only if another process needs that memory; otherwise call it once at the end",
				FormatBytes(b.ReReservedBytes), FormatBytes(b.Bytes-b.ReReservedBytes))
		}},
	{ID: "bursts.empty-cache.kept-free", Command: "bursts",
		Gate: "explicit empty_cache() bursts and nothing reserved again afterwards",
		Says: "it helps only if another process needs the memory",
		when: func(in *adviceIn) bool { return in.burstIs(BurstEmptyCache) && in.burst.ReReservedBytes == 0 },
		text: func(in *adviceIn) string {
			return in.emptyCacheHead() + "; nothing was reserved again afterwards: it helps only if another process needs the memory"
		}},
	{ID: "bursts.malloc-retry", Command: "bursts",
		Gate: "segment frees followed by a segment_alloc or an oom (the allocator's cudaMalloc-failure retry)",
		Says: "the device is at its limit; empty_cache() would not help; lower the peak; fewer streams when the trace allocates on several",
		when: func(in *adviceIn) bool { return in.burstIs(BurstMallocRetry) },
		text: func(in *adviceIn) string {
			b := in.burst
			s := fmt.Sprintf("%d times a cudaMalloc failed and the allocator freed every cached unused segment (%d segment frees, %s in all) and retried",
				b.Bursts, b.Events, FormatBytes(b.Bytes))
			switch {
			case b.FollowedByOOM > 0 && b.FollowedBySegmentAlloc > 0:
				s += fmt.Sprintf(" (%d retries got a new segment, %d ended in an OOM)", b.FollowedBySegmentAlloc, b.FollowedByOOM)
			case b.FollowedByOOM > 0:
				s += " (the retry failed: OOM)"
			}
			if b.Site != "" {
				s += fmt.Sprintf("; the failing cudaMalloc was most often for %s", b.Site)
			}
			s += ": the device is at its limit. Calling empty_cache() would not help (the allocator already does it on every failed cudaMalloc); lower the peak instead, and each retry costs a synchronizing cudaFree of the cache"
			if in.streams > 1 {
				s += fmt.Sprintf("; the trace allocates on %d streams and cached blocks are per stream: blocks cached on one stream cannot serve another, so fewer streams (or preallocated per-stream buffers) keep less cache idle", in.streams)
			}
			return s
		}},
	{ID: "bursts.release.gc-threshold", Command: "bursts",
		Gate: "segment frees with no empty_cache frame and no new segment after, and the file's garbage_collection_threshold is set (> 0)",
		Says: "an empty_cache() recorded without stacks, or the allocator releasing cache above garbage_collection_threshold",
		when: func(in *adviceIn) bool { return in.burstIs(BurstRelease) && in.settingsKnown && in.gcThreshold > 0 },
		text: func(in *adviceIn) string {
			return in.releaseHead() + fmt.Sprintf(": an empty_cache() call recorded without free stacks, or the allocator releasing cache above garbage_collection_threshold:%g", in.gcThreshold)
		}},
	{ID: "bursts.release.unmarked", Command: "bursts",
		Gate: "segment frees with no empty_cache frame and no new segment after, and the file's allocator settings leave garbage_collection_threshold at 0 (so not the allocator's own release)",
		Says: "most likely an empty_cache() whose frees recorded no stack",
		when: func(in *adviceIn) bool { return in.burstIs(BurstRelease) && in.settingsKnown && in.gcThreshold <= 0 },
		text: func(in *adviceIn) string {
			return in.releaseHead() + ": most likely an empty_cache() call whose frees recorded no stack (a framework's, or from C++); the file's garbage_collection_threshold is 0 (off), so it is not the allocator releasing cache on its own"
		}},
	{ID: "bursts.release.settings-unknown", Command: "bursts",
		Gate: "segment frees with no empty_cache frame and no new segment after, and the file records no allocator settings (PyTorch before 2.3)",
		Says: "an empty_cache() recorded without stacks, or the allocator's release if garbage_collection_threshold was set (the file cannot say)",
		when: func(in *adviceIn) bool { return in.burstIs(BurstRelease) && !in.settingsKnown },
		text: func(in *adviceIn) string {
			return in.releaseHead() + ": an empty_cache() call recorded without free stacks, or the allocator releasing cache if garbage_collection_threshold was set (the file records no allocator settings, so it cannot tell)"
		}},

	// --- fragmentation.
	{ID: "frag.empty", Command: "fragmentation", Gate: "nothing reserved", Says: "record history before the model is built and dump at the peak or on OOM",
		when: func(in *adviceIn) bool { return in.frag != nil && in.frag.Verdict == FragEmpty },
		text: fixed("the allocator held no memory when the snapshot was taken: it was taken before any CUDA allocation, after everything was freed and released, or in a process that did not use these GPUs; call torch.cuda.memory._record_memory_history() before the model is built and dump the snapshot at the peak or on OOM")},
	{ID: "frag.expandable", Command: "fragmentation",
		Gate: "verdict fragmented, the device at its limit, expandable segments off (never under little_free: with under 10% of reserved free the split does not matter)",
		Says: "set expandable_segments:True so free neighbours merge",
		when: func(in *adviceIn) bool {
			return in.frag != nil && in.frag.Verdict == FragFragmented && in.frag.DeviceAtLimit && !in.fragExp
		},
		text: func(in *adviceIn) string {
			return fmt.Sprintf("%s, and the free memory is split into pieces of at most %s: set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True so free neighbours merge and free pages can be unmapped and remapped where they are needed",
				in.limit, FormatBytes(in.largestFree))
		}},
	{ID: "frag.expandable-if-oom", Command: "fragmentation",
		Gate: "verdict fragmented, the device not at its limit, expandable segments off",
		Says: "the stranded memory serves later requests; expandable_segments only if the job runs out of memory",
		when: func(in *adviceIn) bool {
			return in.frag != nil && in.frag.Verdict == FragFragmented && !in.frag.DeviceAtLimit && !in.fragExp
		},
		text: func(in *adviceIn) string {
			return fmt.Sprintf("the stranded %s serves later requests that fit (up to %s); if the job runs out of memory with this much cached, set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True so free neighbours merge", FormatBytes(in.frag.StrandedBytes), FormatBytes(in.largestFree))
		}},
	{ID: "frag.cache", Command: "fragmentation", Gate: "verdict cache", Says: "the cache is reused; empty_cache() only for another process",
		when: func(in *adviceIn) bool { return in.frag != nil && in.frag.Verdict == FragCache },
		text: func(in *adviceIn) string {
			return in.returns + ": PyTorch reuses this cache for the next allocations, so it is not lost; call torch.cuda.empty_cache() only if another process needs the memory"
		}},
	{ID: "frag.cache-stranded", Command: "fragmentation", Gate: "verdict cache and ≥ 5% of reserved free in segments that still hold live blocks",
		Says: "that memory serves later requests but empty_cache() cannot return it",
		when: func(in *adviceIn) bool {
			f := in.frag
			return f != nil && f.Verdict == FragCache && f.StrandedBytes > 0 && f.StrandedBytes*20 >= f.ReservedBytes
		},
		text: func(in *adviceIn) string {
			piece := ""
			if in.frag.largestStranded > 0 {
				piece = fmt.Sprintf(" (largest free piece %s)", FormatBytes(in.frag.largestStranded))
			}
			return fmt.Sprintf("another %s is free in segments that still hold live blocks%s: it serves later requests that fit, but empty_cache() cannot return it", FormatBytes(in.frag.StrandedBytes), piece)
		}},
	{ID: "frag.small", Command: "fragmentation", Gate: "under 1 GiB reserved and the device not at its limit", Says: "nothing to do at this scale",
		when: func(in *adviceIn) bool {
			return in.frag != nil && in.frag.Verdict == FragSmall && in.frag.ReservedBytes < gib && !in.frag.DeviceAtLimit
		},
		text: func(in *adviceIn) string {
			return fmt.Sprintf("nothing to do at this scale: %s of %s reserved is free", FormatBytes(in.frag.InactiveBytes), FormatBytes(in.frag.ReservedBytes))
		}},
	{ID: "frag.page-granularity", Command: "fragmentation", Gate: "verdict page_granularity (expandable segments)", Says: "allocate long-lived buffers first",
		when: func(in *adviceIn) bool { return in.frag != nil && in.frag.Verdict == FragPageGranularity },
		text: func(in *adviceIn) string {
			return fmt.Sprintf("%s of free memory shares pages with live tensors: long-lived tensors are interleaved with short-lived ones; allocate long-lived buffers (caches, static inputs) first or preallocate them", FormatBytes(in.frag.StrandedBytes))
		}},
	{ID: "frag.max-split.expandable", Command: "fragmentation", Gate: "max_split_size set and expandable segments on", Says: "drop max_split_size_mb: should_split ignores it for expandable pools",
		when: func(in *adviceIn) bool {
			return in.frag != nil && in.frag.Verdict != FragEmpty && in.maxSplit > 0 && in.fragExp
		},
		text: func(in *adviceIn) string {
			return fmt.Sprintf("drop max_split_size_mb:%d: with expandable segments the allocator's should_split ignores it for the expandable pools", in.maxSplit/mib)
		}},
	{ID: "frag.max-split.no-effect", Command: "fragmentation", Gate: "max_split_size set, expandable segments off, and no block that large", Says: "max_split_size_mb has no effect here",
		when: func(in *adviceIn) bool {
			return in.frag != nil && in.frag.Verdict != FragEmpty && in.maxSplit > 0 && !in.fragExp && in.frag.LargestBlockBytes < in.maxSplit
		},
		text: func(in *adviceIn) string {
			return fmt.Sprintf("max_split_size_mb:%d has no effect here: no block is %s or larger (the largest is %s), so nothing is kept from splitting; remove the setting unless blocks that large occur",
				in.maxSplit/mib, FormatBytes(in.maxSplit), FormatBytes(in.frag.LargestBlockBytes))
		}},
	{ID: "frag.internal-waste", Command: "fragmentation", Gate: "rounding waste ≥ 10% of allocated and ≥ 64 MiB", Says: "roundup_power2_divisions or padded sizes",
		when: func(in *adviceIn) bool {
			f := in.frag
			return f != nil && f.Verdict != FragEmpty && f.InternalWasteBytes > 0 && f.InternalWasteBytes*10 >= f.AllocatedBytes && f.InternalWasteBytes >= 64*mib
		},
		text: func(in *adviceIn) string {
			return fmt.Sprintf("%s of allocated blocks is rounding and unsplit remainders (size - requested): many odd-sized tensors; roundup_power2_divisions or padding sizes can reduce it", FormatBytes(in.frag.InternalWasteBytes))
		}},
	{ID: "frag.nothing", Command: "fragmentation", Gate: "no other fragmentation rule and no segment releases to report", Says: "nothing to change",
		when: func(in *adviceIn) bool {
			return in.frag != nil && len(in.fired) == 0 && len(in.frag.SegmentBursts) == 0
		},
		text: fixed("nothing to change")},

	// --- diff: the fix of each pattern.
	diffFix("diff.retained-graph", PatternRetainedGraph, "", "store loss.item() / loss.detach(), drop stray retain_graph=True", nil,
		func(in *adviceIn) string {
			return fmt.Sprintf("at %s store loss.detach() or loss.item() instead of the tensor (e.g. losses.append(loss.item())), and remove any stray retain_graph=True", in.patSite)
		}),
	diffFix("diff.growing-container", PatternGrowingContainer, "", "detach and move to CPU before appending, or bound the container", nil,
		func(in *adviceIn) string {
			return fmt.Sprintf("at %s detach and move to CPU before appending (x.detach().cpu()), or bound the container (collections.deque(maxlen=N), clear it each epoch)", in.patSite)
		}),
	diffFix("diff.optimizer-first-step", PatternOptimizerFirstStp, "", "none needed; lower-memory or sharded optimizer if it does not fit", nil,
		fixed("none needed; if it does not fit, use a smaller model or batch, a lower-memory optimizer (SGD, Adafactor, 8-bit Adam), or shard the optimizer state (ZeRO / FSDP)")),
	diffFix("diff.moved-not-grown", PatternNoGrowth, ", memory moved between sites", "none for a leak; dump both at the same point of the loop",
		func(in *adviceIn) bool { return in.moved },
		fixed("none for a leak: live memory did not grow; to be sure, dump both snapshots at the same point of the loop (e.g. right after optimizer.step()) and diff again")),
	diffFix("diff.dropped", PatternNoGrowth, ", live memory dropped", "none",
		func(in *adviceIn) bool { return !in.moved && in.diff.DeltaBytes < 0 },
		func(in *adviceIn) string {
			return fmt.Sprintf("none: live memory dropped by %s between these snapshots and no site grew", FormatBytes(-in.diff.DeltaBytes))
		}),
	diffFix("diff.unexplained-growth", PatternUnexplainedGrowth, "", "find what holds the growth; take a third snapshot", nil,
		func(in *adviceIn) string {
			return fmt.Sprintf("find what holds the %s: compare the sites above (existing tensors that got larger, growth spread thinly over many sites, or memory without a Python frame), and take a third snapshot to see whether it continues", FormatBytes(in.diff.DeltaBytes))
		}),
	diffFix("diff.small-growth", PatternNoGrowth, ", live memory grew by less than 1 MiB", "none",
		func(in *adviceIn) bool { return !in.moved && in.diff.DeltaBytes > 0 },
		func(in *adviceIn) string {
			return fmt.Sprintf("none: live memory grew by only %s and no site grew in both bytes and blocks", FormatBytes(in.diff.DeltaBytes))
		}),
	diffFix("diff.same-file", PatternNoGrowth, ", both are the same file", "diff two snapshots of one run",
		func(in *adviceIn) bool { return !in.moved && in.diff.DeltaBytes == 0 && in.sameFile },
		fixed("none: both are the same file, so nothing can differ; diff two snapshots of one run taken at different steps")),
	diffFix("diff.steady", PatternNoGrowth, ", live memory unchanged", "none",
		func(in *adviceIn) bool { return !in.moved && in.diff.DeltaBytes == 0 && !in.sameFile },
		fixed("none: memory is steady between these snapshots")),
	diffFix("diff.within-one-step", PatternWithinOneStep, "", "none for a leak; dump at the same point of two steps; replay for the step's peak", nil,
		fixed("none for a leak: to look for one, dump snapshots at the same point of two different steps or calls (e.g. right after optimizer.step() at step 5 and at step 50) and diff those; for what this step holds at its peak, run replay on the later file")),
	diffFix("diff.compare-runs", PatternNotComparable, " (same_run is not true)", "a comparison: the peaks and the roles at them, not a leak hunt", nil,
		func(in *adviceIn) string {
			d := in.diff
			if d.PeakBeforeBytes != nil && d.PeakAfterBytes != nil {
				s := "none for a leak: these are two runs, so compare them by their peaks and the roles live at them (above)"
				if len(d.PeakRoles) > 0 && d.PeakRoles[0].DeltaBytes != 0 {
					x := d.PeakRoles[0]
					s += fmt.Sprintf("; at the peaks %s changed most (%s -> %s, %s): that is what the change between the runs did to the peak", strings.ReplaceAll(x.Category, "_", " "), FormatBytes(x.BytesBefore), FormatBytes(x.BytesAfter), formatDelta(x.DeltaBytes))
				}
				return s
			}
			return "none for a leak: these are two runs, so compare them by role (above); record a trace in both to compare their peaks"
		}),
	{ID: "diff.note.one-process", Command: "diff", Gate: "same_run is not true (said once, as a note)",
		Says: "to look for growth, diff two snapshots of one process taken at different steps",
		when: func(in *adviceIn) bool { return in.diff != nil && in.pattern == "" && !in.diff.sameRun() },
		text: fixed("to look for growth within one job instead, take two snapshots of the same process at different steps (e.g. torch.cuda.memory._dump_snapshot(f\"step{step}.pickle\") at step 5 and step 50, at the same point of the loop, with _record_memory_history on since the start) and diff those")},

	// --- summarize: devices of one process side by side.
	// torch.nn.DataParallel.forward (torch/nn/parallel/data_parallel.py) scatters the batch,
	// replicates the module, runs parallel_apply and returns self.gather(outputs,
	// self.output_device): every replica's outputs land on output_device (device_ids[0] by
	// default), where the loss and its backward run. Its docstring recommends
	// DistributedDataParallel instead.
	{ID: "summarize.balance.dataparallel", Command: "summarize",
		Gate: "one device holds ≥ 2× any other (and ≥ 256 MiB) and torch.nn.DataParallel is among the file's frameworks",
		Says: "DataParallel gathers outputs on output_device: return the loss from the module, or DistributedDataParallel",
		when: func(in *adviceIn) bool { return in.outlier() && hasFramework(in.frameworks, "DataParallel") },
		text: func(in *adviceIn) string {
			return in.outlierHead() + ": torch.nn.DataParallel gathers every replica's outputs on output_device (device_ids[0] by default) and the loss and its backward run there; compute the loss inside the wrapped module's forward so each replica returns only its loss, or use DistributedDataParallel (one process per GPU, each keeping its own outputs), which PyTorch recommends over DataParallel"
		}},
	{ID: "summarize.balance.outlier", Command: "summarize",
		Gate: "one device holds ≥ 2× any other (and ≥ 256 MiB) and DataParallel is not among the file's frameworks",
		Says: "the site that makes the difference, if the devices should share the work evenly",
		when: func(in *adviceIn) bool { return in.outlier() && !hasFramework(in.frameworks, "DataParallel") },
		text: func(in *adviceIn) string {
			return in.outlierHead() + ": if the devices should share the work evenly, that site is where they differ (a tensor created on the default device, cuda:0, or a model split unevenly across devices)"
		}},

	// --- replay.
	{ID: "replay.optimizer.in-place", Command: "replay",
		Gate: "the peak is in an optimizer step whose temporaries and new state are ≥ 64 MiB and ≥ 10% of the peak, made by your own optimizer code",
		Says: "update the optimizer state in place, or a fused optimizer",
		when: func(in *adviceIn) bool { return in.peakReplay() && in.optimizerPeak() && in.mix.optOwn },
		text: func(in *adviceIn) string {
			return in.optimizerHead() + fmt.Sprintf(". The update at %s is out of place: update the state in place (m.mul_(beta1).add_(g, alpha=1-beta1), v.mul_(beta2).addcmul_(g, g, value=1-beta2), p.addcdiv_(m, v.sqrt().add_(eps), value=-lr)) or use torch.optim.AdamW(fused=True)", in.mix.optSite)
		}},
	{ID: "replay.optimizer.fused", Command: "replay",
		Gate: "the peak is in an optimizer step whose temporaries and new state are ≥ 64 MiB and ≥ 10% of the peak, made by torch.optim",
		Says: "the fused optimizer implementation",
		when: func(in *adviceIn) bool { return in.peakReplay() && in.optimizerPeak() && !in.mix.optOwn },
		text: func(in *adviceIn) string {
			return in.optimizerHead() + ". Use the fused implementation (e.g. torch.optim.AdamW(fused=True)), whose update is in place per parameter instead of foreach temporaries over every parameter at once"
		}},
	{ID: "replay.checkpointing", Command: "replay",
		Gate: "a training backward in the trace, and activations saved for it ≥ 20% of the peak and ≥ 512 MiB",
		Says: "activation checkpointing, in the activations' library's own terms",
		when: func(in *adviceIn) bool {
			r := in.replay
			return in.peakReplay() && in.hasBwd && r.ActivationBytesAtPeak >= r.PeakAllocatedBytes/5 && r.ActivationBytesAtPeak >= 512*mib
		},
		text: func(in *adviceIn) string {
			r := in.replay
			return fmt.Sprintf("activations saved for backward hold %s (%.0f%%) at the peak: activation checkpointing (%s) would trade most of it for recompute",
				FormatBytes(r.ActivationBytesAtPeak), pct(r.ActivationBytesAtPeak, r.PeakAllocatedBytes), in.idiom)
		}},
	{ID: "replay.forward-only", Command: "replay",
		Gate: "no backward in the trace, workload training, grad mode on (lifetimes show a kept graph), activations ≥ 10% of the peak and ≥ 512 MiB",
		Says: "inference_mode if no backward follows",
		when: func(in *adviceIn) bool {
			r := in.replay
			return in.peakReplay() && !in.hasBwd && r.Workload == WorkloadTraining && in.gradOn() && r.ActivationBytesAtPeak >= r.PeakAllocatedBytes/10 && r.ActivationBytesAtPeak >= 512*mib
		},
		text: func(in *adviceIn) string {
			r := in.replay
			return fmt.Sprintf("the trace holds a forward pass with grad enabled and no backward: %s (%.0f%%) at the peak are activations it saves for a backward; if none follows (a forward-only benchmark, evaluation, generation), run it under torch.inference_mode() (or torch.no_grad()) and they are not kept; if one does, they are the step's own (activation checkpointing trades them for recompute)",
				FormatBytes(r.ActivationBytesAtPeak), pct(r.ActivationBytesAtPeak, r.PeakAllocatedBytes))
		}},
	{ID: "replay.gc-cycles", Command: "replay", Gate: "frees made by the cyclic garbage collector", Says: "find and break the reference cycles",
		when: func(in *adviceIn) bool { return in.replay != nil && in.gcOnly && in.replay.GCFrees.Count > 0 },
		text: fixed("these tensors lived until a garbage-collector pass because reference cycles held them: find the cycles with torch.utils.viz._cycles.warn_tensor_cycles() and break them (e.g. do not store tensors on objects that reference themselves, use weakref)")},
}

// outlier: one device holds at least twice any other, with a site that makes the difference.
func (in *adviceIn) outlier() bool {
	return in.balance != nil && in.balance.Outlier >= 0 && in.balance.ExtraSite != ""
}

func (in *adviceIn) outlierHead() string {
	b := in.balance
	return fmt.Sprintf("device %d holds %s more at %s [%s] than any other device", b.Outlier, FormatBytes(b.ExtraBytes), b.ExtraSite, strings.ReplaceAll(b.ExtraCategory, "_", " "))
}

// peakReplay: the replay's peak is being explained (not only its garbage-collector frees).
func (in *adviceIn) peakReplay() bool { return in.replay != nil && !in.gcOnly && in.replay.HasTrace }

// optimizerPeak: the replay's peak is in an optimizer step whose extra memory is material.
func (in *adviceIn) optimizerPeak() bool {
	r := in.replay
	extra := in.mix.optTemp + in.mix.optNew
	return r.PeakPhase == "optimizer" && extra >= 64*mib && extra*10 >= r.PeakAllocatedBytes
}

func (in *adviceIn) optimizerHead() string {
	r, mix := in.replay, in.mix
	var parts []string
	if mix.optTemp > 0 {
		parts = append(parts, fmt.Sprintf("%s of step temporaries (largest at %s)", FormatBytes(mix.optTemp), mix.optSite))
	}
	if mix.optNew > 0 {
		parts = append(parts, fmt.Sprintf("%s of optimizer state allocated anew during the step while the old state is still alive", FormatBytes(mix.optNew)))
	}
	return fmt.Sprintf("the optimizer step, not the forward or backward pass, sets the peak (%s at event %d; %s outside optimizer steps): %s",
		FormatBytes(r.PeakAllocatedBytes), r.PeakAllocatedEvent, FormatBytes(r.PeakOutsideOptimizerBytes), strings.Join(parts, " and "))
}

// ruleByID finds a rule of the table.
func ruleByID(id string) (*adviceRule, bool) {
	i := slices.IndexFunc(adviceRules, func(r adviceRule) bool { return r.ID == id })
	if i < 0 {
		return nil, false
	}
	return &adviceRules[i], true
}

// advise gives every rule of command whose gate holds: weighted ones first, most bytes first,
// then the rest in table order.
func advise(command string, in *adviceIn) []AdviceItem {
	in.fired, in.firedWeighted = map[string]bool{}, false
	type item struct {
		AdviceItem
		weight   int64
		weighted bool
	}
	var items []item
	for i := range adviceRules {
		r := &adviceRules[i]
		if r.Command != command || !r.when(in) {
			continue
		}
		in.fired[r.ID] = true
		it := item{AdviceItem: AdviceItem{Rule: r.ID, Text: r.text(in)}}
		if r.weight != nil {
			it.weight, it.weighted = r.weight(in), true
			in.firedWeighted = true
		}
		items = append(items, it)
	}
	slices.SortStableFunc(items, func(x, y item) int {
		switch {
		case x.weighted != y.weighted:
			if x.weighted {
				return -1
			}
			return 1
		case x.weight > y.weight:
			return -1
		case x.weight < y.weight:
			return 1
		}
		return 0
	})
	out := make([]AdviceItem, len(items))
	for i, it := range items {
		out[i] = it.AdviceItem
	}
	return out
}

// adviseOne gives the first item of command whose gate holds (a pattern has one fix).
func adviseOne(command string, in *adviceIn) (AdviceItem, bool) {
	items := advise(command, in)
	if len(items) == 0 {
		return AdviceItem{}, false
	}
	return items[0], true
}

// adviceTexts is the sentences of items, for the string fields that carried advice before rules.
func adviceTexts(items []AdviceItem) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.Text
	}
	return out
}

// AdviceDoc renders the table as docs/advice.md.
func AdviceDoc() string {
	var b strings.Builder
	b.WriteString("# Advice rules\n\n")
	b.WriteString("Generated from the rule table in `analysis/advice.go` (`go test ./analysis -run TestAdviceDoc -update` rewrites it); do not edit.\n\n")
	b.WriteString("Every piece of advice memsnap gives comes from one rule below, and every advice item in the JSON names its rule (`rule`, `advice_rule` or `fix_rule`). A rule speaks only when its gate holds over the report's own numbers.\n")
	cmd := ""
	for _, r := range adviceRules {
		if r.Command != cmd {
			cmd = r.Command
			fmt.Fprintf(&b, "\n## %s\n\n| rule | gate | says |\n|---|---|---|\n", cmd)
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", r.ID, mdCell(r.Gate), mdCell(r.Says))
	}
	return b.String()
}

func mdCell(s string) string { return strings.ReplaceAll(s, "|", "\\|") }
