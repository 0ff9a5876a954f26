package load

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// FuzzLoad feeds arbitrary bytes to the loader (pickle, JSON, gzip of either). It must never
// panic, whatever it accepts must be a well-formed model (every stack and frame id in range),
// and it must stay within the resource bounds: heap allocated per byte of (decompressed)
// input, and time linear in it. Seeds: the committed fixtures and small hand-made inputs.
func FuzzLoad(f *testing.F) {
	for _, seed := range [][]byte{minimal, gz(minimal), p4("]"), []byte(`{"segments": []}`), nested(300),
		[]byte("\x80\x02ctorch.jit._pickle\nrestore_type_tag\nq\x00}q\x01(X\x08\x00\x00\x00segmentsq\x02]q\x03uX\x04\x00\x00\x00dictq\x04\x86q\x05R.")} {
		f.Add(seed)
	}
	fixtures, _ := filepath.Glob("../../testdata/*/*")
	for _, path := range fixtures {
		if data, err := os.ReadFile(path); err == nil && len(data) < 256<<10 {
			f.Add(data)
		}
	}
	f.Add(gz(p4("}", sstr("segments"), "]s", sstr("x"), "]", strings.Repeat("2\x86", 24), "s")))
	f.Add(gz(bytes.Repeat([]byte("]"), 1<<16)))
	f.Fuzz(func(t *testing.T, data []byte) {
		n := inputSize(data)
		s, alloc, elapsed, err := loadMeasured(t, "", data, Options{MaxDecompressed: 64 << 20})
		if limit := loadAllocPerByte*uint64(n) + loadAllocSlack; alloc > limit {
			t.Fatalf("allocated %d bytes for %d bytes of input (limit %d)", alloc, n, limit)
		}
		if limit := 5*time.Second + time.Duration(n)*5*time.Microsecond; elapsed > limit {
			t.Fatalf("%d bytes took %v (limit %v)", n, elapsed, limit)
		}
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		checkModel(t, s)
	})
}

func checkModel(t *testing.T, s *snapshot.Snapshot) {
	t.Helper()
	okStack := func(id snapshot.StackID) bool { return id >= snapshot.NoStack && int(id) < len(s.Stacks) }
	for _, st := range s.Stacks {
		for _, fid := range st {
			if fid < 0 || int(fid) >= len(s.Frames) {
				t.Fatalf("frame id %d out of range", fid)
			}
		}
	}
	for _, seg := range s.Segments {
		if !okStack(seg.Stack) {
			t.Fatalf("segment stack %d out of range", seg.Stack)
		}
		for _, b := range seg.Blocks {
			if !okStack(b.Stack) || b.State == snapshot.StateUnknown {
				t.Fatalf("bad block %+v", b)
			}
		}
	}
	for _, evs := range s.DeviceTraces {
		for _, e := range evs {
			if !okStack(e.Stack) || e.Extra.Index() >= len(s.EventExtras) {
				t.Fatalf("bad event %+v", e)
			}
		}
	}
}

// inputSize is the input's size, decompressed for gzip (as far as it decompresses, up to the
// limit the fuzz target loads with): the bounds are per byte the decoder reads.
func inputSize(data []byte) int64 {
	n := int64(len(data))
	if zr, err := gzip.NewReader(bytes.NewReader(data)); err == nil {
		m, _ := io.Copy(io.Discard, io.LimitReader(zr, 64<<20+1))
		n = max(n, m)
	}
	return n
}
