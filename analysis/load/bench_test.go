package load

import (
	"context"
	"os"
	"testing"
)

// BenchmarkLoadFile loads the file named by MEMSNAP_BENCH_FILE (skipped when unset), e.g. the
// ~300 MB snapshot bench/gensnap writes: go test -run '^$' -bench LoadFile ./analysis/load.
func BenchmarkLoadFile(b *testing.B) {
	path := os.Getenv("MEMSNAP_BENCH_FILE")
	if path == "" {
		b.Skip("MEMSNAP_BENCH_FILE is not set")
	}
	for b.Loop() {
		if _, err := File(context.Background(), path, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}
