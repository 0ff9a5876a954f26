package evals

import (
	"context"
	"fmt"
	"os"

	"github.com/memsnap/memsnap/internal/realsnaps"
	"github.com/memsnap/memsnap/tools"
)

// Roots are the directories the server may read for the suite: its root and every extra root
// that exists (../shared is absent on machines without the real snapshots).
func (s *Suite) Roots() []string {
	roots := []string{s.Root}
	if os.Getenv(realsnaps.EnvVar) != "" {
		if d := realsnaps.Dir(); d != "" {
			roots = append(roots, d) // the real snapshots, moved (RunCase rewrites their paths)
		}
	}
	for _, r := range s.ExtraRoots {
		if st, err := os.Stat(r); err == nil && st.IsDir() {
			roots = append(roots, r)
		}
	}
	return roots
}

// NewServerCaller starts memsnap's real MCP server (package tools) with the suite's roots and
// connects an in-process client to it. Close the caller when done.
func NewServerCaller(ctx context.Context, s *Suite) (*MCPCaller, error) {
	srv, err := tools.NewServer(tools.Config{Roots: s.Roots()})
	if err != nil {
		return nil, fmt.Errorf("eval: start the MCP server: %w", err)
	}
	return NewMCPCaller(ctx, srv)
}

// RunFile loads a suite file and runs its cases (whose names contain filter) through the real
// MCP server.
func RunFile(ctx context.Context, file, filter string) (*Report, error) {
	s, err := Load(file)
	if err != nil {
		return nil, err
	}
	c, err := NewServerCaller(ctx, s)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return Run(ctx, s, c, filter)
}
