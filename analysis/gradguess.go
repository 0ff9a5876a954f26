package analysis

import (
	"fmt"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

// gradGuesser refines the category of live blocks with an empty stack in files recorded with
// stacks="python". Such files record no frame for anything the autograd engine allocates, so a
// frameless live block is a gradient or a backward temporary (or memory allocated before
// recording started). A block that is still alive when the snapshot is taken and has the exact
// size of a live parameter on its device is most likely that parameter's .grad; any other is
// left a backward temporary. Both remain guesses and the evidence says so.
type gradGuesser struct {
	params map[devSize]string // a parameter site per (device, block size)
}

type devSize struct {
	dev  int
	size int64
}

// Evidence of the two guesses.
const (
	evGradientGuess  = "guess: empty stack, and stacks=\"python\" records no frames for backward-pass allocations; this block is alive at the snapshot and has the size of a parameter (%s, %s), so it is most likely that parameter's gradient (gradients outlive the backward pass, temporaries do not); a backward temporary of the same size would look the same: record with stacks=\"all\" to be sure"
	evTemporaryGuess = "guess: empty stack, and stacks=\"python\" records no frames for backward-pass allocations (gradients and backward temporaries); no live parameter has this block's size, so it is most likely a backward temporary (memory allocated before recording started looks the same): record with stacks=\"all\" to be sure"
)

// newGradGuesser indexes the live parameter blocks of snap; nil when the file's empty stacks
// are not the stacks="python" kind (the refinement then changes nothing).
func newGradGuesser(snap *snapshot.Snapshot, a *Attributor) *gradGuesser {
	if snap == nil || snap.Caps.CppFrames {
		return nil
	}
	g := &gradGuesser{params: map[devSize]string{}}
	for si := range snap.Segments {
		s := &snap.Segments[si]
		for _, b := range s.Blocks {
			if b.State != snapshot.StateActiveAllocated || b.Stack == snapshot.EmptyStack || b.Stack == snapshot.NoStack {
				continue
			}
			if at := a.Attribute(snap, b.Stack); at.Category == CategoryParameter {
				k := devSize{s.Device, b.Size}
				if _, ok := g.params[k]; !ok {
					g.params[k] = at.Site.Site
				}
			}
		}
	}
	return g
}

// refine returns at with the category and evidence of one live block on device dev.
func (g *gradGuesser) refine(at Attribution, dev int, b snapshot.Block) Attribution {
	if g == nil || b.State != snapshot.StateActiveAllocated || b.Stack != snapshot.EmptyStack ||
		at.Category != CategoryBackwardTemporary {
		return at
	}
	if site, ok := g.params[devSize{dev, b.Size}]; ok {
		at.Category = CategoryGradient
		at.Evidence = fmt.Sprintf(evGradientGuess, FormatBytes(b.Size), site)
	} else {
		at.Evidence = evTemporaryGuess
	}
	return at
}
