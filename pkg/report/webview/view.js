// memstat view: the page. It draws on canvases what the server computed at
// the level of detail of the screen (pkg/view); in a report the same page
// reads one pre-decimated window inlined in it instead of a server.
(function () {
  'use strict';
  const $ = (id) => document.getElementById(id);
  const token = new URLSearchParams(location.search).get('token') || '';
  const dataEl = $('memstat-data');
  const STATIC = dataEl ? JSON.parse(dataEl.textContent) : null;
  const PALETTE = ['#4e79a7', '#f28e2b', '#59a14f', '#e15759', '#76b7b2', '#edc948', '#b07aa1', '#ff9da7',
    '#9c755f', '#86bcb6', '#d37295', '#8cd17d', '#a0cbe8', '#ffbe7d', '#499894', '#f1ce63'];
  const S = {
    device: 0, by: 'allocation', top: 300, from: 0, to: 0, entries: 0, win: null, ov: null,
    sel: -1, hover: null, pinned: null, state: null, seq: 0, allocs: new Map(), drawnSegments: [],
  };
  const api = window.memstat = {
    ready: false, range: () => [S.from, S.to], selected: () => S.sel, drawnSegments: () => S.drawnSegments,
    // stateView: the state shown (entry, segments) and the rows on screen, missing those whose blocks have not come yet
    stateView: () => (S.state ? Object.assign({ at: S.state.at, count: S.state.count }, S.state.view) : null),
    bandPoint: bandPoint, busy: () => S.dirty, drawMS: () => S.drawMS, tipText: () => ($('tip').hidden ? '' : $('tip').textContent), select: select,
  };

  function fmtSize(n) {
    const neg = n < 0; n = Math.abs(n);
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
    let u = 0;
    while (n >= 1024 && u < units.length - 1) { n /= 1024; u++; }
    const s = u === 0 ? String(n) : n.toFixed(1);
    return (neg ? '-' : '') + s + ' ' + units[u];
  }
  function esc(s) {
    return String(s).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]);
  }
  function showError(e) {
    const el = $('error');
    el.textContent = String(e && e.message ? e.message : e);
    el.hidden = false;
  }

  // ---- data: the server, or the report's inlined windows ----
  async function get(path, q) {
    if (STATIC) return staticGet(path, q || {});
    const r = await fetch(path + '?' + new URLSearchParams(Object.assign({ token: token }, q || {})));
    if (!r.ok) throw new Error(path + ': ' + (await r.text()));
    return r.json();
  }
  function staticGet(path, q) {
    const dev = STATIC.devices[q.device];
    switch (path) {
      case 'api/info': return STATIC.info;
      case 'api/overview': return dev.overview;
      case 'api/alloc': return dev.allocs[q.id] || { id: +q.id, site: '(not in the report)', stack: [] };
      case 'api/window': {
        // every grouping's window has the allocation window's columns
        const base = dev.windows.allocation, w = Object.assign({}, base, dev.windows[q.by] || base);
        for (const k of ['first', 'sample', 'alloc_min', 'alloc_max', 'allocated', 'reserved', 'reserved_max', 'private_reserved']) if (!w[k]) w[k] = base[k];
        return sliceWindow(w, +q.from, +q.to);
      }
    }
    throw new Error('the report has no ' + path + ': run memstat view on the snapshot');
  }
  // sliceWindow keeps the columns of a pre-decimated window that start
  // inside from..to.
  function sliceWindow(w, from, to) {
    let a = w.first.findIndex((f) => f >= from);
    if (a < 0) a = w.first.length - 1;
    let b = a;
    while (b + 1 < w.first.length && w.first[b + 1] <= to) b++;
    a = Math.max(0, Math.min(a, b));
    if (a > 0 && w.first[a] > from) a--;
    const cut = (arr) => (arr ? arr.slice(a, b + 1) : arr);
    const out = Object.assign({}, w, {
      from: w.first[a], to: b + 1 < w.first.length ? w.first[b + 1] - 1 : w.to,
      first: cut(w.first), sample: cut(w.sample), alloc_min: cut(w.alloc_min), alloc_max: cut(w.alloc_max),
      allocated: cut(w.allocated), reserved: cut(w.reserved), reserved_max: cut(w.reserved_max),
      private_reserved: cut(w.private_reserved), other: cut(w.other), bands: [],
    });
    for (const bd of w.bands) {
      const c0 = Math.max(bd.c0, a), c1 = Math.min(bd.c1, b + 1);
      if (c0 >= c1) continue;
      const nb = Object.assign({}, bd, { c0: c0 - a, c1: c1 - a });
      if (bd.values) nb.values = bd.values.slice(c0 - bd.c0, c1 - bd.c0);
      out.bands.push(nb);
    }
    out.y_max = Math.max(1, ...out.reserved_max, ...out.alloc_max);
    return out;
  }

  // ---- canvases ----
  const tl = $('timeline'), mm = $('minimap'), sg = $('segments');
  const M = { left: 64, right: 12, bottom: 20, lane: 15 };
  function fit(c) {
    const dpr = window.devicePixelRatio || 1;
    const w = c.clientWidth, h = c.clientHeight;
    if (c.width !== Math.round(w * dpr) || c.height !== Math.round(h * dpr)) { c.width = Math.round(w * dpr); c.height = Math.round(h * dpr); }
    const ctx = c.getContext('2d');
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    return { ctx, w, h };
  }
  function lanes() { return Math.min(S.ov ? S.ov.lanes : 0, 4); }
  function plotBox() {
    const w = tl.clientWidth, h = tl.clientHeight;
    const top = 6 + lanes() * M.lane;
    return { x: M.left, y: top, w: Math.max(10, w - M.left - M.right), h: h - top - M.bottom };
  }
  function colX(c, box) { return box.x + (c * box.w) / S.win.first.length; }
  function entryX(i, box) { return box.x + ((i - S.win.from) * box.w) / (S.win.to - S.win.from + 1); }
  function yOf(v, box) { return box.y + box.h - (v / ymax()) * box.h; }
  function ymax() { return Math.max(1, S.win.y_max) * 1.06; }
  function colour(b) { return PALETTE[b.id % PALETTE.length]; }

  function drawTimeline() {
    const { ctx, w, h } = fit(tl);
    ctx.clearRect(0, 0, w, h);
    if (!S.win) return;
    const box = plotBox(), win = S.win, n = win.first.length;
    const base = new Float64Array(n);
    const cw = box.w / n;
    // One rectangle per run of columns where the band's bottom and top
    // stay put, not one per column: hundreds of bands over a wide window
    // would be hundreds of thousands of rectangles to fill.
    const band = (c0, c1, vals, fill) => {
      ctx.fillStyle = fill;
      ctx.beginPath();
      let run = -1, ry0 = 0, ry1 = 0;
      const flush = (c) => { if (run >= 0) ctx.rect(box.x + run * cw, ry1, (c - run) * cw + 0.5, ry0 - ry1); run = -1; };
      for (let c = c0; c < c1; c++) {
        const v = vals(c);
        if (v <= 0) { flush(c); continue; }
        const y0 = yOf(base[c], box), y1 = yOf(base[c] + v, box);
        base[c] += v;
        if (run >= 0 && Math.abs(y0 - ry0) < 0.05 && Math.abs(y1 - ry1) < 0.05) continue;
        flush(c);
        run = c; ry0 = y0; ry1 = y1;
      }
      flush(c1);
      ctx.fill();
    };
    const t0 = performance.now();
    for (const b of win.bands) band(Math.max(0, b.c0), Math.min(n, b.c1), b.values ? (c) => b.values[c - b.c0] : () => b.size, colour(b));
    band(0, n, (c) => win.other[c], 'rgba(140,140,140,0.55)');
    // allocated min over each column (a dip inside a wide column)
    ctx.strokeStyle = 'rgba(0,0,0,0.35)';
    stepLine(ctx, box, n, (c) => win.alloc_min[c]);
    ctx.strokeStyle = '#b91c1c'; ctx.lineWidth = 1.5;
    stepLine(ctx, box, n, (c) => win.reserved_max[c]);
    if (win.private_reserved) {
      // The memory reserved in private pools, a translucent band from the
      // axis up (over the allocations, which it includes), edged dashed.
      ctx.fillStyle = 'rgba(124,58,237,0.18)';
      for (let c = 0; c < n; c++) {
        const v = win.private_reserved[c];
        if (v > 0) { const y = yOf(v, box); ctx.fillRect(colX(c, box), y, colX(c + 1, box) - colX(c, box) + 0.5, yOf(0, box) - y); }
      }
      ctx.strokeStyle = '#7c3aed'; ctx.setLineDash([4, 3]); stepLine(ctx, box, n, (c) => win.private_reserved[c]); ctx.setLineDash([]);
    }
    ctx.lineWidth = 1;
    drawAxes(ctx, box);
    drawPhases(ctx, box);
    drawMarks(ctx, box);
    $('range').textContent = 'entries ' + S.from + '–' + S.to + ' of ' + S.entries;
    S.drawMS = performance.now() - t0;
  }
  function stepLine(ctx, box, n, val) {
    ctx.beginPath();
    for (let c = 0; c < n; c++) {
      const x = colX(c, box), y = yOf(val(c), box);
      if (c === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
      ctx.lineTo(colX(c + 1, box), y);
    }
    ctx.stroke();
  }
  function drawAxes(ctx, box) {
    ctx.fillStyle = '#444'; ctx.strokeStyle = '#ccc'; ctx.font = '11px system-ui, sans-serif';
    ctx.textAlign = 'right'; ctx.textBaseline = 'middle';
    for (let k = 0; k <= 4; k++) {
      const v = (ymax() * k) / 4, y = yOf(v, box);
      ctx.beginPath(); ctx.moveTo(box.x, y); ctx.lineTo(box.x + box.w, y); ctx.stroke();
      ctx.fillText(fmtSize(Math.round(v)), box.x - 4, y);
    }
    ctx.textAlign = 'center'; ctx.textBaseline = 'top';
    const span = S.to - S.from + 1;
    for (let k = 0; k <= 5; k++) {
      const i = Math.round(S.from + ((span - 1) * k) / 5);
      ctx.fillText(String(i), Math.min(Math.max(entryX(i, box), box.x + 20), box.x + box.w - 20), box.y + box.h + 4);
    }
  }
  // The annotation lane: one row per nesting level; a label is drawn only
  // where it fits inside its range and after the previous label of its row,
  // shortened with an ellipsis when that is enough: labels never overprint.
  function drawPhases(ctx, box) {
    if (!S.ov) return;
    ctx.font = '11px system-ui, sans-serif'; ctx.textAlign = 'left'; ctx.textBaseline = 'middle';
    const ends = new Array(lanes()).fill(-Infinity);
    for (const p of S.ov.phases) {
      if (p.lane >= lanes() || p.to < S.from || p.from > S.to) continue;
      const x0 = Math.max(box.x, entryX(p.from, box)), x1 = Math.min(box.x + box.w, entryX(p.to + 1, box));
      const y = 4 + p.lane * M.lane;
      ctx.fillStyle = p.lane % 2 ? '#e0e7ff' : '#dbeafe';
      ctx.fillRect(x0, y, Math.max(1, x1 - x0 - 1), M.lane - 2);
      let text = p.name;
      const room = x1 - Math.max(x0, ends[p.lane]) - 6;
      while (text.length > 2 && ctx.measureText(text).width > room) text = text.slice(0, -2) + '…';
      if (room > 12 && ctx.measureText(text).width <= room && x0 >= ends[p.lane]) {
        ctx.fillStyle = '#1e3a8a';
        ctx.fillText(text, x0 + 3, y + (M.lane - 2) / 2);
        ends[p.lane] = x0 + 3 + ctx.measureText(text).width + 4;
      }
    }
  }
  function drawMarks(ctx, box) {
    if (!S.ov) return;
    let lastX = -Infinity, row = 0;
    const mark = (i, colour, label) => {
      if (i < S.from || i > S.to) return;
      const x = entryX(i + 0.5, box);
      // a label close to the previous one goes one row lower
      row = x - lastX < 40 ? row + 1 : 0;
      if (label) lastX = x;
      ctx.strokeStyle = colour; ctx.setLineDash([3, 3]);
      ctx.beginPath(); ctx.moveTo(x, box.y); ctx.lineTo(x, box.y + box.h); ctx.stroke(); ctx.setLineDash([]);
      ctx.fillStyle = colour; ctx.textAlign = 'left'; ctx.textBaseline = 'top';
      ctx.fillText(label, Math.min(x + 3, box.x + box.w - 40), box.y + 2 + 13 * row);
    };
    mark(S.ov.marks.peak_allocated.index, '#111', 'peak');
    for (const o of S.ov.marks.ooms) mark(o.moment.index, '#dc2626', 'OOM');
    if (S.sel >= 0) mark(S.sel, '#2563eb', '');
  }

  function drawMinimap() {
    const { ctx, w, h } = fit(mm);
    ctx.clearRect(0, 0, w, h);
    if (!S.ov) return;
    const ow = S.ov.window, n = ow.first.length, box = { x: M.left, y: 3, w: Math.max(10, w - M.left - M.right), h: h - 6 };
    const top = Math.max(1, ow.y_max);
    const y = (v) => box.y + box.h - (v / top) * box.h;
    ctx.fillStyle = '#9ca3af';
    for (let c = 0; c < n; c++) {
      const x = box.x + (c * box.w) / n;
      ctx.fillRect(x, y(ow.alloc_max[c]), box.w / n + 0.5, box.y + box.h - y(ow.alloc_max[c]));
    }
    ctx.strokeStyle = '#b91c1c'; ctx.beginPath();
    for (let c = 0; c < n; c++) { const x = box.x + (c * box.w) / n; if (c) ctx.lineTo(x, y(ow.reserved_max[c])); else ctx.moveTo(x, y(ow.reserved_max[c])); }
    ctx.stroke();
    const ex = (i) => box.x + (i * box.w) / S.entries;
    ctx.fillStyle = 'rgba(37,99,235,0.15)'; ctx.strokeStyle = '#2563eb';
    ctx.fillRect(ex(S.from), 0, Math.max(2, ex(S.to + 1) - ex(S.from)), h);
    ctx.strokeRect(ex(S.from), 0.5, Math.max(2, ex(S.to + 1) - ex(S.from)), h - 1);
    mm._box = box;
  }

  // ---- the window: every zoom or pan asks the server for its level of detail ----
  let pending = 0;
  function setRange(from, to) {
    const n = S.entries;
    let span = Math.max(Math.min(to - from + 1, n), Math.min(n, 8));
    from = Math.round(Math.max(0, Math.min(from, n - span)));
    S.from = from; S.to = Math.min(n - 1, from + Math.round(span) - 1);
    drawMinimap();
    S.dirty = true;
    clearTimeout(pending);
    pending = setTimeout(loadWindow, 40);
  }
  async function loadWindow() {
    const seq = ++S.seq;
    const box = plotBox();
    const win = await get('api/window', { device: S.device, from: S.from, to: S.to, width: Math.round(box.w), by: S.by, top: S.by === 'allocation' ? S.top : 40 });
    if (seq !== S.seq) return;
    S.win = win;
    S.dirty = false;
    drawTimeline();
    legend();
  }
  function legend() {
    const win = S.win;
    const parts = ['<span><i style="background:#b91c1c"></i>reserved (max per column)</span>',
      '<span><i style="background:rgba(0,0,0,.35)"></i>allocated (min per column)</span>',
      '<span><i style="background:rgba(140,140,140,.55);height:10px"></i>' + win.other_count + ' smaller ' + (S.by === 'allocation' ? 'allocations' : 'groups') + ', summed</span>'];
    if (win.private_reserved) parts.push('<span><i style="background:rgba(124,58,237,.35);border-top:2px dashed #7c3aed;height:10px"></i>reserved in private pools (CUDA graphs, MemPool)</span>');
    if (S.by !== 'allocation') for (const b of win.bands.slice(0, 8)) parts.push('<span><i style="background:' + colour(b) + ';height:10px"></i>' + esc(b.label) + '</span>');
    $('legend').innerHTML = parts.join('');
  }

  // ---- hover and click ----
  function hitTest(px, py) {
    if (!S.win) return null;
    const box = plotBox(), n = S.win.first.length;
    const c = Math.floor(((px - box.x) * n) / box.w);
    if (c < 0 || c >= n || py < box.y || py > box.y + box.h) return null;
    const v = ((box.y + box.h - py) / box.h) * ymax();
    let base = 0;
    for (const b of S.win.bands) {
      const x = c >= b.c0 && c < b.c1 ? (b.values ? b.values[c - b.c0] : b.size) : 0;
      if (x > 0 && v >= base && v < base + x) return { c, band: b, bytes: x };
      base += x;
    }
    if (v >= base && v < base + S.win.other[c]) return { c, other: true, bytes: S.win.other[c] };
    return { c };
  }
  // bandPoint is where a band is widest on screen: the middle of its
  // tallest run of columns (tests hover there).
  function bandPoint(id) {
    if (!S.win) return null;
    const box = plotBox(), n = S.win.first.length, r = tl.getBoundingClientRect();
    const b = S.win.bands.find((x) => x.id === id);
    if (!b) return null;
    const c = Math.floor((b.c0 + b.c1 - 1) / 2);
    let base = 0;
    for (const o of S.win.bands) {
      if (o === b) break;
      base += c >= o.c0 && c < o.c1 ? (o.values ? o.values[c - o.c0] : o.size) : 0;
    }
    const v = b.values ? b.values[c - b.c0] : b.size;
    return { x: r.left + box.x + ((c + 0.5) * box.w) / n, y: r.top + yOf(base + v / 2, box) };
  }
  async function allocation(id) {
    if (!S.allocs.has(id)) S.allocs.set(id, await get('api/alloc', { device: S.device, id: id }));
    return S.allocs.get(id);
  }
  function allocHTML(a, full) {
    const when = (i, s) => (i < 0 ? null : 'entry ' + i + (s != null ? ' (' + s.toFixed(6) + ' s)' : ''));
    const rows = [
      ['size', fmtSize(a.size) + (a.requested_size ? ' (requested ' + fmtSize(a.requested_size) + ')' : '')],
      ['address', '0x' + a.address.toString(16)], ['stream', a.stream], ['pool', a.pool],
      ['allocated', when(a.alloc_index, a.alloc_seconds) || 'before the trace began'],
      ['freed', when(a.free_index, a.free_seconds) || 'still allocated at the end'],
      ['annotation', a.annotation || '—'],
    ];
    // the user's own frames in bold: where to act
    const stack = ((full ? a.stack : (a.stack || []).slice(0, 10)) || []).map((f, i) => (a.user && a.user[i] ? '<b>' + esc(f) + '</b>' : esc(f)));
    return '<b>' + esc(a.site) + '</b><table>' + rows.map((r) => '<tr><td>' + r[0] + '</td><td>' + esc(r[1]) + '</td></tr>').join('') +
      '</table><pre>' + stack.join('\n') + (a.hidden_frames ? '\n(' + a.hidden_frames + ' internal frames hidden)' : '') + '</pre>';
  }
  let hoverSeq = 0;
  tl.addEventListener('mousemove', async (ev) => {
    if (drag) return;
    const r = tl.getBoundingClientRect(), h = hitTest(ev.clientX - r.left, ev.clientY - r.top);
    const tip = $('tip');
    if (!h || (!h.band && !h.other)) { tip.hidden = true; return; }
    tip.style.left = Math.min(ev.clientX + 14, window.innerWidth - 420) + 'px';
    tip.style.top = ev.clientY + 14 + 'px';
    const at = 'entry ' + S.win.sample[h.c];
    if (h.other) { tip.innerHTML = esc(fmtSize(h.bytes) + ' in smaller allocations at ' + at); tip.hidden = false; return; }
    const seq = ++hoverSeq;
    if (S.by !== 'allocation') {
      tip.innerHTML = '<b>' + esc(h.band.label) + '</b><br>' + esc(fmtSize(h.bytes)) + ' at ' + at;
      tip.hidden = false;
      return;
    }
    tip.innerHTML = '<b>' + esc(h.band.label) + '</b><br>' + esc(fmtSize(h.bytes));
    tip.hidden = false;
    const a = await allocation(h.band.id);
    if (seq === hoverSeq && !tip.hidden) tip.innerHTML = allocHTML(a, false);
  });
  tl.addEventListener('mouseleave', () => { $('tip').hidden = true; });

  // wheel: zoom around the pointer; drag: pan; click: select
  tl.addEventListener('wheel', (ev) => {
    ev.preventDefault();
    const box = plotBox(), r = tl.getBoundingClientRect();
    const f = Math.min(1, Math.max(0, (ev.clientX - r.left - box.x) / box.w));
    const span = S.to - S.from + 1, anchor = S.from + f * span;
    const ns = span * (ev.deltaY > 0 ? 1.4 : 1 / 1.4);
    setRange(anchor - f * ns, anchor - f * ns + ns - 1);
  }, { passive: false });
  let drag = null;
  tl.addEventListener('mousedown', (ev) => { drag = { x: ev.clientX, from: S.from, to: S.to, moved: false }; });
  window.addEventListener('mousemove', (ev) => {
    if (!drag) return;
    const dx = ev.clientX - drag.x;
    if (Math.abs(dx) > 3) drag.moved = true;
    if (!drag.moved) return;
    const shift = (-dx * (drag.to - drag.from + 1)) / plotBox().w;
    setRange(drag.from + shift, drag.to + shift);
  });
  window.addEventListener('mouseup', async (ev) => {
    const d = drag; drag = null;
    if (!d || d.moved || ev.target !== tl) return;
    const r = tl.getBoundingClientRect(), h = hitTest(ev.clientX - r.left, ev.clientY - r.top);
    if (!h) return;
    if (h.band && S.by === 'allocation') { S.pinned = h.band.id; $('detail').innerHTML = allocHTML(await allocation(h.band.id), true); }
    select(S.win.sample[h.c]);
  });
  // minimap: click centres the window there, drag selects a range
  let mdrag = null;
  const mmEntry = (ev) => { const r = mm.getBoundingClientRect(), b = mm._box; return Math.round(((ev.clientX - r.left - b.x) / b.w) * S.entries); };
  mm.addEventListener('mousedown', (ev) => { mdrag = { at: mmEntry(ev), moved: false }; });
  mm.addEventListener('mousemove', (ev) => {
    if (!mdrag) return;
    const e = mmEntry(ev);
    if (Math.abs(e - mdrag.at) > S.entries / 200) { mdrag.moved = true; setRange(Math.min(e, mdrag.at), Math.max(e, mdrag.at)); }
  });
  mm.addEventListener('mouseup', (ev) => {
    if (mdrag && !mdrag.moved) { const span = S.to - S.from + 1, e = mmEntry(ev); setRange(e - span / 2, e + span / 2); }
    mdrag = null;
  });

  // ---- allocator state at an event ----
  // A state of a large run has tens of thousands of segments and a
  // million blocks: the server answers the blocks of the rows on screen
  // only, and a summary row of the segments around them; the pane draws
  // those rows from their summary and asks for their blocks (and the
  // summary of rows further on) as they scroll into view (api/state's
  // from, count and summary).
  const ROW = 14, LABEL = 150, BOX_H = 360;
  const segBox = $('segmentsBox');
  async function select(i) {
    if (STATIC || i < 0 || i >= S.entries) return;
    S.sel = i;
    drawTimeline();
    const first = Math.max(0, Math.floor((segBox.scrollTop - 4) / ROW));
    const [events, ans] = await Promise.all([
      get('api/events', { device: S.device, from: Math.max(0, i - 15), count: 40 }),
      get('api/state', { device: S.device, at: i, from: first, count: partRows() }),
    ]);
    if (S.sel !== i) return;
    S.state = newState(i, ans);
    $('events').innerHTML = events.map((e) => '<tr data-i="' + e.index + '"' + (e.index === i ? ' class="sel"' : '') + '><td>' + e.index +
      '</td><td>' + esc(e.action) + '</td><td>' + esc(fmtSize(e.size)) + '</td><td>' + esc(e.site || '') + '</td></tr>').join('');
    const row = $('events').querySelector('tr.sel');
    if (row) row.scrollIntoView({ block: 'nearest' });
    $('stateTitle').textContent = 'after entry ' + i;
    drawSegments();
    location.hash = 'entry=' + i;
  }
  // partRows is how many segments' blocks one request asks for: the rows
  // the pane shows, and as many again for a short scroll.
  function partRows() { return 2 * Math.ceil(BOX_H / ROW) + 2; }
  function newState(at, ans) {
    const st = { at: at, moment: ans.moment, total: ans.total, count: ans.count, largest: Math.max(1, ans.largest),
      summary: new Map(), blocks: new Map(), asked: new Set(), view: { first: 0, last: -1, missing: 0 } };
    addPart(st, ans);
    return st;
  }
  // addPart keeps an answer's blocks and summary rows (size, allocated,
  // pending free, free, pool name, expandable) by row.
  function addPart(st, ans) {
    ans.segments.forEach((s, k) => st.blocks.set(ans.from + k, s));
    if (ans.summary) ans.summary.forEach((r, k) => st.summary.set(ans.summary_from + k, [r[1], r[2], r[3], r[4], ans.pools[r[6]], r[8]]));
  }
  // askBlocks fetches the blocks of rows first..last of the state shown
  // (those not asked for already), then draws again.
  async function askBlocks(st, first, last) {
    while (first <= last && (st.blocks.has(first) || st.asked.has(first))) first++;
    if (first > last) return;
    const count = Math.min(Math.max(last - first + 1, partRows()), st.count - first);
    let summary = 0;
    for (let r = first; r < first + count; r++) { st.asked.add(r); if (!st.summary.has(r)) summary = 1; }
    try {
      addPart(st, await get('api/state', { device: S.device, at: st.at, from: first, count: count, summary: summary }));
    } finally {
      for (let r = first; r < first + count; r++) st.asked.delete(r);
    }
    if (S.state === st) drawSegments();
  }
  $('events').addEventListener('click', (ev) => { const tr = ev.target.closest('tr'); if (tr) select(+tr.dataset.i); });
  window.addEventListener('keydown', (ev) => {
    if (S.sel < 0 || ev.target.tagName === 'SELECT') return;
    if (ev.key === 'ArrowRight') { ev.preventDefault(); select(S.sel + 1); }
    if (ev.key === 'ArrowLeft') { ev.preventDefault(); select(S.sel - 1); }
  });
  let segFrame = 0;
  segBox.addEventListener('scroll', () => { if (!segFrame) segFrame = requestAnimationFrame(() => { segFrame = 0; drawSegments(); }); });
  const BLOCK = { active_allocated: '#2563eb', active_pending_free: '#f59e0b', inactive: '#e5e7eb' };
  // Each segment is a row whose length is to scale with the largest
  // segment; its blocks are drawn to scale inside it. A row whose blocks
  // have not come yet shows its allocated, pending-free and free bytes
  // side by side, paler, until they do.
  function drawSegments() {
    const st = S.state;
    if (!st) return;
    const full = st.count * ROW + 8, boxH = Math.min(BOX_H, Math.max(40, full));
    sg.style.height = boxH + 'px';
    $('segmentsSpace').style.height = Math.max(0, full - boxH) + 'px';
    const { ctx, w, h } = fit(sg);
    ctx.clearRect(0, 0, w, h);
    ctx.font = '11px system-ui, sans-serif'; ctx.textBaseline = 'middle';
    const top = Math.min(segBox.scrollTop, Math.max(0, full - boxH)), room = w - LABEL - 8;
    const first = Math.max(0, Math.floor((top - 4) / ROW)), last = Math.min(st.count - 1, Math.floor((top + boxH - 4) / ROW));
    S.drawnSegments = [];
    let missing = 0, lo = -1, hi = -1;
    for (let r = first; r <= last; r++) {
      const seg = st.blocks.get(r), sum = st.summary.get(r), y = 4 + r * ROW - top;
      if (!seg && !sum) {
        // neither yet: a row far from where the pane was
        ctx.fillStyle = '#999'; ctx.textAlign = 'right'; ctx.fillText('…', LABEL - 6, y + ROW / 2 - 1);
        missing++;
        if (lo < 0) lo = r;
        hi = r;
        continue;
      }
      const size = seg ? seg.size : sum[0], len = Math.max(2, (size / st.largest) * room);
      ctx.fillStyle = '#333'; ctx.textAlign = 'right';
      ctx.fillText(fmtSize(size) + ' ' + (seg ? seg.pool : sum[4]) + ((seg ? seg.expandable : sum[5]) ? ' exp' : ''), LABEL - 6, y + ROW / 2 - 1);
      if (seg) {
        let off = 0;
        for (const b of seg.blocks) {
          const x0 = LABEL + (off / size) * len, x1 = LABEL + ((off + b.size) / size) * len;
          ctx.fillStyle = BLOCK[b.state] || '#ccc';
          ctx.fillRect(x0, y, Math.max(1, x1 - x0 - (x1 - x0 > 3 ? 1 : 0)), ROW - 3);
          off += b.size;
        }
        S.drawnSegments.push({ index: r, address: seg.address, size: seg.size, blocks: seg.blocks.map((b) => b.state + ':' + b.size) });
      } else {
        ctx.globalAlpha = 0.45;
        let off = 0;
        for (const [bytes, state] of [[sum[1], 'active_allocated'], [sum[2], 'active_pending_free'], [sum[3], 'inactive']]) {
          ctx.fillStyle = BLOCK[state];
          ctx.fillRect(LABEL + (off / size) * len, y, (bytes / size) * len, ROW - 3);
          off += bytes;
        }
        ctx.globalAlpha = 1;
        missing++;
        if (lo < 0) lo = r;
        hi = r;
      }
      ctx.strokeStyle = '#555'; ctx.strokeRect(LABEL + 0.5, y + 0.5, len - 1, ROW - 4);
    }
    st.view = { first: first, last: last, missing: missing };
    if (missing) askBlocks(st, lo, hi).catch(showError);
    const t = st.total;
    $('stateSummary').innerHTML = esc(st.count + ' segments, reserved ' + fmtSize(t.size) + ', allocated ' + fmtSize(t.allocated_bytes) +
      ', pending free ' + fmtSize(t.pending_free_bytes) + ', free ' + fmtSize(t.free_bytes)) +
      (st.count > last - first + 1 ? esc(' (rows ' + first + '–' + last + ' shown; scroll for more)') : '') +
      ' — <span style="color:#2563eb">■</span> allocated <span style="color:#f59e0b">■</span> pending free <span style="color:#9ca3af">■</span> free';
  }
  sg.addEventListener('click', (ev) => {
    const st = S.state; if (!st) return;
    const r = sg.getBoundingClientRect(), full = st.count * ROW + 8, top = Math.min(segBox.scrollTop, Math.max(0, full - r.height));
    const row = Math.floor((ev.clientY - r.top - 4 + top) / ROW), s = st.blocks.get(row);
    if (!s) return;
    const len = Math.max(2, (s.size / st.largest) * (r.width - LABEL - 8));
    let at = ((ev.clientX - r.left - LABEL) / len) * s.size, off = 0;
    for (const b of s.blocks) { if (at < off + b.size) { if (b.allocation >= 0) allocation(b.allocation).then((a) => { $('detail').innerHTML = allocHTML(a, true); }); break; } off += b.size; }
  });

  // ---- devices, group-by, settings, links ----
  async function openDevice(d) {
    S.device = d; S.allocs.clear(); S.sel = -1; S.state = null;
    S.ov = await get('api/overview', { device: d });
    S.entries = S.ov.entries;
    S.from = 0; S.to = S.entries - 1;
    await loadWindow();
    drawMinimap();
  }
  function jump(i) {
    if (i < 0) return;
    const span = Math.max(50, Math.round((S.to - S.from + 1) / 4));
    setRange(i - span / 2, i + span / 2);
    select(i);
  }
  function goHash() {
    const h = location.hash.slice(1);
    if (h === 'peak') jump(S.ov.marks.peak_allocated.index);
    else if (h === 'oom' && S.ov.marks.ooms.length) jump(S.ov.marks.ooms[0].moment.index);
    else if (h.startsWith('entry=')) { const i = +h.slice(6); if (i !== S.sel) jump(i); }
  }
  $('goPeak').onclick = () => jump(S.ov.marks.peak_allocated.index);
  $('goOOM').onclick = () => { if (S.ov.marks.ooms.length) jump(S.ov.marks.ooms[0].moment.index); };
  $('reset').onclick = () => setRange(0, S.entries - 1);
  $('by').onchange = (ev) => { S.by = ev.target.value; loadWindow().catch(showError); };
  $('device').onchange = (ev) => { openDevice(+ev.target.value).catch(showError); };
  window.addEventListener('resize', () => { drawMinimap(); clearTimeout(pending); pending = setTimeout(loadWindow, 100); });

  async function main() {
    if (STATIC) $('memstat-view').classList.add('static');
    const info = await get('api/info');
    $('file').textContent = info.file;
    const traced = info.devices.filter((d) => d.traced);
    $('device').innerHTML = info.devices.map((d) => '<option value="' + d.device + '"' + (d.traced ? '' : ' disabled') + '>' + d.device +
      (d.traced ? ' (' + d.entries + ' entries)' : ' (no trace)') + '</option>').join('');
    $('settingsTable').innerHTML = info.settings.map((kv) => '<tr><td>' + esc(kv.key) + '</td><td>' + esc(kv.value) + '</td></tr>').join('');
    if (STATIC) $('statePane').innerHTML = '<h2>Allocator state</h2><p>Run <code>memstat view ' + esc(info.file) + '</code> to see the segments and blocks at any event.</p>';
    if (!traced.length) { showError('no device of this snapshot has a trace: there is no timeline to show'); return; }
    const first = traced.some((d) => d.device === info.first) ? info.first : traced[0].device;
    $('device').value = String(first);
    await openDevice(first);
    $('goOOM').disabled = !S.ov.marks.ooms.length;
    if (location.hash) goHash();
    window.addEventListener('hashchange', goHash);
    api.ready = true;
  }
  main().catch(showError);
})();
