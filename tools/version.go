package tools

import (
	"runtime/debug"
	"strings"
)

// Version is memsnap's version, bumped with each release. A build also names the VCS revision
// it came from when Go embedded one (see BuildVersion).
const Version = "0.1.0"

// BuildVersion describes the running binary: Version, then in parentheses the module version
// when go install fetched a published one, and the VCS revision with "modified" for a tree with
// uncommitted changes, or "built without VCS information" when Go embedded none (-buildvcs=false,
// a build outside a repository), e.g. "0.1.0 (rev 54ef69f1a2b3, modified)".
func BuildVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return Version + " (built without VCS information)"
	}
	return versionOf(info)
}

// versionOf renders a build's version (see BuildVersion).
func versionOf(info *debug.BuildInfo) string {
	var parts []string
	module := info.Main.Version
	if module != "" && module != "(devel)" {
		parts = append(parts, "module "+module)
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
	if len(rev) > 12 {
		rev = rev[:12]
	}
	switch {
	case rev == "" && module != "" && module != "(devel)":
		// A published module version names its source; nothing more to say.
	case rev == "":
		parts = append(parts, "built without VCS information")
	case strings.HasSuffix(strings.TrimSuffix(module, "+dirty"), rev):
		// A pseudo-version already names the revision (v0.0.0-20261130-54ef69f1a2b3).
		if modified && !strings.HasSuffix(module, "+dirty") {
			parts = append(parts, "modified")
		}
	default:
		r := "rev " + rev
		if modified {
			r += ", modified"
		}
		parts = append(parts, r)
	}
	if len(parts) == 0 {
		return Version
	}
	return Version + " (" + strings.Join(parts, ", ") + ")"
}
