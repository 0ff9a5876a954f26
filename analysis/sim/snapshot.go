package sim

import (
	"fmt"
	"slices"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// Snapshot returns what torch.cuda.memory._snapshot() would return now: segments sorted by
// address, the device trace so far, annotations and settings. Like PyTorch it then records a
// "snapshot" event (size = active bytes), which therefore appears in the trace of the next
// Snapshot call, not this one. Frames and stacks are re-interned in file order (segments and
// their blocks by address, then events), so only stacks the snapshot uses are present.
func (s *Sim) Snapshot() *snapshot.Snapshot {
	out := &snapshot.Snapshot{}
	in := snapshot.NewInterner()
	remap := map[snapshot.StackID]snapshot.StackID{snapshot.NoStack: snapshot.NoStack, snapshot.EmptyStack: snapshot.EmptyStack}
	re := func(id snapshot.StackID) snapshot.StackID {
		if n, ok := remap[id]; ok {
			return n
		}
		old := s.in.Stacks[id]
		ids := make([]snapshot.FrameID, len(old))
		for i, f := range old {
			ids[i] = in.Frame(s.in.Frames[f])
		}
		n := in.Stack(ids)
		remap[id] = n
		return n
	}
	var totalActive int64
	for _, sg := range s.a.Segments() {
		stack := snapshot.EmptyStack
		if id, ok := s.segStack[sg.Addr]; ok {
			stack = id
		}
		seg := snapshot.Segment{Device: s.cfg.Device, Address: sg.Addr, TotalSize: sg.Size,
			Stream: sg.Stream, PoolID: sg.Pool, IsExpandable: sg.Expandable, Stack: re(stack)}
		seg.SegmentType = "large"
		if sg.Small {
			seg.SegmentType = "small"
		}
		for _, b := range sg.Blocks {
			st := b.State()
			bs := snapshot.EmptyStack
			if m := s.live[b.Addr()]; m != nil && st != snapshot.StateInactive {
				bs = m.stack
			}
			seg.Blocks = append(seg.Blocks, snapshot.Block{Address: b.Addr(), Size: b.Size(),
				RequestedSize: b.Requested(), State: st, Stack: re(bs)})
			switch st {
			case snapshot.StateActiveAllocated:
				seg.AllocatedSize += b.Size()
				seg.ActiveSize += b.Size()
				seg.RequestedSize += b.Requested()
			case snapshot.StateActivePendingFree:
				seg.ActiveSize += b.Size()
				seg.RequestedSize += b.Requested()
			}
		}
		totalActive += seg.ActiveSize
		out.Segments = append(out.Segments, seg)
	}
	out.DeviceTraces = make([][]snapshot.Event, s.cfg.NumDevices)
	evs := make([]snapshot.Event, len(s.events))
	for i, ev := range s.events {
		ev.Stack = re(ev.Stack)
		evs[i] = ev
	}
	out.DeviceTraces[s.cfg.Device] = evs
	out.EventExtras = []snapshot.EventExtra{{}}
	if s.cfg.CompileContext != "" {
		out.EventExtras = append(out.EventExtras, snapshot.EventExtra{CompileContext: s.cfg.CompileContext})
	}
	out.Annotations = slices.Clone(s.annots)
	out.Settings = s.settings()
	out.Frames = in.Frames
	out.Stacks = in.Stacks
	out.DroppedEvents = make([]int64, s.cfg.NumDevices)
	out.Format = snapshot.Format{Encoding: "pickle", Protocol: 4}
	out.Caps = caps(out, s.dropped > 0 || s.lateStart, s.dropped > 0, int64(s.cfg.MaxEntries))
	s.record(snapshot.Event{Action: snapshot.ActionSnapshot, Size: totalActive, Stack: snapshot.NoStack})
	return out
}

func (s *Sim) settings() snapshot.AllocatorSettings {
	set := s.allocatorSettings()
	ms := int64(-1)
	if s.cfg.MaxSplitSize > 0 {
		ms = s.cfg.MaxSplitSize
	}
	rp := map[string]any{}
	for i, d := 0, 1; d <= 32768; i, d = i+1, d*2 {
		rp[fmt.Sprint(d)] = int64(s.cfg.RoundupPower2Divisions[i])
	}
	st := snapshot.AllocatorSettings{Present: true, AllocConf: set.AllocConf(), MaxSplitSize: ms,
		ExpandableSegments: s.cfg.Expandable, GCThreshold: s.cfg.GCThreshold}
	st.Raw = map[string]any{
		"PYTORCH_CUDA_ALLOC_CONF":       st.AllocConf,
		"max_split_size":                ms,
		"garbage_collection_threshold":  s.cfg.GCThreshold,
		"expandable_segments":           s.cfg.Expandable,
		"pinned_num_register_threads":   int64(1),
		"release_lock_on_cudamalloc":    false,
		"pinned_use_cuda_host_register": false,
		"roundup_power2_divisions":      rp,
	}
	return st
}

// caps computes Capabilities the way the file would support them.
func caps(sn *snapshot.Snapshot, incomplete, overflow bool, maxEntries int64) snapshot.Capabilities {
	c := snapshot.Capabilities{TraceIncomplete: incomplete, RingBufferFull: overflow, MaxEntries: maxEntries}
	for _, seg := range sn.Segments {
		for _, b := range seg.Blocks {
			if b.State != snapshot.StateInactive && b.Stack > snapshot.EmptyStack && len(sn.Stacks[b.Stack]) > 0 {
				c.FramesOnBlocks = true
			}
		}
	}
	for _, evs := range sn.DeviceTraces {
		for _, ev := range evs {
			if ev.Action != snapshot.ActionSnapshot {
				c.HasTrace = true
			}
			if ev.Stack <= snapshot.EmptyStack || len(sn.Stacks[ev.Stack]) == 0 {
				continue
			}
			switch ev.Action {
			case snapshot.ActionAlloc:
				c.FramesOnAllocs = true
			case snapshot.ActionFreeRequested, snapshot.ActionFreeCompleted:
				c.FramesOnFrees = true
			}
		}
	}
	if len(sn.Frames) > 0 {
		cpp := false
		for _, f := range sn.Frames {
			if snapshot.IsCppFrame(f) {
				cpp = true
			}
		}
		c.CppFrames = cpp
		c.PythonOnly = !cpp
	}
	return c
}

// CheckInvariants verifies the §3 segment invariants and basic trace sanity of a snapshot:
// blocks contiguous from the segment address and summing to total_size; allocated_size = sum
// of active_allocated blocks; active_size = sum of blocks not inactive; requested_size = sum
// of requested_size over active blocks (allocated and pending-free, as PyTorch computes it);
// segment sizes positive; block states known; time_us strictly increasing where present.
func CheckInvariants(sn *snapshot.Snapshot) error {
	for i, seg := range sn.Segments {
		var sum, alloc, active, req int64
		addr := seg.Address
		for j, b := range seg.Blocks {
			if b.Address != addr {
				return fmt.Errorf("segment %d (%#x) block %d: address %#x, want %#x", i, seg.Address, j, b.Address, addr)
			}
			if b.Size <= 0 {
				return fmt.Errorf("segment %d block %d: size %d", i, j, b.Size)
			}
			addr += uint64(b.Size)
			sum += b.Size
			switch b.State {
			case snapshot.StateActiveAllocated:
				alloc += b.Size
				active += b.Size
				req += b.RequestedSize
			case snapshot.StateActivePendingFree:
				active += b.Size
				req += b.RequestedSize
			case snapshot.StateInactive:
			default:
				return fmt.Errorf("segment %d block %d: unknown state", i, j)
			}
		}
		switch {
		case seg.TotalSize <= 0 || sum != seg.TotalSize:
			return fmt.Errorf("segment %d (%#x): blocks sum to %d, total_size %d", i, seg.Address, sum, seg.TotalSize)
		case alloc != seg.AllocatedSize:
			return fmt.Errorf("segment %d (%#x): allocated blocks %d, allocated_size %d", i, seg.Address, alloc, seg.AllocatedSize)
		case active != seg.ActiveSize:
			return fmt.Errorf("segment %d (%#x): active blocks %d, active_size %d", i, seg.Address, active, seg.ActiveSize)
		case req != seg.RequestedSize:
			return fmt.Errorf("segment %d (%#x): requested of active blocks %d, requested_size %d", i, seg.Address, req, seg.RequestedSize)
		}
		if i > 0 && sn.Segments[i-1].Address+uint64(sn.Segments[i-1].TotalSize) > seg.Address {
			return fmt.Errorf("segment %d (%#x) overlaps the previous one", i, seg.Address)
		}
	}
	for d, evs := range sn.DeviceTraces {
		var last int64
		for k, ev := range evs {
			if ev.TimeUS != 0 && ev.TimeUS <= last {
				return fmt.Errorf("device %d event %d: time_us %d not after %d", d, k, ev.TimeUS, last)
			}
			last = ev.TimeUS
			if ev.Stack >= snapshot.StackID(len(sn.Stacks)) || ev.Stack < snapshot.NoStack {
				return fmt.Errorf("device %d event %d: stack %d out of range", d, k, ev.Stack)
			}
		}
	}
	return nil
}
