package analysis

import (
	"context"
	"slices"
	"testing"

	"github.com/memsnap/memsnap/analysis/sim"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// TestTopSiteStackID: each group's stack_id is a real stack whose attribution is the group's
// representative (site and filtered stack), and that stack belongs to the group's largest block.
func TestTopSiteStackID(t *testing.T) {
	snap, _ := sim.ActivationOOM()
	for _, groupBy := range []string{"site", "stack", "file", "function"} {
		r, err := TopStacks(snap, TopStacksOptions{GroupBy: groupBy, Device: AllDevices, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		a := DefaultAttributor()
		for _, s := range r.Sites {
			if s.StackID < 0 || s.StackID >= len(snap.Stacks) {
				t.Fatalf("%s %s: stack_id %d out of range", groupBy, s.Site, s.StackID)
			}
			at := a.Attribute(snap, snapshot.StackID(s.StackID))
			if !slices.Equal(at.Stack, s.Stack) || (groupBy == "site" && at.Site != s.Site) {
				t.Errorf("%s %s: stack %d attributes to %s %q, want %q", groupBy, s.Site, s.StackID, at.Site, at.Stack, s.Stack)
			}
		}
	}
	// The largest group (the parameters, train.py:112): its stack_id is the stack of one of its
	// largest blocks.
	r, _ := TopStacks(snap, TopStacksOptions{Device: AllDevices})
	top := r.Sites[0]
	var largest int64
	var ids []int
	for _, seg := range snap.Segments {
		for _, b := range seg.Blocks {
			if b.State == snapshot.StateActiveAllocated && DefaultAttributor().SiteOf(snap, b.Stack).Site == top.Site {
				if b.Size > largest {
					largest, ids = b.Size, nil
				}
				if b.Size == largest {
					ids = append(ids, int(b.Stack))
				}
			}
		}
	}
	if top.Site != "train.py:112" || !slices.Contains(ids, top.StackID) {
		t.Errorf("top %s stack %d, want train.py:112 and one of %v", top.Site, top.StackID, ids)
	}
}

func TestTopSiteStackIDNone(t *testing.T) {
	tb := newTB()
	tb.seg(0, 1<<30, 0, blk(mib, snapshot.StateActiveAllocated, snapshot.NoStack))
	r, err := TopStacks(tb.done(), TopStacksOptions{Device: AllDevices})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Sites) != 1 || r.Sites[0].StackID != -1 {
		t.Errorf("sites %+v, want one with stack_id -1", r.Sites)
	}
}

func TestOOMSiteStackID(t *testing.T) {
	snap, _ := sim.FragmentationOOM()
	r, err := OOMReport(context.Background(), snap, OOMOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a := DefaultAttributor()
	for _, s := range r.OOMs[0].LiveSites {
		if s.StackID < 0 || a.SiteOf(snap, snapshot.StackID(s.StackID)).Site != s.Site {
			t.Errorf("live site %s stack %d", s.Site, s.StackID)
		}
	}
}
