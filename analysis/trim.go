package analysis

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// TrimOptions says which trace events a trimmed snapshot keeps.
type TrimOptions struct {
	// Device keeps only this device's segments and trace (-1: every device).
	Device int `json:"device"`
	// LastEvents keeps the newest N events of each device trace (0: no bound).
	LastEvents int `json:"last_events"`
	// Window keeps events [Start, End) of the device trace (End 0: to the end); it needs one
	// device with a trace (or Device).
	Window     bool `json:"window"`
	Start, End int
}

// TrimDevice is what a trim kept of one device.
type TrimDevice struct {
	// Device: CUDA device.
	Device int `json:"device"`
	// EventsBefore: Trace events in the input.
	EventsBefore int `json:"events_before"`
	// Start: First input event kept.
	Start int `json:"start"`
	// End: End of the events kept (exclusive).
	End int `json:"end"`
	// StateAt: The segments written are the state after this input event (rebuilt by replay); -1: the input's final state.
	StateAt int `json:"state_at"`
	// Reserved: Reserved bytes of the segments written.
	Reserved int64 `json:"reserved_bytes"`
	// Allocated: Allocated bytes of the segments written.
	Allocated int64 `json:"allocated_bytes"`
	// BlocksOutOfs: Live blocks left out because no segment the trace shows holds them.
	BlocksOutOfs int `json:"blocks_outside_segments"`
}

// TrimReport says what Trim kept.
type TrimReport struct {
	Devices []TrimDevice `json:"devices"`
	Notes   []string     `json:"notes"`
}

// Trim returns a copy of snap that keeps the state and cuts the trace: the newest
// opt.LastEvents events of each device, or the window [opt.Start, opt.End) of one device. A
// window that ends before the trace does gets the segments rebuilt by replay at its end, so the
// trace still leads to the state it is written with (as memory_viz's views assume). Frames,
// stacks and settings are shared with snap; snap is not changed.
func Trim(ctx context.Context, snap *snapshot.Snapshot, opt TrimOptions) (*snapshot.Snapshot, *TrimReport, error) {
	if snap == nil {
		return nil, nil, fmt.Errorf("trim: no snapshot")
	}
	if opt.LastEvents < 0 {
		return nil, nil, fmt.Errorf("trim: --last-events must not be negative")
	}
	devs := snap.Devices()
	keep := func(d int) bool { return opt.Device < 0 || d == opt.Device }
	if opt.Device >= 0 {
		found := false
		for _, d := range devs {
			found = found || d == opt.Device
		}
		if !found {
			return nil, nil, fmt.Errorf("%s: no device %d (the file has devices %v)", snap.Path, opt.Device, devs)
		}
	}
	if opt.Window && opt.Device < 0 {
		var traced []int
		for d, evs := range snap.DeviceTraces {
			if len(evs) > 0 {
				traced = append(traced, d)
			}
		}
		if len(traced) > 1 {
			return nil, nil, fmt.Errorf("%s: --window needs --device: devices %v have traces", snap.Path, traced)
		}
	}
	out := *snap
	out.Path = ""
	out.DroppedEvents = nil
	out.DeviceTraces = make([][]snapshot.Event, len(snap.DeviceTraces))
	out.Segments = nil
	rep := &TrimReport{Devices: []TrimDevice{}, Notes: []string{}}
	rebuiltDev := map[int][]snapshot.Segment{}
	for d, evs := range snap.DeviceTraces {
		if !keep(d) || !slices.Contains(devs, d) {
			out.DeviceTraces[d] = []snapshot.Event{}
			continue
		}
		n := len(evs)
		start, end := 0, n
		if opt.Window && n > 0 {
			start, end = opt.Start, opt.End
			if end <= 0 {
				end = n
			}
			if start < 0 || start >= end || end > n {
				return nil, nil, fmt.Errorf("%s: window %d:%d is outside device %d's trace (events 0:%d)", snap.Path, opt.Start, opt.End, d, n)
			}
		}
		if opt.LastEvents > 0 && end-start > opt.LastEvents {
			start = end - opt.LastEvents
		}
		out.DeviceTraces[d] = evs[start:end]
		td := TrimDevice{Device: d, EventsBefore: n, Start: start, End: end, StateAt: -1}
		if end < n {
			e, err := engineAt(ctx, snap, d, end-1)
			if err != nil {
				return nil, nil, err
			}
			rb := rebuildSegments(e, snap, d)
			rebuiltDev[d] = rb.segs
			td.StateAt, td.BlocksOutOfs = end-1, rb.outside
			if rb.outside > 0 {
				rep.Notes = append(rep.Notes, fmt.Sprintf("device %d: %d live blocks (%s) at event %d lie in no segment the trace shows and are left out", d, rb.outside, FormatBytes(rb.outsideBytes), end-1))
			}
			if rb.expandable {
				rep.Notes = append(rep.Notes, fmt.Sprintf("device %d: expandable segments are written with their final ranges (the ranges mapped at event %d are not rebuilt)", d, end-1))
			}
			if e.requested {
				rep.Notes = append(rep.Notes, fmt.Sprintf("device %d: the trace records requested sizes; block sizes at event %d are rounded up to 512 B", d, end-1))
			}
		}
		rep.Devices = append(rep.Devices, td)
	}
	for si := range snap.Segments {
		s := snap.Segments[si]
		if !keep(s.Device) {
			continue
		}
		if _, ok := rebuiltDev[s.Device]; ok {
			continue
		}
		out.Segments = append(out.Segments, s)
	}
	for d := range len(snap.DeviceTraces) {
		out.Segments = append(out.Segments, rebuiltDev[d]...)
	}
	if out.Segments == nil {
		out.Segments = []snapshot.Segment{}
	}
	for i := range rep.Devices {
		td := &rep.Devices[i]
		for _, s := range out.Segments {
			if s.Device == td.Device {
				td.Reserved += s.TotalSize
				td.Allocated += s.Sums().Allocated
			}
		}
	}
	if opt.Device >= 0 {
		var anns []snapshot.Annotation
		for _, a := range snap.Annotations {
			if a.Device == opt.Device || a.Device < 0 {
				anns = append(anns, a)
			}
		}
		out.Annotations = anns
	}
	return &out, rep, nil
}

// Text renders a trim report.
func (r *TrimReport) Text() string {
	var b strings.Builder
	for _, d := range r.Devices {
		fmt.Fprintf(&b, "device %d: kept events %d:%d of %d", d.Device, d.Start, d.End, d.EventsBefore)
		if d.StateAt >= 0 {
			fmt.Fprintf(&b, "; segments rebuilt after event %d", d.StateAt)
		} else {
			b.WriteString("; final segments kept")
		}
		fmt.Fprintf(&b, " (reserved %s, allocated %s)\n", FormatBytes(d.Reserved), FormatBytes(d.Allocated))
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	return b.String()
}
