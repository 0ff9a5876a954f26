package tools

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

// stdioPeer drives ServeStdio over pipes, as a client would over a child's stdin and stdout.
type stdioPeer struct {
	t    *testing.T
	in   *io.PipeWriter
	msgs chan map[string]any
	done chan error
}

func newStdioPeer(t *testing.T, maxLine int) *stdioPeer {
	t.Helper()
	srv, _ := newTestServer(t, Config{})
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	p := &stdioPeer{t: t, in: inW, msgs: make(chan map[string]any, 100), done: make(chan error, 1)}
	go func() {
		p.done <- ServeStdio(context.Background(), srv, inR, outW, maxLine, nil)
		outW.Close()
	}()
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Errorf("server wrote a line that is not JSON: %.200s", sc.Text())
				continue
			}
			p.msgs <- m
		}
		close(p.msgs)
	}()
	t.Cleanup(func() { inW.Close() })
	return p
}

func (p *stdioPeer) send(line string) {
	p.t.Helper()
	if _, err := io.WriteString(p.in, line+"\n"); err != nil {
		p.t.Fatalf("write: %v", err)
	}
}

// response waits for the response with this id, skipping notifications.
func (p *stdioPeer) response(id float64) map[string]any {
	p.t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case m, ok := <-p.msgs:
			if !ok {
				p.t.Fatalf("server closed its output before answering id %v", id)
			}
			if got, ok := m["id"].(float64); ok && got == id {
				return m
			}
			if _, isReq := m["method"]; !isReq {
				p.t.Fatalf("unexpected message while waiting for id %v: %v", id, m)
			}
		case <-timeout:
			p.t.Fatalf("no response with id %v", id)
		}
	}
}

// TestStdioOverlongLine: a line over the limit is answered with a JSON-RPC error carrying its
// id (even when the id comes last, as the TypeScript SDK writes it), a long notification gets
// no answer, and the server reads and answers the next lines as usual.
func TestStdioOverlongLine(t *testing.T) {
	const max = 64 << 10
	p := newStdioPeer(t, max)
	p.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`)
	if r := p.response(1); r["result"] == nil {
		t.Fatalf("initialize: %v", r)
	}
	p.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)

	big := strings.Repeat("x", 3*max)
	huge := `{"jsonrpc":"2.0","method":"tools/call","params":{"name":"summarize","arguments":{"path":"` + big + `","note":"a \"quoted\" id:3, {brace"}},"id":2}`
	p.send(huge)
	p.send(`{"method":"notifications/message","jsonrpc":"2.0","params":{"data":"` + big + `"}}`)
	p.send(`{"jsonrpc":"2.0","id":3,"method":"tools/list"}`)
	r := p.response(2)
	e, _ := r["error"].(map[string]any)
	want := fmt.Sprintf("message of %d bytes is over memsnap's limit of %d bytes for one JSON-RPC message (memsnap serve --max-message-kb); it was skipped.", len(huge)+1, max)
	if e == nil || e["code"] != float64(-32600) || !strings.HasPrefix(e["message"].(string), want) {
		t.Fatalf("over-long request: %v", r)
	}
	r = p.response(3)
	if res, _ := r["result"].(map[string]any); res == nil || len(res["tools"].([]any)) != len(ToolNames) {
		t.Fatalf("tools/list after an over-long line: %v", r)
	}
	p.send(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"summarize","arguments":{"path":"testdata/scenarios/activation_oom.pickle"}}}`)
	r = p.response(4)
	if res, _ := r["result"].(map[string]any); res == nil || res["isError"] == true {
		t.Fatalf("tool call after an over-long line: %v", r)
	}
	// The long notification got no answer: nothing else is waiting.
	select {
	case m := <-p.msgs:
		if _, isReq := m["method"]; !isReq {
			t.Errorf("unexpected message %v", m)
		}
	case <-time.After(100 * time.Millisecond):
	}
	p.in.Close()
	select {
	case err := <-p.done:
		if err != nil {
			t.Errorf("ServeStdio: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("ServeStdio did not return after stdin closed")
	}
}

func TestIDScanner(t *testing.T) {
	for _, tc := range []struct {
		msg    string
		id     string
		method bool
	}{
		{`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"id":99}}`, "7", true},
		{`{"method":"x","params":{"id":"inner","s":"} , \"id\": 5"},"id":"abc"}`, `"abc"`, true},
		{` { "id" : -12 , "method" : "m" } `, "-12", true},
		{`{"method":"notifications/x","params":{"id":1}}`, "", true},
		{`{"jsonrpc":"2.0","id":3,"result":{}}`, "3", false},
		{`{"id":{"nested":1},"method":"m"}`, "", true},
		{`[1,2,3]`, "", false},
	} {
		var s idScanner
		s.feed([]byte(tc.msg))
		if string(s.id) != tc.id || s.hasMethod != tc.method {
			t.Errorf("%s: id %q method %v, want %q %v", tc.msg, s.id, s.hasMethod, tc.id, tc.method)
		}
	}
}
