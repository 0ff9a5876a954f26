package writer

import (
	"fmt"
	"io"
	"math"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// jsonWriter writes what Python's json.dumps writes (ensure_ascii, separators ", " and ": ",
// or indent=4 with "," and ": "), tuples as lists, every shared object expanded.
type jsonWriter struct {
	w      io.Writer
	buf    []byte // output not yet written to w
	indent bool
	stack  []jsonLevel
	err    error
	// repeats are the bytes of values that come out the same every time they are written
	// (repeat); recording > 0 while one is recorded, from recordFrom (-1: from the end of
	// the next separator, armed).
	repeats     map[repeatKey][]byte
	repeatBytes int
	recording   int
	recordFrom  int
}

// repeatKey names a repeated value: the caller's key and the nesting depth (indentation
// depends on it).
type repeatKey struct{ key, depth int }

const jsonFlushAt = 1 << 20

// maxRepeatBytes bounds the bytes kept for repeats (JSON expands a snapshot's shared frame
// lists into every record: a few thousand distinct lists, each written millions of times, is
// what they save). A variable for tests.
var maxRepeatBytes = 64 << 20

type jsonLevel struct {
	dict  bool
	items int  // values written at this level (a dict counts keys)
	inKey bool // dict: the next value is a value, not a key
}

func newJSONWriter(w io.Writer, indent bool) *jsonWriter {
	return &jsonWriter{w: w, buf: make([]byte, 0, jsonFlushAt+jsonFlushAt/4), indent: indent, repeats: map[repeatKey][]byte{}}
}

// flush writes the buffered output (not while a repeat records: its bytes must stay).
func (j *jsonWriter) flush() {
	if j.recording > 0 || len(j.buf) == 0 {
		return
	}
	if j.err == nil {
		if _, err := j.w.Write(j.buf); err != nil {
			j.err = fmt.Errorf("json writer: write: %w", err)
		}
	}
	j.buf = j.buf[:0]
}

// repeat writes the value that write writes, which is the same every time for key at this
// depth (a frames list): recorded the first time, copied after that.
func (j *jsonWriter) repeat(key int, write func()) {
	k := repeatKey{key, len(j.stack)}
	if b, ok := j.repeats[k]; ok && !j.isKey() {
		j.before()
		j.buf = append(j.buf, b...)
		return
	}
	j.recording++
	j.recordFrom = -1
	write()
	j.recording--
	if from := j.recordFrom; from >= 0 && j.err == nil && j.repeatBytes+len(j.buf)-from <= maxRepeatBytes {
		j.repeats[k] = append([]byte(nil), j.buf[from:]...)
		j.repeatBytes += len(j.buf) - from
	}
	if len(j.buf) >= jsonFlushAt {
		j.flush()
	}
}

func (j *jsonWriter) Err() error { return j.err }

func (j *jsonWriter) finish() error {
	if j.err == nil && len(j.stack) != 0 {
		j.err = fmt.Errorf("json writer: %d containers still open", len(j.stack))
	}
	j.flush()
	return j.err
}

func (j *jsonWriter) newline() {
	j.buf = append(j.buf, '\n')
	for range len(j.stack) * 4 {
		j.buf = append(j.buf, ' ')
	}
}

// before writes the separator due before the next value (or key).
func (j *jsonWriter) before() {
	j.separate()
	if j.recordFrom < 0 {
		j.recordFrom = len(j.buf) // a repeat records from here
	} else if len(j.buf) >= jsonFlushAt {
		j.flush()
	}
}

func (j *jsonWriter) separate() {
	if len(j.stack) == 0 {
		return
	}
	l := &j.stack[len(j.stack)-1]
	if l.dict && l.inKey {
		j.buf = append(j.buf, ": "...)
		l.inKey = false
		return
	}
	if l.items > 0 {
		if j.indent {
			j.buf = append(j.buf, ',')
		} else {
			j.buf = append(j.buf, ", "...)
		}
	}
	if j.indent {
		j.newline()
	}
	l.items++
	if l.dict {
		l.inKey = true
	}
}

func (j *jsonWriter) isKey() bool {
	if len(j.stack) == 0 {
		return false
	}
	l := j.stack[len(j.stack)-1]
	return l.dict && !l.inKey
}

func (j *jsonWriter) scalar(s string) {
	if j.isKey() {
		// json.dumps turns int/float/bool/None keys into strings.
		j.before()
		j.str(s)
		return
	}
	j.before()
	j.buf = append(j.buf, s...)
}

func (j *jsonWriter) None() { j.scalar("null") }
func (j *jsonWriter) Bool(b bool) {
	if b {
		j.scalar("true")
	} else {
		j.scalar("false")
	}
}
func (j *jsonWriter) Int(v int64)       { j.scalar(strconv.FormatInt(v, 10)) }
func (j *jsonWriter) Uint(v uint64)     { j.scalar(strconv.FormatUint(v, 10)) }
func (j *jsonWriter) BigInt(v *big.Int) { j.scalar(v.String()) }
func (j *jsonWriter) Float(f float64)   { j.scalar(pyFloatRepr(f)) }

// pyFloatRepr formats f like Python's float.__repr__ (as json.dumps does).
func pyFloatRepr(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64)
	i := strings.LastIndexByte(e, 'e')
	exp, _ := strconv.Atoi(e[i+1:])
	if exp < -4 || exp >= 16 {
		return e
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s
}

func (j *jsonWriter) Str(s string) {
	j.before()
	j.str(s)
}
func (j *jsonWriter) SharedStr(s string)    { j.Str(s) }
func (j *jsonWriter) StrAs(_ any, s string) { j.Str(s) }
func (j *jsonWriter) Ref(any) bool          { return false }
func (j *jsonWriter) Raw(...byte) {
	if j.err == nil {
		j.err = fmt.Errorf("json writer: raw pickle bytes cannot be written as JSON")
	}
}

func (j *jsonWriter) str(s string) {
	b := append(j.buf, '"')
	// Plain ASCII, the usual string, is copied as it is; escaping starts at the first byte
	// that needs it.
	i := 0
	for i < len(s) && s[i] >= 0x20 && s[i] < 0x7f && s[i] != '"' && s[i] != '\\' {
		i++
	}
	b = append(b, s[:i]...)
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		i += n
		switch {
		case r == '"':
			b = append(b, '\\', '"')
		case r == '\\':
			b = append(b, '\\', '\\')
		case r == '\n':
			b = append(b, '\\', 'n')
		case r == '\r':
			b = append(b, '\\', 'r')
		case r == '\t':
			b = append(b, '\\', 't')
		case r == '\b':
			b = append(b, '\\', 'b')
		case r == '\f':
			b = append(b, '\\', 'f')
		case r < 0x20 || (r >= 0x7f && r < 0x10000):
			b = fmt.Appendf(b, "\\u%04x", r)
		case r >= 0x10000:
			r1, r2 := utf16.EncodeRune(r)
			b = fmt.Appendf(b, "\\u%04x\\u%04x", r1, r2)
		default:
			b = append(b, byte(r))
		}
	}
	j.buf = append(b, '"')
}

func (j *jsonWriter) open(dict bool, c byte) {
	if j.isKey() && j.err == nil {
		j.err = fmt.Errorf("json writer: a container cannot be a dict key")
		return
	}
	j.before()
	j.buf = append(j.buf, c)
	j.stack = append(j.stack, jsonLevel{dict: dict})
}

func (j *jsonWriter) close(dict bool, c byte) {
	if len(j.stack) == 0 || j.stack[len(j.stack)-1].dict != dict {
		if j.err == nil {
			j.err = fmt.Errorf("json writer: unbalanced %c", c)
		}
		return
	}
	l := j.stack[len(j.stack)-1]
	j.stack = j.stack[:len(j.stack)-1]
	if j.indent && l.items > 0 {
		j.newline()
	}
	j.buf = append(j.buf, c)
}

func (j *jsonWriter) StartDict(_ any, _ int)  { j.open(true, '{') }
func (j *jsonWriter) StartList(_ any, _ int)  { j.open(false, '[') }
func (j *jsonWriter) StartTuple(_ any, _ int) { j.open(false, '[') }
func (j *jsonWriter) Next()                   {}
func (j *jsonWriter) EndDict()                { j.close(true, '}') }
func (j *jsonWriter) EndList()                { j.close(false, ']') }
func (j *jsonWriter) EndTuple()               { j.close(false, ']') }
