// Package realsnaps finds the real snapshots that tests and the eval suite read in place: 19
// files from public repositories with an expert answer key each, kept outside the repository.
// The folder is the one MEMSNAP_REAL_SNAPSHOTS names, else ../shared/snapshots/real beside the
// repository's root. Without it the tests that need it skip (package realtest).
package realsnaps

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// EnvVar names the environment variable that points at the folder.
const EnvVar = "MEMSNAP_REAL_SNAPSHOTS"

// SuitePrefix is how the eval suite names the folder, relative to the repository's root.
const SuitePrefix = "../shared/snapshots/real/"

// Dir returns the folder of real snapshots (absolute), or "" when it is absent.
func Dir() string {
	d := Where()
	if st, err := os.Stat(d); err != nil || !st.IsDir() {
		return ""
	}
	return d
}

// Where returns where the folder is looked for (absolute), present or not: the folder that
// MEMSNAP_REAL_SNAPSHOTS names, else ../shared/snapshots/real beside the repository.
func Where() string {
	d := os.Getenv(EnvVar)
	if d == "" {
		d = filepath.Join(repoRoot(), filepath.FromSlash(SuitePrefix))
	}
	if abs, err := filepath.Abs(d); err == nil {
		return abs
	}
	return d
}

// repoRoot is the repository's root, from this file's place in it.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(filepath.Dir(file)))
}

// Rewrite maps a suite path under SuitePrefix (relative to root) into the folder that
// MEMSNAP_REAL_SNAPSHOTS names; other paths, or any path when the variable is unset, are
// returned as they are.
func Rewrite(path string) string {
	d := os.Getenv(EnvVar)
	if d == "" {
		return path
	}
	if rest, ok := strings.CutPrefix(filepath.ToSlash(path), SuitePrefix); ok {
		return filepath.Join(d, filepath.FromSlash(rest))
	}
	return path
}

// Absent says where the real snapshots were looked for and how to point at them.
func Absent() string {
	return fmt.Sprintf("the real snapshots are not in %s (set %s=DIR to point at their folder)", Where(), EnvVar)
}
