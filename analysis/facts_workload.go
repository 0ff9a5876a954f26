package analysis

// The workload as a fact of the process, not of one device: the strongest evidence is the
// optimizer's own record_function annotation, and what one device shows of the training loop
// holds for every device of the process.

import (
	"fmt"
	"slices"
	"strings"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// optimizerAnnotations counts the Optimizer.step#… and Optimizer.zero_grad#… START
// annotations of the file, on any device, and names the optimizers. torch/optim/optimizer.py
// wraps every step in torch.autograd.profiler.record_function(f"Optimizer.step#{cls}.step")
// (Optimizer.profile_hook_step) and zero_grad in "Optimizer.zero_grad#{cls}.zero_grad"; the
// memory history records record_function ranges as external_annotations with the thread's
// current device, so one step that updates the parameters of every device (DataParallel, model
// parallel) is recorded once: the annotation is the process's, not one device's.
func optimizerAnnotations(snap *snapshot.Snapshot) (steps, zeroGrads int, names []string) {
	for _, an := range snap.Annotations {
		if an.Stage != "START" {
			continue
		}
		var rest string
		switch {
		case strings.HasPrefix(an.Name, "Optimizer.step#"):
			steps++
			rest = strings.TrimPrefix(an.Name, "Optimizer.step#")
		case strings.HasPrefix(an.Name, "Optimizer.zero_grad#"):
			zeroGrads++
			rest = strings.TrimPrefix(an.Name, "Optimizer.zero_grad#")
		default:
			continue
		}
		cls, _, _ := strings.Cut(rest, ".")
		if cls != "" && !slices.Contains(names, cls) && len(names) < 4 {
			names = append(names, cls)
		}
	}
	return steps, zeroGrads, names
}

// annotationWorkload is the workload the optimizer's annotations prove (training), with the
// evidence; "" when the file has no Optimizer.step# annotation. A loop that steps an optimizer
// trains, with or without a backward pass (zeroth-order training estimates gradients from
// forward passes alone, and a forward with use_cache=True still allocates a KV cache there).
// Optimizer.zero_grad# alone proves no step: a benchmark that builds an optimizer and clears
// gradients before timing a forward under no_grad is not training.
func (r *Roles) annotationWorkload() (string, string) {
	steps, _, names := optimizerAnnotations(r.snap)
	if steps == 0 {
		return "", ""
	}
	return WorkloadTraining, fmt.Sprintf("%s (%s; torch/optim/optimizer.py records every step with record_function): the process steps an optimizer", count(steps, "Optimizer.step# annotation"), strings.Join(names, ", "))
}

// processDevices lists the devices the file has a trace or segments for, in order.
func (r *Roles) processDevices() []int {
	// Snapshot.Devices is one pass over the segments (a search per segment was quadratic in
	// the devices of a file with thousands of them).
	return slices.DeleteFunc(r.snap.Devices(), func(d int) bool { return d < 0 })
}

// processWorkload: a device whose own frames leave the workload unknown takes the workload of
// a device of the same process that shows training (a backward pass or an optimizer step):
// one snapshot file is one process, and its devices run one loop (DataParallel replicas, model
// parallel stages).
func (r *Roles) processWorkload(dev int, w, ev string) (string, string) {
	if w != WorkloadUnknown {
		return w, ev
	}
	for _, o := range r.processDevices() {
		if o == dev {
			continue
		}
		if od := r.device(o); od.workload == WorkloadTraining {
			return WorkloadTraining, fmt.Sprintf("device %d of the same process trains (%s)", o, od.evidence)
		}
	}
	return w, ev
}
