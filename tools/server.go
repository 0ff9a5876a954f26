// Package tools is memsnap's MCP server: one tool per file (summarize, diff, top-stacks,
// oom-report, fragmentation, replay, read-raw-section), each a thin wrapper over package analysis with
// input and output schemas reflected from Go types, plus a shared snapshot cache, allowed
// roots, prompts and resources. It holds no analysis logic.
package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"runtime/debug"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/memsnap/memsnap/analysis"
	"github.com/memsnap/memsnap/analysis/load"
	"github.com/memsnap/memsnap/analysis/snapshot"
	"github.com/memsnap/memsnap/prompts"
)

// Config configures the MCP server.
type Config struct {
	// Roots are the directories whose files the server may read (default: the working
	// directory). The client's MCP roots are added per session when it offers them.
	Roots []string
	// CacheBytes is the memory budget of the snapshot cache (<= 0: 4 GiB).
	CacheBytes int64
	// Version is reported to clients.
	Version string
	// MaxTextBytes caps each tool's text rendering (<= 0: 8192).
	MaxTextBytes int
	// Loader replaces load.File (tests).
	Loader LoadFunc
	// DirLoader replaces load.Dir for directories of rank snapshots (tests).
	DirLoader DirLoadFunc
}

// DefaultMaxTextBytes is the default cap of a tool's text answer.
const DefaultMaxTextBytes = 8192

// env is what every tool handler shares.
type env struct {
	cache   *Cache
	memo    *memo
	roots   *roots
	maxText int
}

// NewServer builds the memsnap MCP server with its tools, prompts and resources.
func NewServer(cfg Config) (*server.MCPServer, error) {
	rs, err := newRoots(cfg.Roots)
	if err != nil {
		return nil, err
	}
	e := &env{cache: NewCache(cfg.CacheBytes, cfg.Loader), memo: newMemo(64), roots: rs, maxText: cfg.MaxTextBytes}
	if e.maxText <= 0 {
		e.maxText = DefaultMaxTextBytes
	}
	if cfg.DirLoader != nil {
		e.cache.dirLoader = cfg.DirLoader
	}
	version := cfg.Version
	if version == "" {
		version = "dev"
	}
	hooks := &server.Hooks{}
	hooks.AddOnUnregisterSession(func(_ context.Context, s server.ClientSession) { rs.forget(s.SessionID()) })
	s := server.NewMCPServer("memsnap", version,
		server.WithInstructions(prompts.Instructions),
		server.WithToolCapabilities(false),
		server.WithPromptCapabilities(false),
		server.WithResourceCapabilities(false, false),
		server.WithInputSchemaValidation(),
		server.WithOutputSchemaValidation(),
		server.WithRecovery(),
		server.WithHooks(hooks),
	)
	s.AddNotificationHandler(string(mcp.MethodNotificationRootsListChanged), func(ctx context.Context, _ mcp.JSONRPCNotification) {
		if sess := server.ClientSessionFromContext(ctx); sess != nil {
			rs.forget(sess.SessionID())
		}
	})
	tools, err := e.tools()
	if err != nil {
		return nil, err
	}
	s.AddTools(tools...)
	addPrompts(s)
	addResources(s, e)
	return s, nil
}

// tools declares every tool once.
func (e *env) tools() ([]server.ServerTool, error) {
	var out []server.ServerTool
	for _, mk := range []func(*env) (server.ServerTool, error){
		summarizeTool, topStacksTool, diffTool, oomTool, fragmentationTool, replayTool, readRawTool,
	} {
		t, err := mk(e)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// ToolNames lists the tools in declaration order.
var ToolNames = []string{"summarize", "top-stacks", "diff", "oom-report", "fragmentation", "replay", "read-raw-section"}

// texter is an analysis result that renders itself as text.
type texter interface{ Text() string }

// userError is a problem the agent can fix; its message says how.
type userError struct{ msg string }

func (u *userError) Error() string { return u.msg }

func userErrorf(format string, args ...any) error {
	return &userError{fmt.Sprintf(format, args...)}
}

// declare builds a read-only tool from its input and output types and a handler that calls
// analysis. Every failure becomes an isError result that says what to do next.
func declare[In any, Out texter](name, description string, run func(ctx context.Context, in In) (Out, error), maxText int) (server.ServerTool, error) {
	inSchema, err := schemaFor(reflect.TypeFor[In]())
	if err != nil {
		return server.ServerTool{}, err
	}
	outSchema, err := schemaFor(reflect.TypeFor[Out]())
	if err != nil {
		return server.ServerTool{}, err
	}
	tool := mcp.NewToolWithRawSchema(name, description, inSchema)
	tool.RawOutputSchema = outSchema
	tool.Annotations = mcp.ToolAnnotation{
		Title:           name,
		ReadOnlyHint:    mcp.ToBoolPtr(true),
		DestructiveHint: mcp.ToBoolPtr(false),
		IdempotentHint:  mcp.ToBoolPtr(true),
		OpenWorldHint:   mcp.ToBoolPtr(false),
	}
	handler := func(ctx context.Context, req mcp.CallToolRequest) (res *mcp.CallToolResult, _ error) {
		defer func() {
			if p := recover(); p != nil {
				res = mcp.NewToolResultError(fmt.Sprintf("%s failed with an internal error (%v); this is a memsnap bug — report it with the file's PyTorch version. Other tools may still work on this file. %s",
					name, p, firstLines(string(debug.Stack()), 6)))
			}
		}()
		var in In
		raw, err := json.Marshal(req.GetArguments())
		if err != nil {
			return mcp.NewToolResultError("arguments are not a JSON object: " + err.Error()), nil
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&in); err != nil {
			return mcp.NewToolResultError(fmt.Sprintf("invalid arguments for %s: %v. The input schema is %s", name, err, inSchema)), nil
		}
		out, err := run(withProgress(ctx, req), in)
		if err != nil {
			return mcp.NewToolResultError(errorText(name, err)), nil
		}
		return mcp.NewToolResultStructured(out, capText(out.Text(), maxText)), nil
	}
	return server.ServerTool{Tool: tool, Handler: handler}, nil
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, " | ")
}

// errorText phrases an error for an agent: what is wrong and what to do next.
func errorText(tool string, err error) string {
	var ue *userError
	var le *load.Error
	switch {
	case errors.As(err, &ue):
		return ue.msg
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return tool + " was cancelled before it finished; call it again to retry (a file being loaded by another call stays loading)."
	case errors.As(err, &le):
		return fmt.Sprintf("cannot read the snapshot: %s. memsnap reads files written by torch.cuda.memory._dump_snapshot() (pickle, JSON, gzip). If the file is truncated or was copied while being written, dump it again; if it is another kind of file, point the tool at the snapshot instead.", le.Error())
	}
	return fmt.Sprintf("%s failed: %v. Check the arguments; if they are right, this may be a memsnap bug.", tool, err)
}

// capText cuts text at a line boundary to at most max bytes, saying so.
func capText(s string, max int) string {
	if len(s) <= max {
		return s
	}
	note := fmt.Sprintf("… text truncated at %d bytes: structuredContent holds the full answer; pass a smaller limit or use read-raw-section for details.\n", max)
	cut := max - len(note)
	if cut < 0 {
		cut = 0
	}
	if i := strings.LastIndexByte(s[:cut], '\n'); i > 0 {
		cut = i + 1
	}
	return s[:cut] + note
}

type progressKey struct{}

// withProgress attaches a progress reporter when the client gave a progress token.
func withProgress(ctx context.Context, req mcp.CallToolRequest) context.Context {
	if req.Params.Meta == nil || req.Params.Meta.ProgressToken == nil {
		return ctx
	}
	token := req.Params.Meta.ProgressToken
	srv := server.ServerFromContext(ctx)
	if srv == nil {
		return ctx
	}
	fn := func(done, total int64) {
		params := map[string]any{"progressToken": token, "progress": float64(done)}
		msg := fmt.Sprintf("loading snapshot: %s read", analysis.FormatBytes(done))
		if total > 0 {
			params["total"] = float64(total)
			msg = fmt.Sprintf("loading snapshot: %s of %s", analysis.FormatBytes(done), analysis.FormatBytes(total))
		}
		params["message"] = msg
		_ = srv.SendNotificationToClient(ctx, string(mcp.MethodNotificationProgress), params)
	}
	return context.WithValue(ctx, progressKey{}, fn)
}

// snapshotAt resolves path against the roots and returns the cached or freshly loaded
// snapshot and the version of the file served (for memoized results).
func (e *env) snapshotAt(ctx context.Context, path, field string) (*snapshot.Snapshot, string, error) {
	p, err := e.roots.resolve(ctx, path, field)
	if err != nil {
		return nil, "", err
	}
	if load.IsDir(p) {
		return nil, "", userErrorf("%s %q is a directory; give one snapshot file (summarize alone accepts a directory of per-rank snapshots)", field, path)
	}
	progress, _ := ctx.Value(progressKey{}).(func(int64, int64))
	return e.cache.get(ctx, p, progress)
}
