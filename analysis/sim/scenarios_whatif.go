package sim

import (
	"errors"
	"fmt"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// servePy is the simulated inference server of the what-if scenarios.
var servePy = ProjDir + "/serve.py"

// growingBatchSteps are the batch sizes the server runs, one request each.
var growingBatchSteps = []int64{4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}

// WhatIfTruth is the ground truth of a what-if scenario: the OOM recorded with the default
// settings, and what running the same program with expandable_segments:True does at that
// request.
type WhatIfTruth struct {
	OOM OOMTruth
	// Capacity is what PyTorch may reserve: reserved + device_free at the OOM.
	Capacity int64
	// OOMEvent is the index of the oom event in the device trace.
	OOMEvent int
	// ExpandableFits: with expandable segments the request that failed is served (every
	// earlier one is too). ExpandableHeadroom is capacity − reserved right after it, or, when it
	// fails, capacity − reserved − the pages it needed (negative).
	ExpandableFits     bool
	ExpandableHeadroom int64
	// PeakReserved / ExpandablePeakReserved: the peak of reserved bytes up to and including
	// that request, with the defaults and with expandable segments.
	PeakReserved           int64
	ExpandablePeakReserved int64
	// SegmentAllocs / ExpandableSegmentMaps: cudaMalloc calls with the defaults, page-range
	// mappings with expandable segments, up to and including that request.
	SegmentAllocs         int
	ExpandableSegmentMaps int
}

// growingBatchRun is one run of the growing-batch server.
type growingBatchRun struct {
	s        *Sim
	oom      *OOMError // the first request that failed (nil: none)
	peak     int64     // peak reserved up to the last request made
	requests int       // requests made (the failed one included)
}

// growingBatch runs an inference server whose batches grow by one every request: per request
// of batch size b it embeds the input (2b MiB, serve.py:30), runs 6 layers that each make an
// 8b MiB intermediate (model.py:41 fc1) and a 2b MiB output (model.py:43 fc2), freeing the
// intermediate and the previous output, then stores a 6b MiB KV-cache entry (model.py:71) and
// keeps the 2b MiB result in a list (serve.py:34). The weights are 6 × 48 MiB (model.py:12).
// Each KV entry lands in the segment of a freed intermediate (the best fit), pinning it with a
// 2b MiB hole; each larger batch needs a new, larger intermediate segment. The run stops at the
// first OOM, or after maxRequests requests (0 = no limit).
func growingBatch(cfg Config, maxRequests int) growingBatchRun {
	r := growingBatchRun{s: New(cfg)}
	s := r.s
	at := func(line int64, fn string) []snapshot.Frame {
		return []snapshot.Frame{Py(servePy, line, fn), Py(servePy, 52, "serve"), Py(servePy, 60, "<module>")}
	}
	layer := func(line int64) []snapshot.Frame {
		return Chain([]snapshot.Frame{Py(ModelPy, line, "forward")}, ModuleCall(), at(31, "handle"))
	}
	stop := errors.New("stop")
	alloc := func(n int64, st Stack) (uint64, error) {
		if maxRequests > 0 && r.requests >= maxRequests {
			return 0, stop
		}
		r.requests++
		a, err := s.Alloc(n, 0, st)
		r.peak = max(r.peak, s.Reserved())
		if err != nil {
			var e *OOMError
			if !errors.As(err, &e) {
				panic(fmt.Sprintf("sim scenario growingBatch: %v", err))
			}
			r.oom = e
		}
		return a, err
	}
	free := func(a uint64) {
		if err := s.Free(a, FreeAt(at(31, "handle")...)); err != nil {
			panic(err)
		}
	}
	run := func() error {
		for i := 0; i < 6; i++ {
			if _, err := alloc(48*MiB, Op("empty", Py(ModelPy, 12, "__init__"), Py(servePy, 20, "load"), Py(servePy, 58, "<module>"))); err != nil {
				return err
			}
		}
		s.Advance(50_000)
		for _, b := range growingBatchSteps {
			x, err := alloc(2*b*MiB, Op("empty", at(30, "handle")...))
			if err != nil {
				return err
			}
			for l := 0; l < 6; l++ {
				h, err := alloc(8*b*MiB, linearIn(layer(41)))
				if err != nil {
					return err
				}
				y, err := alloc(2*b*MiB, linearIn(layer(43)))
				if err != nil {
					return err
				}
				free(h)
				free(x)
				x = y
			}
			// The KV-cache entry stays, and outputs.append(out) keeps the result x alive.
			if _, err := alloc(6*b*MiB, Op("detach_clone", layer(71)...)); err != nil {
				return err
			}
			s.Advance(20_000)
		}
		return nil
	}
	_ = run()
	return r
}

// growingBatchWhatIf runs the server where PyTorch may reserve capacity bytes, once with the
// defaults (it must fail) and once with expandable segments up to the same request.
func growingBatchWhatIf(capacity int64) (*snapshot.Snapshot, WhatIfTruth) {
	base := growingBatch(Config{Capacity: capacity}, 0)
	if base.oom == nil {
		panic("sim scenario growingBatch: expected an OOM with the default settings")
	}
	sn := base.s.Snapshot()
	tr := WhatIfTruth{OOM: oomTruth(sn, base.oom, "fragmentation"), Capacity: capacity, PeakReserved: base.peak}
	if tr.OOM.Inactive < tr.OOM.Requested {
		tr.OOM.Verdict = "capacity"
	}
	for i, ev := range sn.DeviceTraces[0] {
		switch ev.Action {
		case snapshot.ActionOOM:
			tr.OOMEvent = i
		case snapshot.ActionSegmentAlloc:
			tr.SegmentAllocs++
		}
	}
	x := growingBatch(Config{Capacity: capacity, Expandable: true}, base.requests)
	if x.oom != nil && x.requests < base.requests {
		panic("sim scenario growingBatch: expandable segments fail before the recorded OOM")
	}
	tr.ExpandablePeakReserved = x.peak
	tr.ExpandableSegmentMaps = x.s.a.Stats().SegmentMaps
	if x.oom == nil {
		tr.ExpandableFits = true
		tr.ExpandableHeadroom = capacity - x.s.Reserved()
	} else {
		tr.ExpandableHeadroom = capacity - (x.oom.Reserved + x.oom.Need)
	}
	return sn, tr
}

// GrowingBatchOOM returns the snapshot dumped after the growing-batch server's OOM on a device
// where PyTorch may reserve 2128 MiB: with the default settings the fc1 intermediate of batch
// 19 (152 MiB, model.py:41) fails although 332 MiB of the cache is free, in holes of pinned
// segments (fragmentation); the same program with expandable_segments:True serves it with
// 48 MiB to spare. The truth comes from running both.
func GrowingBatchOOM() (*snapshot.Snapshot, WhatIfTruth) {
	return growingBatchWhatIf(2128 * MiB)
}

// GrowingBatchCapacityOOM is the same server where PyTorch may reserve 2 GiB: the same request
// fails with the defaults, again with 332 MiB cached in holes (the rule of thumb says
// fragmentation), and it fails with expandable segments too, 32 MiB short: the live tensors
// leave no room for it (capacity).
func GrowingBatchCapacityOOM() (*snapshot.Snapshot, WhatIfTruth) {
	return growingBatchWhatIf(2048 * MiB)
}
