package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/memsnap/memsnap/evals/golden"
)

// toolJSON is what an agent sees of a tool, as kept in the golden files.
type toolJSON struct {
	Name         string             `json:"name"`
	Description  string             `json:"description"`
	Annotations  mcp.ToolAnnotation `json:"annotations"`
	InputSchema  json.RawMessage    `json:"inputSchema"`
	OutputSchema json.RawMessage    `json:"outputSchema"`
}

func listTools(t *testing.T) []mcp.Tool {
	t.Helper()
	c := newClient(t, Config{})
	res, err := c.ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return res.Tools
}

func toolAsJSON(t *testing.T, tool mcp.Tool) toolJSON {
	t.Helper()
	raw, err := json.Marshal(tool)
	if err != nil {
		t.Fatal(err)
	}
	var tj toolJSON
	if err := json.Unmarshal(raw, &tj); err != nil {
		t.Fatal(err)
	}
	return tj
}

// TestGolden fails when a tool's name, description, annotations or schemas change without
// its golden file (go test ./tools -run Golden -update rewrites them).
func TestGolden(t *testing.T) {
	tools := listTools(t)
	var names []string
	for _, tool := range tools {
		names = append(names, tool.Name)
		tj := toolAsJSON(t, tool)
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		if err := enc.Encode(tj); err != nil {
			t.Fatal(err)
		}
		// Re-indent the raw schemas too.
		var pretty bytes.Buffer
		if err := json.Indent(&pretty, buf.Bytes(), "", "  "); err != nil {
			t.Fatal(err)
		}
		golden.Check(t, filepath.Join("testdata", tool.Name+".golden.json"), pretty.Bytes(),
			"tool "+tool.Name+"'s interface", "go test ./tools -run Golden -update")
	}
	want := strings.Join(slices.Sorted(slices.Values(ToolNames)), ",")
	if got := strings.Join(names, ","); got != want {
		t.Errorf("tools %s, want %s", got, want)
	}
	golden, _ := filepath.Glob(filepath.Join("testdata", "*.golden.json"))
	if len(golden) != len(tools) {
		t.Errorf("%d golden files for %d tools: remove stale ones", len(golden), len(tools))
	}
}

// TestSchemas: flat object roots, no $ref/$defs/$schema, every property described, enums and
// read-only annotations, and schemas the server's validator compiles (else it skips them).
func TestSchemas(t *testing.T) {
	for _, tool := range listTools(t) {
		tj := toolAsJSON(t, tool)
		a := tj.Annotations
		if a.ReadOnlyHint == nil || !*a.ReadOnlyHint || a.DestructiveHint == nil || *a.DestructiveHint ||
			a.IdempotentHint == nil || !*a.IdempotentHint || a.OpenWorldHint == nil || *a.OpenWorldHint {
			t.Errorf("%s: annotations %+v", tool.Name, a)
		}
		for kind, raw := range map[string]json.RawMessage{"input": tj.InputSchema, "output": tj.OutputSchema} {
			if bytes.Contains(raw, []byte(`"$ref"`)) || bytes.Contains(raw, []byte(`"$defs"`)) || bytes.Contains(raw, []byte(`"$schema"`)) {
				t.Errorf("%s %s schema has $ref/$defs/$schema", tool.Name, kind)
			}
			var root map[string]any
			if err := json.Unmarshal(raw, &root); err != nil {
				t.Fatalf("%s %s: %v", tool.Name, kind, err)
			}
			if root["type"] != "object" {
				t.Errorf("%s %s root type %v", tool.Name, kind, root["type"])
			}
			if kind == "input" {
				checkDescribed(t, tool.Name+" "+kind, root)
			}
			doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
			if err != nil {
				t.Fatal(err)
			}
			comp := jsonschema.NewCompiler()
			if err := comp.AddResource("s.json", doc); err != nil {
				t.Fatal(err)
			}
			if _, err := comp.Compile("s.json"); err != nil {
				t.Errorf("%s %s schema does not compile: %v", tool.Name, kind, err)
			}
		}
	}
	in := map[string]string{}
	for _, tool := range listTools(t) {
		in[tool.Name] = string(toolAsJSON(t, tool).InputSchema)
	}
	for tool, want := range map[string][]string{
		"top-stacks":       {`"enum":["site","stack","file","function","annotation","compile_context"]`, `"enum":["allocated","pending","inactive","all"]`, `"maximum":100`, `"required":["path"]`},
		"diff":             {`"required":["before","after"]`},
		"read-raw-section": {`"required":["path","section"]`, `"maximum":500`},
		"summarize":        {`"required":["path"]`, `"additionalProperties":false`},
		"replay":           {`"required":["path"]`, `"maximum":100`, `"minimum":1`, `"additionalProperties":false`},
	} {
		for _, w := range want {
			if !strings.Contains(in[tool], w) {
				t.Errorf("%s input schema lacks %s: %s", tool, w, in[tool])
			}
		}
	}
}

// TestResultsDocDescribesEveryField: the results resource describes every field of every
// tool's full output schema (tools/list carries structure only).
func TestResultsDocDescribesEveryField(t *testing.T) {
	_, e := newTestServer(t, Config{})
	for name, full := range e.fullOutput {
		var root map[string]any
		if err := json.Unmarshal(full, &root); err != nil {
			t.Fatal(err)
		}
		checkDescribed(t, name+" output", root)
	}
	doc := resultsDoc(e.fullOutput, ToolNames)
	for _, want := range []string{"## replay\n", "- `devices[].delayed_frees.bytes`: ", "- `sites[].site`: "} {
		if !strings.Contains(doc, want) {
			t.Errorf("results doc lacks %q", want)
		}
	}
}

// checkDescribed walks properties and items and fails on a property without a description.
func checkDescribed(t *testing.T, where string, s map[string]any) {
	t.Helper()
	if props, ok := s["properties"].(map[string]any); ok {
		for name, p := range props {
			ps, ok := p.(map[string]any)
			if !ok {
				t.Errorf("%s.%s: schema is %v, not an object", where, name, p)
				continue
			}
			if d, _ := ps["description"].(string); d == "" {
				t.Errorf("%s.%s has no description", where, name)
			}
			checkDescribed(t, where+"."+name, ps)
		}
	}
	if items, ok := s["items"].(map[string]any); ok {
		checkDescribed(t, where+"[]", items)
	}
}
