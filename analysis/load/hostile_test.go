package load

import (
	"bytes"
	"context"
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
