// Package view serves memsnap's interactive page for one loaded snapshot: a timeline that zooms
// and pans with level of detail computed on the server (each request is cut into one column per
// pixel from an index built once, so a gigabyte snapshot answers in milliseconds), the band
// under the pointer with its site, role, bytes and stack, a segment map at the end or at any
// event, and jumps to the peak and each OOM. The page's assets are embedded (go:embed): no CDN,
// nothing leaves the machine.
package view

import (
	"cmp"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/memsnap/memsnap/analysis"
	"github.com/memsnap/memsnap/analysis/snapshot"
	"github.com/memsnap/memsnap/render"
)

//go:embed assets
var assets embed.FS

// Options configure a viewer.
type Options struct {
	Attribution analysis.AttributionOptions
	// Top is how many sites get a band of their own (0: 12).
	Top int
	// AnyHost answers requests whatever their Host header names (--allow-remote); by default
	// only loopback names are answered.
	AnyHost bool
}

// maxColumns bounds the columns one request may ask for.
const maxColumns = 8000

// Server answers the page and its API for one snapshot.
type Server struct {
	snap *snapshot.Snapshot
	opt  Options
	mu   sync.Mutex
	devs map[int]*device
	// segmentSlots bounds the segment maps built at once: each replays the trace up to its
	// event, so a burst of clicks must not multiply that work.
	segmentSlots chan struct{}
	oom          oomReport
	choice       analysis.DeviceChoice
	choiceOnce   sync.Once
}

// DefaultDevice is the device the page opens (analysis.ChooseDevice: the one with an OOM,
// else the highest allocated peak).
func (s *Server) DefaultDevice() int { return s.defaultDevice() }

func (s *Server) defaultDevice() int {
	s.choiceOnce.Do(func() { s.choice, _ = analysis.ChooseDevice(s.snap, nil) })
	return s.choice.Device
}

// device is what the viewer keeps per CUDA device: the timeline index and its bands.
type device struct {
	once   sync.Once
	err    error
	x      *analysis.TimelineIndex
	tb     *analysis.TimelineBands
	meta   *analysis.TimelineResult
	colors []string
	// win: the bands chosen over the last window asked for (Zoom with windowBands).
	winMu sync.Mutex
	win   *windowBands
}

// windowBands is a choice of bands over one window.
type windowBands struct {
	start, end int
	tb         *analysis.TimelineBands
	colors     []string
}

// New makes a viewer of snap.
func New(snap *snapshot.Snapshot, opt Options) *Server {
	if opt.Top <= 0 {
		opt.Top = 12
	}
	return &Server{snap: snap, opt: opt, devs: map[int]*device{}, segmentSlots: make(chan struct{}, 2)}
}

// Prepare builds device dev's timeline index now (the first request would otherwise). A
// device without a trace is not an error: its page shows the segment map only.
func (s *Server) Prepare(ctx context.Context, dev int) error {
	d := s.device(ctx, dev)
	var nt *analysis.NoTraceError
	if d.err != nil && !asNoTrace(d.err, &nt) {
		return d.err
	}
	return nil
}

func asNoTrace(err error, nt **analysis.NoTraceError) bool { return errors.As(err, nt) }

func (s *Server) device(ctx context.Context, dev int) *device {
	if devs := s.snap.Devices(); !slices.Contains(devs, dev) {
		return &device{err: fmt.Errorf("no device %d (the file has devices %v)", dev, devs)}
	}
	s.mu.Lock()
	d := s.devs[dev]
	if d == nil {
		d = &device{}
		s.devs[dev] = d
	}
	s.mu.Unlock()
	d.once.Do(func() {
		// Built once for every later request: the first request's cancellation (a closed tab)
		// must not become the device's error for good.
		ctx := context.WithoutCancel(ctx)
		x, err := analysis.NewTimelineIndex(ctx, s.snap, analysis.TimelineOptions{Device: dev, Attribution: s.opt.Attribution})
		if err != nil {
			d.err = err
			return
		}
		tb, err := x.ChooseBands(ctx, 0, 0, s.opt.Top)
		if err != nil {
			d.err = err
			return
		}
		meta, err := tb.Result(0, 0)
		if err != nil {
			d.err = err
			return
		}
		// The phase runs go with each zoom answer, one per column (a long trace has hundreds of
		// thousands).
		meta.Phases = []analysis.TimelinePhase{}
		d.x, d.tb, d.meta, d.colors = x, tb, meta, render.BandColors(meta.Bands)
	})
	return d
}

// Handler serves the page (/), its assets and the API (/api/...).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets")
	mux.Handle("GET /assets/", http.StripPrefix("/assets/", http.FileServerFS(static)))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		page, err := assets.ReadFile("assets/index.html")
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write(page)
	})
	mux.HandleFunc("GET /api/meta", s.meta)
	mux.HandleFunc("GET /api/timeline/meta", s.timelineMeta)
	mux.HandleFunc("GET /api/timeline", s.timeline)
	mux.HandleFunc("GET /api/segments", s.segments)
	mux.HandleFunc("GET /api/allocations", s.allocations)
	mux.HandleFunc("GET /api/stack", s.stack)
	mux.HandleFunc("GET /api/oom", s.ooms)
	return s.guard(mux)
}

// guard answers only requests addressed to a loopback name (unless AnyHost): a web page
// elsewhere cannot reach the viewer through DNS rebinding. Every answer forbids caching and
// framing.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		host = strings.Trim(host, "[]")
		ok := s.opt.AnyHost || strings.EqualFold(host, "localhost")
		if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
			ok = true
		}
		if !ok {
			http.Error(w, "memsnap view answers loopback addresses only", http.StatusForbidden)
			return
		}
		w.Header().Set("X-Frame-Options", "DENY")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'")
		next.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	if err := enc.Encode(v); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

func fail(w http.ResponseWriter, code int, format string, args ...any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]string{"error": fmt.Sprintf(format, args...)})
}

// intParam reads an integer query parameter (def when absent).
func intParam(r *http.Request, name string, def int) (int, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%s=%q is not an integer", name, v)
	}
	return n, nil
}

// DeviceInfo describes one device for the page.
type DeviceInfo struct {
	Device   int   `json:"device"`
	Events   int   `json:"events"`
	Reserved int64 `json:"reserved_bytes"`
	// OOMs, PeakAllocated (over the trace) and Allocated (final) say what the device holds.
	OOMs          int   `json:"ooms"`
	HasTrace      bool  `json:"has_trace"`
	PeakAllocated int64 `json:"peak_allocated_bytes"`
	Allocated     int64 `json:"allocated_bytes"`
}

// Meta is the page's first answer: the file, its devices and the role colours.
type Meta struct {
	Path          string       `json:"path"`
	Name          string       `json:"name"`
	Devices       []DeviceInfo `json:"devices"`
	DefaultDevice int          `json:"default_device"`
	// DeviceReason / DeviceNote: why the default device (analysis.DeviceReason*), in words with
	// what the others hold.
	DeviceReason string            `json:"device_reason"`
	DeviceNote   string            `json:"device_note"`
	RoleColors   map[string]string `json:"role_colors"`
	Pending      string            `json:"pending_color"`
	Inactive     string            `json:"inactive_color"`
}

func (s *Server) meta(w http.ResponseWriter, r *http.Request) {
	m := Meta{Path: s.snap.Path, Name: filepath.Base(s.snap.Path), Devices: []DeviceInfo{}, RoleColors: render.RoleColors(),
		Pending: "#7a1f1f", Inactive: "#eeeeee"}
	s.defaultDevice()
	for _, d := range s.choice.Devices {
		m.Devices = append(m.Devices, DeviceInfo{Device: d.Device, Events: d.TraceEvents, Reserved: d.ReservedBytes, OOMs: d.OOMs, HasTrace: d.HasTrace,
			PeakAllocated: d.PeakAllocatedBytes, Allocated: d.AllocatedBytes})
	}
	m.DefaultDevice, m.DeviceReason, m.DeviceNote = s.choice.Device, s.choice.Reason, s.choice.Text
	writeJSON(w, m)
}

// TimelineMeta is a device's timeline over the whole trace: the bands and markers, and the
// colour of each band.
type TimelineMeta struct {
	HasTrace bool                     `json:"has_trace"`
	Reason   string                   `json:"reason,omitempty"`
	HasTime  bool                     `json:"has_time"`
	Colors   []string                 `json:"colors"`
	Timeline *analysis.TimelineResult `json:"timeline,omitempty"`
}

func (s *Server) timelineMeta(w http.ResponseWriter, r *http.Request) {
	dev, err := intParam(r, "device", 0)
	if err != nil {
		fail(w, http.StatusBadRequest, "%v", err)
		return
	}
	d := s.device(r.Context(), dev)
	if d.err != nil {
		var nt *analysis.NoTraceError
		if asNoTrace(d.err, &nt) {
			writeJSON(w, TimelineMeta{Reason: d.err.Error(), Colors: []string{}})
			return
		}
		fail(w, http.StatusInternalServerError, "%v", d.err)
		return
	}
	writeJSON(w, TimelineMeta{HasTrace: true, HasTime: d.x.HasTime(), Colors: d.colors, Timeline: d.meta})
}

// Columns is one zoom answer: the window cut into columns, as parallel arrays (compact JSON).
type Columns struct {
	Start int `json:"start"`
	End   int `json:"end"`
	// First/Last: the events of each column; MaxEvent: where allocated memory is highest.
	First    []int   `json:"first"`
	Last     []int   `json:"last"`
	MaxEvent []int   `json:"max_event"`
	AllocMin []int64 `json:"alloc_min"`
	AllocMax []int64 `json:"alloc_max"`
	ResMin   []int64 `json:"res_min"`
	ResMax   []int64 `json:"res_max"`
	// Bands[b][c]: band b's bytes in column c (at MaxEvent).
	Bands [][]int64 `json:"bands"`
	// Peak in the window.
	PeakBytes int64 `json:"peak_bytes"`
	PeakEvent int   `json:"peak_event"`
	// Phase is each column's phase: the one with the most events in it (setup, forward,
	// backward, optimizer, oom_unwinding; "" for none): the phase strip at the column's level
	// of detail.
	Phase []string `json:"phase"`
	// BandsMeta and Colors: the bands chosen over this window (the sites highest in it) when
	// asked for with bands=window; absent, Bands follow the device's bands (the whole trace's).
	BandsMeta []analysis.TimelineBand `json:"bands_meta,omitempty"`
	Colors    []string                `json:"colors,omitempty"`
}

// Zoom cuts events [start, end) of device dev into cols columns (the answer behind
// /api/timeline).
func (s *Server) Zoom(ctx context.Context, dev, start, end, cols int) (*Columns, error) {
	return s.zoom(ctx, dev, start, end, cols, false)
}

// ZoomWindowBands is Zoom with the bands chosen over the window itself (the top sites by their
// highest level in it, as plot --window draws them); the last window's choice is kept.
func (s *Server) ZoomWindowBands(ctx context.Context, dev, start, end, cols int) (*Columns, error) {
	return s.zoom(ctx, dev, start, end, cols, true)
}

func (s *Server) zoom(ctx context.Context, dev, start, end, cols int, window bool) (*Columns, error) {
	d := s.device(ctx, dev)
	if d.err != nil {
		return nil, d.err
	}
	if cols <= 0 || cols > maxColumns {
		return nil, fmt.Errorf("cols=%d: ask for 1 to %d columns", cols, maxColumns)
	}
	tb, nb := d.tb, len(d.meta.Bands)
	var wb *windowBands
	if window {
		var err error
		if wb, err = d.windowBands(ctx, start, end, s.opt.Top); err != nil {
			return nil, err
		}
		tb, nb = wb.tb, len(wb.tb.Bands)
	}
	ser, err := tb.Series(start, end, cols, analysis.TimelineXEvent)
	if err != nil {
		return nil, err
	}
	n := len(ser.Columns)
	c := &Columns{Start: ser.Start, End: ser.End, First: make([]int, n), Last: make([]int, n), MaxEvent: make([]int, n),
		AllocMin: make([]int64, n), AllocMax: make([]int64, n), ResMin: make([]int64, n), ResMax: make([]int64, n),
		Bands: make([][]int64, nb), PeakEvent: -1}
	if wb != nil {
		c.BandsMeta, c.Colors = wb.tb.Bands, wb.colors
	}
	for b := range c.Bands {
		c.Bands[b] = make([]int64, n)
	}
	for i, col := range ser.Columns {
		c.First[i], c.Last[i], c.MaxEvent[i] = col.First, col.Last, col.MaxEvent
		c.AllocMin[i], c.AllocMax[i], c.ResMin[i], c.ResMax[i] = col.MinAllocated, col.MaxAllocated, col.MinReserved, col.MaxReserved
		for b, v := range col.Bands {
			c.Bands[b][i] = v
		}
		if col.MaxAllocated > c.PeakBytes || c.PeakEvent < 0 {
			c.PeakBytes, c.PeakEvent = col.MaxAllocated, col.MaxEvent
		}
	}
	c.Phase = columnPhases(d.x.Phases(c.Start, c.End), c.First, c.Last)
	return c, nil
}

// columnPhases is the phase with the most events in each column (analysis.ColumnPhases).
func columnPhases(runs []analysis.TimelinePhase, first, last []int) []string {
	return analysis.ColumnPhases(runs, first, last)
}

// windowBands chooses the bands over [start, end) (the last choice is reused).
func (d *device) windowBands(ctx context.Context, start, end, top int) (*windowBands, error) {
	d.winMu.Lock()
	defer d.winMu.Unlock()
	if d.win != nil && d.win.start == start && d.win.end == end {
		return d.win, nil
	}
	tb, err := d.x.ChooseBands(ctx, start, end, top)
	if err != nil {
		return nil, err
	}
	d.win = &windowBands{start: start, end: end, tb: tb, colors: render.BandColors(tb.Bands)}
	return d.win, nil
}

func (s *Server) timeline(w http.ResponseWriter, r *http.Request) {
	var vals [4]int
	for i, p := range []struct {
		name string
		def  int
	}{{"device", 0}, {"start", 0}, {"end", 0}, {"cols", 1000}} {
		v, err := intParam(r, p.name, p.def)
		if err != nil {
			fail(w, http.StatusBadRequest, "%v", err)
			return
		}
		vals[i] = v
	}
	c, err := s.zoom(r.Context(), vals[0], vals[1], vals[2], vals[3], r.URL.Query().Get("bands") == "window")
	if err != nil {
		fail(w, http.StatusBadRequest, "%v", err)
		return
	}
	writeJSON(w, c)
}

// Segments is the segment map answer: segments by address, each block as
// [offset, size, state, site] (state 1 allocated, 2 pending free, 3 inactive; site indexes
// Sites, -1 for none).
type Segments struct {
	*analysis.SegmentMapResult
	List  []SegmentJSON `json:"list"`
	Sites []SiteJSON    `json:"sites"`
	Rows  int           `json:"rows"`
	Cap   int64         `json:"row_bytes"`
	Gap   int64         `json:"gap_bytes"`
	// Place: per List entry, its row and its offset in the row (bytes).
	Place [][2]int64 `json:"place"`
	// TopSites: the sites holding the most allocated bytes in the map, largest first (at most
	// 20): the side panel of a file without a trace.
	TopSites []TopSite `json:"top_sites"`
}

// TopSite is a site's allocated bytes in a segment map.
type TopSite struct {
	Site   int   `json:"site"` // index in Sites
	Bytes  int64 `json:"bytes"`
	Blocks int   `json:"blocks"`
}

// SegmentJSON is one segment of the map.
type SegmentJSON struct {
	Address string `json:"address"`
	Size    int64  `json:"size"`
	Stream  string `json:"stream"`
	Type    string `json:"type"`
	// Pool is the segment's memory pool: "default", or the graph/private pool id "(a, b)".
	Pool   string     `json:"pool"`
	Blocks [][4]int64 `json:"blocks"`
}

// SiteJSON is a site of the map's blocks.
type SiteJSON struct {
	analysis.SiteIdentity
	Category string   `json:"category"`
	Evidence string   `json:"evidence"`
	Stack    []string `json:"stack"`
}

func (s *Server) segments(w http.ResponseWriter, r *http.Request) {
	dev, err := intParam(r, "device", 0)
	if err == nil {
		var at int
		at, err = intParam(r, "at", -1)
		if err == nil {
			var width int
			width, err = intParam(r, "width", 1200)
			if err == nil {
				var out *Segments
				out, err = s.SegmentMap(r.Context(), dev, at, width)
				if err == nil {
					writeJSON(w, out)
					return
				}
			}
		}
	}
	fail(w, http.StatusBadRequest, "%v", err)
}

// SegmentMap lays out device dev's segments at event at (-1: the final state) for a map width
// pixels wide.
func (s *Server) SegmentMap(ctx context.Context, dev, at, width int) (*Segments, error) {
	select {
	case s.segmentSlots <- struct{}{}:
		defer func() { <-s.segmentSlots }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	width = min(width, 8000)
	m, err := analysis.SegmentMap(ctx, s.snap, analysis.SegmentMapOptions{Device: dev, At: at, Attribution: s.opt.Attribution})
	if err != nil {
		return nil, err
	}
	l := render.LayoutSegments(m, float64(max(width, 100)), 40)
	out := &Segments{SegmentMapResult: m, List: make([]SegmentJSON, len(m.Map)), Sites: make([]SiteJSON, len(m.Sites)),
		Rows: l.Rows, Cap: l.Capacity, Gap: l.Gap, Place: make([][2]int64, len(m.Map))}
	for _, p := range l.Placed {
		out.Place[p.Segment] = [2]int64{int64(p.Row), p.Offset}
	}
	siteBytes := map[int32]int64{}
	siteBlocks := map[int32]int{}
	for i, seg := range m.Map {
		sj := SegmentJSON{Address: fmt.Sprintf("0x%x", seg.Address), Size: seg.Size, Stream: fmt.Sprintf("0x%x", seg.Stream), Type: seg.Type,
			Pool: "default", Blocks: make([][4]int64, len(seg.Blocks))}
		if seg.Pool != (snapshot.PoolID{}) {
			sj.Pool = fmt.Sprintf("(%d, %d)", seg.Pool[0], seg.Pool[1])
		}
		for k, b := range seg.Blocks {
			sj.Blocks[k] = [4]int64{b.Offset, b.Size, int64(b.State), int64(b.Site)}
			if b.State == snapshot.StateActiveAllocated && b.Site >= 0 {
				siteBytes[b.Site] += b.Size
				siteBlocks[b.Site]++
			}
		}
		out.List[i] = sj
	}
	for i, st := range m.Sites {
		out.Sites[i] = SiteJSON{SiteIdentity: st.SiteIdentity, Category: st.Category, Evidence: st.Evidence, Stack: st.Stack}
	}
	out.TopSites = []TopSite{}
	for site, b := range siteBytes {
		out.TopSites = append(out.TopSites, TopSite{Site: int(site), Bytes: b, Blocks: siteBlocks[site]})
	}
	slices.SortFunc(out.TopSites, func(a, b TopSite) int {
		if a.Bytes != b.Bytes {
			return cmp.Compare(b.Bytes, a.Bytes)
		}
		return cmp.Compare(a.Site, b.Site)
	})
	out.TopSites = out.TopSites[:min(len(out.TopSites), 20)]
	return out, nil
}
