//go:build unix

package load

import (
	"context"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestSpecialFilesRefused: a named pipe (with no writer: opening it for reading would block)
// and a device are refused at once, with the reason.
func TestSpecialFilesRefused(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "snapshot.pickle")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	for path, want := range map[string]string{
		fifo:        fifo + ": is a named pipe (FIFO), not a regular file: pipe it to standard input with '-' instead",
		"/dev/null": "/dev/null: is a device, not a regular file",
	} {
		done := make(chan error, 1)
		go func() {
			_, err := File(context.Background(), path, Options{})
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || err.Error() != want {
				t.Errorf("error %v, want %q", err, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: File blocked", path) // the goroutine stays blocked: fail loudly
		}
	}
}
