package evals

import (
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"
)

// Output is what a tool answered: the structured content decoded from JSON (numbers as
// json.Number), the text content, and whether it is an error result.
type Output struct {
	Structured any
	Text       string
	IsError    bool
}

// DecodeStructured decodes JSON into the generic form checks work on.
func DecodeStructured(data []byte) (any, error) {
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("structured content: %w", err)
	}
	return v, nil
}

// Evaluate runs one check of a case calling tool against out; it returns "" when the check
// passes and the reason otherwise.
func Evaluate(tool string, c Check, out *Output) string {
	ok, detail := evaluate(tool, c, out)
	if c.Not {
		ok = !ok
	}
	if ok {
		return ""
	}
	return c.String() + ": " + detail
}

// evaluate reports whether the (un-negated) check holds, with what was found.
func evaluate(tool string, c Check, out *Output) (bool, string) {
	switch c.Kind {
	case KindEquals, KindContains, KindRange, KindCount:
		if out.Structured == nil {
			return false, "no structured output"
		}
		vals, err := resolve(out.Structured, c.Path)
		if err != nil {
			return false, err.Error()
		}
		return evalPath(c, vals)
	case KindTopSite:
		return evalTopSite(tool, c, out)
	case KindPattern:
		return evalPattern(c, out)
	case KindVerdict:
		vs, err := resolve(out.Structured, "ooms[*].verdict")
		if err != nil {
			return false, err.Error()
		}
		if len(vs) == 0 {
			return false, "no oom events"
		}
		got := scalarText(vs[0])
		return got == c.Value, "verdict is " + strconv.Quote(got)
	case KindMentions:
		s := c.Value.(string)
		if strings.Contains(out.Text, s) {
			return true, fmt.Sprintf("text mentions %q", s)
		}
		return false, fmt.Sprintf("text does not mention %q (text starts %q)", s, head(out.Text, 160))
	case KindMentionsFix:
		s := c.Value.(string)
		fixes := fixTexts(out.Structured)
		inFix := slices.ContainsFunc(fixes, func(f string) bool { return strings.Contains(f, s) })
		inText := strings.Contains(out.Text, s)
		switch {
		case inFix && inText:
			return true, ""
		case !inFix:
			return false, fmt.Sprintf("no fix in the structured output mentions %q (fixes: %q)", s, fixes)
		default:
			return false, fmt.Sprintf("the fix is in the structured output but the text does not mention %q", s)
		}
	case KindMaxTextBytes:
		if len(out.Text) <= c.MaxBytes {
			return true, ""
		}
		return false, fmt.Sprintf("text is %d bytes", len(out.Text))
	}
	return false, "unknown check kind " + c.Kind
}

func head(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

func evalPath(c Check, vals []any) (bool, string) {
	switch c.Kind {
	case KindCount:
		return len(vals) == c.Count, fmt.Sprintf("resolves to %d values", len(vals))
	case KindEquals:
		if len(vals) == 0 {
			return false, "resolves to no value"
		}
		for _, v := range vals {
			if !equalJSON(v, c.Value) {
				return false, "got " + show(v)
			}
		}
		return true, "got " + show(vals[0])
	case KindContains:
		var cands []any
		for _, v := range vals {
			if arr, ok := v.([]any); ok {
				cands = append(cands, arr...)
			} else {
				cands = append(cands, v)
			}
		}
		for _, v := range cands {
			if equalJSON(v, c.Value) {
				return true, "found " + show(v)
			}
			if s, ok := v.(string); ok {
				if want, ok := c.Value.(string); ok && strings.Contains(s, want) {
					return true, "found in " + show(v)
				}
			}
		}
		return false, "not among " + showList(cands)
	case KindRange:
		if len(vals) == 0 {
			return false, "resolves to no value"
		}
		for _, v := range vals {
			n, ok := toRat(v)
			if !ok {
				return false, "not a number: " + show(v)
			}
			if c.AtLeast != nil && n.Cmp(new(big.Rat).SetFloat64(*c.AtLeast)) < 0 {
				return false, "got " + show(v)
			}
			if c.AtMost != nil && n.Cmp(new(big.Rat).SetFloat64(*c.AtMost)) > 0 {
				return false, "got " + show(v)
			}
		}
		return true, ""
	}
	return false, "not a path check"
}

// siteMatches compares a site value with the expected one: "model.py:41" compares with the
// short site, "/abs/model.py:41" with file:line.
func siteMatches(m map[string]any, want string) bool {
	if scalarText(m["site"]) == want {
		return true
	}
	if f, ok := m["file"].(string); ok && f+":"+scalarText(m["line"]) == want {
		return true
	}
	return false
}

func siteText(m map[string]any) string {
	return scalarText(m["site"])
}

func evalTopSite(tool string, c Check, out *Output) (bool, string) {
	path := "sites[0]"
	if tool == "oom-report" {
		path = "ooms[0].live_sites[0]"
	}
	vs, err := resolve(out.Structured, path)
	if err != nil {
		return false, err.Error()
	}
	m, ok := vs[0].(map[string]any)
	if !ok {
		return false, path + " is not an object"
	}
	return siteMatches(m, c.Value.(string)), "top site is " + strconv.Quote(siteText(m))
}

func evalPattern(c Check, out *Output) (bool, string) {
	vs, err := resolve(out.Structured, "patterns[*]")
	if err != nil {
		return false, err.Error()
	}
	var names []string
	for _, v := range vs {
		m, ok := v.(map[string]any)
		if !ok {
			continue
		}
		name := scalarText(m["name"])
		if site := scalarText(m["site"]); site != "" {
			name += " at " + site
		}
		names = append(names, name)
		if m["name"] == c.Value && (c.Site == "" || siteMatches(m, c.Site)) {
			return true, "patterns: " + strings.Join(names, ", ")
		}
	}
	if len(names) == 0 {
		return false, "no patterns"
	}
	return false, "patterns: " + strings.Join(names, ", ")
}

// fixTexts collects the fixes a result proposes: diff patterns[].fix, oom-report
// ooms[].fixes[] and fragmentation advice[].
func fixTexts(doc any) []string {
	var out []string
	for _, p := range []string{"patterns[*].fix", "ooms[*].fixes[*]", "advice[*]"} {
		vs, err := resolve(doc, p)
		if err != nil {
			continue
		}
		for _, v := range vs {
			if s, ok := v.(string); ok {
				out = append(out, s)
			}
		}
	}
	return out
}

// toRat converts a JSON or YAML number to an exact rational.
func toRat(v any) (*big.Rat, bool) {
	switch x := v.(type) {
	case json.Number:
		r, ok := new(big.Rat).SetString(x.String())
		return r, ok
	case int:
		return new(big.Rat).SetInt64(int64(x)), true
	case int64:
		return new(big.Rat).SetInt64(x), true
	case uint64:
		return new(big.Rat).SetUint64(x), true
	case float64:
		r := new(big.Rat)
		if r.SetFloat64(x) == nil {
			return nil, false
		}
		// YAML floats are decimal literals: compare with their shortest decimal form.
		r2, ok := new(big.Rat).SetString(strconv.FormatFloat(x, 'g', -1, 64))
		return r2, ok
	}
	return nil, false
}

// equalJSON compares a decoded JSON value with an expected YAML value; numbers compare exactly
// by value (1 equals 1.0).
func equalJSON(got, want any) bool {
	if a, ok := toRat(got); ok {
		b, ok := toRat(want)
		return ok && a.Cmp(b) == 0
	}
	switch g := got.(type) {
	case string:
		w, ok := want.(string)
		return ok && g == w
	case bool:
		w, ok := want.(bool)
		return ok && g == w
	case nil:
		return want == nil
	case []any:
		w, ok := want.([]any)
		if !ok || len(w) != len(g) {
			return false
		}
		for i := range g {
			if !equalJSON(g[i], w[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		w, ok := want.(map[string]any)
		if !ok || len(w) != len(g) {
			return false
		}
		for k, v := range g {
			wv, ok := w[k]
			if !ok || !equalJSON(v, wv) {
				return false
			}
		}
		return true
	}
	return false
}

func show(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return head(string(b), 200)
}

func showList(vs []any) string {
	if len(vs) == 0 {
		return "[] (nothing)"
	}
	return show(vs)
}

func sortStrings(s []string) { slices.Sort(s) }
