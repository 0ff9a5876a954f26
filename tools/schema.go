package tools

import (
	"encoding/json"
	"fmt"
	"reflect"
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
