package analysis

// DeviceFacts gathers, for one device of a snapshot, the facts every analysis reads, each with
// its evidence, so that reports state them and advice gates on them without working them out
// again. Roles computes them in one pass per (snapshot, device) and keeps them.
type DeviceFacts struct {
	Device int `json:"device"`
	// Workload (training, inference, unknown) is the process's: Optimizer.step# annotations
	// first, then the device's backward and optimizer frames, then a sibling device's.
	Workload         string `json:"workload"`
	WorkloadEvidence string `json:"workload_evidence"`
	// OptimizerSteps counts the file's Optimizer.step# annotations (any device: they are the
	// process's).
	OptimizerSteps int `json:"optimizer_steps"`
	// HasBackward: the loop's own backward pass shows in the trace or the live blocks
	// (autograd calls a forward makes for itself are not one).
	HasBackward bool `json:"has_backward"`
	// GradMode is read from lifetimes (see GradMode).
	GradMode GradMode `json:"grad_mode"`
	// StepSource and Steps: where steps come from (annotations, user_metadata, phases,
	// periodicity or none) and how many start in the trace.
	StepSource string `json:"step_source"`
	Steps      int    `json:"steps"`
	// NestedGrad names the autograd call a forward made for itself (torch.autograd.grad,
	// functional.jvp …) and NestedGradAllocs the engine allocations it caused, counted as the
	// forward's ("" and 0: none).
	NestedGrad       string `json:"nested_grad,omitempty"`
	NestedGradAllocs int    `json:"nested_grad_allocs,omitempty"`
	// Unwind lists what followed each OOM (see UnwindSpan).
	Unwind []UnwindSpan `json:"unwind"`
	// Frameworks are the file's (see Frameworks).
	Frameworks []Framework `json:"frameworks"`
}

// Facts returns the facts of device dev.
func (r *Roles) Facts(dev int) DeviceFacts {
	d := r.device(dev)
	f := DeviceFacts{Device: dev, HasBackward: d.hasBackward, GradMode: r.GradMode(dev), StepSource: d.steps.Source,
		Steps: len(d.steps.Starts), NestedGrad: d.nestedGradEntry, NestedGradAllocs: d.nestedGradAllocs,
		Unwind: d.unwind, Frameworks: r.Frameworks()}
	f.Workload, f.WorkloadEvidence = r.Workload(dev)
	f.OptimizerSteps, _, _ = optimizerAnnotations(r.snap)
	if f.Unwind == nil {
		f.Unwind = []UnwindSpan{}
	}
	return f
}
