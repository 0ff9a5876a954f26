package tools

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"sync"

	"github.com/mark3labs/mcp-go/server"
)

// DefaultMaxMessageBytes bounds one JSON-RPC message (a stdio line, an HTTP body): memsnap's
// requests carry file paths and small numbers, so 1 MiB leaves room for any client's request
// while one runaway message cannot take the server's memory.
const DefaultMaxMessageBytes = 1 << 20

// Stdio worker pool: tool calls run on these goroutines, queued beyond them. Calls waiting for
// a load's turn in the memory budget hold a worker, so there are more than mcp-go's 5; the
// queue is long so that the reading loop never has to run a call itself (mcp-go does that
// when the queue is full, and then reads nothing until the call ends).
const (
	stdioWorkers = 16
	stdioQueue   = 1000
)

// ServeStdio serves srv over newline-delimited JSON-RPC on in and out until in ends or ctx is
// cancelled. A line longer than maxLine bytes (<= 0: DefaultMaxMessageBytes) is never held in
// memory: it is skipped, answered with a JSON-RPC error (code -32600) carrying its id when it
// is a request, and the next line is read as usual. Writes to out are serialised, one whole
// message at a time.
func ServeStdio(ctx context.Context, srv *server.MCPServer, in io.Reader, out io.Writer, maxLine int, errLog *log.Logger) error {
	if maxLine <= 0 {
		maxLine = DefaultMaxMessageBytes
	}
	if errLog == nil {
		errLog = log.New(io.Discard, "", 0)
	}
	w := &lockedWriter{w: out}
	r := &lineLimiter{br: bufio.NewReaderSize(in, 64<<10), out: w, max: maxLine, log: errLog}
	stdio := server.NewStdioServer(srv)
	stdio.SetErrorLogger(errLog)
	server.WithWorkerPoolSize(stdioWorkers)(stdio)
	server.WithQueueSize(stdioQueue)(stdio)
	return stdio.Listen(ctx, r, w)
}

// lockedWriter makes each Write atomic: mcp-go writes each message with one Write, from
// several goroutines, and the line limiter writes its errors beside them.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// lineLimiter passes lines of at most max bytes through and answers longer ones itself.
type lineLimiter struct {
	br   *bufio.Reader
	out  io.Writer
	max  int
	log  *log.Logger
	rest []byte // the part of the current line not yet read
}

// Read hands out whole lines of at most max bytes; longer lines never come out.
func (l *lineLimiter) Read(p []byte) (int, error) {
	for len(l.rest) == 0 {
		line, err := l.next()
		if len(line) > 0 {
			l.rest = line
			break
		}
		if err != nil {
			return 0, err
		}
	}
	n := copy(p, l.rest)
	l.rest = l.rest[n:]
	return n, nil
}

// next returns the next line with its newline, or nil after answering an over-long line.
func (l *lineLimiter) next() ([]byte, error) {
	var line []byte
	for {
		chunk, err := l.br.ReadSlice('\n')
		if len(line)+len(chunk) > l.max {
			var sc idScanner
			sc.feed(line)
			sc.feed(chunk)
			n := len(line) + len(chunk)
			for errors.Is(err, bufio.ErrBufferFull) {
				chunk, err = l.br.ReadSlice('\n')
				sc.feed(chunk)
				n += len(chunk)
			}
			l.reject(&sc, n)
			return nil, err
		}
		line = append(line, chunk...)
		if !errors.Is(err, bufio.ErrBufferFull) {
			return line, err
		}
	}
}

// reject answers a message of n bytes over the limit: an error response to a request (with
// its id) or to a message of unknown kind (id null); nothing to a notification or a response.
func (l *lineLimiter) reject(sc *idScanner, n int) {
	l.log.Printf("skipped a JSON-RPC message of %d bytes (the limit is %d bytes)", n, l.max)
	if (sc.hasMethod && sc.id == nil) || (!sc.hasMethod && sc.id != nil) {
		return
	}
	id := sc.id
	if id == nil {
		id = json.RawMessage("null")
	}
	resp := struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}{JSONRPC: "2.0", ID: id}
	resp.Error.Code = -32600 // invalid request
	resp.Error.Message = fmt.Sprintf("message of %d bytes is over memsnap's limit of %d bytes for one JSON-RPC message (memsnap serve --max-message-kb); it was skipped. Tool arguments are file paths and small numbers: send a smaller request.", n, l.max)
	b, err := json.Marshal(resp)
	if err != nil {
		return
	}
	if _, err := l.out.Write(append(b, '\n')); err != nil {
		l.log.Printf("writing the error for an over-long message: %v", err)
	}
}

// idScanner reads a JSON-RPC message as a stream of bytes, keeping only the top-level "id"
// (raw, up to 128 bytes) and whether a top-level "method" is present: enough to answer a
// message too large to hold.
type idScanner struct {
	depth     int
	inString  bool
	escaped   bool
	expectKey bool   // at depth 1, the next string is a key
	inKey     bool   // reading a depth-1 key
	key       []byte // the depth-1 key read last (capped)
	afterKey  bool   // a depth-1 key was read; its ':' comes next
	capture   string // "id" or "method" while reading that value
	val       []byte // the captured value's raw bytes (capped)
	id        json.RawMessage
	hasMethod bool
}

const maxScannedValue = 128

func (s *idScanner) add(dst *[]byte, c byte, max int) {
	if len(*dst) < max {
		*dst = append(*dst, c)
	}
}

func (s *idScanner) feed(p []byte) {
	for _, c := range p {
		s.step(c)
	}
}

func (s *idScanner) step(c byte) {
	if s.inString {
		switch {
		case s.escaped:
			s.escaped = false
		case c == '\\':
			s.escaped = true
		case c == '"':
			s.inString = false
			if s.inKey {
				s.inKey = false
				s.afterKey = true
				return
			}
		}
		if s.inKey {
			s.add(&s.key, c, 16)
		} else if s.capture != "" {
			s.add(&s.val, c, maxScannedValue)
		}
		return
	}
	switch c {
	case ' ', '\t', '\r', '\n':
		return
	case '"':
		s.inString = true
		if s.depth == 1 && s.expectKey {
			s.inKey, s.expectKey, s.key = true, false, s.key[:0]
			return
		}
	case '{', '[':
		s.depth++
		if s.depth == 1 && c == '{' {
			s.expectKey = true
			return
		}
	case '}', ']':
		if s.depth == 1 {
			s.finish()
		}
		s.depth--
		return
	case ':':
		if s.depth == 1 && s.afterKey {
			s.afterKey = false
			if k := string(s.key); k == "id" || k == "method" {
				s.capture, s.val = k, s.val[:0]
			}
			return
		}
	case ',':
		if s.depth == 1 {
			s.finish()
			s.expectKey = true
			return
		}
	}
	if s.capture != "" {
		s.add(&s.val, c, maxScannedValue)
	}
}

// finish ends the depth-1 value being captured.
func (s *idScanner) finish() {
	switch s.capture {
	case "id":
		v := json.RawMessage(append([]byte(nil), s.val...))
		if len(v) > 0 && len(v) < maxScannedValue && json.Valid(v) && (v[0] == '"' || v[0] == '-' || (v[0] >= '0' && v[0] <= '9')) {
			s.id = v
		}
	case "method":
		s.hasMethod = true
	}
	s.capture = ""
}
