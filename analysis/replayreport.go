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
	return strings.Join(parts, "")
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
