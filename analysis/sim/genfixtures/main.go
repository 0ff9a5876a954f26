// Command genfixtures writes every sim scenario as a snapshot file under testdata/scenarios/
// (relative to the repository root, or the directory given as the first argument), plus a
// README.md stating what each file is and its ground truth. Output is deterministic: running it
// twice gives the same bytes.
//
//	go run ./analysis/sim/genfixtures [dir]
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/memsnap/memsnap/analysis/pickle/writer"
	"github.com/memsnap/memsnap/analysis/sim"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// DefaultDir is where fixtures go, relative to the repository root.
const DefaultDir = "testdata/scenarios"

// fixture is one written file.
type fixture struct {
	name string
	snap *snapshot.Snapshot
	opt  writer.Options
}

// group is a set of files sharing one README entry.
type group struct {
	title string
	truth string
	files []fixture
}

func mib(n int64) string { return fmt.Sprintf("%d B (%.2f MiB)", n, float64(n)/sim.MiB) }

func oomText(tr sim.OOMTruth) string {
	return fmt.Sprintf("verdict **%s**; failing site `%s`; oom event size (rounded request) %s; device_free %s; "+
		"reserved %s; allocated %s; cached free (inactive) %s; largest inactive block %s.",
		tr.Verdict, tr.Site, mib(tr.Requested), mib(tr.DeviceFree), mib(tr.Reserved), mib(tr.Allocated),
		mib(tr.Inactive), mib(tr.LargestFree))
}

func whatIfText(tr sim.WhatIfTruth, about string) string {
	with := fmt.Sprintf("it fails, %s short", mib(-tr.ExpandableHeadroom))
	if tr.ExpandableFits {
		with = fmt.Sprintf("it is served with %s to spare (capacity − reserved right after it)", mib(tr.ExpandableHeadroom))
	}
	return fmt.Sprintf("%s Recorded OOM (oom event %d): %s Capacity (reserved + device_free) %s. "+
		"Running the same program with expandable_segments:True (every earlier request is served): %s. Peak reserved up to that request: %s with the defaults (%d cudaMalloc calls), "+
		"%s with expandable segments (%d page-range mappings).",
		about, tr.OOMEvent, oomText(tr.OOM), mib(tr.Capacity), with, mib(tr.PeakReserved), tr.SegmentAllocs, mib(tr.ExpandablePeakReserved), tr.ExpandableSegmentMaps)
}

// groups builds every scenario. Truth texts mirror the doc comments in analysis/sim/scenarios.go.
func groups() []group {
	p4 := writer.Options{}
	var gs []group
	a, b := sim.RetainedGraphPair()
	gs = append(gs, group{"Retained autograd graph (leak)",
		"Steps 5 and 50 of a loop with `loss.backward(retain_graph=True)` (train.py:90) and `losses.append(loss)` (train.py:93). " +
			"Growth from step 5 to step 50 (45 steps), by innermost user frame: `" + sim.SiteFC1 + "` +90 blocks +180 MiB; `" +
			sim.SiteGELU + "` +90 blocks +180 MiB; `" + sim.SiteResidual + "` +90 blocks +45 MiB; `" + sim.SiteLoss +
			"` +90 blocks, +180 MiB + 180 B requested (+180 MiB + 23,040 B rounded: log_softmax output and the 4-byte loss per step). " +
			"Total +360 blocks, +585 MiB + 180 B requested. Nothing else changes.",
		[]fixture{{"retained_graph_step5.pickle", a, p4}, {"retained_graph_step50.pickle", b, p4}}})
	a, b = sim.GrowingContainerPair()
	gs = append(gs, group{"Growing container (leak)",
		"Steps 5 and 50 of a loop doing `history.append(logits.detach().clone())`. Only `" + sim.SiteHistory +
			"` grows: 5 blocks / 20 MiB at step 5, 50 blocks / 200 MiB at step 50 (+45 blocks, +180 MiB, one 4 MiB block per step).",
		[]fixture{{"growing_container_step5.pickle", a, p4}, {"growing_container_step50.pickle", b, p4}}})
	a, b = sim.NoGrowthPair()
	gs = append(gs, group{"No growth",
		"Steps 5 and 50 of a correct loop. Live blocks identical in both: `" + sim.SiteParams + "` 5 blocks 24 MiB; `" +
			sim.SiteBatchX + "` 1 block 512 KiB; `" + sim.SiteBatchY + "` 1 block 2 KiB; `" + sim.SiteStep +
			"` 15 blocks (AdamW exp_avg/exp_avg_sq 48 MiB + 5 step tensors of 4 B in 512 B blocks). No site grows.",
		[]fixture{{"no_growth_step5.pickle", a, p4}, {"no_growth_step50.pickle", b, p4}}})
	a, b = sim.OptimizerFirstStepPair()
	gs = append(gs, group{"Optimizer state appears once (not a leak)",
		"Right before the first `opt.step()` (step 1) and at the same point of step 10. The only difference: `" + sim.SiteStep +
			"` +15 blocks (10 × exp_avg/exp_avg_sq through torch/optim/adamw.py:113/:116 `_init_group`, 48 MiB; 5 fused step tensors " +
			"through adamw.py:106, 4 B requested each). Created by the first step, flat afterwards.",
		[]fixture{{"optimizer_first_step_before.pickle", a, p4}, {"optimizer_step10.pickle", b, p4}}})
	s, tr := sim.ActivationOOM()
	gs = append(gs, group{"OOM: activations exceed capacity",
		"First forward pass of an 8-block model on a 940 MiB device; the fifth block's fc1 fails after the allocator released its one cached segment (segment_free just before the oom event). " + oomText(tr),
		[]fixture{{"activation_oom.pickle", s, p4}}})
	s, tr = sim.FragmentationOOM()
	gs = append(gs, group{"OOM: fragmentation",
		"50 × 20 MiB segments, each with a 9.5 MiB hole (freed activation, model.py:41) next to a live 10.5 MiB KV-cache block (model.py:71); a 32 MiB request fails on a 1 GiB device. " + oomText(tr),
		[]fixture{{"fragmentation_oom.pickle", s, p4}}})
	s, tr = sim.OutsidePyTorchOOM()
	gs = append(gs, group{"OOM: memory held outside PyTorch",
		"16 GiB device, all but 128 MiB used by another process; PyTorch reserved only 82 MiB when a 1 GiB `torch.empty` at train.py:103 fails. " + oomText(tr),
		[]fixture{{"outside_pytorch_oom.pickle", s, p4}}})
	s, wt := sim.GrowingBatchOOM()
	gs = append(gs, group{"What-if: expandable segments avoid the OOM",
		whatIfText(wt, "An inference server (serve.py) whose batches grow by one per request (batch 4, 5, …): per request 6 layers each make an 8b MiB fc1 intermediate (model.py:41, freed) and a 2b MiB output (model.py:43), "+
			"then a 6b MiB KV-cache entry (model.py:71) lands in a freed intermediate's segment and pins it, and the 2b MiB result is kept (serve.py:34); weights 6 × 48 MiB. "+
			"PyTorch may reserve 2128 MiB. Recorded with the default settings."),
		[]fixture{{"whatif_expandable_avoids.pickle", s, p4}}})
	s, wt = sim.GrowingBatchCapacityOOM()
	gs = append(gs, group{"What-if: expandable segments do not avoid the OOM (capacity)",
		whatIfText(wt, "The same server where PyTorch may reserve 2 GiB: the same request fails, again with the cache full of holes, but the live tensors leave no room for it even in one contiguous range."),
		[]fixture{{"whatif_capacity_oom.pickle", s, p4}}})
	cs := sim.CrossStreamPendingFrees()
	gs = append(gs, group{"Cross-stream delayed frees",
		fmt.Sprintf("Batches prefetched on stream 0 and used on side stream %d via record_stream. At the snapshot 2 blocks (2 MiB each, `train.py:64 prefetch`) are "+
			"`active_pending_free` (free_requested, no free_completed); the 4 earlier batches' free_completed events are delayed past later events. "+
			"The side stream has its own small segment with one live 512 KiB block (`train.py:71 reduce_on_side`). "+
			"The .json file is the same snapshot as json.dumps writes it (compact).", sim.SideStream),
		[]fixture{{"cross_stream_pending.pickle", cs, p4}, {"cross_stream_pending.json", cs, writer.Options{JSON: true}}}})
	gs = append(gs, group{"Backward allocations without Python frames",
		"Recorded with stacks=\"python\" (no C++ frames anywhere), taken after step 3's backward. The 5 live gradient blocks (24 MiB) and 24 alloc events " +
			"(5 gradients + 3 activation-gradient temporaries per step, 3 steps) have EMPTY frames lists; forward allocations have Python frames.",
		[]fixture{{"backward_no_python_frames.pickle", sim.BackwardNoPythonFrames(), p4}}})
	ranks := sim.MultiRank(4)
	var rf []fixture
	for r, sn := range ranks {
		rf = append(rf, fixture{fmt.Sprintf("multirank/rank%d.pickle", r), sn, p4})
	}
	gs = append(gs, group{"Four ranks, one outlier",
		fmt.Sprintf("4 rank snapshots (segments on device = rank, 4 device_traces) after 3 steps. Rank %d also holds 3 × 512 MiB blocks at `train.py:143 gather_predictions` (+1.5 GiB); the others are identical up to addresses and device. Load the directory.", sim.MultiRankOutlier(4)),
		rf})
	sb := sim.SummarizeBasic()
	gs = append(gs, group{"Summarize: small but rich",
		fmt.Sprintf("3 profiled steps (external_annotations ProfilerStep#1..3 START/END), default-stream small and large pools, a side-stream segment (stream %d, 256 KiB block at train.py:71), "+
			"a private pool (1, 0) with an 8 MiB block (train.py:118), default allocator_settings. Live: params 5 blocks 24 MiB, batch 2 blocks, AdamW 15 blocks, plus the two above. "+
			"The same snapshot in other containers: protocol 2 with restore_type_tag, protocol 5, gzip, gzip-compressed JSON (indent 4; plain it would be 1.3 MB), bare segment list (oldest form: no trace), PyTorch 2.0 legacy history form, "+
			"one frames list per traceback like real files, and 64 trailing NUL bytes after STOP.", sim.SideStream),
		[]fixture{
			{"summarize_basic.pickle", sb, p4},
			{"summarize_basic_p2_typetag.pickle", sb, writer.Options{Protocol: 2, TypeTag: true}},
			{"summarize_basic_p5.pickle", sb, writer.Options{Protocol: 5}},
			{"summarize_basic.pickle.gz", sb, writer.Options{Gzip: true}},
			{"summarize_basic.json.gz", sb, writer.Options{JSON: true, JSONIndent: true, Gzip: true}},
			{"summarize_basic_segment_list.pickle", sb, writer.Options{SegmentList: true}},
			{"summarize_basic_legacy20.pickle", sb, writer.Options{Legacy20: true}},
			{"summarize_basic_list_per_traceback.pickle", sb, writer.Options{ListPerTraceback: true}},
			{"summarize_basic_trailing_nul.pickle", sb, writer.Options{TrailingBytes: 64}},
		}})
	for _, fn := range sim.FrameworkScenarios() {
		sn, tr := fn()
		gs = append(gs, group{"Framework: " + strings.TrimSuffix(strings.TrimPrefix(tr.Name, "fw_"), ".pickle"), fwText(tr), []fixture{{tr.Name, sn, p4}}})
	}
	return gs
}

// fwAbout says what each framework fixture is (the scenario doc comments in
// analysis/sim/scenarios_frameworks.go say more).
var fwAbout = map[string]string{
	"fw_lightning_closure.pickle": "Lightning `Trainer.fit` (lit_train.py:88) of a LightningModule wrapping the user's MLP, torch.optim.Adam (foreach), 3 steps. " +
		"`training_step` runs inside the closure that `Adam.step` calls (lightning/pytorch/loops/optimization/automatic.py `closure`/`_training_step`, " +
		"torch/optim/adam.py `step`, optimizer.py `wrapper`, `LightningOptimizer.step`, the fit loop): forward stacks have torch/optim frames OUTSIDE the model call, " +
		"yet are activations. Gradients are zeroed inside the closure, so the previous step's .grad tensors are live during the forward. " +
		"`self.train_preds.append(logits.argmax(-1))` (lit_train.py:33) grows a user container. Snapshot after the third optimizer step, grads not yet zeroed.",
	"fw_hf_trainer_accelerate.pickle": "transformers `Trainer.train()` (finetune.py:47) fine-tuning a 2-layer LlamaForCausalLM (bf16) loaded with `from_pretrained(device_map=\"auto\")` " +
		"(finetune.py:21; weights through modeling_utils.py `from_pretrained`/`_load_pretrained_model` and accelerate `set_module_tensor_to_device` `.to()`: parameter, site the user's line). " +
		"Every module forward is wrapped by accelerate/hooks.py `new_forward`; sites are modeling_llama.py lines, never hooks.py or modeling_utils.py; their user site is finetune.py:47. " +
		"Batches moved by Trainer `_prepare_input` `.to()` are `other`. AdamW (torch.optim, bf16 state) through accelerate's optimizer and the LR-scheduler wrapper. 2 steps; snapshot at on_step_end after step 2.",
	"fw_deepspeed_zero2.pickle": "DeepSpeed ZeRO-2 (bf16, contiguous_gradients, overlap_comm), rank 0 of 2, user MLP whose forward returns the loss. `deepspeed.initialize` (ds_train.py:40): " +
		"module to GPU then moved to CPU, one flat bf16 buffer (parameter), fp32 master partition and FusedAdam exp_avg/exp_avg_sq (optimizer_state), zero grad partition and bf16 clone (temporaries). " +
		"Per iteration: batch `.to()` (ds_train.py:51), engine.forward, engine.backward: IPG bucket buffers (stage_1_and_2.py `backward`, communication), per-parameter .grad (AccumulateGrad, freed at once by ZeRO's grad hook) and " +
		"grads_in_partition allocated by the hook on the autograd thread (gradient, no user frame at all); engine.step: fp32 gradient partition (gradient), `_release_ipg_buffers`, " +
		"`all_gather_dp_groups` → torch.distributed `all_gather` → ProcessGroupNCCL::allgather `c10d::newLikeFlat` (communication). 3 forwards/backwards, 2 optimizer steps; snapshot after the third backward, before `model_engine.step()`.",
	"fw_vllm_kv_cache.pickle": "vLLM V1 in-process (`LLM(...)` at serve.py:9, enforce_eager): Llama weights created in models/llama.py `__init__` under the device context (parameter; site the models/llama.py line, user site serve.py:9), " +
		"GPUModelRunner's positions buffer (other), a profiling dummy run (temporaries), then gpu_model_runner.py `_allocate_kv_cache_tensors` ← `initialize_kv_cache_tensors` ← `initialize_kv_cache` ← gpu_worker.py `initialize_from_config`: " +
		"2 × 64 MiB (kv_cache, site serve.py:9, NOT a user container). `llm.generate` (serve.py:12): 1 prefill + 3 decode engine steps under inference_mode, temporaries only. Inference: no backward, no optimizer frames.",
	"fw_autocast_bf16.pickle": "Eager training of the user's MLP under `torch.autocast(\"cuda\", torch.bfloat16)` (amp_train.py:40) on a bf16 batch, AdamW foreach. Each linear casts its fp32 weight once per forward through " +
		"`at::autocast::cached_cast` (autocast_cache, site the model.py line of the linear); linear outputs carry `at::autocast::WrapFunction_` frames but are activations. The first matmul creates the cuBLAS workspace " +
		"(`at::cuda::getNewWorkspace`, workspace, model.py:41); the backward's engine thread creates its own (workspace, no Python frame). Snapshot inside the autocast region of step 3, after the loss.",
	"fw_hf_generate.pickle": "transformers greedy `generate` (generate.py:18) with a user-owned `DynamicCache` (so the cache outlives generate): model moved with `.to(\"cuda\")` through modeling_utils.py `to` (parameter, site generate.py:14), " +
		"`BatchEncoding.to` (other), generate under no_grad (torch/utils/_contextlib.py `decorate_context`) → generation/utils.py `_sample`: prefill of 4 × 64 tokens then 3 decode forwards. " +
		"Every cache write is cache_utils.py `DynamicLayer.update` `torch.cat` ← `Cache.update` ← modeling_llama.py:254 (kv_cache; each step frees the previous cache tensors). Inference.",
	"fw_torch_compile.pickle": "torch.compile'd training of the user's MLP (PyTorch 2.9 frames from a real compiled snapshot): inductor's generated `call` (/tmp/torchinductor_alice/…) followed by the ORIGINAL model frames " +
		"(model.py:41, model.py:57, …), torch/_inductor/utils.py `run`, output_code.py `__call__`, AOTAutograd runtime_wrappers.py / `CompiledFunction` forward and backward, eval_frame.py `_fn`/`compile_wrapper`. " +
		"The generated file is never the site. Compiled backward allocations (engine thread) have model.py sites: weight gradients (gradient) and activation gradients (backward_temporary). " +
		"cuBLAS workspaces from the first forward mm (model.py:41) and the first backward mm (model.py:58). Snapshot after the second forward, before `loss.backward()`.",
}

func fwShort(s string) string {
	if s == "" {
		return "(none)"
	}
	return "`" + s + "`"
}

func fwTable(rows []sim.FwRow) string {
	var b strings.Builder
	b.WriteString("| site | user_site | role | bytes | blocks |\n|---|---|---|---|---|\n")
	var total, blocks int64
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %d |\n", fwShort(r.Site), fwShort(r.UserSite), r.Role, r.Bytes, r.Blocks)
		total += r.Bytes
		blocks += r.Blocks
	}
	fmt.Fprintf(&b, "| **total** | | | %d | %d |\n", total, blocks)
	return b.String()
}

func fwText(tr sim.FwTruth) string {
	var steps []string
	for _, s := range tr.Steps {
		steps = append(steps, fmt.Sprintf("%d–%d", s[0], s[1]))
	}
	return fmt.Sprintf("%s\n\nWorkload **%s**; %d forward passes, %d backward passes, %d optimizer steps; snapshot %s. "+
		"Iterations (device_traces[0] event indexes): %s.\n\nFinal state (active_allocated blocks; sites \"path:line function\", (none) = no such frame):\n\n%s\n"+
		"Replayed allocated peak: %s, first reached at event %d. Live then:\n\n%s",
		fwAbout[tr.Name], tr.Workload, tr.Forwards, tr.Backwards, tr.OptSteps, tr.Point, strings.Join(steps, ", "),
		fwTable(tr.Final), mib(tr.PeakBytes), tr.PeakEvent, fwTable(tr.Peak))
}

// generate writes every fixture and the README under dir.
func generate(dir string) error {
	var readme strings.Builder
	readme.WriteString("# Scenario fixtures (generated)\n\n" +
		"Written by `go run ./analysis/sim/genfixtures` from the caching-allocator simulation in `analysis/sim` " +
		"(scenario functions in analysis/sim/scenarios*.go). Do not edit: regenerate. Every file is synthetic; " +
		"the ground truth below is exact. Sites are the innermost frame under /workspace/proj (for the fw_* files: the innermost model-code frame, " +
		"a user file or a model-defining library file such as transformers' models/llama/modeling_llama.py; user_site is the innermost frame under /workspace/proj); sizes are block sizes " +
		"(rounded to 512 B) unless marked requested. Unless noted, files are protocol-4 pickles with one frames list per distinct stack.\n")
	for _, g := range groups() {
		fmt.Fprintf(&readme, "\n## %s\n\n", g.title)
		for _, f := range g.files {
			if err := sim.CheckInvariants(f.snap); err != nil {
				return fmt.Errorf("%s: %w", f.name, err)
			}
			data, err := writer.Encode(f.snap, f.opt)
			if err != nil {
				return fmt.Errorf("%s: %w", f.name, err)
			}
			p := filepath.Join(dir, filepath.FromSlash(f.name))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return fmt.Errorf("%s: %w", f.name, err)
			}
			if err := os.WriteFile(p, data, 0o644); err != nil {
				return fmt.Errorf("%s: %w", f.name, err)
			}
			fmt.Fprintf(&readme, "- `%s`\n", f.name)
		}
		fmt.Fprintf(&readme, "\n%s\n", g.truth)
	}
	if err := os.WriteFile(filepath.Join(dir, "README.md"), []byte(readme.String()), 0o644); err != nil {
		return fmt.Errorf("README: %w", err)
	}
	return nil
}

func main() {
	dir := DefaultDir
	if len(os.Args) > 1 {
		dir = os.Args[1]
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "genfixtures:", err)
		os.Exit(1)
	}
	if err := generate(dir); err != nil {
		fmt.Fprintln(os.Stderr, "genfixtures:", err)
		os.Exit(1)
	}
}
