package analysis

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// ReplayReport is the replay of every selected device of one file: what `memsnap replay --json`
// prints and the replay MCP tool returns.
type ReplayReport struct {
	Path    string          `json:"path"`
	Devices []*ReplayResult `json:"devices"`
	// DevicesOmitted counts the devices replayed but not listed (at most MaxListedDevices).
	DevicesOmitted int `json:"devices_omitted,omitempty"`
	// Notes says what was left out.
	Notes []string `json:"notes,omitempty"`
}

// Text renders every device's replay, one after the other.
func (r *ReplayReport) Text() string {
	if len(r.Devices) == 0 {
		return "no device has segments or trace events\n"
	}
	parts := make([]string, len(r.Devices))
	for i, d := range r.Devices {
		parts[i] = d.Text()
	}
	out := strings.Join(parts, "")
	for _, n := range r.Notes {
		out += "note: " + n + "\n"
	}
	return out
}

// ReplaySnapshot replays one device of snap when device is non-nil (opt.Device is ignored), else
// every device that has segments or trace events (ReplayAll). A device the file does not have is
// an error that names the devices it has.
func ReplaySnapshot(ctx context.Context, snap *snapshot.Snapshot, device *int, opt ReplayOptions) (*ReplayReport, error) {
	if snap == nil {
		return nil, fmt.Errorf("replay: no snapshot")
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	out := &ReplayReport{Path: snap.Path, Devices: []*ReplayResult{}}
	if device == nil {
		rs, err := ReplayAll(ctx, snap, opt)
		if err != nil {
			return nil, err
		}
		out.Devices = rs
		keep := listedDevices(len(rs), func(i int) deviceRank {
			return deviceRank{oom: rs[i].OOMEvents > 0, peak: rs[i].PeakReservedBytes}
		}, MaxListedDevices)
		if n := len(rs) - len(keep); n > 0 {
			out.Devices, out.DevicesOmitted = keepListed(rs, keep), n
			out.Notes = append(out.Notes, devicesOmittedNote(n, len(rs), "an OOM"))
		}
		return out, nil
	}
	devs := snap.Devices()
	if !slices.Contains(devs, *device) {
		return nil, fmt.Errorf("%s: no device %d (the file has devices %v)", snap.Path, *device, devs)
	}
	o := opt
	o.Device = *device
	r, err := ReplayDevice(ctx, snap, o)
	if err != nil {
		return nil, err
	}
	out.Devices = append(out.Devices, r)
	return out, nil
}
