package analysis

import (
	"cmp"
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
	// Rules are the user's own categories (see ParseRules): a block whose stack matches one is
	// grouped under the rule's name (its site) and carries rule. The role is still its own.
	Rules []Rule `json:"rules,omitempty"`
}

// Site kinds: where the chosen frame comes from.
const (
	SiteKindUser    = "user"    // the user's own code (or model-defining library code)
	SiteKindTorch   = "torch"   // no user frame: the innermost PyTorch frame
	SiteKindLibrary = "library" // no user or torch frame: the innermost other Python frame
	SiteKindNone    = "none"    // no Python frame at all
	SiteKindRule    = "rule"    // a --rules category: the site is the rule's name
)

// Sites used when a stack has no Python frame.
const (
	SiteNoPython = "<no Python frame>"
	SiteNoStack  = "<no stack recorded>"
	SitePreTrace = "<allocated before the trace>"
	siteKeySep   = "\x00"
)

// Roles: what a block of memory is for. The names are a contract (JSON "category").
const (
	CategoryParameter         = "parameter"
	CategoryGradient          = "gradient"
	CategoryOptimizerState    = "optimizer_state"
	CategoryActivation        = "activation" // forward output saved for backward
	CategoryTemporary         = "temporary"  // freed within the phase that made it
	CategoryBackwardTemporary = "backward_temporary"
	CategoryCommunication     = "communication"
	CategoryKVCache           = "kv_cache"
	CategoryAutocastCache     = "autocast_cache"
	CategoryWorkspace         = "workspace" // cuBLAS / cuDNN workspaces
	CategoryUserContainer     = "user_container"
	CategoryOther             = "other"
)

// AllCategories lists every role, in the order reports rank ties.
var AllCategories = []string{CategoryActivation, CategoryParameter, CategoryOptimizerState, CategoryGradient,
	CategoryBackwardTemporary, CategoryTemporary, CategoryKVCache, CategoryAutocastCache, CategoryWorkspace,
	CategoryCommunication, CategoryUserContainer, CategoryOther}

// SiteIdentity names where memory comes from; every site record of every report embeds it.
// Site is the innermost model-code frame (the user's file or a model-defining library file such
// as transformers' modeling_<arch>.py); UserSite is the innermost frame in the user's own files
// (outside site-/dist-packages, virtual environments and the standard library; notebook cells
// count), empty when the stack has none.
type SiteIdentity struct {
	Site         string `json:"site"`
	File         string `json:"file"`
	Line         int64  `json:"line"`
	Function     string `json:"function"`
	Kind         string `json:"kind"`
	UserSite     string `json:"user_site"`
	UserFile     string `json:"user_file,omitempty"`
	UserLine     int64  `json:"user_line,omitempty"`
	UserFunction string `json:"user_function,omitempty"`
	// Rule is the --rules category that matched (then Site is its name); empty otherwise.
	Rule string `json:"rule,omitempty"`
}

// rowKey groups blocks into one row per (site, role). Blocks your code holds past their pass
// (user_container) share a row with the site's other blocks of role "other": some of a list's
// elements are past a backward pass and some not yet, and the row is the list.
func (at Attribution) rowKey() string {
	c := at.Category
	if c == CategoryUserContainer {
		c = CategoryOther
	}
	return at.key() + "\x00" + c
}

// representative is the block whose role, evidence and stack speak for a row: a block your
// code holds past its pass (user_container) first, then the largest, then the lowest stack id,
// then the lowest tie (alloc event or address). A strict total order, so the choice never
// depends on the order blocks are visited in (a map's).
type representative struct {
	set   bool
	held  bool
	size  int64
	stack snapshot.StackID
	tie   uint64
}

// take makes the block the representative when it comes first in that order, and says so.
func (r *representative) take(category string, size int64, stack snapshot.StackID, tie uint64) bool {
	held := category == CategoryUserContainer
	if r.set {
		c := cmp.Or(cmp.Compare(b2i(!held), b2i(!r.held)), cmp.Compare(r.size, size), cmp.Compare(stack, r.stack), cmp.Compare(tie, r.tie))
		if c >= 0 {
			return false
		}
	}
	*r = representative{set: true, held: held, size: size, stack: stack, tie: tie}
	return true
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// key identifies the site for grouping.
func (s SiteIdentity) key() string {
	return s.File + siteKeySep + s.Function + siteKeySep + fmt.Sprint(s.Line) + siteKeySep + s.Site
}

// Attribution is everything known about one stack from its frames: its site, a role with the
// evidence (the deciding frame), and a filtered stack (the user frames plus the nearest library
// frame, innermost first). Roles that depend on timing (activation vs temporary, optimizer
// state vs optimizer temporaries, gradients without an AccumulateGrad frame) are settled by the
// Roles table, which reads the trace.
type Attribution struct {
	SiteIdentity
	Category    string   `json:"category"`
	Evidence    string   `json:"evidence"`
	Stack       []string `json:"stack"`
	ctx         stackContext
	frame       string // the deciding frame, rendered
	noGrad      bool   // a no_grad / inference_mode decorator is on the stack
	gradFn      bool   // runs inside an autograd.Function forward (grad is enabled)
	gradFnFrame string // the frame that says so
	hint        string // a frame that says the workload is inference (generate, serving engines)
	retained    bool   // a forward block alive after its backward pass, as its pass's whole graph (heldByCaller)
	// nestedGrad is the autograd call (torch.autograd.grad, torch.autograd.functional.jvp …)
	// a forward frame calls on this stack: its work belongs to the forward, not to a
	// training backward. Empty when the stack has none.
	nestedGrad string
	// pyFrames: the stack has a Python frame (the autograd engine's device threads have none).
	pyFrames bool
	// callPath names the stack's path through the user's own code (its user frames; the model
	// frames when it has none): stacks that differ only inside libraries, torch or generated
	// code (a layer's attn1 and attn2, inductor's kernel lines) share it. Empty without either.
	callPath string
}

type frameKind uint8

const (
	kindCpp frameKind = iota
	kindRuntime
	kindTorch
	kindLibrary
	kindModelLib // model-defining library code (transformers models, diffusers, timm): a site, not the user's own
	kindUser
	kindSkipped
)

// isModel reports whether a frame can be a site: the user's own code or model-defining code.
func (k frameKind) isModel() bool { return k == kindUser || k == kindModelLib }

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
	rules []Rule
	cache map[attrKey]Attribution
	// tables keeps what was read of each snapshot's frames (see frameTable).
	tables map[*snapshot.Snapshot]*frameTable
}

// NewAttributor compiles the options; a bad regular expression is an error.
func NewAttributor(opt AttributionOptions) (*Attributor, error) {
	a := &Attributor{cache: map[attrKey]Attribution{}, tables: map[*snapshot.Snapshot]*frameTable{}}
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
	for _, r := range opt.Rules {
		if err := r.compile(); err != nil {
			return nil, fmt.Errorf("bad --rules: %w", err)
		}
		a.rules = append(a.rules, r)
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
	"site-packages/ipykernel", "site-packages/IPython", "dist-packages/ipykernel", "dist-packages/IPython"}

// modelLibMarkers are library paths that define models: they can be the site (never the
// user_site).
var modelLibMarkers = []string{"/transformers/models/", "/diffusers/models/", "/timm/models/",
	"/torchvision/models/", "/peft/tuners/", "/open_clip/", "/ultralytics/nn/", "/vllm/model_executor/models/",
	"/sglang/srt/models/", "/megatron/core/models/", "/megatron/core/transformer/"}

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

// isModelLibPath: a library file that defines a model. transformers' own plumbing
// (modeling_utils.py, modeling_layers.py, modeling_outputs.py …, directly in the package) is not.
func isModelLibPath(p string) bool {
	if strings.Contains(p, "/transformers/models/auto/") {
		return false // AutoModel factories load models; they define none
	}
	for _, m := range modelLibMarkers {
		if strings.Contains(p, m) {
			return true
		}
	}
	b := baseName(p)
	return strings.HasPrefix(b, "modeling_") && !strings.Contains(p, "/transformers/modeling_") &&
		!strings.HasSuffix(b, "_utils.py")
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
	if strings.HasPrefix(p, "<ipython-input") {
		return kindUser // a notebook cell (IPython < 8.x names them this way)
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
		if isModelLibPath(p) {
			return kindModelLib
		}
		return kindLibrary
	}
	if isStdlibPath(p) {
		return kindRuntime
	}
	// A library's source checkout (Megatron-LM is run from its git tree, transformers
	// installed editable) is still the library's code, never the user's own.
	for _, m := range modelLibMarkers {
		if strings.Contains(p, m) {
			return kindModelLib
		}
	}
	if containsAny(p, checkoutLibraryMarkers...) {
		return kindLibrary
	}
	return kindUser
}

// checkoutLibraryMarkers are library paths that are no model's definition, recognised outside
// site-packages too (a source checkout).
var checkoutLibraryMarkers = []string{"/megatron/core/", "/megatron/training/", "/megatron/legacy/"}

func (a *Attributor) underRoot(p string) bool {
	lp := strings.ToLower(p)
	for _, r := range a.roots {
		if strings.HasPrefix(lp, r) || strings.Contains(lp, "/"+strings.TrimPrefix(r, "/")) {
			return true
		}
	}
	return false
}

func lineText(l int64) string {
	if l >= 0 {
		return fmt.Sprint(l)
	}
	return "?"
}

func siteOf(f *frameInfo, kind string) SiteIdentity {
	return SiteIdentity{File: f.f.Filename, Line: f.f.Line, Function: f.f.Name, Site: f.site, Kind: kind}
}

// frameString renders a frame for a filtered stack: "path/file.py:12 in fn".
func frameString(f snapshot.Frame) string {
	if snapshot.IsCppFrame(f) {
		return "(C++) " + cppShort(f.Name)
	}
	return shortPath(f.Filename) + ":" + lineText(f.Line) + " in " + f.Name
}

// cppShort trims a C++ signature to its qualified name.
func cppShort(n string) string {
	if i := strings.IndexByte(n, '('); i > 0 {
		n = n[:i]
	}
	if len(n) > 120 {
		n = n[:120] + "…"
	}
	return n
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
	var infos []*frameInfo
	if id >= 0 && int(id) < len(snap.Stacks) {
		t := a.frames(snap)
		ids := snap.Stacks[id]
		infos = make([]*frameInfo, len(ids))
		for i, f := range ids {
			infos[i] = t.info(a, snap, f)
		}
	}
	at := a.attribute(infos, stackNotRecorded(snap, id), snap.Caps)
	a.cache[k] = at
	return at
}

// stackNotRecorded: a file that recorded no stacks at all writes empty frame lists: that is
// "not recorded", not "no Python frame".
func stackNotRecorded(snap *snapshot.Snapshot, id snapshot.StackID) bool {
	return id == snapshot.NoStack ||
		(id == snapshot.EmptyStack && !snap.Caps.FramesOnBlocks && !snap.Caps.FramesOnAllocs)
}

// SiteOf is Attribute without the role: the site of a stack.
func (a *Attributor) SiteOf(snap *snapshot.Snapshot, id snapshot.StackID) SiteIdentity {
	return a.Attribute(snap, id).SiteIdentity
}

var autogradOpRe = regexp.MustCompile(`(?:autograd::generated::|\b)([A-Za-z0-9_]+Backward[0-9]*|AccumulateGrad)\b`)

// AttributeFrames attributes a frame list (innermost first). noStack says the record carried no
// frames key at all; caps tells what the file recorded, for the empty-stack explanation.
func (a *Attributor) AttributeFrames(frames []snapshot.Frame, noStack bool, caps snapshot.Capabilities) Attribution {
	infos := make([]*frameInfo, len(frames))
	for i, f := range frames {
		fi := a.newFrameInfo(f)
		infos[i] = &fi
	}
	return a.attribute(infos, noStack, caps)
}

// attribute is AttributeFrames over frames already read. It only reads the Attributor (and
// the frames), so goroutines may call it at once.
func (a *Attributor) attribute(frames []*frameInfo, noStack bool, caps snapshot.Capabilities) Attribution {
	modelIdx, ownIdx, torchIdx, libIdx := -1, -1, -1, -1
	for i, f := range frames {
		switch f.kind {
		case kindUser:
			if ownIdx < 0 {
				ownIdx = i
			}
			if modelIdx < 0 {
				modelIdx = i
			}
		case kindModelLib:
			if modelIdx < 0 {
				modelIdx = i
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
	for i, f := range frames {
		if f.bits.has(fbUnderRoot) {
			modelIdx, ownIdx = i, i
			break
		}
	}
	var at Attribution
	switch {
	case modelIdx >= 0:
		at.SiteIdentity = siteOf(frames[modelIdx], SiteKindUser)
	case torchIdx >= 0:
		at.SiteIdentity = siteOf(frames[torchIdx], SiteKindTorch)
	case libIdx >= 0:
		at.SiteIdentity = siteOf(frames[libIdx], SiteKindLibrary)
	default:
		at.SiteIdentity = SiteIdentity{Site: SiteNoPython, Kind: SiteKindNone}
		if noStack || (len(frames) == 0 && caps.CppFrames) {
			at.Site = SiteNoStack
		} else if op := cppOp(frames); op != "" {
			at.Function = op
			at.Site = SiteNoPython + " " + op
		}
	}
	if ownIdx >= 0 {
		f := frames[ownIdx]
		at.UserSite, at.UserFile, at.UserLine, at.UserFunction = f.site, f.f.Filename, f.f.Line, f.f.Name
	}
	at.Stack = filteredStack(frames, modelIdx, torchIdx)
	at.callPath = callPath(frames)
	classify(&at, frames, modelIdx, noStack, caps)
	for _, f := range frames {
		if f.rule >= 0 {
			// One row per rule: the frame that matched goes to the stack, not the grouping key.
			name := a.rules[f.rule].Name
			at.Site, at.File, at.Line, at.Function, at.Kind, at.Rule = name, "", 0, "", SiteKindRule, name
			at.Stack = append([]string{"rule " + name + " matched " + f.str}, at.Stack...)
			break
		}
	}
	return at
}

func cppOp(frames []*frameInfo) string {
	for _, f := range frames {
		if f.op != "" {
			return f.op
		}
	}
	return ""
}

// callPath joins the user frames (the model frames when there are none), innermost first.
func callPath(frames []*frameInfo) string {
	var b strings.Builder
	for _, want := range []frameKind{kindUser, kindModelLib} {
		for _, f := range frames {
			if f.kind == want || (want == kindModelLib && f.kind.isModel()) {
				b.WriteString(f.str)
				b.WriteByte('\n')
			}
		}
		if b.Len() > 0 {
			break
		}
	}
	return b.String()
}

// filteredStack: the nearest library/torch frame inside the site, then the model and user
// frames (at most 8).
func filteredStack(frames []*frameInfo, modelIdx, torchIdx int) []string {
	out := []string{}
	if modelIdx < 0 {
		if torchIdx >= 0 {
			out = append(out, frames[torchIdx].str)
			// and the next Python frame outward, if any, for context
			for j := torchIdx + 1; j < len(frames); j++ {
				if k := frames[j].kind; k != kindCpp && k != kindRuntime {
					out = append(out, frames[j].str)
					break
				}
			}
		} else if op := cppOp(frames); op != "" {
			out = append(out, "(C++) "+op)
		}
		return out
	}
	for j := modelIdx - 1; j >= 0; j-- {
		if k := frames[j].kind; k == kindTorch || k == kindLibrary || k == kindSkipped {
			switch frames[j].f.Name {
			case "_call_impl", "_wrapped_call_impl", "wrapper", "decorate_context", "_fn", "inner":
				continue // module-call and decorator wrappers say nothing
			}
			out = append(out, frames[j].str)
			break
		}
	}
	for j := modelIdx; j < len(frames) && len(out) < 9; j++ {
		if frames[j].kind.isModel() {
			out = append(out, frames[j].str)
		}
	}
	return out
}

// SiteText writes a site with its function the one way every text answer does:
// "model.py:41 in forward", or the site alone when it has no function (<no stack recorded>) or
// already names it (a C++ operator: "<no Python frame> MmBackward0").
func SiteText(site, function string) string {
	if function == "" || site == function || strings.HasSuffix(site, " "+function) {
		return site
	}
	return site + " in " + function
}
