package raw

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Text renders the section compactly, one line per item, stacks once at the end.
func (r *Result) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", r.Section, r.Kind)
	if r.Kind == KindFrameText && r.FrameText != nil {
		fmt.Fprintf(&b, ": bytes %d–%d of %d", r.Offset, r.NextOffset, r.Total)
		if r.More {
			fmt.Fprintf(&b, " (more: offset=%d)", r.NextOffset)
		}
		b.WriteString("\n")
		b.WriteString(string(r.FrameText.Text))
		b.WriteString("\n")
		return b.String()
	}
	if r.Kind != KindSettings && r.Kind != KindFormat && r.Kind != KindCapabilities {
		fmt.Fprintf(&b, ": items %d–%d of %d", r.Offset, r.Offset+r.Returned, r.Total)
		if r.More {
			fmt.Fprintf(&b, " (more: offset=%d)", r.NextOffset)
		}
	}
	b.WriteString("\n")
	dump := func(v any) {
		j, _ := json.Marshal(v)
		b.Write(j)
		b.WriteString("\n")
	}
	switch {
	case r.Settings != nil:
		dump(r.Settings)
	case r.Format != nil:
		dump(r.Format)
	case r.Capabilities != nil:
		dump(r.Capabilities)
	}
	if s := r.Segment; s != nil {
		fmt.Fprintf(&b, "segment %d: device %d %s %s, %d B (allocated %d, active %d, requested %d), stream %d, pool %s, stack %d, %d blocks\n",
			s.Index, s.Device, s.Address, s.SegmentType, s.TotalSize, s.AllocatedSize, s.ActiveSize, s.RequestedSize, s.Stream, s.Pool, s.StackID, s.Blocks)
	}
	for _, s := range r.Segments {
		fmt.Fprintf(&b, "[%d] device %d %s %s %d B allocated %d stream %d pool %s blocks %d stack %d\n",
			s.Index, s.Device, s.Address, s.SegmentType, s.TotalSize, s.AllocatedSize, s.Stream, s.Pool, s.Blocks, s.StackID)
	}
	for _, k := range r.Blocks {
		fmt.Fprintf(&b, "[%d] %s %d B (requested %d) %s stack %d\n", k.Index, k.Address, k.Size, k.RequestedSize, k.State, k.StackID)
	}
	for _, e := range r.Events {
		fmt.Fprintf(&b, "#%d %s %s %d B stream %d t=%d stack %d", e.Index, e.Action, e.Address, e.Size, e.Stream, e.TimeUS, e.StackID)
		if e.DeviceFree != 0 {
			fmt.Fprintf(&b, " device_free %d", e.DeviceFree)
		}
		if e.CompileContext != "" {
			fmt.Fprintf(&b, " compile %q", e.CompileContext)
		}
		if e.UserMetadata != "" {
			fmt.Fprintf(&b, " meta %q", e.UserMetadata)
		}
		b.WriteString("\n")
	}
	for _, a := range r.Annotations {
		fmt.Fprintf(&b, "%s %s device %d t=%d\n", a.Stage, a.Name, a.Device, a.TimeUS)
	}
	for _, s := range r.Stacks {
		fmt.Fprintf(&b, "stack %d (%d frames):\n", s.ID, s.FramesTotal)
		for _, f := range s.Frames {
			fmt.Fprintf(&b, "  %s\n", f)
		}
		if s.FramesOmitted > 0 {
			fmt.Fprintf(&b, "  … %d more frames (read stacks[%d])\n", s.FramesOmitted, s.ID)
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	return b.String()
}
