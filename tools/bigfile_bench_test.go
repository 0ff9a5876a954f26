package tools

import (
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkCachedLargeFile measures calls on a large snapshot once it is loaded: set
// MEMSNAP_BENCH_FILE to one (bench/gensnap writes a 300 MB file). Each tool is called once
// before timing, so the loop measures cache hits: the issue asks for well under 100 ms.
func BenchmarkCachedLargeFile(b *testing.B) {
	f := os.Getenv("MEMSNAP_BENCH_FILE")
	if f == "" {
		b.Skip("set MEMSNAP_BENCH_FILE to a large snapshot (e.g. one written by bench/gensnap)")
	}
	c := newClient(b, Config{Roots: []string{filepath.Dir(f)}})
	for _, tool := range []string{"summarize", "top-stacks", "fragmentation", "oom-report"} {
		b.Run(tool, func(b *testing.B) {
			args := map[string]any{"path": f}
			if res := call(b, c, tool, args); res.IsError {
				b.Fatal(textOf(res))
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if res := call(b, c, tool, args); res.IsError {
					b.Fatal(textOf(res))
				}
			}
		})
	}
}
