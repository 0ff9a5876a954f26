package analysis

import (
	"context"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis/sim"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

func TestContainerGuess(t *testing.T) {
	hist := func(sizes ...int64) sizeHist {
		h := sizeHist{}
		for _, s := range sizes {
			h.add(s)
		}
		return h
	}
	nine := append([]int64{}, 4, 4, 4, 4, 4, 4, 4, 4, 4, 1)
	user := SiteIdentity{Site: "train.py:97", Function: "train_step", Kind: SiteKindUser, UserSite: "train.py:97"}
	modelLib := SiteIdentity{Site: "modeling_llama.py:97", Function: "forward", Kind: SiteKindUser}
	torch := SiteIdentity{Site: "adam.py:9", Kind: SiteKindTorch}
	none := SiteIdentity{Site: SiteNoPython, Kind: SiteKindNone}
	tests := []struct {
		name   string
		site   SiteIdentity
		h      sizeHist
		across string
		want   string // substring of the evidence, "" = not a container
	}{
		{"state-only guess", user, hist(mib, mib, mib), acrossNoTrace, "guess: 3 live blocks of 1.0 MiB each"},
		{"90% one size", user, hist(nine...), acrossNoTrace, "9 live blocks of 4 B each"},
		{"across steps", user, hist(mib, mib, mib), acrossSteps(3), "allocated in 3 different steps"},
		{"one step is not a container", user, hist(mib, mib, mib), acrossSteps(1), ""},
		{"two blocks", user, hist(mib, mib), acrossNoTrace, ""},
		{"mixed sizes (loss + log_softmax)", user, hist(512, 512, 512, 4*mib, 4*mib, 4*mib), acrossNoTrace, ""},
		{"model library is not the user's code", modelLib, hist(mib, mib, mib), acrossSteps(3), ""},
		{"torch site", torch, hist(mib, mib, mib), acrossSteps(3), ""},
		{"no python frame", none, hist(mib, mib, mib), acrossSteps(3), ""},
	}
	for _, tc := range tests {
		got := containerEvidence(tc.site, tc.h, tc.across)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: evidence %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestContainerScenarios: the growing container's site (train.py:97 history.append) is a
// user_container in top-stacks, diff and replay; the retained graph's loss site (train.py:89,
// loss plus log_softmax output) and the steady loop's sites are not.
func TestContainerScenarios(t *testing.T) {
	tests := []struct {
		name      string
		pair      func() (*snapshot.Snapshot, *snapshot.Snapshot)
		container string // the one user_container site; "" = none
		blocks    int
		other     string // a site that must keep its category
		otherCat  string
	}{
		{"growing container", sim.GrowingContainerPair, "train.py:97", 50, "train.py:112", CategoryParameter},
		{"retained graph", sim.RetainedGraphPair, "", 0, "train.py:89", CategoryActivation}, // the loss is part of the graph
		{"no growth", sim.NoGrowthPair, "", 0, "train.py:91", CategoryOptimizerState},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before, after := tc.pair()
			ts, err := TopStacks(after, TopStacksOptions{Device: AllDevices, Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range ts.Sites {
				isC := s.Category == CategoryUserContainer
				if isC != (s.Site == tc.container) {
					t.Errorf("top-stacks %s: category %s (%s)", s.Site, s.Category, s.Evidence)
				}
				if isC && (s.Blocks != tc.blocks || !strings.Contains(s.Evidence, "50 live blocks of 4.0 MiB each") || !strings.Contains(s.Evidence, "train_step")) {
					t.Errorf("top-stacks container %+v", s)
				}
				if s.Site == tc.other && s.Category != tc.otherCat {
					t.Errorf("top-stacks %s: category %s, want %s", s.Site, s.Category, tc.otherCat)
				}
			}
			d, err := Diff(before, after, DiffOptions{Device: AllDevices, Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range d.Sites {
				if (s.Category == CategoryUserContainer) != (s.Site == tc.container) {
					t.Errorf("diff %s: category %s (%s)", s.Site, s.Category, s.Evidence)
				}
			}
			r, err := Replay(context.Background(), after, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range r.RepeatingSites {
				isC := s.Category == CategoryUserContainer
				if isC != (s.Site == tc.container) {
					t.Errorf("replay repeating %s: category %s", s.Site, s.Category)
				}
				if isC && !strings.Contains(s.Evidence, "allocated in 50 different steps") {
					t.Errorf("replay evidence %q", s.Evidence)
				}
			}
		})
	}
}

// TestContainerOOM: a capacity OOM whose memory is a growing list of 10 MiB tensors
// (train.py:97) is dominated by user_container and the fix names the container.
func TestContainerOOM(t *testing.T) {
	s := sim.New(sim.Config{Capacity: 100 * sim.MiB})
	st := sim.Op("detach_clone", sim.Py(sim.TrainPy, 97, "train_step"), sim.Py(sim.TrainPy, 120, "main"))
	n := 0
	for {
		if _, err := s.Alloc(10*sim.MiB, 0, st); err != nil {
			break
		}
		n++
	}
	r, err := OOMReport(context.Background(), s.Snapshot(), OOMOptions{DeviceTotalBytes: 100 * mib})
	if err != nil {
		t.Fatal(err)
	}
	if n != 10 || len(r.OOMs) != 1 {
		t.Fatalf("%d allocations, %d ooms", n, len(r.OOMs))
	}
	o := r.OOMs[0]
	if o.Verdict != VerdictCapacity || o.Dominant != CategoryUserContainer || o.DominantBytes != 100*mib ||
		len(o.LiveSites) != 1 || o.LiveSites[0].Category != CategoryUserContainer || o.LiveSites[0].Blocks != 10 ||
		!strings.Contains(o.Fixes[0], "deque") {
		t.Errorf("oom = %+v", o)
	}
}
