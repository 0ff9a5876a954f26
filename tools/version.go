package tools

import (
	"runtime/debug"
	"strings"
)

// BuildVersion describes the running binary from its build information: the module version
// ("(devel)" for a build from a clone, a pseudo-version or tag for go install), then the VCS
// revision and whether the tree had uncommitted changes, e.g. "(devel) rev 54ef69f1a2b3, modified".
func BuildVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "(devel)"
	}
	return versionOf(info)
}

// versionOf renders a build's version (see BuildVersion).
func versionOf(info *debug.BuildInfo) string {
	v := info.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev string
	modified := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev == "" {
		return v
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	// A pseudo-version already names the revision (v0.0.0-20261130-54ef69f1a2b3).
	if strings.HasSuffix(strings.TrimSuffix(v, "+dirty"), rev) {
		if modified && !strings.HasSuffix(v, "+dirty") {
			return v + ", modified"
		}
		return v
	}
	v += " rev " + rev
	if modified {
		v += ", modified"
	}
	return v
}
