// Command tilesnap writes a large benchmark snapshot from a small real one: it repeats the
// file's trace until the output reaches a target size, re-encoded as CPython's pickle would
// write such a dump, so that loader benchmarks run on real frames and the real opcode mix.
//
// Every copy but the last is followed by events that return the allocator to the state the
// trace started from (frees of the blocks and segments the copy left mapped, allocations of
// the ones it freed that were there before it), so the copies replay one after another and
// the last copy, the original trace, ends on the file's own segments. Earlier copies are
// shifted back in time by the trace's span. Each copy's events are new dict objects; a string
// or frames list that one event of the original owns is a new object in every copy (CPython
// writes it again, with its own MEMOIZE: per-event compile_context strings, per-traceback
// frames lists), one shared by several events is new per copy and shared within it, and one
// the rest of the file refers to (keys, actions, frame dicts, ”) stays shared: a memo GET.
//
//	go run ./bench/tilesnap -i ../shared/snapshots/real/pt2.10_user-metadata_windows_cs336.pickle -mb 300 -o /tmp/t.pickle
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"slices"

	"github.com/memsnap/memsnap/analysis/pickle/writer"
	"github.com/memsnap/memsnap/bench/internal/pyval"
)

func main() {
	in := flag.String("i", "", "real snapshot (an uncompressed CPython pickle) to tile (required)")
	out := flag.String("o", "", "output file (required)")
	mb := flag.Float64("mb", 300, "target size in MB (10^6 bytes)")
	flag.Parse()
	if *in == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "tilesnap: -i FILE and -o FILE are required")
		os.Exit(2)
	}
	if err := run(*in, *out, int64(*mb*1e6)); err != nil {
		fmt.Fprintln(os.Stderr, "tilesnap:", err)
		os.Exit(1)
	}
}

func run(in, out string, target int64) error {
	data, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	root, err := pyval.Decode(data)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	t, err := newTiler(root)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	// What one more copy adds, measured by writing one and two.
	one, two := t.size(1), t.size(2)
	t.copies = max(1, 1+int((target-one+(two-one)/2)/max(1, two-one)))
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 4<<20)
	w := writer.NewWriter(bw, writer.Config{Protocol: 4})
	w.Begin()
	t.write(w)
	err = w.Finish()
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	st, err := os.Stat(out)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "tilesnap: wrote %s: %d bytes, %d copies of %d events (+%d restoring events per copy)\n",
		out, st.Size(), t.copies, t.events, t.restoring)
	return nil
}

// size is how many bytes the output takes with n copies.
func (t *tiler) size(n int) int64 {
	t.copies = n
	var c countingWriter
	w := writer.NewWriter(&c, writer.Config{Protocol: 4})
	w.Begin()
	t.write(w)
	_ = w.Finish()
	return c.n
}

type countingWriter struct{ n int64 }

func (c *countingWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

type tiler struct {
	root   *writer.Dict
	traces *writer.List
	// owned: how many trace events refer to a list or string that nothing outside the trace
	// events refers to (absent: shared with the rest of the file).
	owned   map[any]int
	actions map[string]*writer.Str // a shared str object per action name
	closing [][]*writer.Dict       // per device: the events that restore the trace's start
	span    int64                  // time_us shift per copy
	copies  int
	events  int
	// restoring is how many restoring events follow each copy (all devices).
	restoring int
}

func newTiler(root any) (*tiler, error) {
	d, ok := root.(*writer.Dict)
	if !ok {
		return nil, fmt.Errorf("not a snapshot dict")
	}
	traces, ok := pyval.Get(d, "device_traces").(*writer.List)
	if !ok {
		return nil, fmt.Errorf("no device_traces")
	}
	t := &tiler{root: d, traces: traces, owned: map[any]int{}, actions: map[string]*writer.Str{}}
	outside := map[any]bool{}
	for _, it := range d.Items {
		if pyval.Str(it.Key) != "device_traces" {
			walk(it.Value, outside)
		}
	}
	lo, hi := int64(1<<62), int64(-1<<62)
	for _, dev := range traces.Items {
		for _, e := range dev.(*writer.List).Items {
			ev := e.(*writer.Dict)
			t.events++
			for _, it := range ev.Items {
				switch v := it.Value.(type) {
				case *writer.Str:
					if pyval.Str(it.Key) == "action" {
						if _, ok := t.actions[v.S]; !ok {
							t.actions[v.S] = v
						}
					}
					if !outside[v] {
						t.owned[v]++
					}
				case *writer.List:
					if !outside[v] {
						t.owned[v]++
					}
				case int64:
					if pyval.Str(it.Key) == "time_us" {
						lo, hi = min(lo, v), max(hi, v)
					}
				}
			}
		}
	}
	for _, o := range []string{"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "segment_map", "segment_unmap"} {
		if s, ok := t.actions[o]; !ok || t.owned[s] > 0 && t.owned[s] < 2 {
			// An action nothing shares yet: one object for all the restoring events.
			t.actions[o] = &writer.Str{S: o}
		}
	}
	if hi >= lo {
		t.span = hi - lo + 1000
	}
	for _, dev := range traces.Items {
		c := t.restore(dev.(*writer.List).Items)
		t.closing = append(t.closing, c)
		t.restoring += len(c)
	}
	return t, nil
}

// walk marks every container and string reachable from v.
func walk(v any, seen map[any]bool) {
	switch x := v.(type) {
	case *writer.Str:
		seen[x] = true
	case *writer.List:
		if !seen[x] {
			seen[x] = true
			for _, it := range x.Items {
				walk(it, seen)
			}
		}
	case *writer.Tuple:
		if !seen[x] {
			seen[x] = true
			for _, it := range x.Items {
				walk(it, seen)
			}
		}
	case *writer.Dict:
		if !seen[x] {
			seen[x] = true
			for _, it := range x.Items {
				walk(it.Key, seen)
				walk(it.Value, seen)
			}
		}
	}
}

func intOf(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case uint64:
		return int64(x)
	}
	return 0
}

// restore plays a device's trace on addresses and returns the events that undo it: frees of
// the blocks and segments it left that were not there before it, then allocations of those
// it freed that were.
func (t *tiler) restore(evs []any) []*writer.Dict {
	type rec struct {
		ev      *writer.Dict
		pending bool
	}
	blocks, segs := map[int64]rec{}, map[int64]rec{}
	var preBlocks, preSegs []*writer.Dict
	for _, e := range evs {
		ev := e.(*writer.Dict)
		addr := intOf(pyval.Get(ev, "addr"))
		switch pyval.Str(pyval.Get(ev, "action")) {
		case "alloc":
			blocks[addr] = rec{ev: ev}
		case "free_requested":
			if r, ok := blocks[addr]; ok {
				r.pending = true
				blocks[addr] = r
			}
		case "free_completed":
			if _, ok := blocks[addr]; ok {
				delete(blocks, addr)
			} else {
				preBlocks = append(preBlocks, ev)
			}
		case "segment_alloc", "segment_map":
			segs[addr] = rec{ev: ev}
		case "segment_free", "segment_unmap":
			if _, ok := segs[addr]; ok {
				delete(segs, addr)
			} else {
				preSegs = append(preSegs, ev)
			}
		}
	}
	var out []*writer.Dict
	for _, a := range sortedKeys(blocks) {
		r := blocks[a]
		if !r.pending {
			out = append(out, t.as(r.ev, "free_requested"))
		}
		out = append(out, t.as(r.ev, "free_completed"))
	}
	for _, a := range sortedKeys(segs) {
		r := segs[a]
		undo := "segment_free"
		if pyval.Str(pyval.Get(r.ev, "action")) == "segment_map" {
			undo = "segment_unmap"
		}
		out = append(out, t.as(r.ev, undo))
	}
	for _, ev := range preSegs {
		redo := "segment_alloc"
		if pyval.Str(pyval.Get(ev, "action")) == "segment_unmap" {
			redo = "segment_map"
		}
		out = append(out, t.as(ev, redo))
	}
	for _, ev := range preBlocks {
		out = append(out, t.as(ev, "alloc"))
	}
	return out
}

func sortedKeys[V any](m map[int64]V) []int64 {
	ks := make([]int64, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// as is a copy of event ev with another action (its other values as ev's).
func (t *tiler) as(ev *writer.Dict, action string) *writer.Dict {
	c := &writer.Dict{Items: slices.Clone(ev.Items)}
	for i, it := range c.Items {
		if pyval.Str(it.Key) == "action" {
			c.Items[i].Value = t.actions[action]
		}
	}
	return c
}

// copyKey names an object of one copy: the original object and the copy's number.
type copyKey struct {
	orig any
	copy int
}

func (t *tiler) write(w *writer.Writer) {
	w.StartDict(t.root, len(t.root.Items))
	for _, it := range t.root.Items {
		_ = w.Value(it.Key)
		if it.Value != any(t.traces) {
			_ = w.Value(it.Value)
			w.Next()
			continue
		}
		w.StartList(t.traces, len(t.traces.Items))
		for di, dev := range t.traces.Items {
			evs := dev.(*writer.List).Items
			n := len(evs)
			if n > 0 {
				n = t.copies*len(evs) + (t.copies-1)*len(t.closing[di])
			}
			w.StartList(dev, n)
			for c := range t.copies {
				if n == 0 {
					break
				}
				shift := -int64(t.copies-1-c) * t.span
				last := int64(0)
				for _, e := range evs {
					last = t.event(w, e.(*writer.Dict), c, shift, 0)
					w.Next()
				}
				if c == t.copies-1 {
					break
				}
				for i, ev := range t.closing[di] {
					t.event(w, ev, c, 0, last+int64(i)+1)
					w.Next()
				}
			}
			w.EndList()
			w.Next()
		}
		w.EndList()
		w.Next()
	}
	w.EndDict()
}

// event writes copy c of event ev: time_us shifted by shift (or set to at when at != 0).
// It returns the time written.
func (t *tiler) event(w *writer.Writer, ev *writer.Dict, c int, shift, at int64) int64 {
	last := c == t.copies-1
	w.StartDict(nil, len(ev.Items))
	var tm int64
	for _, it := range ev.Items {
		_ = w.Value(it.Key)
		switch v := it.Value.(type) {
		case int64:
			if pyval.Str(it.Key) == "time_us" {
				v += shift
				if at != 0 {
					v = at
				}
				tm = v
			}
			w.Int(v)
		case *writer.Str:
			switch n := t.owned[v]; {
			case n == 0 || last && n > 1:
				_ = w.Value(v)
			case n == 1:
				w.StrAs(nil, v.S)
			default:
				if k := (copyKey{v, c}); !w.Ref(k) {
					w.StrAs(k, v.S)
				}
			}
		case *writer.List:
			switch n := t.owned[v]; {
			case n == 0 || last && n > 1:
				_ = w.Value(v)
			case n == 1:
				t.list(w, nil, v)
			default:
				if k := (copyKey{v, c}); !w.Ref(k) {
					t.list(w, k, v)
				}
			}
		default:
			_ = w.Value(v)
		}
		w.Next()
	}
	w.EndDict()
	return tm
}

// list writes a new list object with l's items (shared frame dicts).
func (t *tiler) list(w *writer.Writer, h any, l *writer.List) {
	w.StartList(h, len(l.Items))
	for _, it := range l.Items {
		_ = w.Value(it)
		w.Next()
	}
	w.EndList()
}
