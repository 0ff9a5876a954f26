package capacity

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/memsnap/memsnap/analysis"
)

// Text renders the answer: per device the line to act on, then the predictions, the fidelity,
// what was not matched and the assumptions.
func (r *Answer) Text() string {
	var b strings.Builder
	u := shortUnit(r.Dimension)
	for i, d := range r.Devices {
		if i > 0 {
			b.WriteString("\n")
		}
		if len(r.Devices) > 1 {
			fmt.Fprintf(&b, "device %d: ", d.Device)
		}
		b.WriteString(d.Headline + "\n")
		method := "two_points (the exact method: sizes fitted across the files)"
		if d.Method == MethodRoles {
			method = "roles (one snapshot: an estimate from the allocations' roles)"
		}
		fmt.Fprintf(&b, "method %s; peak allocated ≈ %s + %s × %s\n", method, analysis.FormatBytes(d.FixedBytes), analysis.FormatBytes(d.PerUnitBytes), u)
		capText := "capacity unknown"
		if d.DeviceBytesSource != SourceUnknown {
			capText = fmt.Sprintf("capacity %s (%s)", analysis.FormatBytes(d.DeviceBytes), d.DeviceBytesSource)
		}
		fmt.Fprintf(&b, "%-10s %16s %16s  %s\n", u, "peak allocated", "peak reserved", capText)
		for _, p := range d.Predictions {
			size := fmt.Sprint(p.Size)
			if p.Recorded {
				size += "*"
			}
			verdict := ""
			switch {
			case p.Fits == nil:
			case *p.Fits:
				verdict = "fits"
			default:
				verdict = "fails at " + FailedAt(p)
			}
			fmt.Fprintf(&b, "%-10s %16s %16s  %s\n", size, analysis.FormatBytes(p.PeakAllocatedBytes), analysis.FormatBytes(p.PeakReservedBytes), verdict)
		}
		b.WriteString("(* recorded)\n")
		for _, f := range d.Fidelity {
			var s string
			switch {
			case !f.RecordedOOM:
				s = fmt.Sprintf("fidelity: %s (%s %d): recorded peak allocated %s, predicted %s (%+.1f%%)", filepath.Base(f.File), u, f.RecordedSize,
					analysis.FormatBytes(f.RecordedPeakBytes), analysis.FormatBytes(f.PredictedPeakBytes), f.ErrorPercent)
			case f.PredictedFits == nil:
				s = fmt.Sprintf("fidelity: %s (%s %d) ends in an OOM (%s allocated before it); predicted to need %s", filepath.Base(f.File), u, f.RecordedSize,
					analysis.FormatBytes(f.RecordedPeakBytes), analysis.FormatBytes(f.PredictedPeakBytes))
			case *f.PredictedFits:
				s = fmt.Sprintf("fidelity: %s (%s %d) ends in an OOM, but the prediction fits at this capacity: the replay misses that OOM", filepath.Base(f.File), u, f.RecordedSize)
			default:
				s = fmt.Sprintf("fidelity: %s (%s %d) ends in an OOM, and the prediction fails there too", filepath.Base(f.File), u, f.RecordedSize)
			}
			b.WriteString(s + "\n")
		}
		if d.UnmatchedTotal > 0 {
			fmt.Fprintf(&b, "not matched in every file (%s):\n", count(d.UnmatchedTotal, "site"))
			for _, x := range d.Unmatched {
				fmt.Fprintf(&b, "  %s in %s: %s (largest %s); %s\n", x.Site, x.File, count(x.Count, "allocation"), analysis.FormatBytes(x.LargestBytes), x.Reason)
			}
			if d.UnmatchedTotal > len(d.Unmatched) {
				fmt.Fprintf(&b, "  … %d more (unmatched_total)\n", d.UnmatchedTotal-len(d.Unmatched))
			}
		}
		for _, a := range d.Assumptions {
			fmt.Fprintf(&b, "assumes: %s\n", a)
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	return b.String()
}
