package pickle

import (
	"math"
	"unsafe"

	"github.com/memsnap/memsnap/analysis/internal/hugepage"
	"github.com/memsnap/memsnap/analysis/snapshot"
)

// indexPipe builds the address index (snapshot.TraceIndex) of every trace list on another
// goroutine while the decoder fills the lists: the decoder hands over each stretch of events
// once it is final, the indexer numbers their addresses, and the index is ready when the
// decode ends. The events handed over are never written again: lists only grow (a list that
// grows is copied, the copy holding the same events), and MaxEvents, which drops events from
// the front, turns the pipe off.
type indexPipe struct {
	jobs  chan indexJob
	done  chan struct{}
	built map[*eventList]*snapshot.TraceIndexer // the indexer's until done is closed
}

type indexJob struct {
	l   *eventList
	evs []snapshot.Event
	// ahead is memory the decoder writes next (the list's room past evs, the next memo
	// page): the indexer has its pages made ready first (populate).
	ahead  unsafe.Pointer
	aheadN uintptr
	// hint is the list's capacity: room reserved for the index, which, like the list's own,
	// costs memory only as it is filled.
	hint int
}

// indexChunk is how many new events a list collects before they are handed over.
const indexChunk = 1 << 15

func startIndexPipe() *indexPipe {
	p := &indexPipe{jobs: make(chan indexJob, 64), done: make(chan struct{}), built: map[*eventList]*snapshot.TraceIndexer{}}
	go func() {
		defer close(p.done)
		for j := range p.jobs {
			if j.aheadN > 0 {
				hugepage.Populate(j.ahead, j.aheadN)
			}
			if j.l == nil {
				continue
			}
			b := p.built[j.l]
			if b == nil {
				b = snapshot.NewTraceIndexer(j.hint)
				p.built[j.l] = b
			} else {
				b.Reserve(j.hint)
			}
			b.Add(j.evs)
		}
	}()
	return p
}

// newEventList registers a new trace list (starting the pipe with the first one).
func (d *decoder) newEventList(evs []snapshot.Event) *eventList {
	l := &eventList{events: evs}
	if d.opt.Index && d.opt.MaxEvents <= 0 {
		if d.pipe == nil {
			d.pipe = startIndexPipe()
		}
		d.evLists = append(d.evLists, l)
	}
	return l
}

// handOver gives the indexer the events of l it has not seen.
func (d *decoder) handOver(l *eventList) {
	if n := len(l.events); d.pipe != nil && n > l.published {
		// The room the next two hand-overs will fill, beyond the one being filled now.
		ahead := l.events[min(n+indexChunk, cap(l.events)):min(n+3*indexChunk, cap(l.events))]
		d.pipe.jobs <- indexJob{l: l, evs: l.events[l.published:n:n], hint: cap(l.events),
			ahead: unsafe.Pointer(unsafe.SliceData(ahead)), aheadN: uintptr(len(ahead)) * unsafe.Sizeof(snapshot.Event{})}
		l.published = n
	}
}

// finishIndex hands over what is left and waits for the indexer. With complete false (a
// failed decode) nothing more is handed over.
func (d *decoder) finishIndex(complete bool) {
	p := d.pipe
	if p == nil {
		return
	}
	if complete {
		for _, l := range d.evLists {
			d.handOver(l)
		}
	}
	close(p.jobs)
	<-p.done
	d.pipe = nil
	if complete {
		d.indexed = p.built
	}
}

// indexOf is the finished index of a trace list whose events (as converted) are evs.
func (d *decoder) indexOf(l *eventList, evs []snapshot.Event) *snapshot.TraceIndex {
	if b := d.indexed[l]; b != nil {
		return b.Finish(evs)
	}
	return nil
}

// memoAhead maps the memo's next page once the current one is half full and has the indexer
// make it ready, so that filling it costs the decoder no page faults.
func (d *decoder) memoAhead() {
	// One compare, inline (it runs for every trace event); the rest is memoNextPage.
	if d.memo.n >= d.memoNext {
		d.memoNextPage()
	}
}

// memoNextPage is memoAhead's work, once the memo reaches d.memoNext; it sets the next.
func (d *decoder) memoNextPage() {
	const half = 1 << (memoPageBits - 1)
	m := &d.memo
	if d.pipe == nil {
		d.memoNext = math.MaxUint64
		return
	}
	// The middle of the current page, or of the next one when past it.
	d.memoNext = m.n&^(1<<memoPageBits-1) + half
	if m.n >= d.memoNext {
		d.memoNext += 1 << memoPageBits
	}
	if m.n&(1<<memoPageBits-1) < half || m.n>>memoPageBits+1 != uint64(len(m.pages)) {
		return
	}
	m.addPage()
	page := m.raw[len(m.raw)-1]
	if m.mapped[len(m.mapped)-1] {
		d.pipe.jobs <- indexJob{ahead: unsafe.Pointer(unsafe.SliceData(page)), aheadN: uintptr(len(page))}
	}
}
