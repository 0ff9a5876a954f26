package sim

import (
	"fmt"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// trainingLoop runs the small model's training loop (TrainingLoop) for steps steps on a
// simulation configured by cfg.
func trainingLoop(cfg Config, steps int) *snapshot.Snapshot {
	t := newTrainer(New(cfg), smallDims)
	t.setup()
	for range steps {
		t.step()
	}
	return t.s.Snapshot()
}

// Multi-device OOM ground truth: device 0 trains healthily with the most trace events, device 1
// runs out of memory (ActivationOOM's model: a 64 MiB request, 58 MiB free), device 2 trains a
// few steps.
const (
	MultiDeviceOOMDevice   = 1
	MultiDeviceOOMRequest  = 64 * MiB
	MultiDeviceBusyDevice  = 0
	multiDeviceBusySteps   = 40
	multiDeviceSmallSteps  = 3
	multiDeviceNumDevices  = 3
	multiDeviceAddrSpacing = uint64(1) << 36
)

// MultiDeviceOOM returns one process's snapshot of three GPUs (torch.cuda.memory._snapshot()
// holds every device's segments and a trace per device): device 0 trains 40 steps (most trace
// events, no OOM), device 1 runs ActivationOOM's forward pass into an OOM, device 2 trains 3
// steps. A picture that defaults to the device with the most events hides the only OOM.
func MultiDeviceOOM() *snapshot.Snapshot {
	cfg := func(d int) Config {
		return Config{Device: d, NumDevices: multiDeviceNumDevices, BaseAddr: DefaultBase + uint64(d)*multiDeviceAddrSpacing,
			StartUS: 1_717_000_000_000_000}
	}
	busy := trainingLoop(cfg(0), multiDeviceBusySteps)
	t := newTrainer(New(Config{Device: 1, NumDevices: multiDeviceNumDevices, Capacity: 940 * MiB, BaseAddr: DefaultBase + multiDeviceAddrSpacing}),
		dims{H: 1024, N: 4096, V: 8192, L: 8})
	t.setup()
	if _, ok := t.forward().(*OOMError); !ok {
		panic("sim scenario MultiDeviceOOM: device 1 did not run out of memory")
	}
	oom := t.s.Snapshot()
	small := trainingLoop(cfg(2), multiDeviceSmallSteps)
	return mergeDevices(busy, oom, small)
}

// mergeDevices joins snapshots of single devices into one file's snapshot: their frames and
// stacks renumbered, their segments, traces and annotations side by side.
func mergeDevices(snaps ...*snapshot.Snapshot) *snapshot.Snapshot {
	out := &snapshot.Snapshot{Format: snaps[0].Format, Settings: snaps[0].Settings, Caps: snaps[0].Caps,
		EventExtras: []snapshot.EventExtra{{}}, Stacks: [][]snapshot.FrameID{{}}}
	n := 0
	for _, s := range snaps {
		n = max(n, len(s.DeviceTraces))
	}
	out.DeviceTraces = make([][]snapshot.Event, n)
	out.DroppedEvents = make([]int64, n)
	for _, s := range snaps {
		if len(s.EventExtras) > 1 {
			panic("sim scenario: mergeDevices does not merge event extras")
		}
		frameOff := snapshot.FrameID(len(out.Frames))
		out.Frames = append(out.Frames, s.Frames...)
		remap := make([]snapshot.StackID, len(s.Stacks))
		for id, frames := range s.Stacks {
			if id == int(snapshot.EmptyStack) {
				remap[id] = snapshot.EmptyStack
				continue
			}
			ids := make([]snapshot.FrameID, len(frames))
			for k, f := range frames {
				ids[k] = f + frameOff
			}
			remap[id] = snapshot.StackID(len(out.Stacks))
			out.Stacks = append(out.Stacks, ids)
		}
		re := func(id snapshot.StackID) snapshot.StackID {
			if id < 0 || int(id) >= len(remap) {
				return id
			}
			return remap[id]
		}
		for _, seg := range s.Segments {
			seg.Stack = re(seg.Stack)
			blocks := make([]snapshot.Block, len(seg.Blocks))
			for k, b := range seg.Blocks {
				b.Stack = re(b.Stack)
				blocks[k] = b
			}
			seg.Blocks = blocks
			out.Segments = append(out.Segments, seg)
		}
		for d, evs := range s.DeviceTraces {
			if len(evs) == 0 {
				continue
			}
			if len(out.DeviceTraces[d]) > 0 {
				panic(fmt.Sprintf("sim scenario: two traces of device %d", d))
			}
			cp := make([]snapshot.Event, len(evs))
			for k, ev := range evs {
				ev.Stack = re(ev.Stack)
				cp[k] = ev
			}
			out.DeviceTraces[d] = cp
		}
		out.Annotations = append(out.Annotations, s.Annotations...)
	}
	return out
}
