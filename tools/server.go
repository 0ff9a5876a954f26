// Package tools is memsnap's MCP server: one tool per file (the tools package catalog
// lists), each a thin wrapper over package analysis with
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
	"time"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/memsnap/memsnap/analysis"
	"github.com/memsnap/memsnap/analysis/bound"
	"github.com/memsnap/memsnap/analysis/load"
	"github.com/memsnap/memsnap/analysis/snapshot"
	"github.com/memsnap/memsnap/catalog"
	"github.com/memsnap/memsnap/prompts"
)

// Config configures the MCP server.
type Config struct {
	// Roots are the directories whose files the server may read (default: the working
	// directory).
	Roots []string
	// ClientRoots adds, per session, the directories the client offers as MCP roots. Off by
	// default: a client may offer file:/// (the whole file system).
	ClientRoots bool
	// CacheBytes is the memory budget of the snapshot cache: results held and loads in flight
	// (<= 0: 4 GiB).
	CacheBytes int64
	// CallTimeout bounds each tool call and resource read (<= 0: DefaultCallTimeout). A call
	// that runs out answers with an error; other calls are not held up by it.
	CallTimeout time.Duration
	// Version is reported to clients (empty: BuildVersion()).
	Version string
	// MaxTextBytes caps each tool's text rendering and error messages (<= 0: 8192).
	MaxTextBytes int
	// MaxStructuredBytes caps top-stacks' structuredContent, whose stacks grow with the limit
	// (<= 0: DefaultMaxStructuredBytes); the groups that do not fit are left out with a note.
	MaxStructuredBytes int
	// Loader replaces load.File (tests).
	Loader LoadFunc
	// DirLoader replaces load.Dir for directories of rank snapshots (tests).
	DirLoader DirLoadFunc
}

// DefaultMaxTextBytes is the default cap of a tool's text answer.
const DefaultMaxTextBytes = 8192

// DefaultMaxStructuredBytes is the default cap of top-stacks' structuredContent: twice the
// text's, so that the default ten groups of every real snapshot here (at most 11.4 KB) fit.
const DefaultMaxStructuredBytes = 16384

// DefaultCallTimeout is the default bound of one tool call: a 300 MB snapshot loads in about
// 1.5 s here, so only a file that never delivers its data (or a huge one on a slow disk) gets
// near it.
const DefaultCallTimeout = 5 * time.Minute

// env is what every tool handler shares.
type env struct {
	cache         *Cache
	memo          *memo
	roots         *roots
	maxText       int
	maxStructured int
	callTimeout   time.Duration
	// fullOutput is each tool's output schema with its descriptions (ResultsDocURI).
	fullOutput map[string]json.RawMessage
}

// NewServer builds the memsnap MCP server with its tools, prompts and resources.
func NewServer(cfg Config) (*server.MCPServer, error) {
	s, _, err := newServer(cfg)
	return s, err
}

// newServer is NewServer that also returns what the handlers share (for tests).
func newServer(cfg Config) (*server.MCPServer, *env, error) {
	rs, err := newRoots(cfg.Roots)
	if err != nil {
		return nil, nil, err
	}
	rs.clientRootsOn = cfg.ClientRoots
	e := &env{cache: NewCache(cfg.CacheBytes, cfg.Loader), memo: newMemo(64), roots: rs,
		maxText: cfg.MaxTextBytes, maxStructured: cfg.MaxStructuredBytes, callTimeout: cfg.CallTimeout,
		fullOutput: map[string]json.RawMessage{}}
	if e.maxText <= 0 {
		e.maxText = DefaultMaxTextBytes
	}
	if e.maxStructured <= 0 {
		e.maxStructured = DefaultMaxStructuredBytes
	}
	if e.callTimeout <= 0 {
		e.callTimeout = DefaultCallTimeout
	}
	if cfg.DirLoader != nil {
		e.cache.dirLoader = cfg.DirLoader
	}
	version := cfg.Version
	if version == "" {
		version = BuildVersion()
	}
	hooks := &server.Hooks{}
	hooks.AddOnUnregisterSession(func(_ context.Context, s server.ClientSession) { rs.forget(s.SessionID()) })
	s := server.NewMCPServer("memsnap", version,
		server.WithInstructions(prompts.Instructions),
		server.WithToolCapabilities(false),
		server.WithPromptCapabilities(false),
		server.WithResourceCapabilities(false, false),
		// Input is validated by each tool (validate.go), to phrase errors as sentences.
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
		return nil, nil, err
	}
	s.AddTools(tools...)
	addPrompts(s)
	addResources(s, e)
	return s, e, nil
}

// tools declares every tool once.
func (e *env) tools() ([]server.ServerTool, error) {
	var out []server.ServerTool
	for _, mk := range []func(*env) (server.ServerTool, error){
		summarizeTool, topStacksTool, diffTool, oomTool, fragmentationTool, replayTool, readRawTool, checkTool, timelineTool, whatIfTool, capacityTool,
	} {
		t, err := mk(e)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// ToolNames lists the tools, as the catalog gives them (TestToolsMatchCatalog holds the
// declarations above to it).
var ToolNames = catalog.Tools()

// texter is an analysis result that renders itself as text.
type texter interface{ Text() string }

// userError is a problem the agent can fix; its message says how.
type userError struct{ msg string }

func (u *userError) Error() string { return u.msg }

func userErrorf(format string, args ...any) error {
	return &userError{fmt.Sprintf(format, args...)}
}

// declare builds a read-only tool from its input and output types and a handler that calls
// analysis. The arguments are checked against the input schema (validate.go); the handler runs
// under the call timeout (bounded). Every failure becomes an isError result that says what to
// do next, capped like the text.
func declare[In any, Out texter](e *env, name, title, description string, run func(ctx context.Context, in In) (Out, error)) (server.ServerTool, error) {
	inSchema, err := schemaFor(reflect.TypeFor[In]())
	if err != nil {
		return server.ServerTool{}, err
	}
	fullOut, err := schemaFor(reflect.TypeFor[Out]())
	if err != nil {
		return server.ServerTool{}, err
	}
	outSchema, err := compactOutput(fullOut)
	if err != nil {
		return server.ServerTool{}, fmt.Errorf("%s output schema: %w", name, err)
	}
	if e.fullOutput == nil {
		e.fullOutput = map[string]json.RawMessage{}
	}
	e.fullOutput[name] = fullOut
	validate, err := newArgsValidator(name, inSchema, reflect.TypeFor[In]())
	if err != nil {
		return server.ServerTool{}, err
	}
	tool := mcp.NewToolWithRawSchema(name, description, inSchema)
	tool.Title = title
	tool.RawOutputSchema = outSchema
	tool.Annotations = mcp.ToolAnnotation{
		Title:           title,
		ReadOnlyHint:    mcp.ToBoolPtr(true),
		DestructiveHint: mcp.ToBoolPtr(false),
		IdempotentHint:  mcp.ToBoolPtr(true),
		OpenWorldHint:   mcp.ToBoolPtr(false),
	}
	handler := func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		fail := func(msg string) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultError(clip(msg, e.maxText)), nil
		}
		args := req.GetArguments()
		if err := validate.check(args); err != nil {
			return fail(err.Error())
		}
		var in In
		raw, err := json.Marshal(args)
		if err != nil {
			return fail("arguments are not a JSON object: " + err.Error())
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&in); err != nil {
			return fail(fmt.Sprintf("invalid arguments for %s: %v. %s", name, err, validate.usage))
		}
		out, err := bounded(ctx, e.callTimeout, name, func(ctx context.Context) (Out, error) {
			return run(withProgress(ctx, req), in)
		})
		if err != nil {
			return fail(errorText(name, err))
		}
		// Every string cut to a bound (a copy: out may be a memoized answer other calls read).
		out = bound.Strings(out)
		return mcp.NewToolResultStructured(out, capText(out.Text(), e.maxText)), nil
	}
	return server.ServerTool{Tool: tool, Handler: handler}, nil
}

// timeoutError is a call that ran past the server's call timeout.
type timeoutError struct {
	what  string
	after time.Duration
}

func (t *timeoutError) Error() string {
	return fmt.Sprintf("%s did not finish within %s", t.what, t.after)
}

// Unwrap makes a timeout a context.DeadlineExceeded.
func (t *timeoutError) Unwrap() error { return context.DeadlineExceeded }

// panicError is a handler that panicked; msg says so for the agent.
type panicError struct{ msg string }

func (p *panicError) Error() string { return p.msg }

// bounded runs fn in its own goroutine and returns its answer, or returns as soon as ctx is
// cancelled or timeout passes: a call stuck in a system call (a FIFO opened for reading, a
// stalled network mount) holds only its own goroutine, never the caller or other calls. A
// panic in fn becomes a panicError.
func bounded[T any](ctx context.Context, timeout time.Duration, what string, fn func(context.Context) (T, error)) (T, error) {
	if timeout <= 0 {
		timeout = DefaultCallTimeout
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				ch <- result{err: &panicError{fmt.Sprintf("%s failed with an internal error (%v); this is a memsnap bug — report it with the file's PyTorch version. Other tools may still work on this file. %s",
					what, p, firstLines(string(debug.Stack()), 6))}}
			}
		}()
		v, err := fn(cctx)
		ch <- result{v, err}
	}()
	var r result
	select {
	case r = <-ch:
	case <-cctx.Done():
		select {
		case r = <-ch: // finished at the same moment: keep its answer
		default:
			r.err = fmt.Errorf("%s: %w", what, cctx.Err())
		}
	}
	if r.err != nil && ctx.Err() == nil && errors.Is(cctx.Err(), context.DeadlineExceeded) && errors.Is(r.err, context.DeadlineExceeded) {
		// fn gave up (or was abandoned) because the call timed out, not the client.
		var zero T
		return zero, &timeoutError{what, timeout}
	}
	return r.v, r.err
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
	var te *timeoutError
	var pe *panicError
	switch {
	case errors.As(err, &ue):
		return ue.msg
	case errors.As(err, &pe):
		return pe.msg
	case errors.As(err, &te):
		return fmt.Sprintf("%s (the server's --call-timeout): the snapshot may be very large or on a slow disk, or the path may name something that never delivers its data (a file on a stalled network mount). Other calls were not held up. Call it again to retry; for very large files restart memsnap serve with a larger --call-timeout.", te.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return tool + " was cancelled before it finished; call it again to retry (a file being loaded by another call stays loading)."
	case errors.As(err, &le):
		return fmt.Sprintf("cannot read the snapshot: %s. memsnap reads files written by torch.cuda.memory._dump_snapshot() (pickle, JSON, gzip). If the file is truncated or was copied while being written, dump it again; if it is another kind of file, point the tool at the snapshot instead.", le.Error())
	}
	return fmt.Sprintf("%s failed: %v. Check the arguments; if they are right, this may be a memsnap bug.", tool, err)
}

// clip cuts s to at most max bytes at a character boundary, ending it with "…" when cut: for
// error messages and the arguments they echo.
func clip(s string, max int) string {
	if len(s) <= max {
		return s
	}
	const ellipsis = "…"
	cut := max - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	if cut < 0 {
		cut = 0
	}
	return s[:cut] + ellipsis
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
		return nil, "", userErrorf("%s %q is a directory; give one snapshot file (summarize alone accepts a directory of per-rank snapshots)", field, clip(path, maxEchoedPath))
	}
	progress, _ := ctx.Value(progressKey{}).(func(int64, int64))
	return e.cache.get(ctx, p, progress)
}
