// Package load opens CUDA memory snapshot files of every known form — pickle protocols 2 to 5
// (including the TorchScript writer's), JSON, either gzip-compressed, the old bare list of
// segments, PyTorch 2.0's block history — and returns the typed model. Content decides the
// form, never the file name. Directories load as one snapshot per rank, in parallel.
package load

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/klauspost/compress/gzip"
	"github.com/memsnap/memsnap/analysis/pickle"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// Options control loading.
type Options struct {
	// MaxTraceEvents, when positive, keeps only the newest N events of each device trace.
	MaxTraceEvents int
	// Progress, when set, receives bytes read so far and the total (0 when unknown).
	Progress func(done, total int64)
	// MaxDecompressed bounds how many bytes a gzip file may decompress to: 0 means
	// DefaultMaxDecompressed, a negative value no limit.
	MaxDecompressed int64
	// FollowLinks makes Dir read the files that a directory's symbolic links point to. The
	// command line reads the user's own links; the MCP server leaves it off, so that a link
	// cannot lead it out of its roots.
	FollowLinks bool
}

// DefaultMaxDecompressed is the decompressed size past which gzip input is refused. A
// snapshot of a million trace events is under 1 GiB of pickle; the limit stops a small
// compressed file (gzip expands up to 1032 times) from costing unbounded time and memory.
const DefaultMaxDecompressed int64 = 4 << 30

// ErrDecompressedLimit is wrapped by the error for gzip input that decompresses past the
// limit (Options.MaxDecompressed).
var ErrDecompressedLimit = errors.New("decompressed size limit exceeded")

// Error is a load failure: the file, what is wrong, and the byte offset for pickles (-1 when
// no offset applies; for gzip input, an offset into the decompressed stream). Err is the
// underlying error when there is one (a *pickle.Error, an I/O error, ErrDecompressedLimit).
type Error struct {
	File   string
	Offset int64
	Msg    string
	Err    error
}

func (e *Error) Error() string {
	if e.Offset >= 0 {
		return fmt.Sprintf("%s: %s (at byte %d)", e.File, e.Msg, e.Offset)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Msg)
}

// Unwrap returns the underlying error (nil when the message says it all).
func (e *Error) Unwrap() error { return e.Err }

// File loads one snapshot file; "-" reads standard input. Anything but a regular file (a
// named pipe, a socket, a device) is refused before it is opened, so a FIFO cannot block
// the caller and /dev/zero cannot feed it forever.
func File(ctx context.Context, path string, opt Options) (*snapshot.Snapshot, error) {
	if path == "-" {
		return Reader(ctx, os.Stdin, "<stdin>", 0, opt)
	}
	fail := func(msg string, err error) error { return &Error{File: path, Offset: -1, Msg: msg, Err: err} }
	st, err := os.Stat(path)
	if err != nil {
		return nil, fail(openMsg(err), err)
	}
	if msg := notRegular(st.Mode()); msg != "" {
		return nil, fail(msg, nil)
	}
	// O_NONBLOCK: should the path be swapped for a FIFO after the Stat, open still returns at
	// once, and the Stat of the open file refuses it.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fail(openMsg(err), err)
	}
	defer f.Close()
	if st, err = f.Stat(); err != nil {
		return nil, fail(err.Error(), err)
	}
	if msg := notRegular(st.Mode()); msg != "" {
		return nil, fail(msg, nil)
	}
	// A pickle file of some size is mapped and decoded in place; anything else (gzip, JSON,
	// small files) is read as a stream. The size is for progress and the mapping only: nothing
	// is reserved from it (a sparse file may claim terabytes it does not hold).
	if st.Size() >= minMapSize {
		if data, ok := mapFile(f, st.Size()); ok {
			defer unmapFile(data)
			if data[0] == 0x80 { // PROTO: a binary pickle (gzip and JSON start otherwise)
				return decodeMapped(ctx, data, path, opt)
			}
		}
	}
	return Reader(ctx, f, path, st.Size(), opt)
}

// minMapSize: smaller files are read, not mapped.
const minMapSize = 1 << 20

// decodeMapped decodes a mapped pickle file in place. Pages already decoded are dropped from
// the process as it goes (every byte is read once), so the mapping adds little to resident
// memory. A file truncated while it is read faults on the missing pages: that is an error,
// not a crash.
func decodeMapped(ctx context.Context, data []byte, name string, opt Options) (s *snapshot.Snapshot, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if _, fault := r.(interface{ Addr() uintptr }); !fault {
				panic(r)
			}
			s, err = nil, &Error{File: name, Offset: -1, Msg: "the file changed (shrank) while it was read: load it again once it is written"}
		}
	}()
	total := int64(len(data))
	// A helper maps the pages ahead of the decoder and drops those behind it, off the
	// decoder's goroutine.
	progress := make(chan int64, 1)
	helped := make(chan struct{})
	go func() {
		defer close(helped)
		const page, ahead = 64 << 10, 32 << 20
		dropped, mapped := 0, 0
		mapAhead := func(done int) {
			if end := min(done+ahead, len(data)); end > mapped {
				prefetchPages(data[mapped:end])
				mapped = end
			}
		}
		mapAhead(0)
		for done := range progress {
			// Every byte before done has been read for the last time.
			if n := int(done) &^ (page - 1); n > dropped {
				dropPages(data[dropped:n])
				dropped = n
			}
			mapAhead(int(done))
		}
	}()
	// The mapping goes when File returns: the helper must be done with it first (also when
	// the decode panics on a shrunk file).
	defer func() {
		close(progress)
		<-helped
	}()
	popt := pickle.Options{MaxEvents: opt.MaxTraceEvents, Index: true, Progress: func(done int64) {
		select {
		case progress <- done:
		default: // the helper is behind: it catches up with the next one
		}
		if opt.Progress != nil {
			opt.Progress(done, total)
		}
	}}
	res, err := pickle.DecodeBytes(ctx, data, popt)
	if err == nil && opt.Progress != nil {
		opt.Progress(total, total)
	}
	return fromPickle(ctx, res, err, name, snapshot.Format{Encoding: "pickle"}, opt)
}

// notRegular says why a file of this mode cannot be loaded ("" for a regular file).
func notRegular(m os.FileMode) string {
	switch {
	case m.IsRegular():
		return ""
	case m.IsDir():
		return "is a directory (load it as a set of rank snapshots)"
	case m&os.ModeNamedPipe != 0:
		return "is a named pipe (FIFO), not a regular file: pipe it to standard input with '-' instead"
	case m&os.ModeSocket != 0:
		return "is a socket, not a regular file"
	case m&os.ModeDevice != 0:
		return "is a device, not a regular file"
	}
	return "is not a regular file"
}

func openMsg(err error) string {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "no such file"
	case errors.Is(err, os.ErrPermission):
		return "permission denied"
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// countingReader reports progress and lets the decoder be cancelled between reads.
type countingReader struct {
	r     io.Reader
	n     int64
	total int64
	next  int64
	opt   Options
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.opt.Progress != nil && c.n >= c.next {
		c.next = c.n + 8<<20
		c.opt.Progress(c.n, c.total)
	}
	return n, err
}

// capReader fails with a *limitError once more than limit bytes have been read from r.
type capReader struct {
	r     io.Reader
	left  int64
	limit int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		// At the limit: the input is within it only if it ends here.
		var one [1]byte
		if n, err := c.r.Read(one[:]); n == 0 {
			return 0, err
		}
		return 0, &limitError{c.limit}
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

type limitError struct{ limit int64 }

func (e *limitError) Error() string {
	return fmt.Sprintf("decompresses to more than %s, the limit for gzip input (raise it with --max-decompressed BYTES, or -1 for none)", sizeText(e.limit))
}

func (e *limitError) Is(target error) bool { return target == ErrDecompressedLimit }

// Reader loads a snapshot from r; name is used in errors and size (0 if unknown) in progress.
func Reader(ctx context.Context, r io.Reader, name string, size int64, opt Options) (*snapshot.Snapshot, error) {
	fail := func(off int64, err error, format string, args ...any) error {
		return &Error{File: name, Offset: off, Msg: fmt.Sprintf(format, args...), Err: err}
	}
	br := bufio.NewReaderSize(&countingReader{r: r, total: size, opt: opt}, 64<<10)
	head, _ := br.Peek(2)
	var format snapshot.Format
	var src io.Reader = br
	if len(head) == 2 && head[0] == 0x1f && head[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fail(-1, err, "corrupt gzip header: %v", err)
		}
		defer zr.Close()
		format.Gzip = true
		var dz io.Reader = zr
		if limit := cmp.Or(opt.MaxDecompressed, DefaultMaxDecompressed); limit > 0 {
			dz = &capReader{r: zr, left: limit, limit: limit}
		}
		// Inflating takes longer than decoding (klauspost's inflate, a quarter faster than the
		// standard library's, still makes about 300 MB/s): another goroutine inflates ahead.
		ra := newReadAhead(dz)
		defer ra.Close()
		src = bufio.NewReaderSize(ra, 64<<10)
	}
	inner := src.(*bufio.Reader)
	first, err := inner.Peek(1)
	if err != nil {
		if format.Gzip {
			return nil, fail(-1, err, "empty or corrupt gzip stream: %v", err)
		}
		return nil, fail(-1, nil, "empty file")
	}
	var s *snapshot.Snapshot
	switch c, skipped := skipSpace(inner); {
	case c == '{' || c == '[':
		format.Encoding = "json"
		s, err = decodeJSON(ctx, inner, format, opt)
		if err != nil {
			return nil, fail(-1, err, "%v", err)
		}
	case skipped == 0 && (c == 0x80 || c == '(' || c == '}' || c == ']'):
		format.Encoding = "pickle"
		res, err := pickle.Decode(ctx, inner, pickle.Options{MaxEvents: opt.MaxTraceEvents, Index: true})
		return fromPickle(ctx, res, err, name, format, opt)
	default:
		if skipped > 0 && c == 0 {
			return nil, fail(skipped, nil, "not a snapshot: %d bytes of whitespace and nothing else", skipped)
		}
		if skipped > 0 {
			return nil, fail(skipped, nil, "not a snapshot: neither a pickle nor JSON (first byte after %d bytes of whitespace 0x%02x)", skipped, c)
		}
		return nil, fail(0, nil, "not a snapshot: neither a pickle nor JSON (first byte 0x%02x)", first[0])
	}
	s.Path = name
	return s, nil
}

// fromPickle builds the model from a decoded pickle (or words the decoding failure).
func fromPickle(ctx context.Context, res *pickle.Result, err error, name string, format snapshot.Format, opt Options) (*snapshot.Snapshot, error) {
	fail := func(off int64, err error, format string, args ...any) error {
		return &Error{File: name, Offset: off, Msg: fmt.Sprintf(format, args...), Err: err}
	}
	if err != nil {
		var pe *pickle.Error
		if errors.As(err, &pe) {
			return nil, fail(pe.Offset, err, "%s", pickleMsg(pe, format.Gzip))
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fail(-1, err, "%v", err)
	}
	format.Protocol = res.Protocol
	format.TypeTagGlobal = res.TypeTag
	c := newConverter(res.Interner, res.Extras, opt.MaxTraceEvents)
	// Shared references can make a small pickle name the same segment, block list or
	// trace many times: the model may hold no more values than the pickle has bytes.
	c.budget = res.Stats.Bytes + valueSlack
	s, err := c.snapshot(res.Root, format)
	if err != nil {
		return nil, fail(-1, err, "%v", err)
	}
	s.Path = name
	return s, nil
}

// pickleMsg words a decoding failure: corruption says so; a refused global, a limit or a
// read error (a corrupt gzip stream, the decompressed-size limit) speaks for itself.
func pickleMsg(pe *pickle.Error, gz bool) string {
	switch {
	case errors.Is(pe, pickle.ErrCorrupt):
		if gz {
			return "corrupt pickle: " + pe.Msg + " in the decompressed stream"
		}
		return "corrupt pickle: " + pe.Msg
	case errors.Is(pe, pickle.ErrUnsafe), errors.Is(pe, pickle.ErrLimit), errors.Is(pe, ErrDecompressedLimit):
		return pe.Msg
	case gz:
		return "corrupt gzip stream: " + pe.Msg
	}
	return "reading the input: " + pe.Msg
}

// skipSpace discards leading whitespace (JSON may start with it) and returns the first
// non-space byte (0 at the end of the input) and how many bytes it discarded.
func skipSpace(r *bufio.Reader) (byte, int64) {
	// JSON may start with any amount of whitespace (RFC 8259 §2): discard it in buffer-sized
	// steps, so a file padded with megabytes of it is still read (in time linear in its size).
	var skipped int64
	for {
		b, err := r.Peek(1)
		if err != nil || len(b) == 0 {
			return 0, skipped
		}
		buf, _ := r.Peek(r.Buffered())
		n := 0
		for n < len(buf) && isJSONSpace(buf[n]) {
			n++
		}
		if n < len(buf) {
			_, _ = r.Discard(n)
			return buf[n], skipped + int64(n)
		}
		_, _ = r.Discard(n)
		skipped += int64(n)
	}
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

func decodeJSON(ctx context.Context, r io.Reader, format snapshot.Format, opt Options) (*snapshot.Snapshot, error) {
	dec := json.NewDecoder(r)
	dec.UseNumber()
	c := newConverter(nil, nil, opt.MaxTraceEvents)
	root, err := c.streamJSON(ctx, dec)
	if err != nil {
		var se *json.SyntaxError
		switch {
		case errors.As(err, &se):
			return nil, fmt.Errorf("corrupt JSON at byte %d: %w", se.Offset, err)
		case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
			return nil, fmt.Errorf("truncated JSON")
		case ctx.Err() != nil:
			return nil, ctx.Err()
		}
		return nil, err
	}
	return c.snapshot(root, format)
}

// streamJSON reads a JSON snapshot. The device traces, which hold nearly all of a large file
// (JSON repeats every frame of every event), are converted one event at a time, so memory
// follows the typed model rather than a generic tree of the whole document.
// skipJSONValue reads past one value token by token: the decoder keeps no more than a token
// of it buffered (json.RawMessage would hold the whole value, twice while its buffer grows).
func skipJSONValue(dec *json.Decoder) error {
	depth := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('['), json.Delim('{'):
			depth++
		case json.Delim(']'), json.Delim('}'):
			depth--
		}
		if depth == 0 {
			return nil
		}
	}
}

// jsonTopKeys are the top-level keys the converter reads besides device_traces.
var jsonTopKeys = map[string]bool{"segments": true, "allocator_settings": true, "external_annotations": true}

func (c *converter) streamJSON(ctx context.Context, dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if tok != json.Delim('{') {
		if tok == json.Delim('[') { // the oldest form: a bare list of segments
			var list []any
			for dec.More() {
				var v any
				if err := dec.Decode(&v); err != nil {
					return nil, err
				}
				list = append(list, v)
			}
			return emptyIfNil(list), expectDelim(dec, ']')
		}
		return tok, nil // a scalar: the converter says it is not a snapshot
	}
	top := map[string]any{}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := kt.(string)
		if key == "device_traces" {
			if top[key], err = c.streamTraces(ctx, dec); err != nil {
				return nil, err
			}
			continue
		}
		if !jsonTopKeys[key] {
			// A key memsnap does not read is skipped, not built: a 48 MB junk value costs its
			// raw bytes once, not a tree of maps and slices 30 times its size. The key stays,
			// for the message of a file without segments.
			if err := skipJSONValue(dec); err != nil {
				return nil, err
			}
			top[key] = nil
			continue
		}
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		top[key] = v
	}
	return top, expectDelim(dec, '}')
}

// streamTraces reads device_traces: a list of per-device lists of event objects.
func (c *converter) streamTraces(ctx context.Context, dec *json.Decoder) (any, error) {
	if tok, err := dec.Token(); err != nil {
		return nil, err
	} else if tok != json.Delim('[') {
		return tok, nil // not a list: the converter reports it
	}
	lists := []any{}
	for d := 0; dec.More(); d++ {
		if tok, err := dec.Token(); err != nil {
			return nil, err
		} else if tok != json.Delim('[') {
			return nil, fmt.Errorf("device_traces[%d] is not a list of events", d)
		}
		var l pickle.EventList
		for i := 0; dec.More(); i++ {
			if i&0xfff == 0 {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
			}
			var m map[string]any
			if err := dec.Decode(&m); err != nil {
				var te *json.UnmarshalTypeError
				if errors.As(err, &te) {
					return nil, fmt.Errorf("device_traces[%d]: [%d]: trace event is a %s, not a dict", d, i, te.Value)
				}
				return nil, err
			}
			e, err := c.event(m)
			if err != nil {
				return nil, fmt.Errorf("device_traces[%d]: [%d]: %w", d, i, err)
			}
			l.Events = append(l.Events, e)
			if n := c.maxEvent; n > 0 && len(l.Events) >= 2*n { // keep the newest n, amortised
				l.Dropped += int64(len(l.Events) - n)
				l.Events = append(l.Events[:0], l.Events[len(l.Events)-n:]...)
			}
		}
		if n := c.maxEvent; n > 0 && len(l.Events) > n {
			l.Dropped += int64(len(l.Events) - n)
			l.Events = append([]snapshot.Event(nil), l.Events[len(l.Events)-n:]...)
		}
		if err := expectDelim(dec, ']'); err != nil {
			return nil, err
		}
		lists = append(lists, l)
	}
	return lists, expectDelim(dec, ']')
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok != want {
		return fmt.Errorf("corrupt JSON: expected %q", want)
	}
	return nil
}

func emptyIfNil(l []any) []any {
	if l == nil {
		return []any{}
	}
	return l
}

// Rank is one rank's snapshot from a directory (see snapshot.Rank).
type Rank = snapshot.Rank

// Dir loads every regular file of a directory as one rank's snapshot, in parallel. The rank
// comes from the file name (rank5.pickle, snapshot_rank_5.pkl, job-r5-oom.pickle) or else its
// sorted position. Hidden files and README-like text files are skipped; symbolic links are
// followed to regular files with opt.FollowLinks, else skipped.
//
// A file that cannot be read (a rank truncated when its process was killed) does not hide the
// others: its Rank has Err set and no Snap. Dir returns an error only when no file could be
// read, or the context ended.
func Dir(ctx context.Context, dir string, opt Options) ([]Rank, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, &Error{File: dir, Offset: -1, Msg: openMsg(err), Err: err}
	}
	var files []string
	links := 0
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		switch strings.ToLower(filepath.Ext(name)) {
		case ".md", ".txt", ".html", ".py", ".log":
			continue
		}
		if e.Type()&fs.ModeSymlink != 0 {
			links++
			if st, err := os.Stat(filepath.Join(dir, name)); !opt.FollowLinks || err != nil || !st.Mode().IsRegular() {
				continue
			}
		} else if !e.Type().IsRegular() {
			continue
		}
		files = append(files, name)
	}
	sort.Strings(files)
	if len(files) == 0 {
		msg := "directory holds no snapshot files"
		if links > 0 && !opt.FollowLinks {
			what := fmt.Sprintf("%d symbolic links are", links)
			if links == 1 {
				what = "its symbolic link is"
			}
			msg += " (" + what + " not followed here: the MCP server reads only regular files under its roots)"
		}
		return nil, &Error{File: dir, Offset: -1, Msg: msg}
	}
	ranks := make([]Rank, len(files))
	allNamed := true
	for i, name := range files {
		ranks[i] = Rank{Rank: i, File: filepath.Join(dir, name)}
		if n := snapshot.RankFromName(name); n >= 0 {
			ranks[i].Rank = n
		} else {
			allNamed = false
		}
	}
	if !allNamed {
		for i := range ranks {
			ranks[i].Rank = i
		}
	}
	byRank := map[int]string{}
	for _, r := range ranks {
		if other, ok := byRank[r.Rank]; ok {
			return nil, &Error{File: dir, Offset: -1, Msg: fmt.Sprintf("%s and %s both claim rank %d: a rank directory holds one snapshot per rank (load snapshots of different steps one at a time)",
				filepath.Base(other), filepath.Base(r.File), r.Rank)}
		}
		byRank[r.Rank] = r.File
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			ranks[i].Snap, ranks[i].Err = File(ctx, ranks[i].File, opt)
			if ranks[i].Err != nil {
				ranks[i].Snap = nil
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var firstErr error
	read := 0
	for _, r := range ranks {
		if r.Err == nil {
			read++
		} else if firstErr == nil {
			firstErr = r.Err
		}
	}
	if read == 0 {
		return nil, firstErr
	}
	sort.SliceStable(ranks, func(i, j int) bool { return ranks[i].Rank < ranks[j].Rank })
	return ranks, nil
}

// IsDir reports whether path names a directory.
func IsDir(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}

// readAhead reads its source on another goroutine, a few buffers ahead of its reader, so
// that producing the bytes (inflating a gzip stream) and consuming them (decoding) run at
// once. It returns the source's bytes and then its error, exactly as the source would.
type readAhead struct {
	full  chan []byte // filled buffers, in order
	empty chan []byte // buffers to fill again
	done  chan struct{}
	cur   []byte // the buffer being read
	buf   []byte // its whole length, to give back
	err   error  // the source's error, set before full is closed
	once  sync.Once
}

const (
	readAheadBuffers = 4
	readAheadSize    = 256 << 10
)

func newReadAhead(r io.Reader) *readAhead {
	ra := &readAhead{full: make(chan []byte, readAheadBuffers), empty: make(chan []byte, readAheadBuffers), done: make(chan struct{})}
	for range readAheadBuffers {
		ra.empty <- make([]byte, readAheadSize)
	}
	go ra.fill(r)
	return ra
}

func (ra *readAhead) fill(r io.Reader) {
	defer close(ra.full)
	for {
		var buf []byte
		select {
		case buf = <-ra.empty:
		case <-ra.done:
			return
		}
		n := 0
		var err error
		for n < len(buf) && err == nil {
			var m int
			m, err = r.Read(buf[n:])
			n += m
		}
		if n > 0 {
			select {
			case ra.full <- buf[:n]:
			case <-ra.done:
				return
			}
		}
		if err != nil {
			ra.err = err // read by Read after full is closed
			return
		}
	}
}

func (ra *readAhead) Read(p []byte) (int, error) {
	if len(ra.cur) == 0 {
		if ra.buf != nil {
			ra.empty <- ra.buf[:cap(ra.buf)]
			ra.buf = nil
		}
		b, ok := <-ra.full
		if !ok {
			return 0, ra.err
		}
		ra.cur, ra.buf = b, b
	}
	n := copy(p, ra.cur)
	ra.cur = ra.cur[n:]
	return n, nil
}

// Close stops the reading goroutine (the source is then read no further).
func (ra *readAhead) Close() {
	ra.once.Do(func() { close(ra.done) })
	for range ra.full { // wait for it to stop
	}
}
