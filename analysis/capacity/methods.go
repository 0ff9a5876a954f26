package capacity

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/memsnap/memsnap/analysis"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// fitTwoPoints fits each allocation of the reference trace across the files: the allocation
// with the same call stack and the same number of earlier allocations of that stack in each
// file (its position in the step, counted from the trace's start) is the same tensor at
// another size. An allocation found in one file only is fixed at its size, unless the other
// files' traces end in an OOM before it (then it is unrecorded there, and scales as the other
// allocations of its call stack do, when some do). Allocations of the other files that the
// reference lacks are listed (they are not replayed).
func fitTwoPoints(traces []*devTrace, ref int, names siteNamer) (*model, []Unmatched) {
	rt := traces[ref]
	m := &model{ref: rt, fits: make([]fit, len(rt.recs))}
	matched := make([][]bool, len(traces))
	for i, t := range traces {
		matched[i] = make([]bool, len(t.recs))
	}
	single := []int{}
	var thresholds []int // allocations recorded only above some size
	for i, r := range rt.recs {
		var xs, ys []float64
		absent := 0.0 // the largest size of a complete trace without it
		for fi, t := range traces {
			idx := t.byKey[stepKey{r.step, r.key}]
			if r.occ >= len(idx) {
				if t.oom < 0 {
					absent = max(absent, float64(t.size))
				}
				continue
			}
			j := idx[r.occ]
			matched[fi][j] = true
			xs = append(xs, float64(t.size))
			ys = append(ys, float64(t.recs[j].size))
		}
		switch {
		case r.at < 0:
			// Alive before the trace: seeded as fixed, at the replayed file's size.
			m.fits[i] = fit{kind: FitFixed, c: [3]float64{float64(r.size)}}
			continue
		case len(xs) < 2:
			single = append(single, i)
			m.fits[i] = fit{kind: FitFixed, c: [3]float64{float64(r.size)}}
		default:
			m.fits[i] = fitSizes(xs, ys)
		}
		if absent > 0 && absent < slices.Min(xs) {
			m.fits[i].above = absent
			thresholds = append(thresholds, i)
		}
	}
	// A call stack's scaling, from its allocations fitted across files.
	byKey := map[uint64]fit{}
	for i, r := range rt.recs {
		if f := m.fits[i]; f.kind != FitFixed && r.at >= 0 {
			if _, ok := byKey[r.key]; !ok {
				byKey[r.key] = f
			}
		}
	}
	type group struct {
		site, file, reason string
	}
	agg := map[group]*Unmatched{}
	var order []group
	add := func(t *devTrace, r rec, reason string) {
		site, _ := names.name(t, r)
		g := group{site, filepath.Base(t.path), reason}
		u := agg[g]
		if u == nil {
			u = &Unmatched{Site: site, File: g.file, Reason: reason}
			agg[g] = u
			order = append(order, g)
		}
		u.Count++
		u.Bytes += r.size
		u.LargestBytes = max(u.LargestBytes, r.size)
	}
	var stopped []string
	for fi, t := range traces {
		if fi != ref && t.oom >= 0 {
			stopped = append(stopped, filepath.Base(t.path))
		}
	}
	for _, i := range single {
		r := rt.recs[i]
		if f, ok := byKey[r.key]; ok && len(stopped) > 0 {
			// Unrecorded in the files that stopped at an OOM: scaled as its call stack's other
			// allocations are.
			if base := f.at(float64(rt.size)); base > 0 {
				s := float64(r.size) / base
				m.fits[i] = fit{kind: f.kind, c: [3]float64{f.c[0] * s, f.c[1] * s, f.c[2] * s}}
				add(rt, r, fmt.Sprintf("unrecorded in %s (the trace ends in an OOM before it): scaled as the other allocations of its call stack", strings.Join(stopped, ", ")))
				continue
			}
		}
		if m.fits[i].above > 0 {
			add(rt, r, fmt.Sprintf("only at the larger sizes (none at %g or below): counted as fixed at its size above %g", m.fits[i].above, m.fits[i].above))
			continue
		}
		add(rt, r, "only in this file: counted as fixed at its size")
	}
	for _, i := range thresholds {
		if !slices.Contains(single, i) {
			add(rt, rt.recs[i], fmt.Sprintf("only at the larger sizes (none at %g or below): counted above that size only", m.fits[i].above))
		}
	}
	for fi, t := range traces {
		if fi == ref {
			continue
		}
		for j, r := range t.recs {
			if !matched[fi][j] {
				add(t, r, fmt.Sprintf("not in %s, the trace replayed: not counted", filepath.Base(rt.path)))
			}
		}
	}
	for i := range rt.recs {
		switch m.fits[i].kind {
		case FitFixed:
			m.count.Fixed++
		case FitLinear:
			m.count.Linear++
		case FitQuadratic:
			m.count.Quadratic++
		}
	}
	out := make([]Unmatched, 0, len(order))
	for _, g := range order {
		out = append(out, *agg[g])
	}
	return m, out
}

func twoPointAssumptions(traces []*devTrace, ref int, m *model) []string {
	rt := traces[ref]
	var out []string
	where := "from the start of each trace (no step starts found in every file)"
	if rt.stepped {
		where = "in the same step (steps counted from the first step start of each trace)"
	}
	out = append(out, fmt.Sprintf("allocations matched across the %d files by call stack and by how many allocations of that call stack came before them %s; each one's size fitted over the sizes: %d fixed, %d linear, %d quadratic",
		len(traces), where, m.count.Fixed, m.count.Linear, m.count.Quadratic))
	if rt.preTrace > 0 {
		out = append(out, fmt.Sprintf("%d blocks (%s) alive before %s's trace began are seeded into the replay as fixed", rt.preTrace, analysis.FormatBytes(rt.preTraceBytes), filepath.Base(rt.path)))
	}
	for _, t := range traces {
		if t.oom >= 0 {
			out = append(out, fmt.Sprintf("%s ends in an OOM (trace event %d, a %s request): it is matched up to the OOM, and the rest of its step is unrecorded", filepath.Base(t.path), t.oom, analysis.FormatBytes(t.oomRequest)))
		}
	}
	if rt.oom >= 0 {
		out = append(out, "every file ends in an OOM: the predicted step stops where the reference's recording did, so the peaks are lower bounds")
	}
	return out
}

// optimizerTemporary reports whether a stack runs inside an optimizer's step (a frame named
// step, or torch.optim's _single_tensor_* / _multi_tensor_* / _fused_* helpers, in a file whose
// name says optim) and outside any nn.Module call (module.py _call_impl): Lightning's closure runs
// the forward inside optimizer.step, and its temporaries do grow.
func optimizerTemporary(frames []snapshot.Frame) bool {
	inStep := false
	for _, f := range frames {
		file := strings.ToLower(filepath.Base(strings.ReplaceAll(f.Filename, "\\", "/")))
		if strings.HasSuffix(file, "module.py") && (f.Name == "_call_impl" || f.Name == "_wrapped_call_impl") {
			return false
		}
		if strings.Contains(file, "optim") && (f.Name == "step" || strings.HasPrefix(f.Name, "_single_tensor_") ||
			strings.HasPrefix(f.Name, "_multi_tensor_") || strings.HasPrefix(f.Name, "_fused_")) {
			inStep = true
		}
	}
	return inStep
}

// scalingRoles are the roles whose memory grows with the batch (and the sequence): what the
// forward and backward passes make from the input. Parameters, gradients, optimizer state,
// workspaces and communication buffers do not.
var scalingRoles = map[string]bool{
	analysis.CategoryActivation:        true,
	analysis.CategoryTemporary:         true,
	analysis.CategoryBackwardTemporary: true,
	analysis.CategoryKVCache:           true,
}

// fitRoles is the one-snapshot estimate: the allocations of a scaling role grow in proportion
// to the size; the others, and the blocks alive before the trace, stay. An allocation of your
// code that no role claims ("other") scales when it is freed within the trace and its size is
// a multiple of the recorded size (the batch's own tensors, e.g. the input moved to the GPU).
func fitRoles(t *devTrace, rolesOf func(int) (*analysis.Roles, error), dim string, notes *[]string) (*model, error) {
	ro, err := rolesOf(t.file)
	if err != nil {
		return nil, err
	}
	m := &model{ref: t, fits: make([]fit, len(t.recs))}
	x := float64(t.size)
	var scaledBytes, divisible, other, optTemps, optBytes int64
	optStep := map[snapshot.StackID]bool{}
	byStack := map[snapshot.StackID]analysis.Attribution{}
	byRole := map[string]int64{}
	for i, r := range t.recs {
		m.fits[i] = fit{kind: FitFixed, c: [3]float64{float64(r.size)}}
		if r.at < 0 {
			continue
		}
		// A stack's role, asked once: only "other" is settled per allocation (by how it ended).
		at, ok := byStack[r.stack]
		if !ok || at.Category == analysis.CategoryOther {
			at = ro.Live(t.dev, r.stack, r.addr, r.size, r.at, r.at)
			byStack[r.stack] = at
		}
		scale := scalingRoles[at.Category]
		if scale && at.Category == analysis.CategoryTemporary {
			opt, ok := optStep[r.stack]
			if !ok {
				opt = optimizerTemporary(t.snap.StackFrames(r.stack))
				optStep[r.stack] = opt
			}
			if opt {
				scale = false
				optTemps++
				optBytes += r.size
			}
		}
		if !scale && at.Category == analysis.CategoryOther && r.end >= 0 && r.size%t.size == 0 {
			scale = true
			other++
		}
		if !scale {
			continue
		}
		m.fits[i] = fit{kind: FitLinear, c: [3]float64{0, float64(r.size) / x}}
		m.count.Scaled++
		scaledBytes += r.size
		byRole[at.Category] += r.size
		if r.size%t.size == 0 {
			divisible++
		}
	}
	m.count.Fixed = len(t.recs) - m.count.Scaled
	if m.count.Scaled == 0 {
		return nil, fmt.Errorf("%s: no allocation of the trace has a role that grows with the %s (activations, temporaries, backward temporaries, KV cache): record a second snapshot at another size for the exact method", t.path, unitName(dim))
	}
	var parts []string
	for _, c := range []string{analysis.CategoryActivation, analysis.CategoryTemporary, analysis.CategoryBackwardTemporary, analysis.CategoryKVCache, analysis.CategoryOther} {
		if b := byRole[c]; b > 0 {
			parts = append(parts, fmt.Sprintf("%s %s", c, analysis.FormatBytes(b)))
		}
	}
	*notes = append(*notes,
		fmt.Sprintf("one snapshot: an estimate. Which allocations grow with the %s comes from their roles: activations, temporaries, backward temporaries and KV cache grow in proportion to it (%d allocations; made at the recorded size: %s); parameters, gradients, optimizer state, workspaces and the blocks alive before the trace (%d, %s) stay as recorded",
			unitName(dim), m.count.Scaled, strings.Join(parts, ", "), t.preTrace, analysis.FormatBytes(t.preTraceBytes)),
		fmt.Sprintf("evidence: %d of the %d growing allocations have sizes divisible by %d, the recorded %s", divisible, m.count.Scaled, t.size, unitName(dim)))
	if optTemps > 0 {
		*notes = append(*notes, fmt.Sprintf("%s (%s) made inside an optimizer's step() and outside any module's forward are taken for the optimizer's own temporaries, sized by the parameters: they stay as recorded (a guess from the frames)", count(int(optTemps), "temporary allocation"), analysis.FormatBytes(optBytes)))
	}
	if other > 0 {
		*notes = append(*notes, fmt.Sprintf("%s of no particular role grow too: freed within the trace, with sizes divisible by %d (the input and other per-%s tensors; a guess)", count(int(other), "allocation"), t.size, shortUnit(dim)))
	}
	if dim == DimensionSeq {
		*notes = append(*notes, "eager attention's scores grow with the square of the sequence length; this estimate grows everything linearly, so it errs low at longer sequences: record a second (and third) length for the exact method")
	}
	if t.oom >= 0 {
		*notes = append(*notes, fmt.Sprintf("the trace ends in an OOM (event %d): the step after it is unrecorded, so the peaks are lower bounds", t.oom))
	}
	return m, nil
}

// count is "1 allocation", "3 allocations".
func count(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
