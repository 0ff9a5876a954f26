package analysis

import (
	"fmt"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Rule is one of the user's own categories (like Mosaic's custom profile): blocks whose stack has
// a frame whose "file:function" matches Pattern are grouped under Name.
type Rule struct {
	Name    string `json:"name"`
	Pattern string `json:"pattern"`
	re      *regexp.Regexp
}

// ParseRules reads rules from YAML: a mapping of name to regular expression (in file order:
// the first rule that matches wins), optionally under a top-level "rules" key, or a list of
// {name, pattern}. A bad document or pattern is a one-line error.
func ParseRules(data []byte) ([]Rule, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("not YAML: %s", oneLine(err.Error()))
	}
	if len(doc.Content) == 0 {
		return nil, fmt.Errorf("no rules: expected a mapping of name to regular expression")
	}
	n := doc.Content[0]
	if n.Kind == yaml.MappingNode && len(n.Content) == 2 && n.Content[0].Value == "rules" && n.Content[1].Kind != yaml.ScalarNode {
		n = n.Content[1]
	}
	var rules []Rule
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if v.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("line %d: rule %q: the value must be a regular expression string", v.Line, k.Value)
			}
			rules = append(rules, Rule{Name: k.Value, Pattern: v.Value})
		}
	case yaml.SequenceNode:
		for _, item := range n.Content {
			var r struct{ Name, Pattern string }
			if err := item.Decode(&r); err != nil || r.Name == "" || r.Pattern == "" {
				return nil, fmt.Errorf("line %d: each list item needs name and pattern", item.Line)
			}
			rules = append(rules, Rule{Name: r.Name, Pattern: r.Pattern})
		}
	default:
		return nil, fmt.Errorf("line %d: expected a mapping of name to regular expression", n.Line)
	}
	if len(rules) == 0 {
		return nil, fmt.Errorf("no rules: expected a mapping of name to regular expression")
	}
	seen := map[string]bool{}
	for i := range rules {
		r := &rules[i]
		if strings.TrimSpace(r.Name) == "" {
			return nil, fmt.Errorf("rule %d has an empty name", i+1)
		}
		if seen[r.Name] {
			return nil, fmt.Errorf("rule %q appears twice", r.Name)
		}
		seen[r.Name] = true
		if err := r.compile(); err != nil {
			return nil, err
		}
	}
	return rules, nil
}

// CompileRules checks rules given as data (the MCP tools' rules argument): names present and
// distinct, patterns valid.
func CompileRules(rules []Rule) ([]Rule, error) {
	out := make([]Rule, len(rules))
	seen := map[string]bool{}
	for i, r := range rules {
		if strings.TrimSpace(r.Name) == "" {
			return nil, fmt.Errorf("rule %d has an empty name", i+1)
		}
		if seen[r.Name] {
			return nil, fmt.Errorf("rule %q appears twice", r.Name)
		}
		seen[r.Name] = true
		if err := r.compile(); err != nil {
			return nil, err
		}
		out[i] = r
	}
	return out, nil
}

func (r *Rule) compile() error {
	if r.re != nil {
		return nil
	}
	re, err := regexp.Compile(r.Pattern)
	if err != nil {
		return fmt.Errorf("rule %q: bad regular expression %q: %s", r.Name, r.Pattern, oneLine(err.Error()))
	}
	r.re = re
	return nil
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
