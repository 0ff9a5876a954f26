package allocator

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/memsnap/memsnap/analysis/snapshot"
)

const MiB = 1 << 20

func uniform(n int) [NumIntervals]int {
	var d [NumIntervals]int
	for i := range d {
		d[i] = n
	}
	return d
}

func TestRoundSize(t *testing.T) {
	for _, c := range []struct {
		div        int
		n, want    int64
		allocation int64
	}{
		{0, 1, 512, 2 * MiB},
		{0, 512, 512, 2 * MiB},
		{0, 513, 1024, 2 * MiB},
		{0, MiB, MiB, 2 * MiB},
		{0, MiB + 1, MiB + 512, 20 * MiB},
		{0, 10*MiB - 512, 10*MiB - 512, 20 * MiB},
		{0, 10 * MiB, 10 * MiB, 10 * MiB},
		{0, 11*MiB + 1, 11*MiB + 512, 12 * MiB},
		{4, 1258291, 1310720, 20 * MiB},            // 1.2 MiB: quarters of [1, 2) MiB
		{4, 3000, 3072, 2 * MiB},                   // [2048, 4096) in quarters of 512
		{4, 2000, 2048, 2 * MiB},                   // not above 512 × 4: plain rounding
		{4, 64 * MiB, 64 * MiB, 64 * MiB},          // powers of two stay
		{2, 100*MiB + 1, 128 * MiB, 128 * MiB},     // halves of [64, 128) MiB
		{8, 100*MiB + 1, 104 * MiB, 104 * MiB},     // eighths
		{1, 100*MiB + 1, 100*MiB + 512, 102 * MiB}, // 1 = off
	} {
		s := Settings{RoundupPower2Divisions: uniform(c.div)}
		if got := s.RoundSize(c.n); got != c.want {
			t.Errorf("divisions %d: RoundSize(%d) = %d, want %d", c.div, c.n, got, c.want)
		}
		if got := AllocationSize(s.RoundSize(c.n)); got != c.allocation {
			t.Errorf("divisions %d: AllocationSize(RoundSize(%d)) = %d, want %d", c.div, c.n, got, c.allocation)
		}
	}
}

func TestParseRoundupAndSettings(t *testing.T) {
	d, err := ParseRoundup("[256:2,>:1]")
	if err != nil {
		t.Fatal(err)
	}
	want := [NumIntervals]int{2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1}
	if d != want {
		t.Errorf("[256:2,>:1] = %v, want %v", d, want)
	}
	s := Settings{RoundupPower2Divisions: d}
	if got := s.RoundupString(); got != "[256:2,>:1]" {
		t.Errorf("RoundupString = %q", got)
	}
	for _, c := range []struct {
		sets []string
		conf string
		err  string
	}{
		{[]string{"expandable_segments=True"}, "expandable_segments:True", ""},
		{[]string{"expandable_segments=true", "max_split_size_mb=128"}, "expandable_segments:True,max_split_size_mb:128", ""},
		{[]string{"roundup_power2_divisions=4", "garbage_collection_threshold=0.8"}, "roundup_power2_divisions:4,garbage_collection_threshold:0.8", ""},
		{[]string{"max_split_size_mb=128", "max_split_size_mb=0"}, "", ""},
		{[]string{"roundup_power2_divisions=[1:4,>:8]"}, "roundup_power2_divisions:[1:4,>:8]", ""},
		{[]string{"foo=1"}, "", `unknown allocator setting "foo": the accepted keys are expandable_segments, max_split_size_mb, roundup_power2_divisions, garbage_collection_threshold`},
		{[]string{"max_split_size_mb=20"}, "", "max_split_size_mb must be more than 20"},
		{[]string{"max_split_size_mb=x"}, "", "max_split_size_mb must be a whole number"},
		{[]string{"roundup_power2_divisions=3"}, "", "must be 0 or a power of two"},
		{[]string{"garbage_collection_threshold=1"}, "", "garbage_collection_threshold must be a number in (0, 1)"},
		{[]string{"expandable_segments=yes"}, "", "expandable_segments must be True or False"},
	} {
		var s Settings
		var err error
		for _, kv := range c.sets {
			k, v, _ := strings.Cut(kv, "=")
			if err = s.Set(k, v); err != nil {
				break
			}
		}
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%v: %v", c.sets, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%v: error %v, want %q", c.sets, err, c.err)
		case c.err == "" && s.AllocConf() != c.conf:
			t.Errorf("%v: AllocConf %q, want %q", c.sets, s.AllocConf(), c.conf)
		}
		var se *SettingError
		if err != nil && !errors.As(err, &se) {
			t.Errorf("%v: %T is not a SettingError", c.sets, err)
		}
	}
}

func TestFromSnapshot(t *testing.T) {
	st := snapshot.AllocatorSettings{Present: true, MaxSplitSize: 128 * MiB, ExpandableSegments: true, GCThreshold: 0.6,
		Raw: map[string]any{"roundup_power2_divisions": map[string]any{"1": int64(4), "2": int64(4), "256": int64(8), "32768": int64(2)}}}
	s := FromSnapshot(st)
	if !s.ExpandableSegments || s.MaxSplitSize != 128*MiB || s.GCThreshold != 0.6 ||
		s.RoundupPower2Divisions[0] != 4 || s.RoundupPower2Divisions[1] != 4 || s.RoundupPower2Divisions[8] != 8 || s.RoundupPower2Divisions[15] != 2 || s.RoundupPower2Divisions[3] != 0 {
		t.Errorf("FromSnapshot = %+v", s)
	}
	if s := FromSnapshot(snapshot.AllocatorSettings{MaxSplitSize: -1}); s != (Settings{}) {
		t.Errorf("unset = %+v", s)
	}
}

// rec records events as "action size" strings.
type rec struct{ evs []string }

func (r *rec) on(ev Event) {
	r.evs = append(r.evs, fmt.Sprintf("%s %d", ev.Action, ev.Size/1024))
}

func layoutOf(a *Allocator) string {
	var parts []string
	for _, sv := range a.Segments() {
		var bs []string
		for _, b := range sv.Blocks {
			st := "free"
			switch b.State() {
			case snapshot.StateActiveAllocated:
				st = "used"
			case snapshot.StateActivePendingFree:
				st = "pend"
			}
			bs = append(bs, fmt.Sprintf("%s:%dK", st, b.Size()/1024))
		}
		kind := "L"
		if sv.Small {
			kind = "S"
		}
		if sv.Expandable {
			kind += "x"
		}
		parts = append(parts, kind+"["+strings.Join(bs, " ")+"]")
	}
	return strings.Join(parts, " ")
}

// op is one step of a scripted run: malloc size on stream (into slot), free slot, or a
// special action.
type op struct {
	kind   string // "m" malloc, "f" free, "r" free requested (pending), "c" complete, "e" empty_cache, "p" malloc in private pool (1,0), "s" record_stream
	size   int64
	slot   int
	stream uint64
}

func m(slot int, size int64) op            { return op{kind: "m", slot: slot, size: size} }
func ms(slot int, size int64, s uint64) op { return op{kind: "m", slot: slot, size: size, stream: s} }
func f(slot int) op                        { return op{kind: "f", slot: slot} }
func mp(slot int, size int64) op           { return op{kind: "p", slot: slot, size: size} }

func runOps(t *testing.T, a *Allocator, ops []op) []error {
	t.Helper()
	blocks := map[int]*Block{}
	var errs []error
	for i, o := range ops {
		switch o.kind {
		case "m", "p":
			pool := DefaultPool
			if o.kind == "p" {
				pool = snapshot.PoolID{1, 0}
			}
			b, err := a.Malloc(o.size, o.stream, pool)
			errs = append(errs, err)
			if err == nil {
				blocks[o.slot] = b
			}
		case "f":
			a.Free(blocks[o.slot])
		case "r":
			a.FreeRequested(blocks[o.slot])
		case "c":
			a.Complete(blocks[o.slot])
		case "s":
			a.RecordStream(blocks[o.slot], o.stream)
		case "e":
			a.EmptyCache()
		}
		if err := a.Check(); err != nil {
			t.Fatalf("after op %d %+v: %v", i, o, err)
		}
	}
	return errs
}

func TestAllocatorRules(t *testing.T) {
	tests := []struct {
		name     string
		cfg      Config
		ops      []op
		layout   string
		events   string // segment events and ooms only
		reserved int64
		ooms     int
	}{
		{"small pool packs 2 MiB segments, remainders of 512 B split", Config{},
			[]op{m(0, 1000), m(1, 2000), m(2, 512)}, "S[used:1K used:2K used:0K free:2044K]", "segment_alloc 2048", 2 * MiB, 0},
		{"large pool: below 10 MiB a 20 MiB segment, split when more than 1 MiB is left", Config{},
			[]op{m(0, 3*MiB), m(1, 16*MiB-512)}, "L[used:3072K used:16383K free:1024K]", "segment_alloc 20480", 20 * MiB, 0},
		{"large pool: exactly 1 MiB left is not split", Config{},
			[]op{m(0, 11*MiB)}, "L[used:12288K]", "segment_alloc 12288", 12 * MiB, 0},
		{"best fit: the smallest free block, lowest address on ties", Config{},
			[]op{m(0, 12*MiB), m(1, 12*MiB), m(2, 14*MiB), f(0), f(1), f(2), m(3, 11*MiB+512)},
			"L[used:12288K] L[free:12288K] L[free:14336K]", "segment_alloc 12288,segment_alloc 12288,segment_alloc 14336", 38 * MiB, 0},
		{"freed neighbours merge inside one segment only", Config{},
			[]op{m(0, 4*MiB), m(1, 4*MiB), m(2, 4*MiB), f(0), f(1), m(3, 8*MiB)},
			"L[used:8192K used:4096K free:8192K]", "segment_alloc 20480", 20 * MiB, 0},
		{"streams do not share cached blocks", Config{},
			[]op{m(0, 4*MiB), f(0), ms(1, 4*MiB, 7)}, "L[free:20480K] L[used:4096K free:16384K]", "segment_alloc 20480,segment_alloc 20480", 40 * MiB, 0},
		{"max_split_size: an oversize block is not split for a smaller request", Config{Settings: Settings{MaxSplitSize: 64 * MiB}},
			[]op{m(0, 100*MiB), f(0), m(1, 30*MiB), m(2, 90*MiB)},
			"L[used:102400K] L[used:30720K]", "segment_alloc 102400,segment_alloc 30720", 130 * MiB, 0},
		{"max_split_size: an oversize request takes a block less than 20 MiB larger", Config{Settings: Settings{MaxSplitSize: 64 * MiB}},
			[]op{m(0, 100*MiB), f(0), m(1, 80*MiB)},
			"L[free:102400K] L[used:81920K]", "segment_alloc 102400,segment_alloc 81920", 180 * MiB, 0},
		{"release_available_cached_blocks frees oversize segments, largest first, before the full release", Config{Settings: Settings{MaxSplitSize: 64 * MiB}, Capacity: 300 * MiB},
			[]op{m(0, 100*MiB), m(1, 110*MiB), m(2, 30*MiB), f(0), f(1), f(2), m(3, 150*MiB)},
			"L[free:30720K] L[used:153600K]", "segment_alloc 102400,segment_alloc 112640,segment_alloc 30720,segment_free 112640,segment_free 102400,segment_alloc 153600", 180 * MiB, 0},
		{"a failed cudaMalloc releases every whole cached segment and retries", Config{Capacity: 100 * MiB},
			[]op{m(0, 30*MiB), m(1, 30*MiB), m(2, 1000), f(0), f(2), m(3, 50*MiB)},
			"L[used:30720K] L[used:51200K]", "segment_alloc 30720,segment_alloc 30720,segment_alloc 2048,segment_free 30720,segment_free 2048,segment_alloc 51200", 80 * MiB, 0},
		{"OOM after the release", Config{Capacity: 100 * MiB},
			[]op{m(0, 30*MiB), m(1, 30*MiB), m(2, 50*MiB)},
			"L[used:30720K] L[used:30720K]", "segment_alloc 30720,segment_alloc 30720,oom 51200", 60 * MiB, 1},
		{"garbage collection frees old cached segments above the threshold", Config{Settings: Settings{GCThreshold: 0.5}, Capacity: 100 * MiB},
			[]op{m(0, 30*MiB), m(1, 30*MiB), f(0), f(1), m(2, 40*MiB)},
			"L[used:40960K]", "segment_alloc 30720,segment_alloc 30720,segment_free 30720,segment_free 30720,segment_alloc 40960", 40 * MiB, 0},
		{"without garbage collection the same request just cudaMallocs", Config{Capacity: 100 * MiB},
			[]op{m(0, 30*MiB), m(1, 30*MiB), f(0), f(1), m(2, 40*MiB)},
			"L[free:30720K] L[free:30720K] L[used:40960K]", "segment_alloc 30720,segment_alloc 30720,segment_alloc 40960", 100 * MiB, 0},
		{"a pending free (another stream) is not reused until complete", Config{},
			[]op{m(0, 4*MiB), {kind: "s", slot: 0, stream: 9}, f(0), m(1, 4*MiB)},
			"L[pend:4096K used:4096K free:12288K]", "segment_alloc 20480", 20 * MiB, 0},
		{"the cudaMalloc-failure path completes pending frees first", Config{Capacity: 20 * MiB},
			[]op{m(0, 15*MiB), {kind: "r", slot: 0}, m(1, 15*MiB)},
			"L[used:16384K]", "segment_alloc 16384,segment_free 16384,segment_alloc 16384", 16 * MiB, 0},
		{"private pools keep their own blocks and are not released", Config{},
			[]op{mp(0, 4*MiB), f(0), m(1, 4*MiB), f(1), {kind: "e"}},
			"L[free:20480K]", "segment_alloc 20480,segment_alloc 20480,segment_free 20480", 20 * MiB, 0},
		{"expandable: 20 MiB pages mapped as needed, remainders split", Config{Settings: Settings{ExpandableSegments: true}, Capacity: GiBCap},
			[]op{m(0, 30*MiB), m(1, 5*MiB), m(2, 10*MiB), f(2)},
			"Lx[used:30720K used:5120K free:25600K]", "segment_map 40960,segment_map 20480", 60 * MiB, 0},
		{"expandable: empty_cache unmaps only whole free pages", Config{Settings: Settings{ExpandableSegments: true}, Capacity: GiBCap},
			[]op{m(0, 30*MiB), m(1, 5*MiB), m(2, 10*MiB), f(2), {kind: "e"}},
			"Lx[used:30720K used:5120K free:5120K]", "segment_map 40960,segment_map 20480,segment_unmap 20480", 40 * MiB, 0},
		{"expandable with max_split_size: an oversize free block is not used for a smaller request, the range grows", Config{Settings: Settings{ExpandableSegments: true, MaxSplitSize: 64 * MiB}, Capacity: GiBCap},
			[]op{m(0, 100*MiB), m(1, 10*MiB), f(0), m(2, 30*MiB)},
			"Lx[free:102400K used:10240K used:30720K]", "segment_map 102400,segment_map 20480,segment_map 20480", 140 * MiB, 0},
		{"expandable splits any remainder of 512 B or more, even of an oversize request", Config{Settings: Settings{ExpandableSegments: true, MaxSplitSize: 64 * MiB}, Capacity: GiBCap},
			[]op{m(0, 80*MiB), m(1, 10*MiB), f(0), m(2, 70*MiB)},
			"Lx[used:71680K free:10240K used:10240K free:10240K]", "segment_map 81920,segment_map 20480", 100 * MiB, 0},
		{"without expandable segments an oversize request takes the block whole", Config{Settings: Settings{MaxSplitSize: 64 * MiB}},
			[]op{m(0, 80*MiB), f(0), m(1, 70*MiB)},
			"L[used:81920K]", "segment_alloc 81920", 80 * MiB, 0},
		{"expandable: pages freed on the cudaMalloc-failure path serve the retry at the end of the range", Config{Settings: Settings{ExpandableSegments: true}, Capacity: 200 * MiB},
			[]op{m(0, 30*MiB), m(1, 30*MiB), m(2, 30*MiB), m(3, 30*MiB), m(4, 30*MiB), m(5, 30*MiB), f(0), f(2), f(5), m(6, 60*MiB)},
			"Lx[free:10240K used:30720K] Lx[free:10240K used:30720K used:30720K used:61440K free:10240K]",
			"segment_map 40960,segment_map 20480,segment_map 40960,segment_map 20480,segment_map 40960,segment_map 20480,segment_unmap 20480,segment_unmap 20480,segment_unmap 20480,segment_map 61440", 180 * MiB, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &rec{}
			cfg := tc.cfg
			cfg.OnEvent = r.on
			a := New(cfg)
			runOps(t, a, tc.ops)
			if got := layoutOf(a); got != tc.layout {
				t.Errorf("layout\n got %s\nwant %s", got, tc.layout)
			}
			var segEvs []string
			for _, e := range r.evs {
				if strings.HasPrefix(e, "segment") || strings.HasPrefix(e, "oom") {
					segEvs = append(segEvs, e)
				}
			}
			if got := strings.Join(segEvs, ","); got != tc.events {
				t.Errorf("events\n got %s\nwant %s", got, tc.events)
			}
			if a.Reserved() != tc.reserved || a.Stats().OOMs != tc.ooms {
				t.Errorf("reserved %d ooms %d, want %d %d", a.Reserved(), a.Stats().OOMs, tc.reserved, tc.ooms)
			}
		})
	}
}

// GiBCap is a capacity large enough not to matter.
const GiBCap = 1 << 30
