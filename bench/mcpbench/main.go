// Command mcpbench times MCP tool calls on a snapshot: it starts `memsnap serve` over stdio,
// calls a tool on the file once (cold: the server loads it) and then again (warm: from its
// cache), and prints both times in seconds, cold first:
//
//	mcpbench -memsnap /tmp/memsnap -tool summarize -n 5 /tmp/big.pickle
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"time"
)

func main() {
	bin := flag.String("memsnap", "memsnap", "the memsnap binary")
	tool := flag.String("tool", "summarize", "the tool to call")
	warmN := flag.Int("n", 5, "warm calls (the median is printed)")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: mcpbench [-memsnap BIN] [-tool NAME] [-n N] FILE")
		os.Exit(2)
	}
	cold, warm, err := run(*bin, *tool, *warmN, flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "mcpbench:", err)
		os.Exit(1)
	}
	fmt.Printf("%.4f %.4f\n", cold.Seconds(), warm.Seconds())
}

func run(bin, tool string, warmN int, file string) (cold, warm time.Duration, err error) {
	abs, err := filepath.Abs(file)
	if err != nil {
		return 0, 0, err
	}
	cmd := exec.Command(bin, "serve", "--root", filepath.Dir(abs))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return 0, 0, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return 0, 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	defer func() {
		stdin.Close()
		_ = cmd.Wait()
	}()
	in := bufio.NewReaderSize(stdout, 1<<20)
	id := 0
	call := func(method string, params any) (json.RawMessage, error) {
		id++
		msg, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
		if _, err := stdin.Write(append(msg, '\n')); err != nil {
			return nil, err
		}
		for {
			line, err := in.ReadBytes('\n')
			if err != nil {
				return nil, fmt.Errorf("reading the reply to %s: %w", method, err)
			}
			var reply struct {
				ID     *int            `json:"id"`
				Result json.RawMessage `json:"result"`
				Error  json.RawMessage `json:"error"`
			}
			if json.Unmarshal(line, &reply) != nil || reply.ID == nil || *reply.ID != id {
				continue // a notification (progress, logging)
			}
			if len(reply.Error) > 0 {
				return nil, fmt.Errorf("%s: %s", method, reply.Error)
			}
			return reply.Result, nil
		}
	}
	if _, err := call("initialize", map[string]any{"protocolVersion": "2025-03-26", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "mcpbench", "version": "1"}}); err != nil {
		return 0, 0, err
	}
	note, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"})
	if _, err := stdin.Write(append(note, '\n')); err != nil {
		return 0, 0, err
	}
	timed := func() (time.Duration, error) {
		start := time.Now()
		res, err := call("tools/call", map[string]any{"name": tool, "arguments": map[string]any{"path": abs}})
		if err != nil {
			return 0, err
		}
		var r struct {
			IsError bool `json:"isError"`
		}
		if json.Unmarshal(res, &r) == nil && r.IsError {
			return 0, fmt.Errorf("%s failed: %s", tool, res)
		}
		return time.Since(start), nil
	}
	if cold, err = timed(); err != nil {
		return 0, 0, err
	}
	var ws []time.Duration
	for range max(warmN, 1) {
		w, err := timed()
		if err != nil {
			return 0, 0, err
		}
		ws = append(ws, w)
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i] < ws[j] })
	return cold, ws[len(ws)/2], nil
}
