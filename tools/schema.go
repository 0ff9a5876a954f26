package tools

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/invopop/jsonschema"
)

// schemaFor reflects T into a flat MCP object schema: no $schema, $ref or $defs; every field
// described (from jsonschema tags, else from fieldDocs); bare `true` schemas mapped to {}.
func schemaFor(t reflect.Type) (json.RawMessage, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	r := &jsonschema.Reflector{
		DoNotReference: true,
		ExpandedStruct: true,
		LookupComment:  lookupDoc,
	}
	s := r.ReflectFromType(t)
	s.Version = ""
	s.ID = ""
	raw, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("schema for %s: %w", t, err)
	}
	var tree any
	if err := json.Unmarshal(raw, &tree); err != nil {
		return nil, fmt.Errorf("schema for %s: %w", t, err)
	}
	tree = fixTrue(tree)
	return json.Marshal(tree)
}

// fixTrue replaces bare `true` schemas (from any / json.RawMessage) under properties and items
// with {}, which every model provider accepts.
func fixTrue(v any) any {
	m, ok := v.(map[string]any)
	if !ok {
		return v
	}
	if props, ok := m["properties"].(map[string]any); ok {
		for k, p := range props {
			if b, ok := p.(bool); ok && b {
				props[k] = map[string]any{}
			} else {
				props[k] = fixTrue(p)
			}
		}
	}
	for _, k := range []string{"items", "additionalProperties"} {
		switch x := m[k].(type) {
		case map[string]any:
			m[k] = fixTrue(x)
		}
	}
	if b, ok := m["items"].(bool); ok && b {
		m["items"] = map[string]any{}
	}
	return m
}

// docsUsed records the fieldDocs keys schemas looked up (TestDocsInOnePlace finds stale ones).
var docsUsed sync.Map

func lookupDoc(t reflect.Type, field string) string {
	if field == "" {
		return ""
	}
	key := t.Name() + "." + field
	docsUsed.Store(key, true)
	return fieldDocs[key]
}

// ResultsDocURI is the resource that describes every field of every tool's answer: the output
// schemas in tools/list carry structure only, so that a client forwarding them to the model
// pays for the descriptions once, when it asks.
const ResultsDocURI = "memsnap://docs/results"

// maxOutputDepth is how deep output schemas spell out properties: the answer's fields and
// theirs (a list's items count as the list); deeper objects are typed "object" only.
const maxOutputDepth = 2

// compactOutput returns an output schema with structure only: types, enums, items and
// properties two levels deep. Descriptions, required lists and
// additionalProperties go (the answers are the server's own; a client only needs their
// shape): tools/list stays under 48 KB. Descriptions are served by ResultsDocURI.
func compactOutput(full json.RawMessage) (json.RawMessage, error) {
	var tree map[string]any
	if err := json.Unmarshal(full, &tree); err != nil {
		return nil, err
	}
	var strip func(v any, depth int) any
	strip = func(v any, depth int) any {
		m, ok := v.(map[string]any)
		if !ok {
			return v
		}
		out := map[string]any{}
		for k, x := range m {
			switch k {
			case "description", "required", "additionalProperties", "title", "default", "examples":
				continue
			case "properties":
				if depth >= maxOutputDepth {
					continue // an object whose fields ResultsDocURI lists
				}
				props := map[string]any{}
				for name, p := range x.(map[string]any) {
					props[name] = strip(p, depth+1)
				}
				out[k] = props
			case "items":
				out[k] = strip(x, depth)
			case "anyOf", "oneOf", "allOf":
				var list []any
				for _, e := range x.([]any) {
					list = append(list, strip(e, depth))
				}
				out[k] = list
			default:
				out[k] = x
			}
		}
		return out
	}
	return json.Marshal(strip(tree, 0))
}

// fieldLines renders the descriptions of a full schema as "name: description" lines, nested
// fields as parent.child (list items as parent[].child).
func fieldLines(prefix string, schema map[string]any, out *[]string) {
	props, _ := schema["properties"].(map[string]any)
	names := make([]string, 0, len(props))
	for n := range props {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		p, _ := props[n].(map[string]any)
		if d, _ := p["description"].(string); d != "" {
			*out = append(*out, "- `"+prefix+n+"`: "+d)
		}
		fieldLines(prefix+n+".", p, out)
		if items, ok := p["items"].(map[string]any); ok {
			fieldLines(prefix+n+"[].", items, out)
		}
	}
}

// resultsDoc renders every tool's answer fields with their descriptions, from the full
// output schemas.
func resultsDoc(full map[string]json.RawMessage, order []string) string {
	var b strings.Builder
	b.WriteString("# memsnap answers: what each field means\n\nEach tool's structuredContent, field by field (nested fields as parent.child, list items as parent[].child).\n")
	for _, name := range order {
		var tree map[string]any
		if json.Unmarshal(full[name], &tree) != nil {
			continue
		}
		var lines []string
		fieldLines("", tree, &lines)
		b.WriteString("\n## " + name + "\n\n" + strings.Join(lines, "\n") + "\n")
	}
	return b.String()
}
