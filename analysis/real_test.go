package analysis

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis/load"
	"github.com/memsnap/memsnap/analysis/snapshot"

	"github.com/memsnap/memsnap/internal/realsnaps"
	"github.com/memsnap/memsnap/internal/realsnaps/realtest"
)

// realDir is the folder of real snapshots (package realsnaps: MEMSNAP_REAL_SNAPSHOTS, else
// ../shared/snapshots/real), present or not.
var realDir = realsnaps.Where()

// realFiles returns the real snapshots, or skips the test when they are absent.
func realFiles(t *testing.T) []string { return realtest.Files(t) }

func TestMain(m *testing.M) { realtest.Main(m) }

// torchInternal reports whether a site file is PyTorch's own code.
func torchInternal(file string) bool {
	return isTorchPath(normPath(file))
}

// TestRealTopStacksNameUserFrames: wherever a block's stack has a user frame, top-stacks names
// a user frame, never a torch-internal one.
func TestRealTopStacksNameUserFrames(t *testing.T) {
	for _, path := range realFiles(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			snap, err := load.File(context.Background(), path, load.Options{})
			if err != nil {
				t.Fatalf("load: %v", err)
			}
			a := DefaultAttributor()
			withUser := 0
			for _, seg := range snap.Segments {
				for _, b := range seg.Blocks {
					if b.State != snapshot.StateActiveAllocated {
						continue
					}
					frames := snap.StackFrames(b.Stack)
					hasUser := false
					for _, f := range frames {
						if !snapshot.IsCppFrame(f) && a.kind(f) == kindUser {
							hasUser = true
						}
					}
					at := a.Attribute(snap, b.Stack)
					if hasUser {
						withUser++
						if at.Kind != SiteKindUser || torchInternal(at.File) {
							t.Errorf("block with a user frame attributed to %s (%s)", at.Site, at.File)
						}
					}
				}
			}
			r, err := TopStacks(snap, TopStacksOptions{Device: AllDevices, Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			var sum int64
			for _, s := range r.Sites {
				sum += s.Bytes
				if torchInternal(s.File) && s.Kind == SiteKindUser {
					t.Errorf("site %s in torch counted as user code", s.Site)
				}
			}
			if sum != r.TotalBytes {
				t.Errorf("sites sum to %d, total %d", sum, r.TotalBytes)
			}
			t.Logf("%d allocated blocks with a user frame; top: %s", withUser, firstLine(r.Text(), 3))
		})
	}
}

func firstLine(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, " | ")
}

// TestRealReplay: every real file replays without error, peaks bound the final state.
func TestRealReplay(t *testing.T) {
	for _, path := range realFiles(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			snap, err := load.File(context.Background(), path, load.Options{})
			if err != nil {
				t.Fatalf("load: %v", err)
			}
			rs, err := ReplayAll(context.Background(), snap, ReplayOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rs {
				if r.PeakAllocatedBytes < r.EndAllocatedBytes || r.PeakReservedBytes < r.FinalReservedBytes || (r.HasTrace && !r.Consistent) {
					t.Errorf("device %d: peak below final: %+v", r.Device, r)
				}
				t.Logf("%s", r.Text())
			}
		})
	}
}
