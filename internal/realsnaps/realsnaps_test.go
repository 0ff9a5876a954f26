package realsnaps

import (
	"path/filepath"
	"testing"
)

// TestResolver: MEMSNAP_REAL_SNAPSHOTS moves the folder, suite paths follow it, and an absent
// folder is "" with a sentence naming where it was looked for.
func TestResolver(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(EnvVar, dir)
	if Where() != dir || Dir() != dir {
		t.Errorf("Where %q Dir %q, want %q", Where(), Dir(), dir)
	}
	if got, want := Rewrite("../shared/snapshots/real/a.pickle"), filepath.Join(dir, "a.pickle"); got != want {
		t.Errorf("Rewrite: %q, want %q", got, want)
	}
	if got := Rewrite("testdata/scenarios/a.pickle"); got != "testdata/scenarios/a.pickle" {
		t.Errorf("Rewrite of a fixture: %q", got)
	}
	missing := filepath.Join(dir, "none")
	t.Setenv(EnvVar, missing)
	if Dir() != "" || Absent() != "the real snapshots are not in "+missing+" (set MEMSNAP_REAL_SNAPSHOTS=DIR to point at their folder)" {
		t.Errorf("absent: Dir %q, %q", Dir(), Absent())
	}
	t.Setenv(EnvVar, "")
	if got, want := Where(), filepath.Join(repoRoot(), "..", "shared", "snapshots", "real"); got != want {
		t.Errorf("default Where %q, want %q", got, want)
	}
	if got := Rewrite("../shared/snapshots/real/a.pickle"); got != "../shared/snapshots/real/a.pickle" {
		t.Errorf("Rewrite without the variable: %q", got)
	}
}
