package tools

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// argsValidator checks a tool's arguments against its input schema and says what is wrong in
// sentences an agent can act on ("group_by must be one of site, stack, file, function; got
// foo"), where mcp-go's own validation prints the validator's Go structs.
type argsValidator struct {
	tool   string
	schema *jsonschema.Schema
	// usage lists the arguments: "top-stacks takes path (required), group_by, …".
	usage string
}

// maxEchoedValue caps an argument value quoted back in an error.
const maxEchoedValue = 120

// newArgsValidator compiles the tool's input schema; in is its input type (for the argument
// names in declaration order).
func newArgsValidator(tool string, schema json.RawMessage, in reflect.Type) (*argsValidator, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, fmt.Errorf("%s input schema: %w", tool, err)
	}
	c := jsonschema.NewCompiler()
	url := "mem:///memsnap/" + tool + ".json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("%s input schema: %w", tool, err)
	}
	compiled, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("%s input schema: %w", tool, err)
	}
	var names []string
	for i := range in.NumField() {
		f := in.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		if !strings.Contains(opts, "omitempty") {
			name += " (required)"
		}
		names = append(names, name)
	}
	return &argsValidator{tool: tool, schema: compiled,
		usage: fmt.Sprintf("%s takes %s; tools/list gives each argument's description.", tool, strings.Join(names, ", "))}, nil
}

// check returns nil when args satisfy the schema, else an error whose message is one sentence
// per problem followed by the usage.
func (v *argsValidator) check(args map[string]any) error {
	if args == nil {
		args = map[string]any{}
	}
	raw, err := json.Marshal(args)
	if err != nil {
		return fmt.Errorf("arguments are not a JSON object: %w", err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return fmt.Errorf("arguments are not a JSON object: %w", err)
	}
	verr, ok := v.schema.Validate(inst).(*jsonschema.ValidationError)
	if !ok || verr == nil {
		return nil
	}
	var msgs []string
	for _, leaf := range leaves(verr) {
		if m := sentence(leaf); !slices.Contains(msgs, m) {
			msgs = append(msgs, m)
		}
	}
	return fmt.Errorf("invalid arguments for %s: %s. %s", v.tool, strings.Join(msgs, "; "), v.usage)
}

// leaves returns the validation errors without causes: the violated constraints themselves.
func leaves(e *jsonschema.ValidationError) []*jsonschema.ValidationError {
	if len(e.Causes) == 0 {
		return []*jsonschema.ValidationError{e}
	}
	var out []*jsonschema.ValidationError
	for _, c := range e.Causes {
		out = append(out, leaves(c)...)
	}
	return out
}

// sentence phrases one violated constraint.
func sentence(e *jsonschema.ValidationError) string {
	field := fieldName(e.InstanceLocation)
	switch k := e.ErrorKind.(type) {
	case *kind.Enum:
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			want[i] = valueText(w)
		}
		return fmt.Sprintf("%s must be one of %s; got %s", field, strings.Join(want, ", "), valueText(k.Got))
	case *kind.Type:
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			want[i] = typeText(w)
		}
		return fmt.Sprintf("%s must be %s; got %s", field, strings.Join(want, " or "), typeText(k.Got))
	case *kind.Minimum:
		return fmt.Sprintf("%s must be at least %s; got %s", field, ratText(k.Want), ratText(k.Got))
	case *kind.Maximum:
		return fmt.Sprintf("%s must be at most %s; got %s", field, ratText(k.Want), ratText(k.Got))
	case *kind.Required:
		if len(k.Missing) == 1 {
			return k.Missing[0] + " is required"
		}
		return strings.Join(k.Missing, " and ") + " are required"
	case *kind.AdditionalProperties:
		for i, p := range k.Properties {
			k.Properties[i] = clip(p, maxEchoedValue)
		}
		if len(k.Properties) == 1 {
			return "unknown argument " + k.Properties[0]
		}
		return "unknown arguments " + strings.Join(k.Properties, ", ")
	}
	return fmt.Sprintf("%s does not satisfy the schema's %s", field, strings.Join(e.ErrorKind.KeywordPath(), "/"))
}

// fieldName renders an instance location: "group_by", "skip[2]", or "the arguments".
func fieldName(loc []string) string {
	if len(loc) == 0 {
		return "the arguments"
	}
	var b strings.Builder
	for i, seg := range loc {
		if _, err := strconv.Atoi(seg); err == nil && i > 0 {
			fmt.Fprintf(&b, "[%s]", seg)
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(clip(seg, maxEchoedValue))
	}
	return b.String()
}

// valueText renders a value as an agent typed it: strings bare, the rest as JSON.
func valueText(v any) string {
	if s, ok := v.(string); ok {
		return clip(s, maxEchoedValue)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return clip(fmt.Sprint(v), maxEchoedValue)
	}
	return clip(string(b), maxEchoedValue)
}

// typeText names a JSON schema type with its article.
func typeText(t string) string {
	switch t {
	case "integer":
		return "an integer"
	case "number":
		return "a number"
	case "string":
		return "a string"
	case "boolean":
		return "true or false"
	case "array":
		return "a list"
	case "object":
		return "an object"
	}
	return t
}

// ratText renders a schema bound or value: an integer when it is one.
func ratText(r *big.Rat) string {
	if r == nil {
		return "?"
	}
	if r.IsInt() {
		return r.Num().String()
	}
	return r.FloatString(3)
}
