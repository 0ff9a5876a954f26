package analysis

import (
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// TestFragmentationPrivatePoolNotReleasable: empty_cache() cannot give back a private (CUDA
// graph) pool's free segments while the graph lives, so they are not counted as releasable.
func TestFragmentationPrivatePoolNotReleasable(t *testing.T) {
	free := func(addr uint64, pool snapshot.PoolID) snapshot.Segment {
		return snapshot.Segment{Address: addr, TotalSize: 2 << 20, SegmentType: "small", PoolID: pool,
			Blocks: []snapshot.Block{{Address: addr, Size: 2 << 20, State: snapshot.StateInactive, Stack: snapshot.NoStack}}}
	}
	snap := &snapshot.Snapshot{Segments: []snapshot.Segment{free(1<<30, snapshot.PoolID{}), free(2<<30, snapshot.PoolID{1, 0})}}
	r, err := Fragmentation(snap, FragOptions{Device: AllDevices})
	if err != nil {
		t.Fatal(err)
	}
	if r.ReleasableBytes != 2<<20 || r.PrivatePoolFreeBytes != 2<<20 {
		t.Fatalf("releasable %d, private pool free %d", r.ReleasableBytes, r.PrivatePoolFreeBytes)
	}
	if !strings.Contains(strings.Join(r.Notes, "\n"), "2.0 MiB sits in fully free segments of private (CUDA graph) pools") {
		t.Fatalf("notes %q", r.Notes)
	}
}
