package analysis

import (
	"fmt"
	"slices"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// Why a picture draws the device it draws.
const (
	DeviceReasonAsked    = "asked"         // the caller named it
	DeviceReasonOOM      = "oom"           // the only device (or the first) with an oom event
	DeviceReasonPeak     = "peak"          // no OOM: the highest allocated peak over its trace
	DeviceReasonAlloc    = "allocated"     // no trace anywhere: the most allocated in the final state
	DeviceReasonOnlyOne  = "only_device"   // the file has one device
	DeviceReasonNoTraced = "most_reserved" // no device has a trace or allocated memory: the most reserved
)

// PictureDeviceInfo is what one device of a file holds, so a picture of one device can say what
// the others hold.
type PictureDeviceInfo struct {
	Device      int `json:"device"`
	TraceEvents int `json:"trace_events"`
	// HasTrace: the events are a history of allocations (not the one or two events a
	// state-only file may hold).
	HasTrace bool `json:"has_trace"`
	OOMs     int  `json:"ooms"`
	// PeakAllocatedBytes is the highest allocated total over the device's trace (counted from
	// its events and the final state: an alloc adds its size, the first free event of the block
	// takes it away); 0 without a trace (HasTrace false).
	PeakAllocatedBytes int64 `json:"peak_allocated_bytes"`
	// AllocatedBytes and ReservedBytes are the final state's.
	AllocatedBytes int64 `json:"allocated_bytes"`
	ReservedBytes  int64 `json:"reserved_bytes"`
}

// DeviceChoice is the device a picture draws, why, and every device of the file.
type DeviceChoice struct {
	Device  int                 `json:"device"`
	Reason  string              `json:"reason"`
	Text    string              `json:"text"`
	Devices []PictureDeviceInfo `json:"devices"`
}

// PictureDevices counts, per device of snap, its trace events, OOMs, allocated peak and
// final allocated and reserved bytes.
func PictureDevices(snap *snapshot.Snapshot) []PictureDeviceInfo {
	out := []PictureDeviceInfo{}
	for _, d := range snap.Devices() {
		s := PictureDeviceInfo{Device: d}
		var requested int64
		for si := range snap.Segments {
			seg := &snap.Segments[si]
			if seg.Device != d {
				continue
			}
			s.ReservedBytes += seg.TotalSize
			for _, b := range seg.Blocks {
				if b.State == snapshot.StateActiveAllocated {
					s.AllocatedBytes += b.Size
					requested += b.RequestedSize
				}
			}
		}
		if d < len(snap.DeviceTraces) {
			evs := snap.DeviceTraces[d]
			s.TraceEvents = len(evs)
			s.HasTrace = snapshot.IsHistory(evs)
			// A trace of requested sizes (newer PyTorch: an alloc size that is no multiple of
			// 512 B) starts from the blocks' requested bytes, as the replay does.
			final := s.AllocatedBytes
			if slices.ContainsFunc(evs, func(ev snapshot.Event) bool { return ev.Action == snapshot.ActionAlloc && ev.Size%512 != 0 }) {
				final = requested
			}
			s.PeakAllocatedBytes, s.OOMs = tracePeak(evs, final)
			if !s.HasTrace {
				s.PeakAllocatedBytes = 0
			}
		}
		out = append(out, s)
	}
	return out
}

// tracePeak is the highest allocated total over a trace and its oom events. Allocated bytes go
// up at an alloc and down at the block's first free event (free_requested, or free_completed
// when none was recorded), as the replay counts them; the level before the first event is the
// final allocated bytes less the trace's net change.
func tracePeak(evs []snapshot.Event, final int64) (int64, int) {
	live := map[uint64]int64{} // allocated in the trace, not yet freed: their sizes
	freed := map[uint64]bool{} // a free was counted, the free_completed is still to come
	var cur, hi int64
	ooms := 0
	for i := range evs {
		ev := &evs[i]
		switch ev.Action {
		case snapshot.ActionAlloc:
			if old, ok := live[ev.Addr]; ok { // allocated again without a free: replaced
				cur -= old
			}
			cur += ev.Size
			live[ev.Addr] = ev.Size
			delete(freed, ev.Addr)
		case snapshot.ActionFreeRequested, snapshot.ActionFreeCompleted:
			size, ok := live[ev.Addr]
			if !ok {
				size = ev.Size // a block alive before the trace
			}
			if ok || !freed[ev.Addr] {
				cur -= size
				delete(live, ev.Addr)
				if ev.Action == snapshot.ActionFreeRequested {
					freed[ev.Addr] = true
				}
			} else if ev.Action == snapshot.ActionFreeCompleted {
				delete(freed, ev.Addr)
			}
		case snapshot.ActionOOM:
			ooms++
		}
		hi = max(hi, cur)
	}
	start := max(final-cur, 0)
	return start + max(hi, 0), ooms
}

// ChooseDevice picks the device a picture draws when none is given: the device with an OOM (the
// first such), else the highest allocated peak over its trace, else (no trace) the most
// allocated, else the most reserved. A device the file lacks is an error.
func ChooseDevice(snap *snapshot.Snapshot, device *int) (DeviceChoice, error) {
	devs := PictureDevices(snap)
	ids := make([]int, len(devs))
	for i, d := range devs {
		ids[i] = d.Device
	}
	ch := DeviceChoice{Devices: devs}
	if device != nil {
		if !slices.Contains(ids, *device) {
			return ch, fmt.Errorf("%s: no device %d (the file has devices %v)", snap.Path, *device, ids)
		}
		ch.Device, ch.Reason = *device, DeviceReasonAsked
		ch.Text = fmt.Sprintf("device %d, as asked", *device)
		ch.Text += othersText(devs, *device)
		return ch, nil
	}
	if len(devs) == 0 {
		return ch, fmt.Errorf("%s: the file has no segments and no trace events: nothing to draw", snap.Path)
	}
	best := devs[0]
	switch {
	case len(devs) == 1:
		ch.Reason = DeviceReasonOnlyOne
	case slices.ContainsFunc(devs, func(d PictureDeviceInfo) bool { return d.OOMs > 0 }):
		ch.Reason = DeviceReasonOOM
		for _, d := range devs {
			if d.OOMs > 0 {
				best = d
				break
			}
		}
	case slices.ContainsFunc(devs, func(d PictureDeviceInfo) bool { return d.HasTrace }):
		ch.Reason = DeviceReasonPeak
		best = devs[slices.IndexFunc(devs, func(d PictureDeviceInfo) bool { return d.HasTrace })]
		for _, d := range devs {
			if d.HasTrace && d.PeakAllocatedBytes > best.PeakAllocatedBytes {
				best = d
			}
		}
	case slices.ContainsFunc(devs, func(d PictureDeviceInfo) bool { return d.AllocatedBytes > 0 }):
		ch.Reason = DeviceReasonAlloc
		for _, d := range devs {
			if d.AllocatedBytes > best.AllocatedBytes {
				best = d
			}
		}
	default:
		ch.Reason = DeviceReasonNoTraced
		for _, d := range devs {
			if d.ReservedBytes > best.ReservedBytes {
				best = d
			}
		}
	}
	ch.Device = best.Device
	switch ch.Reason {
	case DeviceReasonOnlyOne:
		ch.Text = fmt.Sprintf("device %d, the file's only device", best.Device)
	case DeviceReasonOOM:
		ch.Text = fmt.Sprintf("device %d: it has the OOM (%d)", best.Device, best.OOMs)
	case DeviceReasonPeak:
		ch.Text = fmt.Sprintf("device %d: no OOM; the highest allocated peak (%s)", best.Device, FormatBytes(best.PeakAllocatedBytes))
	case DeviceReasonAlloc:
		ch.Text = fmt.Sprintf("device %d: no trace; the most allocated (%s)", best.Device, FormatBytes(best.AllocatedBytes))
	default:
		ch.Text = fmt.Sprintf("device %d: the most reserved (%s)", best.Device, FormatBytes(best.ReservedBytes))
	}
	ch.Text += othersText(devs, best.Device)
	return ch, nil
}

// othersText says what the devices other than dev hold ("" when there are none).
func othersText(devs []PictureDeviceInfo, dev int) string {
	s := ""
	for _, d := range devs {
		if d.Device == dev {
			continue
		}
		if s == "" {
			s = "; other devices: "
		} else {
			s += ", "
		}
		switch {
		case d.HasTrace:
			s += fmt.Sprintf("%d (peak %s allocated", d.Device, FormatBytes(d.PeakAllocatedBytes))
		default:
			s += fmt.Sprintf("%d (%s allocated, no trace", d.Device, FormatBytes(d.AllocatedBytes))
		}
		if d.OOMs > 0 {
			s += fmt.Sprintf(", %d OOM", d.OOMs)
		}
		s += fmt.Sprintf(", %s reserved at the end)", FormatBytes(d.ReservedBytes))
	}
	return s
}
