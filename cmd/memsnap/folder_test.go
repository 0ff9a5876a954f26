package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis"
)

// copyInto copies fixture files into dir under new names (new name → fixture path).
func copyInto(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, from := range files {
		data, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func folderJSON(t *testing.T, out string) analysis.Summary {
	t.Helper()
	var s analysis.Summary
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	return s
}

// TestFolderTruncatedRank: a rank cut short (its process killed at the OOM) is flagged in the
// text and in files[].error, the other ranks are summarized, and the exit status is 2; check on
// the folder exits 2 too, never 1.
func TestFolderTruncatedRank(t *testing.T) {
	dir := t.TempDir()
	rank := scenarioDir + "multirank/rank%d.pickle"
	copyInto(t, dir, map[string]string{"rank0.pickle": strings.Replace(rank, "%d", "0", 1), "rank1.pickle": strings.Replace(rank, "%d", "1", 1), "rank2.pickle": strings.Replace(rank, "%d", "2", 1)})
	whole, _ := os.ReadFile(strings.Replace(rank, "%d", "3", 1))
	os.WriteFile(filepath.Join(dir, "rank3.pickle"), whole[:10000], 0o644)
	bad := filepath.Join(dir, "rank3.pickle")
	wantErr := dir + ": 1 of 4 files could not be read (rank3.pickle): the others are summarized above"

	text, err := run(t, "summarize", dir)
	if err == nil || oneLine(err) != wantErr || exitCode(err) != 2 {
		t.Fatalf("err %v, want %q (exit 2)", err, wantErr)
	}
	lines := strings.Split(text, "\n")
	if want := "not read: " + bad + ": corrupt pickle: truncated: needed 23 more bytes (at byte 9986)"; lines[1] != want {
		t.Errorf("second line %q, want %q", lines[1], want)
	}
	for _, w := range []string{"rank 0 (rank0.pickle): reserved 124 MiB", "rank 1 (rank1.pickle): reserved 1.6 GiB", "rank 2 (rank2.pickle): reserved 124 MiB",
		"1 of 4 files could not be read and are left out of everything above (see files[].error)"} {
		if !strings.Contains(text, w) {
			t.Errorf("text lacks %q:\n%s", w, text)
		}
	}
	js, err := run(t, "summarize", dir, "--json")
	if err == nil || exitCode(err) != 2 {
		t.Fatalf("--json: err %v", err)
	}
	s := folderJSON(t, js[:strings.LastIndex(js, "}")+1])
	if len(s.Files) != 4 || len(s.Ranks) != 3 || s.Files[3].File != bad || s.Files[3].Rank != 3 || s.Files[3].Capabilities != nil ||
		!strings.Contains(s.Files[3].Error, "truncated") || s.Files[0].Error != "" || s.Files[0].Capabilities == nil || !s.Files[0].Capabilities.HasTrace ||
		s.Totals == nil || s.Totals.ReservedBytes != 2000683008 || !s.Capabilities.HasTrace {
		t.Errorf("files %+v ranks %d totals %+v", s.Files, len(s.Ranks), s.Totals)
	}
	if _, err := run(t, "check", dir, "--max-peak", "1KiB"); err == nil || exitCode(err) != 2 {
		t.Errorf("check on the folder: %v (exit %d), want exit 2", err, exitCode(err))
	}
}

// TestFolderUnrelatedFiles: files that are not ranks of one job (one with a trace, one state
// only) keep their own capabilities: the traced file's peaks are printed; the note saying they
// are unrelated comes first; totals are null with the reason, and has_trace means some file
// has a trace.
func TestFolderUnrelatedFiles(t *testing.T) {
	dir := t.TempDir()
	copyInto(t, dir, map[string]string{"a.pickle": scenarioDir + "summarize_basic.pickle", "b.pickle": scenarioDir + "summarize_basic_segment_list.pickle"})
	text, err := run(t, "summarize", dir)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(text, "\n")
	if !strings.HasPrefix(lines[1], "the 2 files are not taken as the ranks of one job: their names carry no rank each (a.pickle, b.pickle) and b.pickle has no timed trace") ||
		lines[2] != "total: not summed: the 2 files are not the ranks of one job" || strings.Count(text, "not taken as the ranks") != 1 {
		t.Errorf("the note and the totals do not come first:\n%s", text)
	}
	if !strings.Contains(text, "peak allocated 115 MiB") || strings.Contains(text, "not a trace (state only): no peak\n  ") {
		t.Errorf("the traced file lost its peaks:\n%s", text)
	}
	js, err := run(t, "summarize", dir, "--json")
	if err != nil {
		t.Fatal(err)
	}
	s := folderJSON(t, js)
	if s.Totals != nil || s.TotalsNote == "" || !s.SeparateFiles || !s.Capabilities.HasTrace || len(s.Files) != 2 ||
		!s.Files[0].Capabilities.HasTrace || s.Files[1].Capabilities.HasTrace {
		t.Errorf("totals %+v (%q) files %+v has_trace %v", s.Totals, s.TotalsNote, s.Files, s.Capabilities.HasTrace)
	}
	if !strings.Contains(js, `"totals": null`) {
		t.Error(`--json lacks "totals": null`)
	}
}

// TestFolderOfSymlinks: the command line reads a folder of symbolic links to rank files as it
// reads the files themselves.
func TestFolderOfSymlinks(t *testing.T) {
	dir := t.TempDir()
	for i := range 4 {
		abs, err := filepath.Abs(scenarioDir + "multirank/rank" + string(rune('0'+i)) + ".pickle")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(abs, filepath.Join(dir, "rank"+string(rune('0'+i))+".pickle")); err != nil {
			t.Skip("no symbolic links here:", err)
		}
	}
	linked, err := run(t, "summarize", dir, "--json")
	if err != nil {
		t.Fatal(err)
	}
	direct, err := run(t, "summarize", scenarioDir+"multirank", "--json")
	if err != nil {
		t.Fatal(err)
	}
	a, b := folderJSON(t, linked), folderJSON(t, direct)
	if len(a.Ranks) != 4 || *a.Totals != *b.Totals {
		t.Errorf("links: %d ranks, totals %+v; the files: %+v", len(a.Ranks), a.Totals, b.Totals)
	}
}
