package tools

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// roots decides which files the server may read: the configured roots plus, when
// clientRootsOn (serve --client-roots), per session the client's MCP roots.
type roots struct {
	static        []string // absolute, symlinks resolved
	clientRootsOn bool
	// written holds the roots as given, absolute but through their symlinks (macOS's /tmp is
	// /private/tmp): a path the agent writes under one passes the first, lexical check; the
	// file it names must still lie under a resolved root.
	written []string
	// writtenReal[i] is written[i] resolved (one of static).
	writtenReal []string

	mu      sync.Mutex
	session map[string][]string // session id -> client roots (resolved)
}

func newRoots(dirs []string) (*roots, error) {
	if len(dirs) == 0 {
		wd, err := os.Getwd()
		if err != nil {
			return nil, fmt.Errorf("roots: working directory: %w", err)
		}
		dirs = []string{wd}
	}
	r := &roots{session: map[string][]string{}}
	for _, d := range dirs {
		abs, err := resolveDir(d)
		if err != nil {
			return nil, fmt.Errorf("root %s: %w", d, err)
		}
		r.static = append(r.static, abs)
		if w, err := filepath.Abs(d); err == nil && w != abs {
			r.written = append(r.written, w)
			r.writtenReal = append(r.writtenReal, abs)
		}
	}
	return r, nil
}

func resolveDir(d string) (string, error) {
	abs, err := filepath.Abs(d)
	if err != nil {
		return "", err
	}
	res, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", err
	}
	st, err := os.Stat(res)
	if err != nil {
		return "", err
	}
	if !st.IsDir() {
		return "", errors.New("not a directory")
	}
	return res, nil
}

// forget drops a session's client roots (on roots/list_changed or when the session ends).
func (r *roots) forget(sessionID string) {
	r.mu.Lock()
	delete(r.session, sessionID)
	r.mu.Unlock()
}

// clientRoots asks the client for its roots once per session (if it declared the capability and
// the server was started with --client-roots).
func (r *roots) clientRoots(ctx context.Context) []string {
	if !r.clientRootsOn {
		return nil
	}
	sess := server.ClientSessionFromContext(ctx)
	srv := server.ServerFromContext(ctx)
	if sess == nil || srv == nil {
		return nil
	}
	info, ok := sess.(server.SessionWithClientInfo)
	if !ok || info.GetClientCapabilities().Roots == nil {
		return nil
	}
	id := sess.SessionID()
	r.mu.Lock()
	got, ok := r.session[id]
	r.mu.Unlock()
	if ok {
		return got
	}
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := srv.RequestRoots(qctx, mcp.ListRootsRequest{})
	dirs := []string{}
	if err == nil && res != nil {
		for _, root := range res.Roots {
			if p, ok := fileURIPath(root.URI); ok {
				if d, err := resolveDir(p); err == nil {
					dirs = append(dirs, d)
				}
			}
		}
	}
	if err == nil { // a failed request is retried on the next call
		r.mu.Lock()
		r.session[id] = dirs
		r.mu.Unlock()
	}
	return dirs
}

func fileURIPath(uri string) (string, bool) {
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "file" {
		return "", false
	}
	p := u.Path
	if runtime.GOOS == "windows" {
		p = strings.TrimPrefix(p, "/")
	}
	return filepath.FromSlash(p), p != ""
}

// all returns every root allowed for this call.
func (r *roots) all(ctx context.Context) []string {
	return append(append([]string{}, r.static...), r.clientRoots(ctx)...)
}

// within reports whether p (absolute, clean) lies inside dir.
func within(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// maxEchoedPath caps a path quoted back to the agent in an error.
const maxEchoedPath = 300

// resolve turns the path an agent gave into an absolute path under an allowed root, or an
// error message telling the agent what to do.
func (r *roots) resolve(ctx context.Context, path, field string) (string, error) {
	if strings.TrimSpace(path) == "" {
		return "", userErrorf("%s is empty: give the path of a snapshot file (absolute, or relative to %s)", field, r.static[0])
	}
	arg := clip(path, maxEchoedPath) // as echoed in errors
	allowed := r.all(ctx)
	p := path
	if strings.HasPrefix(p, "file://") {
		if fp, ok := fileURIPath(p); ok {
			p = fp
		}
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(r.static[0], p)
	}
	p = filepath.Clean(p)
	outside := func() error {
		return userErrorf("%s %q is outside the directories this server may read (%s). Give a path under one of them, or restart `memsnap serve` with --root DIR for the directory that holds the snapshot",
			field, arg, clip(strings.Join(allowed, ", "), 2*maxEchoedPath))
	}
	// First as written (no file system access for a path outside every root), then link by
	// link: a link whose target lies outside every root gets the same answer whatever the
	// target is (missing, a file, a directory), before anything about it is looked at.
	if !underAny(p, allowed) && !underAny(p, r.written) {
		return "", outside()
	}
	real, err := r.walk(p, allowed)
	switch {
	case errors.Is(err, errOutside):
		return "", outside()
	case errors.Is(err, os.ErrNotExist):
		return "", userErrorf("%s %q: no such file. Check the path (relative paths are resolved against %s); list the directory to find the snapshot (.pickle, .pkl, .json, .gz)", field, arg, r.static[0])
	case err != nil:
		return "", userErrorf("%s %q: %v", field, arg, clip(err.Error(), maxEchoedPath))
	}
	return real, nil
}

// errOutside is a path whose resolution leaves the roots.
var errOutside = errors.New("outside the roots")

// maxLinks bounds the symbolic links one resolution follows (as Linux's ELOOP does at 40).
const maxLinks = 40

// walk resolves p (absolute, clean, lexically under a root or a root as written) component by
// component from the root that holds it, with Lstat and Readlink only: every path it looks at
// lies under an allowed root, and a link pointing outside them is errOutside before its
// target is touched.
func (r *roots) walk(p string, allowed []string) (string, error) {
	cur, rest := "", ""
	for _, d := range allowed {
		if within(p, d) && len(d) > len(cur) {
			cur = d
		}
	}
	if cur == "" {
		for i, w := range r.written {
			if within(p, w) {
				cur, p = r.writtenReal[i], filepath.Join(r.writtenReal[i], strings.TrimPrefix(p, w))
				break
			}
		}
	}
	if cur == "" {
		return "", errOutside
	}
	rest = strings.TrimPrefix(strings.TrimPrefix(p, cur), string(filepath.Separator))
	links := 0
	for rest != "" {
		var c string
		c, rest, _ = strings.Cut(rest, string(filepath.Separator))
		switch c {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			if !underAny(cur, allowed) {
				return "", errOutside
			}
			continue
		}
		next := filepath.Join(cur, c)
		st, err := os.Lstat(next)
		if err != nil {
			return "", err
		}
		if st.Mode()&os.ModeSymlink == 0 {
			if rest != "" && !st.IsDir() {
				return "", fmt.Errorf("%s is not a directory", filepath.Base(next))
			}
			cur = next
			continue
		}
		if links++; links > maxLinks {
			return "", fmt.Errorf("more than %d symbolic links", maxLinks)
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(cur, target)
		}
		target = filepath.Clean(target)
		root := ""
		for _, d := range allowed {
			if within(target, d) && len(d) > len(root) {
				root = d
			}
		}
		if root == "" {
			return "", errOutside
		}
		cur = root
		rest = filepath.Join(strings.TrimPrefix(strings.TrimPrefix(target, root), string(filepath.Separator)), rest)
	}
	if !underAny(cur, allowed) {
		return "", errOutside
	}
	return cur, nil
}

func underAny(p string, dirs []string) bool {
	for _, d := range dirs {
		if within(p, d) {
			return true
		}
	}
	return false
}
