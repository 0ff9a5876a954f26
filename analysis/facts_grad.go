package analysis

// Grad mode as a fact read from lifetimes. `with torch.no_grad():` leaves no frame, and the
// autograd VariableType kernels (torch/csrc/autograd/generated/VariableType_*.cpp) sit on the
// stack of every op whether grad is on or off, so no frame — present or missing — says whether
// autograd kept a graph. What autograd does does: with grad enabled, a forward op saves its
// inputs or outputs for the backward (SavedVariable), so forward allocations outlive the layer
// that made them and are freed by the backward pass, in reverse order; with grad disabled
// nothing is saved, each intermediate is freed within the forward (as soon as the next op no
// longer needs it) and memory stays flat across the layers.

import (
	"fmt"
	"strings"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// Grad modes.
const (
	GradOn      = "on"      // a backward pass freed forward allocations: a graph was kept
	GradOff     = "off"     // the forward freed what it allocated: no graph was kept
	GradUnknown = "unknown" // no forward in the trace, or its allocations outlive it with no backward to tell
)

// minGradForwardAllocs is the fewest forward allocations that can show a pass kept nothing
// (a handful of ops say nothing about many layers).
const minGradForwardAllocs = 16

// GradMode says whether the forward passes of a device's trace kept an autograd graph, from
// how their allocations ended (see the package comment above).
type GradMode struct {
	Mode     string `json:"mode"`
	Evidence string `json:"evidence"`
	// ForwardAllocs are the trace's allocations in forward passes: FreedInPass of them were
	// freed before that pass ended, FreedByBackward by a later backward pass, and Outlived
	// outlived their pass otherwise (alive at the end, at an OOM, or freed by a later phase).
	ForwardAllocs   int `json:"forward_allocs"`
	FreedInPass     int `json:"freed_in_pass"`
	FreedByBackward int `json:"freed_by_backward"`
	Outlived        int `json:"outlived"`
}

// GradMode reads device dev's grad mode from its trace's lifetimes.
func (r *Roles) GradMode(dev int) GradMode {
	d := r.device(dev)
	if !d.hasTrace {
		return GradMode{Mode: GradUnknown, Evidence: "no trace: lifetimes cannot show whether a graph was kept"}
	}
	return r.gradMode(d)
}

func (r *Roles) gradMode(d *deviceRoles) GradMode {
	r.lifetimes(d)
	var g GradMode
	for i := range d.evs {
		if d.evs[i].Action != snapshot.ActionAlloc || d.phases[i] != phaseForward {
			continue
		}
		g.ForwardAllocs++
		switch d.fates[i] {
		case fateSameRun:
			g.FreedInPass++
		case fateInBackward:
			g.FreedByBackward++
		default:
			g.Outlived++
		}
	}
	switch {
	case g.FreedByBackward > 0:
		g.Mode = GradOn
		g.Evidence = fmt.Sprintf("%d of %d forward allocations outlived their pass and were freed by a backward pass: saved for backward", g.FreedByBackward, g.ForwardAllocs)
	case g.ForwardAllocs >= minGradForwardAllocs && g.FreedInPass*10 >= g.ForwardAllocs*9:
		g.Mode = GradOff
		g.Evidence = fmt.Sprintf("%d of %d forward allocations were freed within the forward pass that made them, and no backward pass frees any: no graph was kept (torch.no_grad()/inference_mode, or nothing requires grad); a with-block leaves no frame, so this is read from lifetimes", g.FreedInPass, g.ForwardAllocs)
	case g.ForwardAllocs == 0:
		g.Mode = GradUnknown
		g.Evidence = "no forward pass in the trace"
	default:
		if fr := r.compiledAutogradFrame(d); fr != "" {
			g.Mode = GradOn
			g.Evidence = fmt.Sprintf("%d of %d forward allocations outlived their pass, made under AOTAutograd's CompiledFunction (%s): torch.compile wraps a graph in that autograd.Function only when grad is enabled and an input requires grad, and returns the tensors it saves for backward", g.Outlived, g.ForwardAllocs, fr)
			break
		}
		g.Mode = GradUnknown
		g.Evidence = fmt.Sprintf("%d of %d forward allocations outlived their pass and no backward pass in the trace frees them: saved for a backward the trace does not reach, or outputs the caller keeps", g.Outlived, g.ForwardAllocs)
	}
	return g
}

// compiledAutogradFrame is the first frame of AOTAutograd's CompiledFunction on the stack of a
// forward allocation that outlived its pass. AOTAutograd (torch/_functorch/aot_autograd.py)
// compiles the joint training graph behind the CompiledFunction autograd.Function only when
// needs_autograd holds (an input requires grad and torch.is_grad_enabled()); under no_grad or
// inference_mode it compiles an inference graph with no such frame. So the frame is evidence
// of grad on where no backward in the trace shows it. aot_autograd.py sets
// needs_autograd = any(x.requires_grad for x in fake_flat_args ...) (and, in some versions,
// "and torch.is_grad_enabled()"), looked up in PyTorch's source; how older releases
// chose the graph is a guess.
func (r *Roles) compiledAutogradFrame(d *deviceRoles) string {
	for i := range d.evs {
		if d.evs[i].Action != snapshot.ActionAlloc || d.phases[i] != phaseForward || d.fates[i] == fateSameRun || d.fates[i] == fateInBackward {
			continue
		}
		for _, f := range r.attrs.frames.stackInfos(r.snap, d.evs[i].Stack) {
			// CompiledFunction.forward: a frame named forward in torch/_functorch's AOTAutograd
			// runtime (Python before 3.11 records the bare function name).
			if strings.Contains(f.t.n, "CompiledFunction") || (strings.Contains(f.t.p, "torch/_functorch/") && f.t.n == "forward") {
				return f.str
			}
		}
	}
	return ""
}
