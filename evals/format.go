package evals

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/memsnap/memsnap/tools"
)

// Tools the suite may call: the MCP server's tool names.
var knownTools = tools.ToolNames

// pathArgs are the tool arguments that name files; relative values are resolved against the
// suite's root before the call.
var pathArgs = []string{"path", "before", "after", "baseline"}

// Suite is a parsed eval file.
type Suite struct {
	// File is the YAML file the suite came from.
	File string `yaml:"-"`
	// Root is the directory fixture paths and path arguments are relative to (the repository
	// root). In YAML it is relative to the file's directory; after Load it is absolute.
	Root string `yaml:"root"`
	// ExtraRoots are further directories the server may read (relative to Root in YAML, absolute
	// after Load); the real snapshots live under ../shared.
	ExtraRoots []string `yaml:"extra_roots"`
	Cases      []Case   `yaml:"cases"`
}

// Case is one tool call and the checks on its answer.
type Case struct {
	Name        string `yaml:"name"`
	Description string `yaml:"description"`
	// Fixtures are the snapshot files or directories the case reads, relative to the root.
	Fixtures []string `yaml:"fixtures"`
	// SkipIfMissing makes an absent fixture skip the case instead of failing it (for the real
	// snapshots, which are not in the repository).
	SkipIfMissing bool           `yaml:"skip_if_missing"`
	Tool          string         `yaml:"tool"`
	Args          map[string]any `yaml:"args"`
	// ExpectError says the tool must answer with an error result (isError); the text checks then
	// apply to the error message.
	ExpectError bool    `yaml:"expect_error"`
	Checks      []Check `yaml:"checks"`
}

// Check kinds.
const (
	KindEquals       = "equals"
	KindContains     = "contains"
	KindRange        = "range" // at_least and/or at_most
	KindCount        = "count"
	KindTopSite      = "top_site"
	KindPattern      = "pattern"
	KindVerdict      = "verdict"
	KindMentions     = "mentions"
	KindMentionsFix  = "mentions_fix"
	KindMaxTextBytes = "max_text_bytes"
)

// Check is one assertion on a tool's answer. Exactly one kind is set per check.
type Check struct {
	Kind string
	// Path is the JSON path into the structured output (equals, contains, at_least, at_most,
	// count).
	Path string
	// Value is the expected value: of equals, contains, top_site (string), pattern (string),
	// verdict (string), mentions (string), mentions_fix (string).
	Value any
	// AtLeast and AtMost bound a number (range checks); Count is the expected number of values a
	// path resolves to; MaxBytes bounds the text.
	AtLeast, AtMost *float64
	Count           int
	MaxBytes        int
	// Site narrows a pattern check to the pattern's site.
	Site string
	// Not negates equals, contains, top_site, pattern, verdict and mentions.
	Not bool
}

var checkKeys = []string{"path", "equals", "contains", "at_least", "at_most", "count", "top_site", "pattern", "site", "verdict", "mentions", "mentions_fix", "max_text_bytes", "not"}

// UnmarshalYAML reads one check, rejecting unknown keys and checks with zero or several kinds.
func (c *Check) UnmarshalYAML(n *yaml.Node) error {
	var m map[string]any
	if err := n.Decode(&m); err != nil {
		return fmt.Errorf("line %d: a check is a mapping: %w", n.Line, err)
	}
	for k := range m {
		if !slices.Contains(checkKeys, k) {
			return fmt.Errorf("line %d: unknown check key %q (known: %s)", n.Line, k, strings.Join(checkKeys, ", "))
		}
	}
	var kinds []string
	for _, k := range []string{"equals", "contains", "count", "top_site", "pattern", "verdict", "mentions", "mentions_fix", "max_text_bytes"} {
		if _, ok := m[k]; ok {
			kinds = append(kinds, k)
		}
	}
	_, lo := m["at_least"]
	_, hi := m["at_most"]
	if lo || hi {
		kinds = append(kinds, KindRange)
	}
	if len(kinds) != 1 {
		return fmt.Errorf("line %d: a check needs exactly one of equals, contains, at_least/at_most, count, top_site, pattern, verdict, mentions, mentions_fix, max_text_bytes (got %d)", n.Line, len(kinds))
	}
	*c = Check{Kind: kinds[0]}
	str := func(k string) (string, error) {
		v, ok := m[k]
		if !ok {
			return "", nil
		}
		s, ok := v.(string)
		if !ok {
			return "", fmt.Errorf("line %d: %s must be a string, not %v", n.Line, k, v)
		}
		return s, nil
	}
	num := func(k string) (*float64, error) {
		v, ok := m[k]
		if !ok {
			return nil, nil
		}
		switch x := v.(type) {
		case int:
			f := float64(x)
			return &f, nil
		case float64:
			return &x, nil
		}
		return nil, fmt.Errorf("line %d: %s must be a number, not %v", n.Line, k, v)
	}
	var err error
	if c.Path, err = str("path"); err != nil {
		return err
	}
	if c.Site, err = str("site"); err != nil {
		return err
	}
	if v, ok := m["not"]; ok {
		b, isBool := v.(bool)
		if !isBool {
			return fmt.Errorf("line %d: not must be true or false", n.Line)
		}
		c.Not = b
	}
	needsPath := false
	switch c.Kind {
	case KindEquals, KindContains:
		c.Value = m[c.Kind]
		needsPath = true
	case KindRange:
		if c.AtLeast, err = num("at_least"); err != nil {
			return err
		}
		if c.AtMost, err = num("at_most"); err != nil {
			return err
		}
		needsPath = true
	case KindCount, KindMaxTextBytes:
		v, isInt := m[c.Kind].(int)
		if !isInt || v < 0 {
			return fmt.Errorf("line %d: %s must be a non-negative integer", n.Line, c.Kind)
		}
		if c.Kind == KindCount {
			c.Count = v
			needsPath = true
		} else {
			c.MaxBytes = v
		}
	default: // top_site, pattern, verdict, mentions, mentions_fix
		s, err := str(c.Kind)
		if err != nil {
			return err
		}
		if s == "" {
			return fmt.Errorf("line %d: %s must not be empty", n.Line, c.Kind)
		}
		c.Value = s
	}
	if needsPath && c.Path == "" {
		return fmt.Errorf("line %d: %s needs a path", n.Line, c.Kind)
	}
	if !needsPath && c.Path != "" {
		return fmt.Errorf("line %d: %s takes no path", n.Line, c.Kind)
	}
	if c.Site != "" && c.Kind != KindPattern {
		return fmt.Errorf("line %d: site only narrows a pattern check", n.Line)
	}
	if c.Not {
		switch c.Kind {
		case KindRange, KindCount, KindMaxTextBytes, KindMentionsFix:
			return fmt.Errorf("line %d: not cannot negate %s", n.Line, c.Kind)
		}
	}
	if c.Path != "" {
		if _, err := parsePath(c.Path); err != nil {
			return fmt.Errorf("line %d: %w", n.Line, err)
		}
	}
	return nil
}

// String describes the check in one line (for failure messages).
func (c Check) String() string {
	neg := ""
	if c.Not {
		neg = "not "
	}
	switch c.Kind {
	case KindEquals, KindContains:
		return fmt.Sprintf("%s %s%s %v", c.Path, neg, c.Kind, c.Value)
	case KindRange:
		var parts []string
		if c.AtLeast != nil {
			parts = append(parts, fmt.Sprintf("at_least %v", *c.AtLeast))
		}
		if c.AtMost != nil {
			parts = append(parts, fmt.Sprintf("at_most %v", *c.AtMost))
		}
		return c.Path + " " + strings.Join(parts, " ")
	case KindCount:
		return fmt.Sprintf("%s count %d", c.Path, c.Count)
	case KindMaxTextBytes:
		return fmt.Sprintf("max_text_bytes %d", c.MaxBytes)
	case KindPattern:
		s := fmt.Sprintf("%spattern %v", neg, c.Value)
		if c.Site != "" {
			s += " at " + c.Site
		}
		return s
	}
	return fmt.Sprintf("%s%s %v", neg, c.Kind, c.Value)
}

// Load reads and validates a suite file.
func Load(file string) (*Suite, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("eval suite: %w", err)
	}
	s, err := Parse(data, filepath.Dir(file))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	s.File = file
	return s, nil
}

// Parse reads a suite from YAML; dir is the directory relative roots are resolved against.
func Parse(data []byte, dir string) (*Suite, error) {
	var s Suite
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	if s.Root == "" {
		s.Root = "."
	}
	if !filepath.IsAbs(s.Root) {
		s.Root = filepath.Join(dir, s.Root)
	}
	root, err := filepath.Abs(s.Root)
	if err != nil {
		return nil, fmt.Errorf("root: %w", err)
	}
	s.Root = root
	for i, r := range s.ExtraRoots {
		if !filepath.IsAbs(r) {
			s.ExtraRoots[i] = filepath.Join(s.Root, r)
		}
	}
	if len(s.Cases) == 0 {
		return nil, fmt.Errorf("no cases")
	}
	seen := map[string]bool{}
	for i := range s.Cases {
		c := &s.Cases[i]
		if err := c.validate(); err != nil {
			return nil, fmt.Errorf("case %d (%q): %w", i+1, c.Name, err)
		}
		if seen[c.Name] {
			return nil, fmt.Errorf("case %d: duplicate name %q", i+1, c.Name)
		}
		seen[c.Name] = true
	}
	return &s, nil
}

func (c *Case) validate() error {
	if c.Name == "" {
		return fmt.Errorf("no name")
	}
	if !slices.Contains(knownTools, c.Tool) {
		return fmt.Errorf("unknown tool %q (known: %s)", c.Tool, strings.Join(knownTools, ", "))
	}
	if len(c.Fixtures) == 0 {
		return fmt.Errorf("no fixtures")
	}
	if len(c.Checks) == 0 {
		return fmt.Errorf("no checks")
	}
	for _, k := range pathArgs {
		v, ok := c.Args[k]
		if !ok {
			continue
		}
		s, isStr := v.(string)
		if !isStr {
			return fmt.Errorf("argument %s must be a string", k)
		}
		if !filepath.IsAbs(s) && !slices.Contains(c.Fixtures, s) {
			return fmt.Errorf("argument %s=%q is not one of the case's fixtures", k, s)
		}
	}
	for _, ch := range c.Checks {
		switch ch.Kind {
		case KindTopSite:
			if c.Tool != "top-stacks" && c.Tool != "diff" && c.Tool != "oom-report" {
				return fmt.Errorf("top_site applies to top-stacks, diff and oom-report, not %s", c.Tool)
			}
		case KindPattern:
			if c.Tool != "diff" {
				return fmt.Errorf("pattern applies to diff, not %s", c.Tool)
			}
		case KindVerdict:
			if c.Tool != "oom-report" {
				return fmt.Errorf("verdict applies to oom-report, not %s", c.Tool)
			}
		case KindEquals, KindContains, KindRange, KindCount, KindMentionsFix:
			if c.ExpectError {
				return fmt.Errorf("%s needs structured output; an expect_error case has only text", ch.Kind)
			}
		}
	}
	return nil
}
