// memsnap view: the timeline (zoom and pan, level of detail from the server), the band under
// the pointer, and the segment map. No framework, no CDN: everything is served by memsnap.
'use strict';

const $ = id => document.getElementById(id);

const S = {
  meta: null,          // /api/meta
  dev: 0,
  tm: null,            // /api/timeline/meta for the device
  colors: [],          // band colours
  events: 0,
  win: {start: 0, end: 1},
  data: null,          // the latest /api/timeline answer
  token: 0,
  timer: 0,
  selected: null,      // {band, event} or {seg, block}
  selectedEvent: -1,
  seg: null,           // /api/segments answer
  segRows: [],         // per row: indexes into seg.list sorted by offset
  drag: null,
  drawn: 0,
  segDrawn: 0,
  lastZoomMS: 0,
  ready: false,
  bands: [],           // the bands drawn: the whole trace's, or those chosen over the window
  allocMode: false,    // the per-allocation view
  allocs: null,        // the latest /api/allocations answer
  allocToken: 0,
  pinned: -1,          // the allocation clicked
};

// ---- formatting ----------------------------------------------------------------------------

function fmtBytes(n) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = Math.abs(n), i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  const s = i === 0 ? String(v) : (v >= 100 ? v.toFixed(0) : v.toFixed(1));
  return (n < 0 ? '-' : '') + s + ' ' + units[i];
}
function fmtInt(n) { return Math.round(n).toLocaleString('en-US'); }
function fmtCount(v) {
  const a = Math.abs(v);
  if (a >= 1e6) return trim(v / 1e6) + 'M';
  if (a >= 1e4) return trim(v / 1e3) + 'k';
  return trim(v);
}
function trim(v) { return String(Math.round(v * 100) / 100); }
// decimalsOf is the number of decimals that write v exactly (at most 7).
function decimalsOf(v) {
  for (let d = 0; d < 7; d++) {
    const p = v * 10 ** d;
    if (Math.abs(p - Math.round(p)) < 1e-6 * Math.max(1, Math.abs(p))) return d;
  }
  return 7;
}
// countTickLabel labels event ticks step apart up to hi so that neighbours differ (as
// render.CountTickLabel): 1.25M, 120k, else every digit grouped.
function countTickLabel(step, hi) {
  for (const u of [{div: 1e6, suf: 'M', from: 1e6, to: Infinity, max: 2}, {div: 1e3, suf: 'k', from: 1e4, to: 1e6, max: 1}]) {
    if (Math.abs(hi) < u.from || Math.abs(hi) >= u.to) continue;
    const d = decimalsOf(step / u.div);
    if (d <= u.max) return v => (Math.abs(v) < 1e-9 ? '0' : (v / u.div).toFixed(d) + u.suf);
  }
  return v => fmtInt(v);
}
function lowerBound(arr, v) {
  let lo = 0, hi = arr.length;
  while (lo < hi) { const mid = (lo + hi) >> 1; if (arr[mid] < v) lo = mid + 1; else hi = mid; }
  return lo;
}
function unitFor(max) {
  if (max >= 2 ** 30) return ['GiB', 2 ** 30];
  if (max >= 2 ** 20) return ['MiB', 2 ** 20];
  if (max >= 2 ** 10) return ['KiB', 2 ** 10];
  return ['B', 1];
}
function niceStep(span, n) {
  if (span <= 0) return 1;
  const raw = span / n, mag = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * mag >= raw) return m * mag;
  return 10 * mag;
}
function siteName(b) {
  let s = b.site;
  if (b.function && !s.includes(b.function)) s += ' ' + b.function;
  return s;
}
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

async function getJSON(url) {
  const r = await fetch(url);
  const j = await r.json();
  if (!r.ok) throw new Error(j.error || r.statusText);
  return j;
}

// ---- setup ---------------------------------------------------------------------------------

async function init() {
  try {
    S.meta = await getJSON('/api/meta');
  } catch (e) {
    $('subtitle').textContent = 'cannot read the snapshot: ' + e.message;
    return;
  }
  $('title').textContent = S.meta.name;
  document.title = S.meta.name + ' · memsnap view';
  const sel = $('device');
  for (const d of S.meta.devices) {
    const o = el('option', '', `${d.device} (${d.has_trace ? fmtInt(d.events) + ' events, ' : 'no trace, '}${d.has_trace ? 'peak ' + fmtBytes(d.peak_allocated_bytes) : fmtBytes(d.allocated_bytes) + ' allocated'}${d.ooms ? ', ' + d.ooms + ' OOM' : ''})`);
    o.value = d.device;
    sel.appendChild(o);
  }
  sel.value = S.meta.default_device;
  sel.addEventListener('change', () => loadDevice(Number(sel.value)));
  $('reset').addEventListener('click', () => setWindow(0, S.events));
  $('peak').addEventListener('click', zoomToPeak);
  $('mode').addEventListener('click', () => setAllocMode(!S.allocMode));
  if (S.meta.devices.length > 1) $('device-note').textContent = S.meta.device_note;
  $('seg-final').addEventListener('click', () => loadSegments(-1));
  $('seg-at').addEventListener('click', () => { if (S.selectedEvent >= 0) loadSegments(S.selectedEvent); });
  setupTimelineEvents();
  setupSegmentEvents();
  window.addEventListener('resize', () => { fetchColumns(0); drawSegments(); });
  await loadDevice(S.meta.default_device);
}

async function loadDevice(dev) {
  S.dev = dev;
  // a new device opens on its bands (the per-allocation view asks again)
  S.allocMode = false;
  S.allocs = null;
  S.pinned = -1;
  $('mode').textContent = 'Allocations';
  $('legend-section').classList.remove('hidden');
  S.data = null;
  S.selected = null;
  S.selectedEvent = -1;
  $('seg-at').disabled = true;
  S.tm = await getJSON(`/api/timeline/meta?device=${dev}`);
  const tl = S.tm.timeline;
  const section = $('timeline-section');
  if (!S.tm.has_trace) {
    section.classList.add('hidden');
    $('peak').disabled = true;
    $('reset').disabled = true;
    $('subtitle').textContent = S.tm.reason;
    $('legend').textContent = '';
    $('ooms').textContent = '';
    $('mode').disabled = true;
  } else {
    section.classList.remove('hidden');
    $('peak').disabled = false;
    $('reset').disabled = false;
    $('mode').disabled = false;
    $('legend-title').textContent = 'Bands (the sites highest in the trace; bytes at the peak)';
    S.colors = S.tm.colors;
    S.bands = tl.bands;
    S.events = tl.events;
    S.win = {start: 0, end: tl.events};
    let sub = `device ${dev} · ${fmtInt(tl.events)} events · allocated peak ${fmtBytes(tl.peak_allocated_bytes)} after event ${fmtInt(tl.peak_event)} · reserved peak ${fmtBytes(tl.peak_reserved_bytes)}`;
    if (tl.ooms.length) sub += ` · ${tl.ooms.length} OOM`;
    $('subtitle').textContent = sub;
    buildLegend();
    buildOOMButtons();
    await fetchColumns(0);
  }
  await loadSegments(-1);
  S.ready = true;
  document.body.dataset.ready = '1';
}

function buildLegend() {
  const ol = $('legend');
  ol.textContent = '';
  const bands = S.bands;
  for (let b = bands.length - 1; b >= 0; b--) {
    const band = bands[b];
    const li = el('li');
    li.dataset.band = b;
    const sw = el('span', 'swatch');
    sw.style.background = S.colors[b];
    li.appendChild(sw);
    li.appendChild(el('span', 'name', band.other ? (band.sites === 1 ? '1 other site' : `${band.sites} other sites`) : siteName(band)));
    const sub = band.other ? `${fmtBytes(band.bytes_at_peak)} at the peak` : `${band.category} · ${fmtBytes(band.bytes_at_peak)} at the peak (${band.percent.toFixed(1)}%)`;
    const upTo = band.max_bytes > band.bytes_at_peak ? ` · up to ${fmtBytes(band.max_bytes)}` : '';
    li.appendChild(el('span', 'sub', sub + upTo));
    li.addEventListener('click', () => selectBand(b, -1));
    ol.appendChild(li);
  }
}

function buildOOMButtons() {
  const span = $('ooms');
  span.textContent = '';
  const ooms = S.tm.timeline.ooms;
  ooms.slice(0, 8).forEach((o, k) => {
    const b = el('button', 'oom', ooms.length > 1 ? `OOM ${k + 1}` : 'OOM');
    b.type = 'button';
    b.title = `event ${fmtInt(o.event)}: ${fmtBytes(o.requested_bytes)} requested, ${fmtBytes(o.device_free_bytes)} free`;
    b.addEventListener('click', () => showOOM(k));
    span.appendChild(b);
  });
}

// ---- the window ----------------------------------------------------------------------------

function setWindow(start, end) {
  const n = S.events;
  const minSpan = Math.min(n, 40);
  let span = Math.max(minSpan, Math.min(n, end - start));
  start = Math.max(0, Math.min(start, n - span));
  S.win = {start: Math.round(start), end: Math.round(start + span)};
  drawTimeline();
  fetchColumns(40);
}

function zoomAround(event) {
  const span = Math.max(Math.min(S.events, 200), Math.round(S.events / 40));
  setWindow(event - span / 2, event + span / 2);
  selectEvent(event);
}

function zoomToPeak() {
  const tl = S.tm.timeline;
  zoomAround(tl.peak_event);
}

function plotBox() {
  const c = $('timeline');
  const w = c.clientWidth, h = c.clientHeight;
  return {w, h, left: 70, right: w - 14, top: 18, bottom: h - 40};
}

async function fetchColumns(delay) {
  clearTimeout(S.timer);
  const go = async () => {
    const t = ++S.token;
    const box = plotBox();
    const cols = Math.max(10, Math.round(box.right - box.left));
    const t0 = performance.now();
    try {
      const d = await getJSON(`/api/timeline?device=${S.dev}&start=${S.win.start}&end=${S.win.end}&cols=${cols}`);
      if (t !== S.token) return;
      S.lastZoomMS = performance.now() - t0;
      S.data = d;
      useBands(S.tm.timeline.bands, S.tm.colors);
      if (S.allocMode) { fetchAllocations(); return; }
      if (d.start > 0 || d.end < S.events) fetchWindowBands(t, cols);
      $('status').textContent = `events ${fmtInt(d.start)}–${fmtInt(d.end - 1)} · ${d.first.length} columns (each keeps its events' minimum and maximum; pale above the minimum) · answered in ${S.lastZoomMS.toFixed(0)} ms · peak here ${fmtBytes(d.peak_bytes)} after event ${fmtInt(d.peak_event)}`;
      drawTimeline();
    } catch (e) {
      $('status').textContent = 'zoom failed: ' + e.message;
      $('status').classList.add('error');
    }
  };
  if (delay > 0) {
    await new Promise(res => { S.timer = setTimeout(() => go().then(res), delay); });
  } else {
    await go();
  }
}

// ---- drawing the timeline ------------------------------------------------------------------

function setupCanvas(c) {
  const dpr = window.devicePixelRatio || 1;
  const w = c.clientWidth, h = c.clientHeight;
  if (c.width !== Math.round(w * dpr) || c.height !== Math.round(h * dpr)) {
    c.width = Math.round(w * dpr);
    c.height = Math.round(h * dpr);
  }
  const ctx = c.getContext('2d');
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, h);
  ctx.fillStyle = '#fff';
  ctx.fillRect(0, 0, w, h);
  return ctx;
}

function xOf(event, box) {
  return box.left + (event - S.win.start) / (S.win.end - S.win.start) * (box.right - box.left);
}
function eventAt(x, box) {
  return S.win.start + (x - box.left) / (box.right - box.left) * (S.win.end - S.win.start);
}

// yScale is the current vertical scale: bytes at the top of the plot.
function yTop() {
  const d = S.data;
  let m = 1;
  if (d) {
    for (let c = 0; c < d.first.length; c++) {
      if (d.last[c] + 1 <= S.win.start || d.first[c] >= S.win.end) continue;
      m = Math.max(m, d.alloc_max[c], d.res_max[c]);
    }
  }
  return m * 1.1;
}

function drawTimeline() {
  const c = $('timeline');
  const ctx = setupCanvas(c);
  const box = plotBox();
  const d = S.data;
  if (!d || !S.tm || !S.tm.has_trace) return;
  const top = yTop();
  const [uname, scale] = unitFor(top);
  const yOf = v => box.bottom - v / top * (box.bottom - box.top);
  // grid and y axis
  ctx.font = '12px "Liberation Sans", Arial, sans-serif';
  ctx.textBaseline = 'middle';
  ctx.textAlign = 'right';
  const ystep = niceStep(top / scale, 6);
  for (let v = 0; v <= top / scale + 1e-9; v += ystep) {
    const y = yOf(v * scale);
    ctx.strokeStyle = '#ececec';
    ctx.beginPath(); ctx.moveTo(box.left, y); ctx.lineTo(box.right, y); ctx.stroke();
    ctx.fillStyle = '#333';
    ctx.fillText(trim(v), box.left - 6, y);
  }
  ctx.save();
  ctx.translate(16, (box.top + box.bottom) / 2);
  ctx.rotate(-Math.PI / 2);
  ctx.textAlign = 'center';
  ctx.fillText(`memory (${uname})`, 0, 0);
  ctx.restore();
  // clip to the plot
  ctx.save();
  ctx.beginPath(); ctx.rect(box.left, box.top - 10, box.right - box.left, box.bottom - box.top + 10); ctx.clip();
  const tl = S.tm.timeline;
  // step starts
  drawSteps(ctx, box, tl);
  // bands: one path of rectangles per band
  const n = d.first.length;
  const x0 = new Float64Array(n), x1 = new Float64Array(n), base = new Float64Array(n);
  for (let k = 0; k < n; k++) {
    x0[k] = xOf(d.first[k], box);
    x1[k] = Math.max(xOf(d.last[k] + 1, box), x0[k] + 1);
  }
  if (S.allocMode && S.allocs) drawAllocations(ctx, box, yOf);
  for (let b = 0; b < d.bands.length && !S.allocMode; b++) {
    ctx.fillStyle = S.colors[b] || '#ccc';
    ctx.beginPath();
    const vals = d.bands[b];
    for (let k = 0; k < n; k++) {
      const v = vals[k];
      if (v > 0) {
        const ya = yOf(base[k]), yb = yOf(base[k] + v);
        ctx.rect(x0[k], yb, x1[k] - x0[k] + 0.3, ya - yb);
      }
      base[k] += v;
    }
    ctx.fill();
  }
  // the envelope: pale between each column's minimum and maximum, a line at the minimum
  if (!S.allocMode) {
    ctx.fillStyle = 'rgba(255,255,255,0.6)';
    ctx.beginPath();
    for (let k = 0; k < n; k++) {
      const ya = yOf(d.alloc_min[k]), yb = yOf(d.alloc_max[k]);
      if (ya - yb > 0.5) ctx.rect(x0[k], yb, x1[k] - x0[k] + 0.3, ya - yb);
    }
    ctx.fill();
    ctx.strokeStyle = '#555';
    ctx.beginPath();
    for (let k = 0; k < n; k++) {
      const y = yOf(d.alloc_min[k]);
      if (k === 0) ctx.moveTo(x0[k], y); else ctx.lineTo(x0[k], y);
      ctx.lineTo(x1[k], y);
    }
    ctx.stroke();
  }
  drawPhases(ctx, box, tl);
  // reserved
  ctx.strokeStyle = '#1f1f1f';
  ctx.lineWidth = 1.5;
  ctx.beginPath();
  for (let k = 0; k < n; k++) {
    const y = yOf(d.res_max[k]);
    if (k === 0) ctx.moveTo(x0[k], y); else ctx.lineTo(x0[k], y);
    ctx.lineTo(x1[k], y);
  }
  ctx.stroke();
  ctx.lineWidth = 1;
  // segment-release bursts
  const burstColor = {empty_cache: '#e07b00', malloc_retry: '#c62828', release: '#808080'};
  for (const b of tl.segment_bursts) {
    if (b.first_event < S.win.start || b.first_event >= S.win.end) continue;
    const x = xOf(b.first_event + 0.5, box);
    ctx.fillStyle = burstColor[b.kind] || '#808080';
    ctx.beginPath(); ctx.moveTo(x - 5, box.top - 8); ctx.lineTo(x + 5, box.top - 8); ctx.lineTo(x, box.top); ctx.fill();
  }
  // OOMs
  ctx.strokeStyle = '#c62828';
  ctx.lineWidth = 1.5;
  for (const o of tl.ooms) {
    if (o.event < S.win.start || o.event >= S.win.end) continue;
    const x = xOf(o.event + 0.5, box);
    ctx.beginPath(); ctx.moveTo(x, box.top); ctx.lineTo(x, box.bottom); ctx.stroke();
    ctx.fillStyle = '#c62828';
    ctx.textAlign = 'right';
    ctx.font = 'bold 12px "Liberation Sans", Arial, sans-serif';
    ctx.fillText('OOM', x - 4, box.top + 8);
  }
  ctx.lineWidth = 1;
  // the selected event
  if (S.selectedEvent >= S.win.start && S.selectedEvent < S.win.end) {
    const x = xOf(S.selectedEvent + 0.5, box);
    ctx.strokeStyle = '#2b6cb0';
    ctx.beginPath(); ctx.moveTo(x, box.top); ctx.lineTo(x, box.bottom); ctx.stroke();
  }
  // the peak
  if (tl.peak_event >= S.win.start && tl.peak_event < S.win.end) {
    const x = xOf(tl.peak_event + 0.5, box), y = yOf(tl.peak_allocated_bytes);
    ctx.strokeStyle = '#1a1a1a';
    ctx.setLineDash([4, 3]);
    ctx.beginPath(); ctx.moveTo(x, box.bottom); ctx.lineTo(x, y); ctx.stroke();
    ctx.setLineDash([]);
    ctx.fillStyle = '#1a1a1a';
    ctx.beginPath(); ctx.arc(x, y, 4, 0, 2 * Math.PI); ctx.fill();
    ctx.font = 'bold 13px "Liberation Sans", Arial, sans-serif';
    const label = 'peak ' + fmtBytes(tl.peak_allocated_bytes);
    const w = ctx.measureText(label).width;
    ctx.textAlign = x + 8 + w > box.right ? 'right' : 'left';
    ctx.fillText(label, ctx.textAlign === 'right' ? x - 8 : x + 8, y - 8);
  }
  ctx.restore();
  // x axis
  ctx.strokeStyle = '#666';
  ctx.beginPath(); ctx.moveTo(box.left, box.bottom + 0.5); ctx.lineTo(box.right, box.bottom + 0.5); ctx.stroke();
  ctx.beginPath(); ctx.moveTo(box.left - 0.5, box.top); ctx.lineTo(box.left - 0.5, box.bottom); ctx.stroke();
  ctx.fillStyle = '#333';
  ctx.font = '12px "Liberation Sans", Arial, sans-serif';
  ctx.textAlign = 'center';
  ctx.textBaseline = 'top';
  const xstep = niceStep(S.win.end - S.win.start, 8);
  const xlabel = countTickLabel(xstep, S.win.end);
  for (let v = Math.ceil(S.win.start / xstep) * xstep; v <= S.win.end; v += xstep) {
    const x = xOf(v, box);
    ctx.beginPath(); ctx.moveTo(x, box.bottom); ctx.lineTo(x, box.bottom + 5); ctx.stroke();
    ctx.fillText(xlabel(v), x, box.bottom + 7);
  }
  ctx.fillText('trace event', (box.left + box.right) / 2, box.bottom + 23);
  S.drawn++;
  c.dataset.drawn = String(S.drawn);
}

// hit finds the column and band under (x, y) of the timeline canvas.
function hit(x, y) {
  const d = S.data;
  if (!d) return null;
  const box = plotBox();
  if (x < box.left || x > box.right || y < box.top || y > box.bottom) return null;
  const e = eventAt(x, box);
  let lo = 0, hi = d.first.length - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (d.first[mid] <= e) lo = mid; else hi = mid - 1;
  }
  const k = lo;
  const top = yTop();
  const v = (box.bottom - y) / (box.bottom - box.top) * top;
  let acc = 0;
  for (let b = 0; b < d.bands.length; b++) {
    const bv = d.bands[b][k];
    if (v >= acc && v < acc + bv) return {col: k, band: b, bytes: bv};
    acc += bv;
  }
  return {col: k, band: -1, bytes: 0};
}

function setupTimelineEvents() {
  const c = $('timeline');
  const tip = $('tooltip');
  c.addEventListener('wheel', ev => {
    if (!S.data) return;
    ev.preventDefault();
    const box = plotBox();
    const r = c.getBoundingClientRect();
    const anchor = eventAt(ev.clientX - r.left, box);
    const f = ev.deltaY > 0 ? 1.25 : 0.8;
    const span = (S.win.end - S.win.start) * f;
    const start = anchor - (anchor - S.win.start) * f;
    setWindow(start, start + span);
  }, {passive: false});
  c.addEventListener('mousedown', ev => {
    S.drag = {x: ev.clientX, start: S.win.start, end: S.win.end, moved: false};
  });
  window.addEventListener('mouseup', ev => {
    const drag = S.drag;
    S.drag = null;
    if (drag && !drag.moved && ev.target === c && S.allocMode) {
      const r = c.getBoundingClientRect();
      const i = allocHit(ev.clientX - r.left, ev.clientY - r.top);
      S.pinned = S.pinned === i ? -1 : i;
      if (i >= 0) showAllocation(i);
      drawTimeline();
      return;
    }
    if (drag && !drag.moved && ev.target === c) {
      const r = c.getBoundingClientRect();
      const h = hit(ev.clientX - r.left, ev.clientY - r.top);
      if (h) {
        selectEvent(S.data.max_event[h.col]);
        if (h.band >= 0) selectBand(h.band, h.col);
      }
    }
  });
  c.addEventListener('mousemove', ev => {
    const r = c.getBoundingClientRect();
    const x = ev.clientX - r.left, y = ev.clientY - r.top;
    if (S.drag) {
      const dx = ev.clientX - S.drag.x;
      if (Math.abs(dx) > 3) S.drag.moved = true;
      if (S.drag.moved) {
        const box = plotBox();
        const per = (S.drag.end - S.drag.start) / (box.right - box.left);
        setWindow(S.drag.start - dx * per, S.drag.end - dx * per);
      }
      tip.classList.add('hidden');
      return;
    }
    if (S.allocMode) {
      const i = allocHit(x, y);
      if (i < 0) { tip.classList.add('hidden'); return; }
      const a = S.allocs.allocations[i];
      tip.textContent = `${a.site}\n${a.role} · ${fmtBytes(a.size)}\nallocated ${a.alloc_event === null ? 'before the trace' : 'at event ' + fmtInt(a.alloc_event)}, ${a.free_event === null ? 'never freed' : 'freed at event ' + fmtInt(a.free_event)}`;
      tip.classList.remove('hidden');
      tip.style.left = Math.min(x + 14, c.clientWidth - tip.offsetWidth - 4) + 'px';
      tip.style.top = (y + 14) + 'px';
      if (S.pinned < 0 && S.hovered !== i) { S.hovered = i; showAllocation(i); }
      return;
    }
    const h = hit(x, y);
    if (!h || h.band < 0) { tip.classList.add('hidden'); return; }
    const band = S.bands[h.band];
    const d = S.data;
    const name = band.other ? (band.sites === 1 ? '1 other site' : `${band.sites} other sites`) : siteName(band);
    tip.textContent = `${name}\n${band.other ? 'several roles' : band.category} · ${fmtBytes(h.bytes)}\nevents ${fmtInt(d.first[h.col])}–${fmtInt(d.last[h.col])} (at ${fmtInt(d.max_event[h.col])}: ${fmtBytes(d.alloc_max[h.col])} allocated)`;
    tip.classList.remove('hidden');
    const left = Math.min(x + 14, c.clientWidth - tip.offsetWidth - 4);
    tip.style.left = left + 'px';
    tip.style.top = (y + 14) + 'px';
  });
  c.addEventListener('mouseleave', () => tip.classList.add('hidden'));
  c.addEventListener('dblclick', () => setWindow(0, S.events));
}

function selectEvent(e) {
  S.selectedEvent = e;
  const b = $('seg-at');
  b.disabled = e < 0;
  b.textContent = e >= 0 ? `At event ${fmtInt(e)}` : 'At the selected event';
  drawTimeline();
}

// ---- details -------------------------------------------------------------------------------

function showDetails(title, rows, stack, note) {
  const det = $('details');
  det.textContent = '';
  det.classList.remove('muted');
  det.appendChild(el('div', 'site', title));
  const dl = el('dl');
  for (const [k, v] of rows) {
    if (v === undefined || v === '') continue;
    dl.appendChild(el('dt', '', k));
    dl.appendChild(el('dd', '', v));
  }
  det.appendChild(dl);
  if (note) det.appendChild(el('div', 'muted', note));
  if (stack && stack.length) {
    det.appendChild(el('div', 'muted', 'stack (innermost first):'));
    det.appendChild(el('pre', 'stack', stack.join('\n')));
  }
}

function selectBand(b, col) {
  const band = S.bands[b];
  for (const li of document.querySelectorAll('#legend li')) li.classList.toggle('selected', Number(li.dataset.band) === b);
  S.selected = {band: b, col};
  const rows = [];
  if (!band.other) {
    rows.push(['role', band.category]);
    if (band.file) rows.push(['where', `${band.file}:${band.line}${band.function ? ' in ' + band.function : ''}`]);
    if (band.user_site && band.user_site !== band.site) rows.push(['your code', band.user_site]);
  } else {
    rows.push(['roles', band.roles.map(r => `${r.category} ${fmtBytes(r.bytes)}`).join(', ')]);
  }
  if (col >= 0 && S.data) {
    const d = S.data;
    rows.push(['here', `${fmtBytes(d.bands[b][col])} after event ${fmtInt(d.max_event[col])} (column: events ${fmtInt(d.first[col])}–${fmtInt(d.last[col])})`]);
  }
  rows.push(['at the peak', `${fmtBytes(band.bytes_at_peak)} in ${fmtInt(band.blocks_at_peak)} blocks (${band.percent.toFixed(1)}%)`]);
  rows.push(['highest', fmtBytes(band.max_bytes)]);
  const title = band.other ? (band.sites === 1 ? '1 other site' : `${band.sites} other sites`) : siteName(band);
  showDetails(title, rows, band.stack, band.evidence);
}

// ---- segments ------------------------------------------------------------------------------

async function loadSegments(at) {
  const c = $('segments');
  $('seg-when').textContent = at >= 0 ? `after event ${fmtInt(at)} (replayed)` : 'final state';
  try {
    S.seg = await getJSON(`/api/segments?device=${S.dev}&at=${at}&width=${Math.round(c.clientWidth - 20)}`);
  } catch (e) {
    $('seg-summary').textContent = 'segments: ' + e.message;
    return;
  }
  const s = S.seg;
  let sum = `reserved ${fmtBytes(s.reserved_bytes)} in ${fmtInt(s.segments)} segments · allocated ${fmtBytes(s.allocated_bytes)}`;
  if (s.pending_free_bytes) sum += ` · pending free ${fmtBytes(s.pending_free_bytes)}`;
  sum += ` · inactive ${fmtBytes(s.inactive_bytes)} · largest free block ${fmtBytes(s.largest_free_bytes)}`;
  for (const n of s.notes) sum += ' · ' + n;
  $('seg-summary').textContent = sum;
  S.segRows = [];
  s.place.forEach(([row, off], i) => {
    (S.segRows[row] = S.segRows[row] || []).push(i);
  });
  for (const r of S.segRows) if (r) r.sort((a, b) => s.place[a][1] - s.place[b][1]);
  buildSegLegend();
  if (!S.tm || !S.tm.has_trace) buildTopSites();
  drawSegments();
}

function segBox() {
  const c = $('segments');
  const s = S.seg;
  const rows = Math.max(1, s ? s.rows : 1);
  const pitch = Math.max(6, Math.min(30, 600 / rows));
  const h = Math.min(rows * pitch + 16, 2400);
  if (Math.abs(c.clientHeight - h) > 1) c.style.height = h + 'px';
  return {left: 8, right: c.clientWidth - 8, top: 8, pitch, bar: Math.max(pitch * 0.78, 2)};
}

function blockColor(blk) {
  const s = S.seg;
  if (blk[2] === 1) {
    const site = s.sites[blk[3]];
    return (site && S.meta.role_colors[site.category]) || '#a0a0a0';
  }
  if (blk[2] === 2) return S.meta.pending_color;
  return S.meta.inactive_color;
}

function drawSegments() {
  const s = S.seg;
  if (!s) return;
  const box = segBox();
  const c = $('segments');
  const ctx = setupCanvas(c);
  const scale = (box.right - box.left) / Math.max(s.row_bytes, 1);
  ctx.lineWidth = 0.6;
  for (let i = 0; i < s.list.length; i++) {
    const seg = s.list[i];
    const [row, off] = s.place[i];
    const y = box.top + row * box.pitch;
    const x = box.left + off * scale;
    let runX = 0, runColor = null;
    const flush = end => { if (runColor) { ctx.fillStyle = runColor; ctx.fillRect(runX, y, end - runX, box.bar); runColor = null; } };
    for (const blk of seg.blocks) {
      const bx0 = x + blk[0] * scale, bx1 = bx0 + blk[1] * scale;
      const color = blockColor(blk);
      if (bx1 - bx0 < 1.5) {
        if (runColor && runColor !== color) flush(bx0);
        if (!runColor) { runX = bx0; runColor = color; }
        continue;
      }
      flush(bx0);
      ctx.fillStyle = color;
      ctx.fillRect(bx0, y, bx1 - bx0, box.bar);
      if (blk[2] !== 3 && bx1 - bx0 >= 4) {
        ctx.fillStyle = '#fff';
        ctx.fillRect(bx1 - 0.5, y, 0.8, box.bar);
      }
    }
    flush(x + seg.size * scale);
    ctx.strokeStyle = '#555';
    ctx.strokeRect(x, y, seg.size * scale, box.bar);
  }
  drawSegLabels(ctx, box);
  S.segDrawn++;
  c.dataset.drawn = String(S.segDrawn);
}

// segHit finds the segment and block under (x, y) of the segment canvas.
function segHit(x, y) {
  const s = S.seg;
  if (!s) return null;
  const box = segBox();
  const row = Math.floor((y - box.top) / box.pitch);
  if (row < 0 || !S.segRows[row] || (y - box.top) - row * box.pitch > box.bar) return null;
  const scale = (box.right - box.left) / Math.max(s.row_bytes, 1);
  const off = (x - box.left) / scale;
  for (const i of S.segRows[row]) {
    const start = s.place[i][1], seg = s.list[i];
    if (off >= start && off < start + seg.size) {
      const rel = off - start;
      let lo = 0, hi = seg.blocks.length - 1;
      while (lo < hi) {
        const mid = (lo + hi + 1) >> 1;
        if (seg.blocks[mid][0] <= rel) lo = mid; else hi = mid - 1;
      }
      return {seg: i, block: lo};
    }
  }
  return null;
}

const stateNames = {1: 'allocated', 2: 'freed, waiting for another stream (pending free)', 3: 'cached free (inactive)'};

function setupSegmentEvents() {
  const c = $('segments');
  const tip = $('tooltip');
  c.addEventListener('mousemove', ev => {
    const r = c.getBoundingClientRect();
    const h = segHit(ev.clientX - r.left, ev.clientY - r.top);
    c.title = '';
    if (!h) return;
    const seg = S.seg.list[h.seg], blk = seg.blocks[h.block];
    const site = blk[3] >= 0 ? S.seg.sites[blk[3]] : null;
    c.title = `${fmtBytes(blk[1])} ${stateNames[blk[2]]}${site ? '\n' + siteName(site) + ' · ' + site.category : ''}\nsegment ${seg.address}: ${fmtBytes(seg.size)} ${seg.type}, ${seg.pool} pool, stream ${seg.stream}`;
  });
  c.addEventListener('click', ev => {
    const r = c.getBoundingClientRect();
    const h = segHit(ev.clientX - r.left, ev.clientY - r.top);
    if (!h) return;
    const seg = S.seg.list[h.seg], blk = seg.blocks[h.block];
    const site = blk[3] >= 0 ? S.seg.sites[blk[3]] : null;
    const rows = [['block', `${fmtBytes(blk[1])} at offset ${fmtInt(blk[0])}, ${stateNames[blk[2]]}`],
      ['segment', `${seg.address}: ${fmtBytes(seg.size)} ${seg.type} pool, stream ${seg.stream}`]];
    if (site) {
      rows.unshift(['role', site.category]);
      if (site.file) rows.push(['where', `${site.file}:${site.line}${site.function ? ' in ' + site.function : ''}`]);
    }
    showDetails(site ? siteName(site) : 'cached free block', rows, site ? site.stack : [], site ? site.evidence : '');
    tip.classList.add('hidden');
  });
}

// ---- test hooks ----------------------------------------------------------------------------

// memsnapView lets a browser test find what is drawn without reading pixels by hand.
window.memsnapView = {
  state: S,
  // pointForBand: page coordinates of the middle of band b in the column where it is largest.
  pointForBand(b) {
    const d = S.data;
    if (!d) return null;
    let best = -1, bv = 0;
    for (let k = 0; k < d.first.length; k++) if (d.bands[b][k] > bv) { bv = d.bands[b][k]; best = k; }
    if (best < 0) return null;
    const box = plotBox();
    const top = yTop();
    let acc = 0;
    for (let i = 0; i < b; i++) acc += d.bands[i][best];
    const yv = acc + bv / 2;
    const r = $('timeline').getBoundingClientRect();
    const x = (xOf(d.first[best], box) + xOf(d.last[best] + 1, box)) / 2;
    const y = box.bottom - yv / top * (box.bottom - box.top);
    return {x: r.left + window.scrollX + x, y: r.top + window.scrollY + y};
  },
  // inkedPixels counts the pixels of a canvas that are not white.
  inkedPixels(id) {
    const c = $(id);
    const img = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 0; i < img.length; i += 4) if (img[i] < 250 || img[i + 1] < 250 || img[i + 2] < 250) n++;
    return n;
  },
  zoom(start, end) { setWindow(start, end); return fetchColumns(0); },
  // allocations turns the per-allocation view on and waits for its answer.
  async allocations() { S.allocMode = true; setAllocMode(true); await fetchColumns(0); await fetchAllocations(); return S.allocs.allocations.length; },
  // pointForAllocation: page coordinates of the middle of allocation i where it is alive.
  pointForAllocation(i) {
    const a = S.allocs, sp = a.spans[i];
    const k = Math.floor((sp.from + sp.to - 1) / 2);
    const box = plotBox(), top = yTop();
    const r = $('timeline').getBoundingClientRect();
    const x = (xOf(a.first[k], box) + xOf(a.last[k] + 1, box)) / 2;
    const y = box.bottom - (sp.lo[k - sp.from] + a.allocations[i].size / 2) / top * (box.bottom - box.top);
    return {x: r.left + window.scrollX + x, y: r.top + window.scrollY + y};
  },
};

init();

// ---- steps and phases by level of detail ---------------------------------------------------

function drawSteps(ctx, box, tl) {
  const all = tl.steps.start_events;
  const a = lowerBound(all, S.win.start), b = lowerBound(all, S.win.end);
  const count = b - a;
  if (count <= 0) return;
  const width = box.right - box.left;
  ctx.strokeStyle = '#c4c4c4';
  ctx.setLineDash([2, 3]);
  ctx.beginPath();
  if (width / count >= 5) {
    for (let i = a; i < b; i++) { const x = Math.round(xOf(all[i], box)) + 0.5; ctx.moveTo(x, box.top); ctx.lineTo(x, box.bottom); }
    ctx.stroke();
    ctx.setLineDash([]);
    return;
  }
  // dense: a step-count axis, a tick every nice number of steps about 70 px apart
  const every = Math.max(1, niceStep(count * 70 / width, 1));
  const labels = [];
  for (let i = Math.ceil(a / every) * every; i < b; i += every) {
    const x = Math.round(xOf(all[i], box)) + 0.5;
    ctx.moveTo(x, box.top + 12); ctx.lineTo(x, box.bottom);
    labels.push([x, i]);
  }
  ctx.stroke();
  ctx.setLineDash([]);
  ctx.fillStyle = '#666';
  ctx.font = '10px "Liberation Sans", Arial, sans-serif';
  ctx.textAlign = 'center';
  ctx.textBaseline = 'top';
  for (const [x, i] of labels) ctx.fillText('step ' + i, x, box.top + 1);
  ctx.textBaseline = 'middle';
}

const phaseColors = {setup: '#b8c4d6', forward: '#8cc084', backward: '#f0a85c', optimizer: '#a78bc9', oom_unwinding: '#e57373'};

function drawPhases(ctx, box, tl) {
  // one piece of strip per column: the phase with the most events there (from the server)
  const d = S.data;
  if (!d || !d.phase) return;
  for (let k = 0; k < d.first.length; k++) {
    const name = d.phase[k];
    if (!name) continue;
    const xa = xOf(d.first[k], box), xb = Math.max(xOf(d.last[k] + 1, box), xa + 1);
    ctx.fillStyle = phaseColors[name] || '#ccc';
    ctx.fillRect(xa, box.bottom - 6, xb - xa + 0.3, 6);
  }
}

// ---- the per-allocation view (memory_viz's Active Memory Timeline) -------------------------

async function fetchAllocations() {
  if (!S.allocMode) return;
  const box = plotBox();
  const cols = Math.max(10, Math.round(box.right - box.left));
  const t = ++S.allocToken;
  const a = await getJSON(`/api/allocations?device=${S.dev}&start=${S.win.start}&end=${S.win.end}&cols=${cols}&height=${Math.round(box.bottom - box.top)}`);
  if (t !== S.allocToken) return;
  S.allocs = a;
  layoutAllocations();
  $('status').textContent = `events ${fmtInt(a.start)}–${fmtInt(a.end - 1)} · ${fmtInt(a.allocations.length)} allocations drawn (in allocation order), ${fmtInt(a.aggregated)} smaller than ${fmtBytes(a.min_bytes)} summed in gray`;
  drawTimeline();
}

// layoutAllocations stacks the allocations per column in allocation order: lo[i][k] is the
// bottom of allocation i in column k (NaN where it is not alive).
function layoutAllocations() {
  const a = S.allocs, n = a.first.length;
  const off = new Float64Array(n);
  a.spans = a.allocations.map(x => {
    const from = x.alloc_event === null ? 0 : lowerBound(a.max_event, x.alloc_event);
    const to = x.free_event === null ? n : lowerBound(a.max_event, x.free_event);
    const lo = new Float64Array(Math.max(to - from, 0));
    for (let k = from; k < to; k++) { lo[k - from] = off[k]; off[k] += x.size; }
    return {from, to, lo};
  });
  a.top = off;
}

function allocColor(x, i) {
  const base = (S.meta.role_colors[x.role] || '#a0a0a0');
  const r = parseInt(base.slice(1, 3), 16), g = parseInt(base.slice(3, 5), 16), b = parseInt(base.slice(5, 7), 16);
  const f = [0, -0.18, 0.22, -0.32, 0.36][i % 5];
  const to = f < 0 ? 0 : 255, m = Math.abs(f);
  const c = v => Math.round(v * (1 - m) + to * m);
  return `rgb(${c(r)},${c(g)},${c(b)})`;
}

function drawAllocations(ctx, box, yOf) {
  const a = S.allocs;
  if (!a || !a.spans) return;
  const x0 = k => xOf(a.first[k], box), x1 = k => Math.max(xOf(a.last[k] + 1, box), x0(k) + 1);
  a.allocations.forEach((x, i) => {
    const sp = a.spans[i];
    if (sp.to <= sp.from) return;
    ctx.fillStyle = S.pinned === i ? '#2b6cb0' : allocColor(x, i);
    ctx.beginPath();
    ctx.moveTo(x0(sp.from), yOf(sp.lo[0]));
    for (let k = sp.from; k < sp.to; k++) { const y = yOf(sp.lo[k - sp.from] + x.size); ctx.lineTo(x0(k), y); ctx.lineTo(x1(k), y); }
    for (let k = sp.to - 1; k >= sp.from; k--) { const y = yOf(sp.lo[k - sp.from]); ctx.lineTo(x1(k), y); ctx.lineTo(x0(k), y); }
    ctx.closePath();
    ctx.fill();
  });
  ctx.fillStyle = '#cfcfcf';
  ctx.beginPath();
  for (let k = 0; k < a.first.length; k++) {
    const v = a.aggregated_bytes[k];
    if (v > 0) { const ya = yOf(a.top[k]), yb = yOf(a.top[k] + v); ctx.rect(x0(k), yb, x1(k) - x0(k), ya - yb); }
  }
  ctx.fill();
}

// allocHit finds the allocation under (x, y) of the timeline canvas (-1: none).
function allocHit(x, y) {
  const a = S.allocs;
  if (!a || !a.spans) return -1;
  const box = plotBox();
  if (x < box.left || x > box.right || y < box.top || y > box.bottom) return -1;
  const k = Math.max(0, lowerBound(a.first, eventAt(x, box) + 1e-9) - 1);
  const v = (box.bottom - y) / (box.bottom - box.top) * yTop();
  for (let i = 0; i < a.allocations.length; i++) {
    const sp = a.spans[i];
    if (k < sp.from || k >= sp.to) continue;
    const lo = sp.lo[k - sp.from];
    if (v >= lo && v < lo + a.allocations[i].size) return i;
  }
  return -1;
}

const stackCache = new Map();
async function getStack(id) {
  if (id < 0) return null;
  if (!stackCache.has(id)) stackCache.set(id, getJSON(`/api/stack?id=${id}&device=${S.dev}`));
  return stackCache.get(id);
}

async function showAllocation(i) {
  const x = S.allocs.allocations[i];
  const rows = [['size', `${fmtBytes(x.size)} (${fmtInt(x.size)} B) at ${x.addr}`], ['role', x.role],
    ['allocated', x.alloc_event === null ? 'before the trace' : `at event ${fmtInt(x.alloc_event)}`],
    ['freed', x.free_event === null ? 'never (alive at the end)' : `at event ${fmtInt(x.free_event)}`]];
  const st = await getStack(x.stack_id).catch(() => null);
  showDetails(x.site, rows, st ? st.frames : [], st ? st.evidence : '');
}

function setAllocMode(on) {
  S.allocMode = on;
  $('mode').textContent = on ? 'Bands by site' : 'Allocations';
  $('legend-section').classList.toggle('hidden', on);
  if (on) fetchAllocations(); else { S.allocs = null; fetchColumns(0); }
  drawTimeline();
}

// ---- the OOM, explained --------------------------------------------------------------------

async function showOOM(k) {
  const o = S.tm.timeline.ooms[k];
  zoomAround(o.event);
  let rep = null;
  try {
    const r = await getJSON(`/api/oom?device=${S.dev}`);
    rep = r.ooms.find(x => x.event_index === o.event) || r.ooms[k];
  } catch (e) { /* the marker's own numbers below */ }
  const rows = [['requested', `${fmtBytes(o.requested_bytes)} (${fmtInt(o.requested_bytes)} B)`],
    ['device free', fmtBytes(o.device_free_bytes)], ['allocated', fmtBytes(o.allocated_bytes)], ['reserved', fmtBytes(o.reserved_bytes)]];
  let note = '';
  if (rep) {
    rows.push(['verdict', rep.verdict]);
    rows.push(['live sites', rep.live_sites.slice(0, 8).map(s => `${siteName(s)} ${s.category} ${fmtBytes(s.bytes)}`).join('\n')]);
    note = rep.explanation;
  }
  showDetails(`OOM at event ${fmtInt(o.event)}`, rows, rep ? rep.stack : [], note);
  $('details').dataset.oom = String(o.event);
}

// ---- segment map legend, pools and streams, top sites --------------------------------------

// segGroups are the runs of rows of one pool, stream and segment type (the layout packs
// segments by pool and stream).
function segGroups() {
  const s = S.seg, groups = [];
  const order = s.list.map((_, i) => i).sort((a, b) => s.place[a][0] - s.place[b][0] || s.place[a][1] - s.place[b][1]);
  for (const i of order) {
    const seg = s.list[i], key = `${seg.pool}|${seg.stream}`;
    const g = groups[groups.length - 1];
    if (g && g.key === key) { g.last = s.place[i][0]; g.bytes += seg.size; g.n++; continue; }
    groups.push({key, pool: seg.pool, stream: seg.stream, first: s.place[i][0], last: s.place[i][0], seg: i, bytes: seg.size, n: 1});
  }
  return groups;
}

function buildSegLegend() {
  const s = S.seg, box = $('seg-legend');
  box.textContent = '';
  const item = (color, label) => {
    const span = el('span');
    const sw = el('span', 'sw');
    sw.style.background = color;
    span.appendChild(sw);
    span.appendChild(document.createTextNode(label));
    box.appendChild(span);
  };
  for (const r of s.roles || []) item(S.meta.role_colors[r.category] || '#a0a0a0', `${r.category} ${fmtBytes(r.bytes)}`);
  if (s.pending_free_bytes) item(S.meta.pending_color, `freed, waiting for another stream ${fmtBytes(s.pending_free_bytes)}`);
  item(S.meta.inactive_color, `cached free ${fmtBytes(s.inactive_bytes)}`);
  for (const g of segGroups()) {
    box.appendChild(el('span', 'muted', `rows ${g.first + 1}–${g.last + 1}: ${g.pool} pool, stream ${g.stream} (${g.n} segments, ${fmtBytes(g.bytes)})`));
  }
}

// buildTopSites fills the side panel of a device without a trace with the segment map's top
// sites.
function buildTopSites() {
  const ol = $('legend'), s = S.seg;
  ol.textContent = '';
  $('legend-title').textContent = 'Top sites (allocated in the segments)';
  for (const t of s.top_sites || []) {
    const site = s.sites[t.site];
    const li = el('li');
    const sw = el('span', 'swatch');
    sw.style.background = S.meta.role_colors[site.category] || '#a0a0a0';
    li.appendChild(sw);
    li.appendChild(el('span', 'name', siteName(site)));
    li.appendChild(el('span', 'sub', `${site.category} · ${fmtBytes(t.bytes)} in ${fmtInt(t.blocks)} blocks`));
    li.addEventListener('click', () => showDetails(siteName(site), [['role', site.category], ['allocated', `${fmtBytes(t.bytes)} in ${fmtInt(t.blocks)} blocks`]], site.stack, site.evidence));
    ol.appendChild(li);
  }
}

// drawSegLabels writes each pool and stream at the start of its first row.
function drawSegLabels(ctx, box) {
  const s = S.seg;
  if (box.pitch < 12) return;
  ctx.font = '10px "Liberation Sans", Arial, sans-serif';
  ctx.textBaseline = 'top';
  ctx.textAlign = 'left';
  for (const g of segGroups()) {
    const y = box.top + g.first * box.pitch;
    const label = `${g.pool} pool · stream ${g.stream}`;
    const w = ctx.measureText(label).width;
    ctx.fillStyle = 'rgba(255,255,255,0.85)';
    ctx.fillRect(box.left + 2, y + 1, w + 4, 11);
    ctx.fillStyle = '#333';
    ctx.fillText(label, box.left + 4, y + 1);
  }
}

// ---- bands chosen over the window shown ----------------------------------------------------

// useBands switches the bands drawn (and the legend) when they change.
function useBands(bands, colors) {
  if (S.bands === bands) return;
  S.bands = bands;
  S.colors = colors;
  if (bands === S.tm.timeline.bands) $('legend-title').textContent = 'Bands (the sites highest in the trace; bytes at the peak)';
  buildLegend();
}

// fetchWindowBands asks, once a zoom has settled, for the same columns with the bands chosen
// over the window (the sites highest in it), and draws those.
async function fetchWindowBands(token, cols) {
  await new Promise(res => setTimeout(res, 250));
  if (token !== S.token || S.allocMode) return;
  try {
    const d = await getJSON(`/api/timeline?device=${S.dev}&start=${S.win.start}&end=${S.win.end}&cols=${cols}&bands=window`);
    if (token !== S.token || S.allocMode) return;
    S.data = d;
    useBands(d.bands_meta, d.colors);
    $('legend-title').textContent = `Bands (the sites highest in events ${fmtInt(d.start)}–${fmtInt(d.end - 1)}; bytes at the window's peak)`;
    drawTimeline();
  } catch (e) { /* the whole trace's bands stay */ }
}
