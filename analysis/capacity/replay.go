package capacity

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/memsnap/memsnap/analysis/allocator"
)

// op is one step of a program: the malloc or the free of an allocation (a rec index).
type op struct {
	rec  int32
	free bool
}

// program is a stretch of a device's trace made replayable: the allocations alive at its first
// event (made first, in trace order: the blocks alive before the trace, then the others), then
// its mallocs and frees in trace order.
type program struct {
	ops   []op
	seeds int // the first seeds ops make the allocations alive at the start
	from  int
	to    int
}

func newProgram(t *devTrace, from, to int) program {
	p := program{from: from, to: to}
	type timed struct {
		ev int
		op op
	}
	var evs []timed
	for i, r := range t.recs {
		if r.at < from && (r.end < 0 || r.end >= from) {
			p.ops = append(p.ops, op{rec: int32(i)})
		}
		if r.at >= from && r.at < to {
			evs = append(evs, timed{r.at, op{rec: int32(i)}})
		}
		if r.end >= from && r.end < to {
			evs = append(evs, timed{r.end, op{rec: int32(i), free: true}})
		}
	}
	p.seeds = len(p.ops)
	slices.SortStableFunc(evs, func(a, b timed) int { return a.ev - b.ev })
	for _, e := range evs {
		p.ops = append(p.ops, e.op)
	}
	return p
}

// outcome is one replay of a program.
type outcome struct {
	peakAllocated int64
	peakReserved  int64
	// peakEvent is the trace event of the malloc that reached the peak allocated (-1: a seed).
	peakEvent int
	// failed is the rec whose malloc found no room at the capacity (-1: everything fit);
	// failedBytes what it asked for.
	failed      int
	failedBytes int64
}

// errModel marks a panic of the allocator model turned into an error.
var errModel = errors.New("internal error in the allocator model (please report it)")

// replay runs p through a fresh allocator model with settings set and capacity (0: unbounded),
// the allocations sized by sizes (per rec). It stops at the first malloc that does not fit.
func replay(ctx context.Context, t *devTrace, p program, sizes []int64, set allocator.Settings, capacity int64) (out outcome, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v", errModel, r)
		}
	}()
	out = outcome{failed: -1, peakEvent: -1}
	a := allocator.New(allocator.Config{Settings: set, Capacity: capacity})
	blocks := make([]*allocator.Block, len(t.recs))
	for i, o := range p.ops {
		if i&(1<<14-1) == 0 {
			if err := ctx.Err(); err != nil {
				return out, fmt.Errorf("capacity: %w", err)
			}
		}
		r := &t.recs[o.rec]
		if o.free {
			if b := blocks[o.rec]; b != nil {
				a.Free(b)
				blocks[o.rec] = nil
			}
			continue
		}
		n := sizes[o.rec]
		if n <= 0 {
			continue // absent at this size
		}
		b, err := a.Malloc(n, r.stream, allocator.DefaultPool)
		if err != nil {
			var oe *allocator.OOMError
			if !errors.As(err, &oe) {
				return out, fmt.Errorf("capacity: replay: %w", err)
			}
			out.failed, out.failedBytes = int(o.rec), n
			break
		}
		blocks[o.rec] = b
		if al := a.Allocated(); al > out.peakAllocated {
			out.peakAllocated = al
			out.peakEvent = r.at
		}
	}
	st := a.Stats()
	out.peakReserved = st.PeakReserved
	out.peakAllocated = max(out.peakAllocated, st.PeakAllocated)
	return out, nil
}
