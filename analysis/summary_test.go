package analysis

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis/load"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// TestReplayPeaksMatchFullReplay: summarize's one-pass peaks equal the full replay's on every
// committed fixture and every real snapshot, device by device.
func TestReplayPeaksMatchFullReplay(t *testing.T) {
	files, _ := filepath.Glob("../testdata/scenarios/*.pickle")
	multi, _ := filepath.Glob("../testdata/scenarios/multirank/*.pickle")
	real, _ := filepath.Glob(filepath.Join(realDir, "*.pickle"))
	if len(real) == 0 {
		t.Log("../../shared/snapshots/real is absent: checking the fixtures only")
	}
	files = append(append(files, multi...), real...)
	ctx := context.Background()
	checked := 0
	for _, path := range files {
		snap, err := load.File(ctx, path, load.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, dev := range snap.Devices() {
			full, err := ReplayDevice(ctx, snap, ReplayOptions{Device: dev})
			if err != nil {
				t.Fatal(err)
			}
			p := replayPeaks(snap, dev)
			if p.allocated != full.PeakAllocatedBytes || p.reserved != full.PeakReservedBytes {
				t.Errorf("%s device %d: peaks %d/%d, full replay %d/%d", filepath.Base(path), dev,
					p.allocated, p.reserved, full.PeakAllocatedBytes, full.PeakReservedBytes)
			}
			checked++
		}
	}
	if checked < 20 {
		t.Fatalf("only %d devices checked", checked)
	}
}

// TestReplayPeaksLateStart: blocks alive before the trace raise every point of the replay.
func TestReplayPeaksLateStart(t *testing.T) {
	snap := &snapshot.Snapshot{
		Segments: []snapshot.Segment{{Device: 0, Address: 0x1000, TotalSize: 4096, Blocks: []snapshot.Block{
			{Address: 0x1000, Size: 1024, State: snapshot.StateActiveAllocated},
			{Address: 0x1400, Size: 3072, State: snapshot.StateInactive},
		}}},
		DeviceTraces: [][]snapshot.Event{{
			{Action: snapshot.ActionFreeRequested, Addr: 0x1400, Size: 2048}, // alive before the trace
			{Action: snapshot.ActionFreeCompleted, Addr: 0x1400, Size: 2048},
			{Action: snapshot.ActionAlloc, Addr: 0x1400, Size: 512},
			{Action: snapshot.ActionAlloc, Addr: 0x1600, Size: 512},
			{Action: snapshot.ActionFreeRequested, Addr: 0x1400, Size: 512},
			{Action: snapshot.ActionFreeCompleted, Addr: 0x1400, Size: 512},
			{Action: snapshot.ActionFreeRequested, Addr: 0x1600, Size: 512},
			{Action: snapshot.ActionFreeCompleted, Addr: 0x1600, Size: 512},
		}},
	}
	p := replayPeaks(snap, 0)
	// Start: 2048 (pre-trace) + 1024 (final block with no event) = 3072, the peak.
	if p.allocated != 3072 || p.reserved != 4096 {
		t.Fatalf("peaks %+v, want allocated 3072 reserved 4096", p)
	}
	full, _ := ReplayDevice(context.Background(), snap, ReplayOptions{})
	if full.PeakAllocatedBytes != p.allocated {
		t.Fatalf("full replay peak %d", full.PeakAllocatedBytes)
	}
}

// TestSummarizeEmptySnapshot: answer key #8 is four empty device_traces lists and no segment,
// from one process: the summary says there is nothing to diagnose and that the four lists are
// visible devices, not ranks; a file with memory gets no such note.
func TestSummarizeEmptySnapshot(t *testing.T) {
	cases := []struct {
		file    string
		visible int
		note    string
	}{
		{"pt2.5plus_empty_4-devices.pickle", 4, "note: nothing to diagnose: no memory was reserved on any device and no allocation was recorded; it lists 4 visible devices (one trace list per device this process could see: not ranks of a job), all empty; the snapshot was taken before the first CUDA allocation, after everything was freed and released, or by a process that did not use these GPUs, so it says nothing about leaks, peaks or health"},
		{"pt2.5plus_tiny_two-devices_expandable_no-trace.pickle", 2, ""},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			s, err := Summarize(context.Background(), realFile(t, tc.file), SummaryOptions{})
			if err != nil {
				t.Fatal(err)
			}
			notes := []string{}
			for _, n := range s.Notes {
				if strings.HasPrefix(n, "note: nothing to diagnose") {
					notes = append(notes, n)
				}
			}
			want := []string{}
			if tc.note != "" {
				want = []string{tc.note}
			}
			if s.VisibleDevices != tc.visible || !slices.Equal(notes, want) {
				t.Fatalf("visible devices %d, notes %q; want %d, %q", s.VisibleDevices, notes, tc.visible, want)
			}
		})
	}
}

// TestSummarizeSizesAreRequested: answer key #5 ends at its peak (16.52 GiB in rounded
// blocks), and its trace records requested sizes, so the trace's peak (16.39 GiB) reads below
// the final allocated: the summary says the peak is in requested bytes. The qwen2 trace
// records block sizes.
func TestSummarizeSizesAreRequested(t *testing.T) {
	cases := []struct {
		file            string
		requested       bool
		peak, allocated int64
		finalState      bool // no trace: the peaks are the final state
	}{
		{realCompileForward, true, 17602723840, 17738153984, false},
		{"pt2.5-2.7_hf-qwen2-inference_segment-free-churn_sqattn.pickle", false, 4351237120, 215105536, false},
		{"pt2.0_legacy-history_flexgen-opt.pickle", false, 11840159744, 11840159744, true},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			s, err := Summarize(context.Background(), realFile(t, tc.file), SummaryOptions{})
			if err != nil {
				t.Fatal(err)
			}
			d := s.Devices[0]
			if d.Trace.SizesAreRequested != tc.requested || d.Trace.PeakAllocatedBytes != tc.peak || d.AllocatedBytes != tc.allocated || d.Trace.PeaksAreFinalState != tc.finalState {
				t.Fatalf("requested %v, peak %d, allocated %d, final state %v", d.Trace.SizesAreRequested, d.Trace.PeakAllocatedBytes, d.AllocatedBytes, d.Trace.PeaksAreFinalState)
			}
			if strings.Contains(s.Text(), "(requested bytes, as the trace records them)") != tc.requested {
				t.Errorf("text:\n%s", s.Text())
			}
		})
	}
}
