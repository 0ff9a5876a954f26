package evals

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// A JSON path is a dot-separated list of object keys, each optionally followed by bracket
// selectors: [N] (an index; negative counts from the end), [*] (every element) or
// [key=value] (the elements whose field key, as text, equals value). Examples:
//
//	totals.allocated_bytes
//	sites[0].site
//	patterns[*].name
//	sites[site=train.py:97].delta_bytes
//	ooms[-1].fixes
type pathStep struct {
	key    string // object key ("" for a bare selector)
	sel    string // "", "*", "index" or "filter"
	index  int
	fkey   string
	fvalue string
}

func parsePath(p string) ([]pathStep, error) {
	if p == "" {
		return nil, fmt.Errorf("empty path")
	}
	var steps []pathStep
	i := 0
	for i < len(p) {
		// key
		j := i
		for j < len(p) && p[j] != '.' && p[j] != '[' {
			j++
		}
		key := p[i:j]
		switch {
		case key != "":
			steps = append(steps, pathStep{key: key})
		case i != 0 || j == len(p) || p[j] != '[':
			// Only a path that starts with a selector ("[0].x": the document is an array) may
			// have an empty key.
			return nil, fmt.Errorf("path %q: empty key at %d", p, i)
		}
		i = j
		for i < len(p) && p[i] == '[' {
			end := strings.IndexByte(p[i:], ']')
			if end < 0 {
				return nil, fmt.Errorf("path %q: unclosed [ at %d", p, i)
			}
			inner := p[i+1 : i+end]
			st := pathStep{}
			switch {
			case inner == "*":
				st.sel = "*"
			case strings.Contains(inner, "="):
				k, v, _ := strings.Cut(inner, "=")
				if k == "" {
					return nil, fmt.Errorf("path %q: filter [%s] has no key", p, inner)
				}
				st.sel, st.fkey, st.fvalue = "filter", k, v
			default:
				n, err := strconv.Atoi(inner)
				if err != nil {
					return nil, fmt.Errorf("path %q: selector [%s] is not an index, * or key=value", p, inner)
				}
				st.sel, st.index = "index", n
			}
			steps = append(steps, st)
			i += end + 1
		}
		if i < len(p) {
			if p[i] != '.' {
				return nil, fmt.Errorf("path %q: unexpected %q at %d", p, p[i], i)
			}
			i++
			if i == len(p) {
				return nil, fmt.Errorf("path %q: ends with a dot", p)
			}
		}
	}
	return steps, nil
}

// resolve returns every value the path reaches in doc (decoded JSON with json.Number numbers).
// It fails when a key is missing or a step meets the wrong type; [*] and filters may yield none.
func resolve(doc any, p string) ([]any, error) {
	steps, err := parsePath(p)
	if err != nil {
		return nil, err
	}
	cur := []any{doc}
	walked := ""
	for _, st := range steps {
		var next []any
		if st.key != "" {
			if walked != "" {
				walked += "."
			}
			walked += st.key
			for _, v := range cur {
				m, ok := v.(map[string]any)
				if !ok {
					return nil, fmt.Errorf("%s: not an object (%s)", walked, typeName(v))
				}
				x, ok := m[st.key]
				if !ok {
					return nil, fmt.Errorf("%s: no such key (have %s)", walked, keysOf(m))
				}
				next = append(next, x)
			}
		} else {
			walked += selText(st)
			for _, v := range cur {
				arr, ok := v.([]any)
				if !ok {
					return nil, fmt.Errorf("%s: not an array (%s)", walked, typeName(v))
				}
				switch st.sel {
				case "*":
					next = append(next, arr...)
				case "index":
					i := st.index
					if i < 0 {
						i += len(arr)
					}
					if i < 0 || i >= len(arr) {
						return nil, fmt.Errorf("%s: index out of range (length %d)", walked, len(arr))
					}
					next = append(next, arr[i])
				case "filter":
					for _, el := range arr {
						m, ok := el.(map[string]any)
						if !ok {
							continue
						}
						if fv, ok := m[st.fkey]; ok && scalarText(fv) == st.fvalue {
							next = append(next, el)
						}
					}
				}
			}
		}
		cur = next
	}
	return cur, nil
}

func selText(st pathStep) string {
	switch st.sel {
	case "*":
		return "[*]"
	case "index":
		return fmt.Sprintf("[%d]", st.index)
	}
	return "[" + st.fkey + "=" + st.fvalue + "]"
}

// scalarText is a JSON scalar as text (strings unquoted); other values are their JSON.
func scalarText(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case json.Number:
		return x.String()
	case nil:
		return "null"
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func typeName(v any) string {
	switch v.(type) {
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case string:
		return "string"
	case json.Number:
		return "number"
	case bool:
		return "bool"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}

func keysOf(m map[string]any) string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sortStrings(ks)
	if len(ks) > 12 {
		ks = append(ks[:12], "...")
	}
	return strings.Join(ks, ", ")
}
