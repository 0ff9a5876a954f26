package main

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/server"
	"github.com/spf13/cobra"

	"github.com/memsnap/memsnap/catalog"
	"github.com/memsnap/memsnap/prompts"
	"github.com/memsnap/memsnap/tools"
)

func init() { register(newServeCmd) }

// tokenEnv names the environment variable that gives the bearer token when --token is not set
// (a token on the command line is visible to every user in the process list).
const tokenEnv = "MEMSNAP_TOKEN"

// serveOptions are serve's flags.
type serveOptions struct {
	httpAddr     string
	token        string
	roots        []string
	clientRoots  bool
	cacheMB      int64
	callTimeout  time.Duration
	maxMessageKB int
	allowRemote  bool
	allowOrigins []string
}

// promptNames lists the MCP prompts for serve --help.
func promptNames() string {
	var names []string
	for _, p := range prompts.All {
		names = append(names, p.Name)
	}
	return strings.Join(names, ", ")
}

func newServeCmd() *cobra.Command {
	var o serveOptions
	c := &cobra.Command{
		Use:   "serve",
		Short: "Run the MCP server (stdio by default, or streamable HTTP) for coding agents",
		Long: `serve runs memsnap as a Model Context Protocol server.
Tools: ` + strings.Join(catalog.Tools(), ", ") + `.
Prompts: ` + promptNames() + `; resources: the usage guide and snapshot sections.
It reads only files under --root (repeatable; default the working directory), plus the
client's MCP roots with --client-roots.
Over stdio (the default) the client starts memsnap itself. With --http it listens on a
loopback address for streamable HTTP at /mcp; a token (--token, or the MEMSNAP_TOKEN
environment variable) requires "Authorization: Bearer TOKEN"; requests from a browser page
are refused (403) unless its Origin is a loopback one or given with --allow-origin.
--cache-mb bounds the snapshots held and the loads in flight together; --call-timeout bounds
each call; a message over --max-message-kb is refused (413 over HTTP, a JSON-RPC error over
stdio) and the server goes on. While a snapshot loads, Go's garbage collector runs at GOGC 200,
as the CLI's commands do, and at its default between loads; a GOGC in the environment stands.`,
		Example: `  memsnap serve
  memsnap serve --root /data/snapshots --root .
  MEMSNAP_TOKEN=... memsnap serve --http 127.0.0.1:8765`,
		Args: needArgs(0, ""),
		RunE: func(c *cobra.Command, _ []string) error {
			ctx := c.Context()
			if !c.Flags().Changed("token") {
				o.token = os.Getenv(tokenEnv)
			}
			if os.Getenv("GOMEMLIMIT") == "" && o.cacheMB > 0 {
				// The budget counts the live snapshots; the garbage collector's headroom comes
				// on top (up to as much again). A soft limit keeps it near the budget: with 50
				// concurrent loads of 54 MB files and --cache-mb 200, peak RSS 413-418 MB
				// instead of 569-575 MB; wall time varied more between runs (29-56 s) than
				// between the two.
				debug.SetMemoryLimit(o.cacheMB<<20*3/2 + 64<<20)
			}
			fileLoader, dirLoader := serverLoaders()
			srv, err := tools.NewServer(tools.Config{Roots: o.roots, ClientRoots: o.clientRoots, CacheBytes: o.cacheMB << 20,
				CallTimeout: o.callTimeout, Version: appVersion(), Loader: fileLoader, DirLoader: dirLoader})
			if err != nil {
				return err
			}
			if o.httpAddr == "" {
				err := tools.ServeStdio(ctx, srv, os.Stdin, os.Stdout, o.maxMessageKB<<10, log.New(os.Stderr, "memsnap serve: ", log.LstdFlags))
				if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, os.ErrClosed) {
					return nil
				}
				return fmt.Errorf("serve: %w", err)
			}
			return serveHTTP(ctx, c, srv, o)
		},
	}
	c.Flags().StringVar(&o.httpAddr, "http", "", "serve streamable HTTP at ADDR (e.g. 127.0.0.1:8765) instead of stdio; endpoint /mcp")
	c.Flags().StringVar(&o.token, "token", "", "with --http: require the header Authorization: Bearer TOKEN (default $"+tokenEnv+"; prefer the variable: a flag shows in the process list)")
	c.Flags().StringArrayVar(&o.roots, "root", nil, "directory whose files may be read (repeatable; default the working directory)")
	c.Flags().BoolVar(&o.clientRoots, "client-roots", false, "also read under the directories the client offers as MCP roots (a client may offer file:///, the whole file system)")
	c.Flags().Int64Var(&o.cacheMB, "cache-mb", 4096, "memory budget in MiB for loaded snapshots and loads in flight (also sets Go's soft memory limit to 1.5x this plus 64 MiB unless GOMEMLIMIT is set)")
	c.Flags().DurationVar(&o.callTimeout, "call-timeout", tools.DefaultCallTimeout, "longest a tool call may run before it answers with an error")
	c.Flags().IntVar(&o.maxMessageKB, "max-message-kb", tools.DefaultMaxMessageBytes>>10, "largest JSON-RPC message in KiB (a stdio line or an HTTP body)")
	c.Flags().BoolVar(&o.allowRemote, "allow-remote", false, "with --http and a token: allow a non-loopback listen address")
	c.Flags().StringArrayVar(&o.allowOrigins, "allow-origin", nil, "with --http: also accept requests whose Origin header is this (e.g. https://app.example.com; repeatable); loopback origins are always accepted")
	return c
}

// serveHTTP serves streamable HTTP on o.httpAddr (loopback unless o.allowRemote) until ctx ends.
func serveHTTP(ctx context.Context, c *cobra.Command, srv *server.MCPServer, o serveOptions) error {
	host, _, err := net.SplitHostPort(o.httpAddr)
	if err != nil {
		return fmt.Errorf("--http %q: want HOST:PORT such as 127.0.0.1:8765: %w", o.httpAddr, err)
	}
	if o.allowRemote && o.token == "" {
		return fmt.Errorf("--allow-remote needs --token (or $%s): a server reachable from the network must check a bearer token", tokenEnv)
	}
	if !o.allowRemote && !isLoopback(host) {
		return fmt.Errorf("--http %q is not a loopback address: use 127.0.0.1 or localhost, or pass --allow-remote (with --token)", o.httpAddr)
	}
	logger := slog.New(slog.NewTextHandler(c.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	mux, mcpHTTP := httpHandler(srv, o, logger)
	hs := &http.Server{Addr: o.httpAddr, Handler: mux, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10}
	ln, err := net.Listen("tcp", o.httpAddr)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	fmt.Fprintf(c.ErrOrStderr(), "memsnap serve: MCP over streamable HTTP at http://%s/mcp\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = mcpHTTP.Shutdown(sctx)
		_ = hs.Shutdown(sctx)
		return nil
	}
}

// httpHandler serves MCP at /mcp behind, in order: the Origin check, the bearer check when a
// token is set, and the body size limit. mcp-go's transport logs only warnings and errors
// (its info lines, such as "Delivered sampling response" for every roots/list answer, read
// as if the server sampled the client's model).
func httpHandler(srv *server.MCPServer, o serveOptions, logger *slog.Logger) (http.Handler, *server.StreamableHTTPServer) {
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	mcpHTTP := server.NewStreamableHTTPServer(srv, server.WithEndpointPath("/mcp"),
		server.WithDisableLocalhostProtection(o.allowRemote), server.WithStreamableHTTPLogger(logger))
	maxBody := int64(o.maxMessageKB) << 10
	if maxBody <= 0 {
		maxBody = tools.DefaultMaxMessageBytes
	}
	var h http.Handler = limitBody(maxBody, mcpHTTP)
	if o.token != "" {
		h = bearer(o.token, h)
	}
	h = checkOrigin(o.allowOrigins, h)
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	return mux, mcpHTTP
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// bearer rejects requests without "Authorization: Bearer token" (the scheme in any case, as
// RFC 9110 makes auth schemes case-insensitive).
func bearer(token string, next http.Handler) http.Handler {
	want := []byte(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme, cred, _ := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
		if !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(cred)), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="memsnap"`)
			http.Error(w, "missing or wrong bearer token", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// checkOrigin answers 403 to a request whose Origin header is present and neither a loopback
// origin nor one of allowed, as the MCP transport specification asks (DNS rebinding: a web page
// must not drive a local server).
func checkOrigin(allowed []string, next http.Handler) http.Handler {
	allow := map[string]bool{}
	for _, o := range allowed {
		allow[normOrigin(o)] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o := r.Header.Get("Origin"); o != "" && !loopbackOrigin(o) && !allow[normOrigin(o)] {
			if len(o) > 200 {
				o = o[:200] + "…"
			}
			http.Error(w, fmt.Sprintf("Origin %q is not allowed: memsnap accepts loopback origins (http://localhost:PORT, http://127.0.0.1:PORT) and those given with memsnap serve --allow-origin", o), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// loopbackOrigin reports whether o is an http(s) origin on a loopback host.
func loopbackOrigin(o string) bool {
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	return isLoopback(u.Hostname())
}

func normOrigin(o string) string {
	return strings.ToLower(strings.TrimSuffix(strings.TrimSpace(o), "/"))
}

// limitBody answers 413 to a request body over max bytes, read before the MCP handler sees it
// (so a chunked body without Content-Length is bounded too).
func limitBody(max int64, next http.Handler) http.Handler {
	tooLarge := func(w http.ResponseWriter) {
		http.Error(w, fmt.Sprintf("request body over memsnap's limit of %d bytes for one JSON-RPC message (memsnap serve --max-message-kb)", max), http.StatusRequestEntityTooLarge)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > max {
			tooLarge(w)
			return
		}
		if r.Body != nil && r.Body != http.NoBody {
			body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				tooLarge(w)
				return
			}
			if err != nil {
				http.Error(w, "reading the request body: "+err.Error(), http.StatusBadRequest)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		next.ServeHTTP(w, r)
	})
}
