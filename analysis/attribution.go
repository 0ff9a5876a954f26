package analysis

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// AttributionOptions tunes how the user's own frame is chosen.
type AttributionOptions struct {
	// UserRoots are directories whose frames win: the innermost frame under any of them is the
	// site. Windows paths work (backslashes are normalised).
	UserRoots []string `json:"user_roots,omitempty"`
	// Skip is a list of regular expressions; a frame whose "file:function" matches is never the site.
	Skip []string `json:"skip,omitempty"`
	// Keep is a list of regular expressions; a Python frame whose "file:function" matches counts as
	// user code even inside site-packages or torch.
	Keep []string `json:"keep,omitempty"`
}

// Site kinds: where the chosen frame comes from.
const (
	SiteKindUser    = "user"    // the user's own code (or model-defining library code)
	SiteKindTorch   = "torch"   // no user frame: the innermost PyTorch frame
	SiteKindLibrary = "library" // no user or torch frame: the innermost other Python frame
	SiteKindNone    = "none"    // no Python frame at all
)

// Sites used when a stack has no Python frame.
const (
	SiteNoPython = "<no Python frame>"
	SiteNoStack  = "<no stack recorded>"
)

// Categories guessed for a site.
const (
	CategoryParameter         = "parameter"
	CategoryGradient          = "gradient"
	CategoryOptimizerState    = "optimizer_state"
	CategoryActivation        = "activation"
	CategoryBackwardTemporary = "backward_temporary"
	CategoryCommunication     = "communication"
	CategoryUserContainer     = "user_container"
	CategoryOther             = "other"
)

// Site is the frame a stack is attributed to.
type Site struct {
	File     string `json:"file"`
	Line     int64  `json:"line"`
	Function string `json:"function"`
	// Site is the short form "model.py:214" (or "<no Python frame>", "<no stack recorded>").
	Site string `json:"site"`
	Kind string `json:"kind"`
}

// Attribution is everything known about one stack: its site, a category guess with the evidence,
// and a filtered stack (the user frames plus the nearest library frame, innermost first).
type Attribution struct {
	Site
	Category string   `json:"category"`
	Evidence string   `json:"evidence"`
	Stack    []string `json:"stack"`
}

type frameKind uint8

const (
	kindCpp frameKind = iota
	kindRuntime
	kindTorch
	kindLibrary
	kindUser
	kindSkipped
)

type attrKey struct {
	snap *snapshot.Snapshot
	id   snapshot.StackID
}

// Attributor picks the user's frame in stacks. It caches per (snapshot, stack); it is not safe
// for concurrent use.
type Attributor struct {
	roots []string
	skip  []*regexp.Regexp
	keep  []*regexp.Regexp
	cache map[attrKey]Attribution
}

// NewAttributor compiles the options; a bad regular expression is an error.
func NewAttributor(opt AttributionOptions) (*Attributor, error) {
	a := &Attributor{cache: map[attrKey]Attribution{}}
	for _, r := range opt.UserRoots {
		r = strings.TrimSuffix(normPath(r), "/")
		if r != "" {
			a.roots = append(a.roots, strings.ToLower(r)+"/")
		}
	}
	for _, s := range opt.Skip {
		re, err := regexp.Compile(s)
		if err != nil {
			return nil, fmt.Errorf("bad --skip pattern %q: %w", s, err)
		}
		a.skip = append(a.skip, re)
	}
	for _, s := range opt.Keep {
		re, err := regexp.Compile(s)
		if err != nil {
			return nil, fmt.Errorf("bad --keep pattern %q: %w", s, err)
		}
		a.keep = append(a.keep, re)
	}
	return a, nil
}

// DefaultAttributor has no options.
func DefaultAttributor() *Attributor {
	a, _ := NewAttributor(AttributionOptions{})
	return a
}

var runtimeMarkers = []string{"runpy.py", "threading.py", "<frozen", "importlib", "<string>",
	"contextlib.py", "functools.py", "concurrent/futures", "multiprocessing/", "asyncio/",
	"site-packages/ipykernel", "site-packages/IPython", "<ipython-input"}

// modelLibMarkers are library paths that define models: they count as the user's code.
var modelLibMarkers = []string{"/transformers/models/", "/diffusers/models/", "/timm/models/",
	"/torchvision/models/", "/peft/tuners/"}

func isTorchPath(p string) bool {
	return strings.HasPrefix(p, "torch/") || strings.Contains(p, "/torch/") ||
		strings.Contains(p, "torchinductor_") || strings.HasPrefix(p, "<eval_with_key>") ||
		strings.Contains(p, "/functorch/")
}

func isLibraryPath(p string) bool {
	return strings.Contains(p, "site-packages/") || strings.Contains(p, "dist-packages/")
}

func isStdlibPath(p string) bool {
	// /usr/lib/python3.11/foo.py, .../lib/python3.11/foo.py, C:/Python311/Lib/foo.py
	if isLibraryPath(p) {
		return false
	}
	lp := strings.ToLower(p)
	return strings.Contains(lp, "/lib/python3") || strings.Contains(lp, "/lib/python2") ||
		(strings.Contains(lp, "/python3") && strings.Contains(lp, "/lib/"))
}

func (a *Attributor) kind(f snapshot.Frame) frameKind {
	if snapshot.IsCppFrame(f) {
		return kindCpp
	}
	p := normPath(f.Filename)
	key := p + ":" + f.Name
	for _, re := range a.skip {
		if re.MatchString(key) {
			return kindSkipped
		}
	}
	for _, re := range a.keep {
		if re.MatchString(key) {
			return kindUser
		}
	}
	if a.underRoot(p) {
		return kindUser
	}
	for _, m := range runtimeMarkers {
		if strings.Contains(p, m) {
			return kindRuntime
		}
	}
	if isTorchPath(p) {
		return kindTorch
	}
	if isLibraryPath(p) {
		for _, m := range modelLibMarkers {
			if strings.Contains(p, m) {
				return kindUser
			}
		}
		if strings.HasPrefix(baseName(p), "modeling_") {
			return kindUser
		}
		return kindLibrary
	}
	if isStdlibPath(p) {
		return kindRuntime
	}
	return kindUser
}

func (a *Attributor) underRoot(p string) bool {
	lp := strings.ToLower(p)
	for _, r := range a.roots {
		if strings.HasPrefix(lp, r) || strings.Contains(lp, "/"+strings.TrimPrefix(r, "/")) {
			return true
		}
	}
	return false
}

func siteOf(f snapshot.Frame, kind string) Site {
	line := "?"
	if f.Line >= 0 {
		line = fmt.Sprint(f.Line)
	}
	return Site{File: f.Filename, Line: f.Line, Function: f.Name, Site: baseName(f.Filename) + ":" + line, Kind: kind}
}

// frameString renders a frame for a filtered stack: "path/file.py:12 in fn".
func frameString(f snapshot.Frame) string {
	line := "?"
	if f.Line >= 0 {
		line = fmt.Sprint(f.Line)
	}
	return shortPath(f.Filename) + ":" + line + " in " + f.Name
}

// shortPath keeps a path readable: the part after site-packages/, else the last three elements.
func shortPath(p string) string {
	p = normPath(p)
	for _, m := range []string{"site-packages/", "dist-packages/"} {
		if i := strings.LastIndex(p, m); i >= 0 {
			return p[i+len(m):]
		}
	}
	parts := strings.Split(p, "/")
	if len(parts) > 3 {
		parts = parts[len(parts)-3:]
	}
	return strings.Join(parts, "/")
}

// Attribute returns the attribution of one stack of snap (cached).
func (a *Attributor) Attribute(snap *snapshot.Snapshot, id snapshot.StackID) Attribution {
	k := attrKey{snap, id}
	if at, ok := a.cache[k]; ok {
		return at
	}
	// A file that recorded no stacks at all writes empty frame lists: that is "not recorded",
	// not "no Python frame".
	noStack := id == snapshot.NoStack ||
		(id == snapshot.EmptyStack && !snap.Caps.FramesOnBlocks && !snap.Caps.FramesOnAllocs)
	at := a.AttributeFrames(snap.StackFrames(id), noStack, snap.Caps)
	a.cache[k] = at
	return at
}

// SiteOf is Attribute without the category: the site of a stack.
func (a *Attributor) SiteOf(snap *snapshot.Snapshot, id snapshot.StackID) Site {
	return a.Attribute(snap, id).Site
}

var backwardNodeRe = regexp.MustCompile(`(autograd::generated::|^)[A-Za-z0-9_]+Backward[0-9]*(::apply|$)`)

var autogradOpRe = regexp.MustCompile(`(?:autograd::generated::|\b)([A-Za-z0-9_]+Backward[0-9]*|AccumulateGrad)\b`)

// AttributeFrames attributes a frame list (innermost first). noStack says the record carried no
// frames key at all; caps tells what the file recorded, for the empty-stack explanation.
func (a *Attributor) AttributeFrames(frames []snapshot.Frame, noStack bool, caps snapshot.Capabilities) Attribution {
	kinds := make([]frameKind, len(frames))
	userIdx, torchIdx, libIdx := -1, -1, -1
	for i, f := range frames {
		kinds[i] = a.kind(f)
		switch kinds[i] {
		case kindUser:
			if userIdx < 0 {
				userIdx = i
			}
		case kindTorch:
			if torchIdx < 0 {
				torchIdx = i
			}
		case kindLibrary:
			if libIdx < 0 {
				libIdx = i
			}
		}
	}
	// Frames under a user root win over other user frames.
	if len(a.roots) > 0 {
		for i, f := range frames {
			if kinds[i] == kindUser && a.underRoot(normPath(f.Filename)) {
				userIdx = i
				break
			}
		}
	}
	var at Attribution
	switch {
	case userIdx >= 0:
		at.Site = siteOf(frames[userIdx], SiteKindUser)
	case torchIdx >= 0:
		at.Site = siteOf(frames[torchIdx], SiteKindTorch)
	case libIdx >= 0:
		at.Site = siteOf(frames[libIdx], SiteKindLibrary)
	default:
		at.Site = Site{Line: 0, Site: SiteNoPython, Kind: SiteKindNone}
		if noStack || (len(frames) == 0 && caps.CppFrames) {
			at.Site.Site = SiteNoStack
		} else if op := cppOp(frames); op != "" {
			at.Site.Function = op
			at.Site.Site = SiteNoPython + " " + op
		}
	}
	at.Stack = filteredStack(frames, kinds, userIdx, torchIdx)
	at.Category, at.Evidence = categorize(frames, kinds, noStack, caps)
	return at
}

func cppOp(frames []snapshot.Frame) string {
	for _, f := range frames {
		if m := autogradOpRe.FindStringSubmatch(f.Name); m != nil {
			return m[1]
		}
	}
	return ""
}

// filteredStack: the nearest library/torch frame inside the site, then the user frames (at most 8).
func filteredStack(frames []snapshot.Frame, kinds []frameKind, userIdx, torchIdx int) []string {
	out := []string{}
	if userIdx < 0 {
		if torchIdx >= 0 {
			out = append(out, frameString(frames[torchIdx]))
			// and the next Python frame outward, if any, for context
			for j := torchIdx + 1; j < len(frames); j++ {
				if kinds[j] != kindCpp && kinds[j] != kindRuntime {
					out = append(out, frameString(frames[j]))
					break
				}
			}
		} else if op := cppOp(frames); op != "" {
			out = append(out, "(C++) "+op)
		}
		return out
	}
	for j := userIdx - 1; j >= 0; j-- {
		if kinds[j] == kindTorch || kinds[j] == kindLibrary || kinds[j] == kindSkipped {
			switch frames[j].Name {
			case "_call_impl", "_wrapped_call_impl", "wrapper", "decorate_context", "_fn", "inner":
				continue // module-call and decorator wrappers say nothing
			}
			out = append(out, frameString(frames[j]))
			break
		}
	}
	for j := userIdx; j < len(frames) && len(out) < 9; j++ {
		if kinds[j] == kindUser {
			out = append(out, frameString(frames[j]))
		}
	}
	return out
}

func hasFrame(frames []snapshot.Frame, pred func(p, name string) bool) (snapshot.Frame, bool) {
	for _, f := range frames {
		if pred(normPath(f.Filename), f.Name) {
			return f, true
		}
	}
	return snapshot.Frame{}, false
}

func ev(f snapshot.Frame, what string) string {
	return what + " (" + frameString(f) + ")"
}

// categorize guesses what a stack's memory is, with the frame that says so.
func categorize(frames []snapshot.Frame, kinds []frameKind, noStack bool, caps snapshot.Capabilities) (string, string) {
	if noStack {
		return CategoryOther, "the file recorded no stack for this memory"
	}
	if len(frames) == 0 {
		if caps.PythonOnly || !caps.CppFrames {
			return CategoryBackwardTemporary, "guess: empty stack, and stacks=\"python\" records no frames for backward-pass allocations, so this is a gradient or a backward temporary (memory allocated before recording started looks the same): record with stacks=\"all\" to be sure"
		}
		return CategoryOther, "empty stack in a file that records C++ frames: allocated before memory history recording started (often the model's weights)"
	}
	if f, ok := hasFrame(frames, func(p, _ string) bool { return strings.Contains(p, "torch/optim/") }); ok {
		return CategoryOptimizerState, ev(f, "allocated inside the optimizer")
	}
	if f, ok := hasFrame(frames, func(p, n string) bool {
		ln := strings.ToLower(n)
		return strings.Contains(p, "torch/distributed/") || strings.Contains(ln, "nccl") ||
			strings.Contains(n, "c10d::") || strings.Contains(p, "torch/nn/parallel/distributed.py")
	}); ok {
		return CategoryCommunication, ev(f, "collective communication / distributed frame")
	}
	if f, ok := hasFrame(frames, func(_, n string) bool { return strings.Contains(n, "AccumulateGrad") }); ok {
		return CategoryGradient, ev(f, "gradient accumulation in the autograd engine")
	}
	if f, ok := hasFrame(frames, func(p, n string) bool {
		return strings.Contains(n, "autograd::Engine::") || backwardNodeRe.MatchString(n) ||
			n == "_engine_run_backward" ||
			(n == "backward" && (strings.Contains(p, "torch/autograd/__init__.py") || strings.Contains(p, "torch/_tensor.py")))
	}); ok {
		return CategoryBackwardTemporary, ev(f, "allocated during the backward pass")
	}
	if f, ok := hasFrame(frames, func(p, n string) bool {
		if strings.Contains(p, "torch/nn/parameter.py") || strings.Contains(p, "torch/nn/init.py") {
			return true
		}
		if strings.Contains(p, "torch/nn/modules/module.py") {
			switch n {
			case "_apply", "to", "cuda", "convert", "load_state_dict", "_load_from_state_dict":
				return true
			}
		}
		if strings.Contains(p, "torch/nn/modules/") && n == "__init__" {
			return true
		}
		return n == "from_pretrained" || n == "reset_parameters" || n == "_load_from_state_dict"
	}); ok {
		return CategoryParameter, ev(f, "created while building or moving the model")
	}
	if f, ok := hasFrame(frames, func(p, n string) bool {
		return n == "forward" || n == "_call_impl" || n == "_wrapped_call_impl" ||
			(strings.Contains(p, "torch/_dynamo/") && strings.Contains(n, "call")) ||
			strings.Contains(p, "torchinductor_")
	}); ok {
		return CategoryActivation, ev(f, "allocated in a forward pass")
	}
	_ = kinds
	return CategoryOther, "no frame identifies the kind of memory"
}
