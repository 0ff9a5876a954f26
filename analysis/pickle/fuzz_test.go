package pickle

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// FuzzDecode: the decoder never panics on arbitrary bytes and fails only with *Error (or a
// context error), whatever lengths, memo indexes or nesting the input claims; and it stays
// within the resource bounds (checkBounds): heap allocated per byte read, memo size, tree
// values, and time linear in the input. An input that amplifies is a crasher.
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
	// The event fast path's batches (see TestFastEventsMatchSlowPath): the stream decode
	// never takes it, so sameAsStream compares it with the slow path.
	pad := strings.Repeat("N", 32)
	for _, batch := range []string{feEvent + feEvent, feEvent + feSlow + feEvent, feEvent + feEvent + "0", feEvent + "h\x06"} {
		f.Add([]byte(feHead + "(" + batch + "e." + pad))
	}
	f.Add([]byte(feHead2 + "(" + feFresh + feFresh + "e." + pad))
	fixtures, _ := filepath.Glob("../../testdata/*/*")
	for _, path := range fixtures {
		if data, err := os.ReadFile(path); err == nil && len(data) < 256<<10 && len(data) > 0 && data[0] == 0x80 {
			f.Add(data)
		}
	}
	for _, seed := range []string{ // the shapes of the resource-exhaustion report
		"\x80\x04}\x8c\x08segments]s\x8c\x01x]" + strings.Repeat("2\x86", 24) + "s.",
		"\x80\x04](\x8b\x00\x01\x00\x00" + strings.Repeat("\x7f", 256) + "\x94" + strings.Repeat("h\x00", 100) + "e.",
		"\x80\x04" + strings.Repeat("]", 1000) + strings.Repeat("a", 999) + ".",
		"\x80\x04N" + strings.Repeat("r\xff\x0f\x00\x00", 100) + ".",
		"(lp0\nI01\naL12345678901234567890123L\naF0.5\naS'a\\n'\naV\\u00e9\naa.",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		start := time.Now()
		res, st, alloc, err := decodeMeasured(t, data, Options{MaxEvents: 3})
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error of type %T: %v", err, err)
			}
		}
		checkBounds(t, st, alloc)
		sameAsStream(t, data, Options{MaxEvents: 3}, res, err)
		if elapsed, limit := time.Since(start), 5*time.Second+time.Duration(len(data))*5*time.Microsecond; elapsed > limit {
			t.Fatalf("%d bytes took %v (limit %v)", len(data), elapsed, limit)
		}
	})
}

// TestEventReservationFollowsBytesRead: an event list's capacity follows the bytes read so
// far, never a size given from outside; a finished device trace is trimmed when the next one
// starts, so only the list being filled keeps spare capacity.
func TestEventReservationFollowsBytesRead(t *testing.T) {
	event := "}(\x8c\x06action\x8c\x05alloc\x8c\x04size\x4b\x10u"
	pad := "\x8e" + string(binary.LittleEndian.AppendUint64(nil, 8<<20)) + strings.Repeat("x", 8<<20) + "0" // 8 MiB read, then POPped
	data := []byte("\x80\x04" + pad + "](" + "](" + event + "e" + "](" + strings.Repeat(event, 2000) + "e" + "e.")
	res, err := Decode(context.Background(), bytes.NewReader(data), Options{})
	if err != nil {
		t.Fatal(err)
	}
	lists := res.Root.([]any)
	first, second := lists[0].(EventList), lists[1].(EventList)
	if len(first.Events) != 1 || cap(first.Events) != 1 || len(second.Events) != 2000 {
		t.Fatalf("first %d/%d, second %d/%d", len(first.Events), cap(first.Events), len(second.Events), cap(second.Events))
	}
	// 8 MiB read when the second list started: room for four times the events 8 MiB could hold.
	if c := cap(second.Events); c < 4*(8<<20)/minEventBytes || c > 4*(9<<20)/minEventBytes {
		t.Fatalf("second list capacity %d, want about %d", c, 4*(8<<20)/minEventBytes)
	}
}

// sameInPlace: decoding the input in place (DecodeBytes, as a mapped file is read) gives
// exactly what decoding it as a stream gives, the same value or the same error, and leaves the
// input as it was.
func sameInPlace(t *testing.T, data []byte, opt Options) {
	t.Helper()
	stream, err := Decode(context.Background(), bytes.NewReader(data), opt)
	sameAsStream(t, data, opt, stream, err)
}

// sameAsStream is sameInPlace given the stream's decode (its result and error).
func sameAsStream(t *testing.T, data []byte, opt Options, stream *Result, err1 error) {
	t.Helper()
	in := bytes.Clone(data)
	inPlace, err2 := DecodeBytes(context.Background(), in, opt)
	if !bytes.Equal(in, data) {
		t.Fatal("DecodeBytes changed its input")
	}
	if fmt.Sprint(err1) != fmt.Sprint(err2) {
		t.Fatalf("stream error %v, in place %v", err1, err2)
	}
	if err1 != nil {
		return
	}
	a, b := *stream, *inPlace
	a.Stats, b.Stats = Stats{}, Stats{}
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("in place decodes differently:\nstream   %#v\nin place %#v", stream.Root, inPlace.Root)
	}
}

// TestInPlaceMatchesStream runs sameInPlace on the fixtures and on inputs longer than the
// stream decoder's buffer (a string longer than it, a pickle cut inside one).
func TestInPlaceMatchesStream(t *testing.T) {
	fixtures, _ := filepath.Glob("../../testdata/*/*")
	for _, path := range fixtures {
		if data, err := os.ReadFile(path); err == nil && len(data) > 0 && data[0] == 0x80 {
			sameInPlace(t, data, Options{})
		}
	}
	long := "\x80\x04X" + u32(bufSize+10) + strings.Repeat("s", bufSize+10) + "."
	sameInPlace(t, []byte(long), Options{})
	sameInPlace(t, []byte(long[:bufSize]), Options{})
	res, err := DecodeBytes(context.Background(), []byte(long), Options{})
	if err != nil || len(res.Root.(string)) != bufSize+10 {
		t.Fatalf("long string: %v", err)
	}
}
