package analysis

// Facts about the phases of a device's trace that the phase pass alone cannot see: autograd
// work a forward does for itself, and what follows an out-of-memory error. Each rewrites the
// phase of events from what the trace proves, so steps, stages, workload and roles read one
// story.

import (
	"fmt"
	"slices"
	"strings"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// nestedGradPass gives back to the forward the autograd work a forward frame asked for (a
// regulariser's torch.autograd.grad, torch.autograd.functional.jvp): not a training backward.
// On CUDA the autograd engine runs a graph's nodes on its device thread, whose allocations
// carry no Python frame (torch/csrc/autograd/engine.cpp: Engine::thread_main on the device's
// ready queue), so the call that asked for them is the last allocation with Python frames
// before them: when its stack has the autograd call under a forward frame (Attribution.
// nestedGrad), the engine's allocations up to the next allocation with Python frames are that
// call's, in the forward.
func (r *Roles) nestedGradPass(d *deviceRoles) {
	if !r.anyFrame(fbNestedGradEntry) {
		return
	}
	nested, moved := false, 0
	var entry string
	for i := range d.evs {
		ev := &d.evs[i]
		if ev.Action == snapshot.ActionAlloc {
			if at := r.attr(ev.Stack); at.pyFrames {
				nested, entry = at.nestedGrad != "", at.nestedGrad
			}
		}
		if !nested || d.phases[i] != phaseBackward {
			continue
		}
		d.phases[i] = phaseForward
		if ev.Action == snapshot.ActionAlloc {
			d.allocs[phaseBackward]--
			d.allocs[phaseForward]++
			if moved == 0 {
				d.nestedGradEntry = entry
			}
			moved++
		}
	}
	if moved == 0 {
		return
	}
	d.nestedGradAllocs = moved
	if d.allocs[phaseBackward] == 0 {
		d.firstFrame[phaseBackward] = ""
		return
	}
	for i := range d.evs {
		if d.phases[i] == phaseBackward && d.evs[i].Action == snapshot.ActionAlloc {
			if at := r.attr(d.evs[i].Stack); at.frame != "" {
				d.firstFrame[phaseBackward] = at.frame
			}
			return
		}
	}
}

// anyFrame reports whether any frame of the file has bit b.
func (r *Roles) anyFrame(b frameBits) bool {
	for i := range r.attrs.frames.infos {
		if r.attrs.frames.infos[i].bits.has(b) {
			return true
		}
	}
	return false
}

// UnwindSpan is what followed one out-of-memory error on a device: the events from the oom
// event up to the next allocation of a new pass (a forward, backward or optimizer step: the
// program caught the error and went on) or the end of the trace. Those events are the
// exception unwinding the pass (the frames that held its tensors return and drop them) and
// the framework's teardown: Lightning's trainer catches the error in _call_and_handle_interrupt
// (lightning/pytorch/trainer/call.py) and runs trainer._teardown(), whose strategy teardown
// moves the LightningModule to the CPU (module.cpu()) and whose CUDA accelerator teardown
// calls _clear_cuda_memory() → torch.cuda.empty_cache() (lightning/fabric/accelerators/
// cuda.py). They say nothing about what the memory was for: roles and steps never read them.
type UnwindSpan struct {
	OOMEvent   int `json:"oom_event"`
	StartEvent int `json:"start_event"`
	EndEvent   int `json:"end_event"`
	// FreedBlocks and FreedBytes are the blocks freed in the span (free_completed). What
	// stays allocated after it is still held: a traceback kept (sys.last_traceback, a logger)
	// pins the frames' tensors, and the caller's own references stay.
	FreedBlocks int   `json:"freed_blocks"`
	FreedBytes  int64 `json:"freed_bytes"`
	// Teardown names the frames of the span's frees and cache releases that are a framework's
	// teardown or torch.cuda.empty_cache (empty: none recorded).
	Teardown []string `json:"teardown"`
	// Resumed: a new pass allocated after the span (the program caught the error).
	Resumed bool `json:"resumed"`
}

// teardownFrame names a frame that tears down or releases memory after an error: Lightning's
// Trainer._teardown / Strategy.teardown / _clear_cuda_memory, Module.cpu(), torch.cuda.
// empty_cache, gc.collect.
func teardownFrame(p, n string) string {
	switch {
	case n == "_teardown" || n == "teardown" || n == "_clear_cuda_memory":
		return n
	case strings.HasSuffix(p, "torch/nn/modules/module.py") && n == "cpu":
		return "Module.cpu"
	case strings.HasSuffix(p, "torch/cuda/memory.py") && n == "empty_cache":
		return "torch.cuda.empty_cache"
	}
	return ""
}

// oomPass marks the events after each oom event as unwinding (phaseUnwind), up to the next
// allocation of a new pass, and records the spans. An allocation in the span keeps no phase of
// its own: what the pass was doing ended at the error.
func (r *Roles) oomPass(d *deviceRoles) {
	if d.index == nil {
		return
	}
	next := 0 // the first event not yet in a span
	for _, i := range d.index.Tally.OOMEvents {
		if i < next || i >= len(d.evs) {
			continue
		}
		sp := UnwindSpan{OOMEvent: i, StartEvent: i, EndEvent: len(d.evs) - 1, Teardown: []string{}}
		j := i + 1
		for ; j < len(d.evs); j++ {
			ev := &d.evs[j]
			if ev.Action == snapshot.ActionOOM {
				break
			}
			if ev.Action == snapshot.ActionAlloc {
				if c, _ := r.stackCtx(ev.Stack); phaseOfCtx(c) != phaseNone {
					sp.Resumed = true
					break
				}
			}
			if ev.Action == snapshot.ActionAlloc {
				d.allocs[d.phases[j]]--
				d.allocs[phaseUnwind]++
			}
			d.phases[j] = phaseUnwind
			if ev.Action == snapshot.ActionFreeCompleted {
				sp.FreedBlocks++
				sp.FreedBytes += ev.Size
			}
			if ev.Action == snapshot.ActionFreeRequested || ev.Action == snapshot.ActionFreeCompleted || ev.Action == snapshot.ActionSegmentFree {
				for _, f := range r.attrs.frames.stackInfos(r.snap, ev.Stack) {
					if t := teardownFrame(f.t.p, f.t.n); t != "" && !slices.Contains(sp.Teardown, t) && len(sp.Teardown) < 8 {
						sp.Teardown = append(sp.Teardown, t)
					}
				}
			}
		}
		d.phases[i] = phaseUnwind
		sp.EndEvent = j - 1
		d.unwind = append(d.unwind, sp)
		next = j
	}
}

// UnwindSpans lists what followed each out-of-memory error on device dev (empty: none).
func (r *Roles) UnwindSpans(dev int) []UnwindSpan {
	return r.device(dev).unwind
}

// nestedGradBlock: an allocation of the autograd engine that nestedGradPass gave back to the
// forward is the forward's work (a JVP's or a regulariser's gradient), not a training
// backward's temporary or gradient; the stack alone (an engine node) cannot say so, the phase
// of this allocation does.
func (r *Roles) nestedGradBlock(d *deviceRoles, at Attribution, allocIdx int) Attribution {
	if d.nestedGradAllocs == 0 || (at.ctx != ctxBackward && at.ctx != ctxGradient) || allocIdx < 0 || allocIdx >= len(d.phases) || d.phases[allocIdx] != phaseForward {
		return at
	}
	at.Category = CategoryTemporary
	at.Evidence = "made by the autograd engine for " + d.nestedGradEntry + ", called inside a forward (event " + fmt.Sprint(allocIdx) + "): the forward's own derivative, not the training backward"
	if allocIdx < len(d.fates) && d.fates[allocIdx] == fateAlive {
		at.Category = CategoryActivation
		at.Evidence += "; still alive after its call: kept by the forward's graph (create_graph) for the training backward"
	}
	return at
}
