package pickle

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
)

// FuzzDecode: the decoder never panics on arbitrary bytes and fails only with *Error (or a
// context error), whatever lengths, memo indexes or nesting the input claims.
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		"\x80\x04}\x8c\x08segments]s.",
		"\x80\x04](}(\x8c\x06action\x8c\x05alloc\x8c\x04size\x4b\x10ua.",
		"\x80\x04](}(\x8c\x08filename\x8c\x02??\x8c\x04line\x4b\x00\x8c\x04name\x8c\x01f\x94ua\x94h\x01.",
		"\x80\x02ctorch.jit._pickle\nrestore_type_tag\nq\x00}q\x01X\x04\x00\x00\x00dictq\x02\x86q\x03R.",
		"\x80\x04\x8a\x09\xff\xff\xff\xff\xff\xff\xff\xff\x00.",
		"\x80\x04r\xff\xff\xff\xffh\x00.",
	} {
		f.Add([]byte(seed))
	}
	fixtures, _ := filepath.Glob("../../testdata/*/*")
	for _, path := range fixtures {
		if data, err := os.ReadFile(path); err == nil && len(data) < 256<<10 && len(data) > 0 && data[0] == 0x80 {
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := Decode(context.Background(), bytes.NewReader(data), Options{MaxEvents: 3})
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error of type %T: %v", err, err)
			}
		}
	})
}

// TestEventListsShareOneReservation: with a size hint, only the list being filled keeps spare
// capacity; a finished device trace is trimmed when the next one starts.
func TestEventListsShareOneReservation(t *testing.T) {
	event := "}(\x8c\x06action\x8c\x05alloc\x8c\x04size\x4b\x10u"
	data := []byte("\x80\x04](" + "](" + event + "e" + "](" + event + event + "e" + "e.")
	res, err := Decode(context.Background(), bytes.NewReader(data), Options{SizeHint: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	lists := res.Root.([]any)
	first, second := lists[0].(EventList), lists[1].(EventList)
	if len(first.Events) != 1 || cap(first.Events) != 1 || len(second.Events) != 2 || cap(second.Events) < 1<<20 {
		t.Fatalf("first %d/%d, second %d/%d", len(first.Events), cap(first.Events), len(second.Events), cap(second.Events))
	}
}
