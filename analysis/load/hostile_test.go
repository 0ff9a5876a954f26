package load

import (
	"bytes"
	"context"
	"runtime"
	"strings"
	"testing"
)

// loadBytes loads data as the file name through Reader.
func loadBytes(t *testing.T, data []byte) error {
	t.Helper()
	_, err := Reader(context.Background(), bytes.NewReader(data), "x.json", int64(len(data)), Options{})
	return err
}

// TestLeadingWhitespace: valid JSON after more whitespace than one buffer peek (4 KiB and
// 1 MiB) loads; a file of whitespace alone says so.
func TestLeadingWhitespace(t *testing.T) {
	for _, n := range []int{0, 5000, 1 << 20} {
		data := []byte(strings.Repeat(" \n\t\r", n/4) + `{"segments": [], "device_traces": []}`)
		s, err := Reader(context.Background(), bytes.NewReader(data), "x.json", int64(len(data)), Options{})
		if err != nil {
			t.Fatalf("%d bytes of whitespace: %v", n, err)
		}
		if s.Format.Encoding != "json" {
			t.Errorf("%d: encoding %q", n, s.Format.Encoding)
		}
	}
	err := loadBytes(t, []byte(strings.Repeat(" ", 9000)))
	if err == nil || !strings.Contains(err.Error(), "9000 bytes of whitespace and nothing else") {
		t.Errorf("whitespace only: %v", err)
	}
	err = loadBytes(t, []byte("   \x80\x04"))
	if err == nil || !strings.Contains(err.Error(), "first byte after 3 bytes of whitespace 0x80") {
		t.Errorf("whitespace before a pickle: %v", err)
	}
}

// TestNumberNotInteger: a JSON size written with a fraction or an exponent is named as
// written.
func TestNumberNotInteger(t *testing.T) {
	for _, num := range []string{"1.5e3", "1e308", "1e999", "2.5"} {
		data := []byte(`{"segments": [{"device": 0, "address": 0, "total_size": ` + num + `, "stream": 0, "segment_type": "large", "allocated_size": 0, "active_size": 0, "requested_size": 0, "blocks": []}]}`)
		err := loadBytes(t, data)
		want := "total_size is " + num + ", not an integer"
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want %q", num, err, want)
		}
	}
}

// TestUnknownKeySkipped (F3): a top-level key memsnap does not read is skipped, not built:
// loading a file with 8 MB of junk under it grows the heap by at most 4 bytes per byte of
// junk (a decoded tree of it is about 30), and the answer is the same as without it.
func TestUnknownKeySkipped(t *testing.T) {
	var junk strings.Builder
	junk.WriteString("[")
	for i := 0; junk.Len() < 8<<20; i++ {
		if i > 0 {
			junk.WriteString(",")
		}
		junk.WriteString(`{"k":[1,"xxxxxxxxxxxxxxxxxxxx",{"a":1.5}]}`)
	}
	junk.WriteString("]")
	data := []byte(`{"segments": [], "junk": ` + junk.String() + `, "device_traces": [[]]}`)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s, err := Reader(context.Background(), bytes.NewReader(data), "junk.json", int64(len(data)), Options{})
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Segments) != 0 || len(s.DeviceTraces) != 1 {
		t.Errorf("segments %d traces %d", len(s.Segments), len(s.DeviceTraces))
	}
	if grown := int64(after.HeapSys) - int64(before.HeapSys); grown > 4*int64(junk.Len()) {
		t.Errorf("the heap grew by %d bytes for %d bytes of junk", grown, junk.Len())
	}
	// Without segments, the message still names the keys the file has.
	err = loadBytes(t, []byte(`{"junk": [1, 2], "other": {}}`))
	if err == nil || !strings.Contains(err.Error(), "no 'segments' key (keys: junk, other)") {
		t.Errorf("no segments: %v", err)
	}
}
