package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/mark3labs/mcp-go/server"

	"github.com/memsnap/memsnap/analysis"
	"github.com/memsnap/memsnap/analysis/bound"
)

// TopStacksInput is the top-stacks tool's input.
type TopStacksInput struct {
	Path    string          `json:"path" jsonschema:"description=Snapshot file; absolute or relative to the server's first root"`
	GroupBy string          `json:"group_by,omitempty" jsonschema:"description=Group blocks by the user's site (file:line; default)\\, by whole stack\\, by file\\, by function\\, by annotation (the innermost record_function range open when each block was allocated\\, e.g. Optimizer.step#AdamW.step; <none> outside any; with trace_allocs per range) or by compile_context (torch.compile frame/graph),enum=site,enum=stack,enum=file,enum=function,enum=annotation,enum=compile_context,default=site"`
	State   string          `json:"state,omitempty" jsonschema:"description=Which blocks to count: allocated (live tensors; default)\\, pending (freed but awaiting another stream)\\, inactive (cached free: stack of last use) or all,enum=allocated,enum=pending,enum=inactive,enum=all,default=allocated"`
	Limit   int             `json:"limit,omitempty" jsonschema:"description=Groups to return\\, largest first (default 10),minimum=1,maximum=100,default=10"`
	Device  *int            `json:"device,omitempty" jsonschema:"description=Only this CUDA device (default: every device),minimum=0"`
	Rules   []analysis.Rule `json:"rules,omitempty" jsonschema:"description=The user's own categories (like the CLI's --rules): blocks whose stack has a frame whose file:function matches a rule's pattern are grouped under its name and carry rule; the first rule that matches wins\\, innermost frame first"`
}

// topStacksDefaultLimit keeps the default answer under the text cap.
const topStacksDefaultLimit = 10

func topStacksTool(e *env) (server.ServerTool, error) {
	return declare(e, "top-stacks", "Top memory holders by code site",
		"Who holds the memory at the snapshot: blocks grouped by the user's own source line (site), largest first, with a category guess (parameter, gradient, optimizer_state, activation, …), the evidence and a short filtered stack. Use state=inactive to see whose freed memory sits in the cache, state=pending for cross-stream delayed frees. Site ids (model.py:41) match diff and oom-report; stack_id opens the representative stack whole with read-raw-section section stacks[ID].",
		func(ctx context.Context, in TopStacksInput) (*analysis.TopStacksResult, error) {
			rules, err := rulesArg(in.Rules)
			if err != nil {
				return nil, err
			}
			snap, version, err := e.snapshotAt(ctx, in.Path, "path")
			if err != nil {
				return nil, err
			}
			opt := analysis.TopStacksOptions{GroupBy: in.GroupBy, State: in.State, Limit: in.Limit, Device: analysis.AllDevices,
				Attribution: analysis.AttributionOptions{Rules: rules}}
			if opt.Limit <= 0 {
				opt.Limit = topStacksDefaultLimit
			}
			if in.Device != nil {
				opt.Device = *in.Device
			}
			r, err := memoized(e, "top-stacks", opt, []string{version}, func() (*analysis.TopStacksResult, error) {
				return analysis.TopStacks(snap, opt)
			})
			if err != nil {
				return nil, err
			}
			// Strings cut first, so the cap counts what is sent.
			return capSites(bound.Strings(r), e.maxStructured), nil
		})
}

// capSites returns r, or when its JSON is over max bytes a copy that keeps only the largest
// groups that fit (none when even the largest does not), with a note that says so: group_by stack with a high limit
// can otherwise reach 100 KB of structuredContent while the text is capped.
func capSites(r *analysis.TopStacksResult, max int) *analysis.TopStacksResult {
	full, err := json.Marshal(r)
	if err != nil || len(full) <= max {
		return r
	}
	c := *r
	c.Notes = append(slices.Clone(r.Notes), "")
	note := func(n int) string {
		return fmt.Sprintf("structuredContent keeps the largest %d of the %d groups asked for, to stay under %d bytes (the text is capped too): pass a smaller limit or group_by site; read a group's whole stack with read-raw-section stacks[ID]",
			n, len(r.Sites), max)
	}
	c.Sites = []analysis.TopSite{}
	c.Notes[len(c.Notes)-1] = note(len(r.Sites))
	base, err := json.Marshal(&c)
	if err != nil {
		return r
	}
	size, n := len(base), 0
	for n < len(r.Sites) {
		site, err := json.Marshal(r.Sites[n])
		if err != nil || size+len(site)+1 > max {
			break
		}
		size += len(site) + 1
		n++
	}
	c.Sites = r.Sites[:n:n]
	c.Notes[len(c.Notes)-1] = note(n)
	return &c
}

// rulesArg checks the rules argument of a tool.
func rulesArg(rules []analysis.Rule) ([]analysis.Rule, error) {
	if len(rules) == 0 {
		return nil, nil
	}
	out, err := analysis.CompileRules(rules)
	if err != nil {
		return nil, userErrorf("rules: %s", clip(err.Error(), maxEchoedPath))
	}
	return out, nil
}
