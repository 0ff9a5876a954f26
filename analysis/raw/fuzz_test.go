package raw

import (
	"encoding/json"
	"errors"
	"testing"
)

// FuzzRead reads any section string with any paging options, as an agent may send them to the
// read-raw-section tool: a bad request is an *Error that says what is accepted, never a panic,
// and an answer renders and marshals.
func FuzzRead(f *testing.F) {
	for _, sec := range []string{"segments", "segments[1].blocks[10:20]", "device_traces[0][3:]", "stacks[2]", "device_traces[1]",
		"segments[0].blocks[:]", "allocator_settings", "external_annotations", "capabilities", "format", "stacks[99999999999999999999]"} {
		f.Add(sec, 0, 0, 0, 0)
	}
	f.Add("segments[1].blocks", 5, 3, 200, 2)
	f.Add("device_traces[0][2:9]", -1, -4, -100, -2)
	s := testSnap()
	f.Fuzz(func(t *testing.T, section string, offset, limit, maxBytes, maxFrames int) {
		r, err := Read(s, section, Options{Offset: offset, Limit: limit, MaxBytes: maxBytes, MaxFrames: maxFrames})
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Msg == "" {
				t.Fatalf("%q: error %T %v, want a *raw.Error", section, err, err)
			}
			return
		}
		if _, err := json.Marshal(r); err != nil {
			t.Fatalf("%q: %v", section, err)
		}
		_ = r.Text()
	})
}
