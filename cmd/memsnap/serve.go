package main

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/mark3labs/mcp-go/server"
	"github.com/spf13/cobra"

	"github.com/memsnap/memsnap/tools"
)

func init() { register(newServeCmd) }

// version is reported to MCP clients; set with -ldflags "-X main.version=...".
var version = "dev"

func newServeCmd() *cobra.Command {
	var (
		httpAddr    string
		token       string
		roots       []string
		cacheMB     int64
		allowRemote bool
	)
	c := &cobra.Command{
		Use:   "serve",
		Short: "Run the MCP server (stdio by default, or streamable HTTP) for coding agents",
		Long: `serve runs memsnap as a Model Context Protocol server. Tools: summarize, top-stacks, diff,
oom-report, fragmentation, read-raw-section; prompts: diagnose-oom, find-leak, explain-memory;
resources: the usage guide and snapshot sections. It reads only files under --root
(repeatable; default the working directory) plus the client's MCP roots.
Over stdio (the default) the client starts memsnap itself. With --http it listens on a
loopback address for streamable HTTP at /mcp; --token requires "Authorization: Bearer TOKEN".`,
		Example: `  memsnap serve
  memsnap serve --root /data/snapshots --root .
  memsnap serve --http 127.0.0.1:8765 --token "$MEMSNAP_TOKEN"`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			ctx := c.Context()
			srv, err := tools.NewServer(tools.Config{Roots: roots, CacheBytes: cacheMB << 20, Version: version})
			if err != nil {
				return err
			}
			if httpAddr == "" {
				stdio := server.NewStdioServer(srv)
				stdio.SetErrorLogger(log.New(os.Stderr, "memsnap serve: ", log.LstdFlags))
				err := stdio.Listen(ctx, os.Stdin, os.Stdout)
				if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, os.ErrClosed) {
					return nil
				}
				return fmt.Errorf("serve: %w", err)
			}
			return serveHTTP(ctx, c, srv, httpAddr, token, allowRemote)
		},
	}
	c.Flags().StringVar(&httpAddr, "http", "", "serve streamable HTTP at ADDR (e.g. 127.0.0.1:8765) instead of stdio; endpoint /mcp")
	c.Flags().StringVar(&token, "token", "", "with --http: require the header Authorization: Bearer TOKEN")
	c.Flags().StringArrayVar(&roots, "root", nil, "directory whose files may be read (repeatable; default the working directory)")
	c.Flags().Int64Var(&cacheMB, "cache-mb", 4096, "memory budget of the loaded-snapshot cache in MiB")
	c.Flags().BoolVar(&allowRemote, "allow-remote", false, "with --http and --token: allow a non-loopback listen address")
	return c
}

// serveHTTP serves streamable HTTP on addr (loopback unless allowRemote) until ctx ends.
func serveHTTP(ctx context.Context, c *cobra.Command, srv *server.MCPServer, addr, token string, allowRemote bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--http %q: want HOST:PORT such as 127.0.0.1:8765: %w", addr, err)
	}
	if allowRemote && token == "" {
		return fmt.Errorf("--allow-remote needs --token: a server reachable from the network must check a bearer token")
	}
	if !allowRemote && !isLoopback(host) {
		return fmt.Errorf("--http %q is not a loopback address: use 127.0.0.1 or localhost, or pass --allow-remote (with --token)", addr)
	}
	mux, mcpHTTP := httpHandler(srv, token, allowRemote)
	hs := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	ln, err := net.Listen("tcp", addr)
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

// httpHandler serves MCP at /mcp, behind a bearer check when token is set.
func httpHandler(srv *server.MCPServer, token string, allowRemote bool) (http.Handler, *server.StreamableHTTPServer) {
	mcpHTTP := server.NewStreamableHTTPServer(srv, server.WithEndpointPath("/mcp"),
		server.WithDisableLocalhostProtection(allowRemote))
	var h http.Handler = mcpHTTP
	if token != "" {
		h = bearer(token, h)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	return mux, mcpHTTP
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// bearer rejects requests without "Authorization: Bearer token".
func bearer(token string, next http.Handler) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="memsnap"`)
			http.Error(w, "missing or wrong bearer token", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}
