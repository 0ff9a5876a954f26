package analysis

import (
	"context"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// TestWhatIfPeakOverTraceEvents: a trace that opens with an empty_cache() releasing 40 MiB
// starts from more reserved memory than any of its events reach. The state before the first
// event is not the run's peak (issue 31: it made every what-if's peak the same).
func TestWhatIfPeakOverTraceEvents(t *testing.T) {
	b := newTB()
	user := b.stack("train.py", 7, "main")
	ec := b.stack("torch/cuda/memory.py", 192, "empty_cache", "train.py", 5, "main")
	b.seg(0, 0x1000000, 1, blk(4*mib, snapshot.StateActiveAllocated, user), blk(16*mib, snapshot.StateInactive, snapshot.NoStack))
	free := segFree(0x4000000, 40*mib)
	free.Stack, free.Stream = ec, 1
	b.ev(0, free)
	a := alloc(0x1000000, 4*mib, user)
	a.Stream = 1
	b.ev(0, a)
	snap := b.done()
	snap.Caps.FramesOnAllocs, snap.Caps.FramesOnFrees, snap.Caps.FramesOnBlocks = true, true, true
	r, err := WhatIf(context.Background(), snap, nil, WhatIfOptions{Settings: []WhatIfSetting{{Key: "expandable_segments", Value: "True"}}})
	if err != nil {
		t.Fatal(err)
	}
	d := r.Devices[0]
	if d.StartReservedBytes != 60*mib {
		t.Fatalf("start reserved %d, want 60 MiB", d.StartReservedBytes)
	}
	if d.Fidelity.RecordedPeakReservedBytes != 20*mib || d.Baseline.PeakReservedBytes != 20*mib {
		t.Errorf("recorded peak %d, baseline peak %d: want 20 MiB, the trace's own", d.Fidelity.RecordedPeakReservedBytes, d.Baseline.PeakReservedBytes)
	}
	if !strings.Contains(strings.Join(d.Notes, "\n"), "the state before the trace's first event held 60.0 MiB reserved") {
		t.Errorf("notes %q", d.Notes)
	}
}
