package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestProgressOff: without a terminal on stderr (tests, pipes, CI) and under serve, there is no
// progress at all.
func TestProgressOff(t *testing.T) {
	for _, args := range [][]string{{"summarize", scenarioDir + "summarize_basic.pickle"}, {"serve", "--help"}} {
		activeProgress = nil
		if _, err := run(t, args...); err != nil {
			t.Fatal(err)
		}
		if activeProgress != nil {
			t.Errorf("%v: progress on without a terminal", args)
		}
	}
	root := newRootCmd()
	serve, _, _ := root.Find([]string{"serve"})
	startProgress(serve) // even were stderr a terminal
	if activeProgress != nil {
		t.Error("progress on under serve")
	}
}

// TestProgressLine: the bytes read, then the phase, go to the progress writer (stderr) only,
// and the line is cleared before the command's first output on stdout.
func TestProgressLine(t *testing.T) {
	var stderr, stdout bytes.Buffer
	p := &progress{w: &stderr, phase: "replaying the trace", done: map[string]int64{}, total: map[string]int64{}}
	out := clearFirst{p: p, w: &stdout}
	f := p.reading("/data/big.pickle")
	f(50<<20, 100<<20)
	f(100<<20, 100<<20)
	p.read()
	time.Sleep(250 * time.Millisecond) // the spinner turns
	out.Write([]byte("result\n"))
	if stdout.String() != "result\n" {
		t.Errorf("stdout %q", stdout.String())
	}
	got := stderr.String()
	if !strings.Contains(got, "reading big.pickle") || !strings.Contains(got, "replaying the trace") {
		t.Errorf("stderr lacks the file or the phase: %q", got)
	}
	n := stderr.Len()
	time.Sleep(250 * time.Millisecond)
	f(100<<20, 100<<20)
	if stderr.Len() != n {
		t.Errorf("progress wrote after the output began: %q", stderr.String()[n:])
	}
}
