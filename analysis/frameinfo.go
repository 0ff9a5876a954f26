package analysis

import (
	"runtime"
	"strings"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// frameInfo is everything attribution reads of one frame, worked out once per frame. A
// snapshot repeats a few thousand frames across its stacks (the ~300 MB benchmark file: 921
// frames in 158 k stack entries), and reading a frame (path tests, lower-casing, marker
// matching, rendering) is what attributing a stack costs; with the answers kept per frame, a
// stack costs a walk over flags.
type frameInfo struct {
	f    snapshot.Frame
	kind frameKind // by the Attributor's roots, skip and keep
	t    frameText
	str  string // frameString
	site string // "file.py:12", the site name of the frame
	op   string // the autograd node a native frame names (cppOp), "" if none
	rule int    // index of the first of the Attributor's rules that matches, -1 if none
	// strong is the index in strongMarkers of the first marker that matches, -1 if none.
	strong int8
	bits   frameBits
}

// frameBits are the yes/no questions classify and AttributeFrames ask of a frame.
type frameBits uint16

const (
	fbNoGradDecorator frameBits = 1 << iota // torch.no_grad / inference_mode's decorator
	fbGradFn                                // an autograd.Function or AOTAutograd forward
	fbInferenceHint                         // inferenceHint
	fbModuleForward                         // a torch.nn module's own forward (not native)
	fbForwardMarker                         // forwardMarker matches
	fbCompiled                              // a compiled or compiler frame (not native)
	fbBackwardPy                            // the backward marker matches a Python frame
	fbParamBuildName                        // isParamBuildName
	fbTransparent                           // transparentFrame
	fbModulePy                              // torch/nn/modules/module.py
	fbOptimizerCaller                       // the optimizer marker, read as a Python frame
	fbParameterCaller                       // the parameter marker, read as a Python frame
	fbUnderRoot                             // a user frame under one of the user's roots
	fbNestedGradEntry                       // an autograd call that is not a training backward (nestedGradEntry)
	fbForwardCall                           // a forward frame: a module's forward or the module call around one
)

func (b frameBits) has(f frameBits) bool { return b&f != 0 }

// newFrameInfo works out what attribution reads of f.
func (a *Attributor) newFrameInfo(f snapshot.Frame) frameInfo {
	k := a.kind(f)
	cpp := k == kindCpp
	t := frameText{p: normPath(f.Filename), n: f.Name, ln: strings.ToLower(f.Name), cpp: cpp}
	fi := frameInfo{f: f, kind: k, t: t, str: frameString(f), site: baseName(f.Filename) + ":" + lineText(f.Line), rule: -1, strong: -1}
	if m := autogradOpRe.FindStringSubmatch(f.Name); m != nil {
		fi.op = m[1]
	}
	for i, r := range a.rules {
		if r.re.MatchString(t.p + ":" + f.Name) {
			fi.rule = i
			break
		}
	}
	for i, m := range strongMarkers {
		if m.matches(t) {
			fi.strong = int8(i)
			break
		}
	}
	set := func(b frameBits, ok bool) {
		if ok {
			fi.bits |= b
		}
	}
	set(fbNoGradDecorator, strings.Contains(t.p, "torch/utils/_contextlib.py") && t.n == "decorate_context")
	set(fbGradFn, strings.Contains(t.n, "CompiledFunction") || (strings.Contains(t.p, "torch/_functorch/") && t.n == "forward"))
	set(fbInferenceHint, inferenceHint(t.p, t.ln))
	set(fbModuleForward, !cpp && strings.Contains(t.p, "torch/nn/modules/") && t.n == "forward")
	set(fbForwardMarker, forwardMarker.matches(t))
	set(fbCompiled, !cpp && compiledFrame(t.p))
	set(fbBackwardPy, !cpp && markerOf(ctxBackward).matches(t))
	set(fbParamBuildName, isParamBuildName(t.ln))
	set(fbTransparent, transparentFrame(t.p, t.n))
	set(fbModulePy, strings.Contains(t.p, "torch/nn/modules/module.py"))
	set(fbOptimizerCaller, markerOf(ctxOptimizer).test(t.p, t.n, t.ln, false))
	set(fbParameterCaller, markerOf(ctxParameter).test(t.p, t.n, t.ln, false))
	set(fbUnderRoot, k == kindUser && len(a.roots) > 0 && a.underRoot(t.p))
	set(fbNestedGradEntry, !cpp && nestedGradEntry(t.p, t.n))
	set(fbForwardCall, !cpp && (t.n == "forward" || (strings.Contains(t.p, "torch/nn/modules/module.py") && (t.n == "_call_impl" || t.n == "_wrapped_call_impl"))))
	return fi
}

// frameTable keeps the frameInfo of every frame of one snapshot, for one Attributor. It is
// filled lazily on the Attributor's goroutine, or all at once (fill) before goroutines that
// only read it start.
type frameTable struct {
	infos []frameInfo
	ready []bool
}

// frames returns the table of snap's frames (made on first use).
func (a *Attributor) frames(snap *snapshot.Snapshot) *frameTable {
	if t := a.tables[snap]; t != nil {
		return t
	}
	t := &frameTable{infos: make([]frameInfo, len(snap.Frames)), ready: make([]bool, len(snap.Frames))}
	a.tables[snap] = t
	return t
}

// info returns the frameInfo of frame id, working it out if it is not yet known.
func (t *frameTable) info(a *Attributor, snap *snapshot.Snapshot, id snapshot.FrameID) *frameInfo {
	if !t.ready[id] {
		t.infos[id] = a.newFrameInfo(snap.Frames[id])
		t.ready[id] = true
	}
	return &t.infos[id]
}

// fill works out every frame not yet known, on all cores. Afterwards the table is only read.
func (t *frameTable) fill(a *Attributor, snap *snapshot.Snapshot) {
	n := len(t.infos)
	workers := min(runtime.GOMAXPROCS(0), 1+n/1024)
	inParallel(workers, func(w int) {
		for id := w * n / workers; id < (w+1)*n/workers; id++ {
			if !t.ready[id] {
				t.infos[id] = a.newFrameInfo(snap.Frames[id])
				t.ready[id] = true
			}
		}
	})
}

// stackInfos returns the frameInfos of a stack's frames from a filled table (safe on any
// goroutine once fill has returned).
func (t *frameTable) stackInfos(snap *snapshot.Snapshot, id snapshot.StackID) []*frameInfo {
	if id < 0 || int(id) >= len(snap.Stacks) {
		return nil
	}
	ids := snap.Stacks[id]
	out := make([]*frameInfo, len(ids))
	for i, f := range ids {
		out[i] = &t.infos[f]
	}
	return out
}
