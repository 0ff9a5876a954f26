package render

import (
	"fmt"
	"io"

	"github.com/memsnap/memsnap/analysis"
)

// Picture draws a picture's numbers: its timeline or its segment map.
func Picture(w io.Writer, p *analysis.PictureResult, opt Options) error {
	switch {
	case p == nil:
		return fmt.Errorf("render: no picture")
	case p.Timeline != nil:
		if opt.Note == "" && len(p.Devices) > 1 {
			opt.Note = p.DeviceNote
		}
		return Timeline(w, p.Timeline, opt)
	case p.Segments != nil:
		return Segments(w, p.Segments, opt)
	}
	return fmt.Errorf("render: empty picture")
}
