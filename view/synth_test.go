package view

import (
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// synthSnapshot builds a training loop's snapshot in memory with at least events trace events:
// parameters and optimizer state made before the loop, then steps of a forward pass (per-layer
// activations saved for backward, temporaries freed at once), a backward pass (gradients kept,
// activation frees, backward temporaries) and an optimizer step, ending in an OOM. Every block
// alive at the end sits in a segment of its own, so the trace replays onto the final state.
func synthSnapshot(events int) *snapshot.Snapshot {
	const layers = 160
	s := &snapshot.Snapshot{Path: "synthetic.pickle", Stacks: [][]snapshot.FrameID{{}}, EventExtras: []snapshot.EventExtra{{}}}
	s.Format = snapshot.Format{Encoding: "pickle", Protocol: 4}
	frame := func(file string, line int64, name string) snapshot.FrameID {
		s.Frames = append(s.Frames, snapshot.Frame{Filename: file, Line: line, Name: name})
		return snapshot.FrameID(len(s.Frames) - 1)
	}
	stack := func(ids ...snapshot.FrameID) snapshot.StackID {
		s.Stacks = append(s.Stacks, ids)
		return snapshot.StackID(len(s.Stacks) - 1)
	}
	linear := frame("/usr/lib/python3/site-packages/torch/nn/modules/linear.py", 125, "forward")
	call := frame("/usr/lib/python3/site-packages/torch/nn/modules/module.py", 1750, "_call_impl")
	step := frame("/work/proj/train.py", 88, "train_step")
	main := frame("/work/proj/train.py", 140, "main")
	engine := frame("/usr/lib/python3/site-packages/torch/autograd/graph.py", 768, "_engine_run_backward")
	backward := frame("/work/proj/train.py", 92, "train_step")
	adam := frame("/usr/lib/python3/site-packages/torch/optim/adamw.py", 520, "_multi_tensor_adamw")
	optStep := frame("/work/proj/train.py", 95, "train_step")
	init := frame("/work/proj/model.py", 20, "__init__")
	var act, tmp [layers]snapshot.StackID
	for l := range layers {
		layer := frame("/work/proj/model.py", int64(40+l%6), "forward")
		act[l] = stack(linear, call, layer, call, step, main)
		tmp[l] = stack(frame("/work/proj/model.py", int64(60+l%4), "forward"), call, step, main)
	}
	param := stack(init, main)
	grad := stack(engine, backward, main)
	bwTmp := stack(frame("/usr/lib/python3/site-packages/torch/autograd/function.py", 300, "apply"), engine, backward, main)
	state := stack(adam, optStep, main)
	optTmp := stack(frame("/usr/lib/python3/site-packages/torch/optim/adamw.py", 600, "_multi_tensor_adamw"), optStep, main)

	var evs []snapshot.Event
	t := int64(1_700_000_000_000_000)
	emit := func(a snapshot.Action, at uint64, size int64, st snapshot.StackID) {
		t += 7
		evs = append(evs, snapshot.Event{Action: a, Addr: at, Size: size, Stack: st, TimeUS: t})
	}
	// A cache of one-block segments per size, as the allocator keeps freed blocks: a new size or
	// an empty cache costs a cudaMalloc (segment_alloc).
	type blk struct {
		size  int64
		stack snapshot.StackID
		live  bool
	}
	blocks := map[uint64]*blk{}
	var order []uint64
	cached := map[int64][]uint64{}
	next := uint64(0x7f0000000000)
	alloc := func(size int64, st snapshot.StackID) uint64 {
		var a uint64
		if c := cached[size]; len(c) > 0 {
			a = c[len(c)-1]
			cached[size] = c[:len(c)-1]
		} else {
			a = next
			next += uint64(size+(2<<20)-1) / (2 << 20) * (2 << 20)
			emit(snapshot.ActionSegmentAlloc, a, size, st)
			blocks[a] = &blk{size: size}
			order = append(order, a)
		}
		b := blocks[a]
		b.stack, b.live = st, true
		emit(snapshot.ActionAlloc, a, size, st)
		return a
	}
	free := func(a uint64) {
		b := blocks[a]
		emit(snapshot.ActionFreeRequested, a, b.size, b.stack)
		emit(snapshot.ActionFreeCompleted, a, b.size, b.stack)
		b.live = false
		cached[b.size] = append(cached[b.size], a)
	}
	for range layers {
		alloc(8<<20, param)
	}
	for k := 0; len(evs) < events; k++ {
		// forward: per layer an activation kept for backward and temporaries freed at once
		acts := make([]uint64, layers)
		for l := range layers {
			acts[l] = alloc(6<<20+int64(l%3)<<20, act[l])
			for range 3 {
				free(alloc(3<<20, tmp[l]))
			}
		}
		// backward: gradients (made by the first step, kept), activations freed
		for l := layers - 1; l >= 0; l-- {
			ta := alloc(2<<20, bwTmp)
			if k == 0 {
				alloc(8<<20, grad)
			}
			free(ta)
			free(acts[l])
		}
		// optimizer: state made by the first step, temporaries every step
		if k == 0 {
			for range 2 * layers {
				alloc(8<<20, state)
			}
		}
		free(alloc(64<<20, optTmp))
	}
	emit(snapshot.ActionOOM, 0, 1<<30, act[0])
	evs[len(evs)-1] = evs[len(evs)-1].WithDeviceFree(256 << 20)
	s.DeviceTraces = [][]snapshot.Event{evs}
	for _, a := range order {
		b := blocks[a]
		seg := snapshot.Segment{Device: 0, Address: a, TotalSize: b.size, SegmentType: "large", Stack: snapshot.NoStack}
		blk := snapshot.Block{Address: a, Size: b.size, State: snapshot.StateInactive, Stack: snapshot.NoStack}
		if b.live {
			blk.State, blk.RequestedSize, blk.Stack = snapshot.StateActiveAllocated, b.size, b.stack
			seg.AllocatedSize, seg.ActiveSize, seg.RequestedSize = b.size, b.size, b.size
		}
		seg.Blocks = []snapshot.Block{blk}
		s.Segments = append(s.Segments, seg)
	}
	s.Caps = snapshot.Capabilities{HasTrace: true, FramesOnBlocks: true, FramesOnAllocs: true, FramesOnFrees: true, PythonOnly: true, TraceStart: "complete"}
	return s
}
