package analysis

// Device balance: the devices one process drives, side by side. torch.nn.DataParallel
// (torch/nn/parallel/data_parallel.py) keeps the module on device_ids[0], copies it to the
// other devices on every forward (replicate → comm.broadcast_coalesced), splits the batch
// (scatter) and gathers every replica's outputs back on output_device (device 0 by default),
// where the loss and its backward run: device 0 holds more than the replicas by design, and
// how much more is the fact worth stating.

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// maxBalanceSites bounds DeviceBalance.Sites.
const maxBalanceSites = 8

// DeviceBalance compares the devices of one file: what each holds allocated, and the sites
// that hold the most on any device with their bytes on every device (in Devices order).
type DeviceBalance struct {
	Devices        []int         `json:"devices"`
	AllocatedBytes []int64       `json:"allocated_bytes"`
	Sites          []BalanceSite `json:"sites"`
	// Outlier is the device holding at least twice what any other device holds (and 256 MiB
	// or more), -1 when none; Evidence says by how much and which site makes the difference.
	Outlier  int    `json:"outlier"`
	Evidence string `json:"evidence"`
	// ExtraSite and ExtraCategory are the site that holds the most bytes on the outlier beyond
	// what any other device holds there (ExtraBytes); empty without an outlier.
	ExtraSite     string `json:"extra_site,omitempty"`
	ExtraCategory string `json:"extra_category,omitempty"`
	ExtraBytes    int64  `json:"extra_bytes,omitempty"`
	// Advice comes from the advice table (rules summarize.balance.*), each item naming its rule.
	Advice []AdviceItem `json:"advice"`
}

// BalanceSite is one (site, role) with its allocated bytes on each device.
type BalanceSite struct {
	Site     string  `json:"site"`
	Category string  `json:"category"`
	Bytes    []int64 `json:"bytes"`
}

// deviceBalance compares the devices of snap from the allocated blocks of its final state;
// nil with fewer than two devices holding memory.
func deviceBalance(snap *snapshot.Snapshot, roles *Roles) *DeviceBalance {
	var devs []int
	for _, d := range snap.Devices() {
		for i := range snap.Segments {
			if snap.Segments[i].Device == d && snap.Segments[i].AllocatedSize > 0 {
				devs = append(devs, d)
				break
			}
		}
	}
	if len(devs) < 2 {
		return nil
	}
	b := &DeviceBalance{Devices: devs, AllocatedBytes: make([]int64, len(devs)), Sites: []BalanceSite{}, Outlier: -1, Advice: []AdviceItem{}}
	type key struct{ site, cat string }
	bytes := map[key][]int64{}
	for i := range snap.Segments {
		s := &snap.Segments[i]
		k := slices.Index(devs, s.Device)
		if k < 0 {
			continue
		}
		for _, blk := range s.Blocks {
			if blk.State != snapshot.StateActiveAllocated {
				continue
			}
			b.AllocatedBytes[k] += blk.Size
			at := roles.Block(s.Device, blk)
			kk := key{at.Site, at.Category}
			if bytes[kk] == nil {
				bytes[kk] = make([]int64, len(devs))
			}
			bytes[kk][k] += blk.Size
		}
	}
	for k, v := range bytes {
		b.Sites = append(b.Sites, BalanceSite{Site: k.site, Category: k.cat, Bytes: v})
	}
	slices.SortFunc(b.Sites, func(x, y BalanceSite) int {
		return cmp.Or(cmp.Compare(slices.Max(y.Bytes), slices.Max(x.Bytes)), cmp.Compare(x.Site, y.Site), cmp.Compare(x.Category, y.Category))
	})
	top, second := 0, -1
	for k := range devs {
		if b.AllocatedBytes[k] > b.AllocatedBytes[top] {
			top = k
		}
	}
	for k := range devs {
		if k != top && (second < 0 || b.AllocatedBytes[k] > b.AllocatedBytes[second]) {
			second = k
		}
	}
	if t, s := b.AllocatedBytes[top], b.AllocatedBytes[second]; t >= 256*mib && t >= 2*s {
		b.Outlier = top
		var others []string
		for k, d := range devs {
			if k != top {
				others = append(others, fmt.Sprintf("device %d %s", d, FormatBytes(b.AllocatedBytes[k])))
			}
		}
		// The site that makes the difference: the most bytes on the outlier beyond the most
		// any other device holds there.
		best, diff := -1, int64(0)
		for i, st := range b.Sites {
			var rest int64
			for k, v := range st.Bytes {
				if k != top {
					rest = max(rest, v)
				}
			}
			if d := st.Bytes[top] - rest; d > diff {
				best, diff = i, d
			}
		}
		b.Evidence = fmt.Sprintf("device %d holds %s allocated, %.1f× the next (%s)", devs[top], FormatBytes(t), float64(t)/float64(max(s, 1)), strings.Join(others, ", "))
		if best >= 0 {
			b.ExtraSite, b.ExtraCategory, b.ExtraBytes = b.Sites[best].Site, b.Sites[best].Category, diff
			b.Evidence += fmt.Sprintf("; %s [%s] holds %s more there than on any other device", b.Sites[best].Site, b.Sites[best].Category, FormatBytes(diff))
		}
	}
	if len(b.Sites) > maxBalanceSites {
		b.Sites = b.Sites[:maxBalanceSites]
	}
	b.Advice = append(b.Advice, advise("summarize", &adviceIn{balance: b, frameworks: roles.Frameworks()})...)
	return b
}
