package main

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeAtomic streams into a temporary file and links it into place only when the whole
// output is written: an error of the encoder's leaves neither the file nor the temporary one.
func TestWriteAtomic(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.pickle")
	chunk := strings.Repeat("x", 1<<16)
	n, err := writeAtomic(out, false, func(w io.Writer) error {
		for range 40 { // 2.5 MiB: more than the 1 MiB buffer, so it reaches the file in pieces
			if _, err := io.WriteString(w, chunk); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil || n != 40<<16 {
		t.Fatalf("writeAtomic: %d bytes, %v; want %d, nil", n, err, 40<<16)
	}
	if st, err := os.Stat(out); err != nil || st.Size() != 40<<16 || st.Mode().Perm() != 0o644 {
		t.Fatalf("output: %v %v", st, err)
	}
	if _, err := writeAtomic(out, false, func(io.Writer) error { return nil }); err == nil || !strings.Contains(err.Error(), "exists; pass --force") {
		t.Errorf("existing file without overwrite: %v", err)
	}
	failed := errors.New("encode snapshot: boom")
	other := filepath.Join(dir, "other.json")
	if _, err := writeAtomic(other, true, func(w io.Writer) error {
		io.WriteString(w, chunk)
		return failed
	}); !errors.Is(err, failed) || err.Error() != failed.Error() {
		t.Errorf("the encoder's error: got %v, want it unchanged", err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 || ents[0].Name() != "out.pickle" {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("after a failed write the folder holds %v, want only out.pickle", names)
	}
	if _, err := writeAtomic(filepath.Join(dir, "no", "such", "dir.pickle"), true, func(io.Writer) error { return nil }); err == nil || !strings.HasPrefix(err.Error(), "cannot write "+filepath.Join(dir, "no", "such", "dir.pickle")) {
		t.Errorf("unwritable path: %v", err)
	}
}

// A failed write of the file reaches the encoder (its next writes fail) and close still
// returns: the chunks go out on another goroutine.
func TestWriteBehindFailure(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "x")
	if err != nil {
		t.Fatal(err)
	}
	f.Close() // every write now fails
	fw := &fileWriter{f: f}
	w := newWriteBehind(fw)
	chunk := make([]byte, 1<<16)
	var werr error
	for i := 0; i < 200 && werr == nil; i++ { // 12.5 MiB: the error must surface well before
		_, werr = w.Write(chunk)
	}
	w.close()
	if werr == nil || fw.err() == nil || !errors.Is(werr, os.ErrClosed) {
		t.Errorf("writes after a failure: %v (file: %v), want the file's error", werr, fw.err())
	}
	if fw.n != 0 {
		t.Errorf("%d bytes counted as written", fw.n)
	}
}
