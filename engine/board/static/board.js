// gorun board: the page. It asks the board for its runs (api/runs), follows
// their metrics.jsonl over server-sent events (api/events) and draws each
// chart as SVG. No library: see docs/reference.md, "Watching runs".
'use strict';
(function () {
  const SVGNS = 'http://www.w3.org/2000/svg';
  const COLORS = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd',
    '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22', '#17becf'];
  const HEIGHT = 240;
  const MARGIN = { left: 58, right: 14, top: 10, bottom: 26 };

  // Each chart: its series, each from one kind of metrics.jsonl line
  // (src: steps, epochs or evals) and one field of it.
  const CHARTS = [
    { id: 'loss', title: 'Loss', series: [
      { key: 'train', label: 'train (steps)', src: 'steps', field: 'loss', smooth: true, on: true },
      { key: 'epoch', label: 'train (epoch mean)', src: 'epochs', field: 'train_loss', marker: true, on: false },
      { key: 'test', label: 'test', src: 'evals', field: 'loss', marker: true, on: true }] },
    { id: 'accuracy', title: 'Test accuracy', series: [
      { key: 'test', label: 'test', src: 'evals', field: 'accuracy', marker: true, on: true }] },
    { id: 'lr', title: 'Learning rate', series: [
      { key: 'lr', label: 'lr', src: 'steps', field: 'lr', on: true }] },
    { id: 'samples', title: 'Samples/s', series: [
      { key: 'samples', label: 'samples/s', src: 'steps', field: 'samples_per_s', smooth: true, on: true }] },
    { id: 'comm', title: 'Communication time (s per step, rank 0)', series: [
      { key: 'comm', label: 'comm s', src: 'steps', field: 'comm_seconds', smooth: true, on: true }] },
  ];
  const FIELDS = {
    steps: ['step', 'time', 'loss', 'lr', 'samples_per_s', 'comm_seconds'],
    epochs: ['step', 'epoch', 'train_loss'],
    evals: ['step', 'epoch', 'accuracy', 'loss'],
  };

  const state = {
    runs: [], // {index, name, dir, color, visible, state, detail, steps, epochs, evals, summary, stepTime}
    connected: false,
    events: 0, // "lines" events received
    redraws: 0,
    smoothing: 0.6,
    xaxis: 'step',
    charts: {}, // id → {def, svg, on: {seriesKey: bool}, drawn: [...]}
  };
  window.gorunBoard = state; // read by the browser test

  const $ = (id) => document.getElementById(id);
  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function svg(tag, attrs, text) {
    const e = document.createElementNS(SVGNS, tag);
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  const num = (v) => (typeof v === 'number' ? v : NaN);

  function emptyData(run) {
    for (const src in FIELDS) {
      run[src] = {};
      for (const f of FIELDS[src]) run[src][f] = [];
    }
    run.summary = null;
    run.stepTime = new Map();
  }

  // ingest adds one metrics.jsonl line to a run.
  function ingest(run, line) {
    let src;
    switch (line.kind) {
      case 'step': src = 'steps'; break;
      case 'epoch': src = 'epochs'; break;
      case 'eval': src = 'evals'; break;
      case 'summary': run.summary = line; return;
      default: return;
    }
    for (const f of FIELDS[src]) run[src][f].push(num(line[f]));
    if (src === 'steps') run.stepTime.set(line.step, num(line.time));
  }

  // ---- numbers and axes ----

  function fmt(v) {
    if (!isFinite(v)) return '–';
    const a = Math.abs(v);
    if (a === 0) return '0';
    if (a >= 1e6) return Number((v / 1e6).toPrecision(3)) + 'M';
    if (a >= 1e4) return Number((v / 1e3).toPrecision(3)) + 'k';
    if (a < 1e-3) return v.toExponential(2);
    return String(Number(v.toPrecision(4)));
  }

  // ticks: nice values (1, 2 or 5 × 10^k) covering [lo, hi].
  function ticks(lo, hi, n) {
    // A span too small to cut at this magnitude (a constant series, a
    // single point) is widened by a tenth of the value, or by 1 around 0.
    if (!(hi - lo > Math.max(Math.abs(lo), Math.abs(hi)) * 1e-9)) {
      const c = lo / 2 + hi / 2, d = Math.abs(c) / 10 || 1;
      lo = c - d; hi = c + d;
    }
    const raw = (hi - lo) / n;
    const k = Math.floor(Math.log10(raw));
    let step = Math.pow(10, k);
    for (const m of [1, 2, 5, 10]) {
      if (m * Math.pow(10, k) >= raw * (1 - 1e-9)) { step = m * Math.pow(10, k); break; }
    }
    const first = Math.floor(lo / step + 1e-9), last = Math.ceil(hi / step - 1e-9);
    const decimals = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
    const out = [];
    for (let i = first; i <= last && out.length <= 2 * n + 4; i++) {
      const v = i * step;
      let label;
      if (Math.abs(v) >= 1e4 || (Math.abs(v) < 1e-3 && v !== 0)) label = fmt(v);
      else label = v.toFixed(Math.min(decimals, 10));
      out.push({ v, label });
    }
    return out;
  }

  // smooth is TensorBoard's debiased exponential moving average; NaN
  // values stay gaps.
  function smooth(ys, w) {
    if (!(w > 0)) return ys;
    const out = new Array(ys.length);
    let last = 0, n = 0;
    for (let i = 0; i < ys.length; i++) {
      const y = ys[i];
      if (!isFinite(y)) { out[i] = NaN; continue; }
      last = last * w + (1 - w) * y;
      n++;
      out[i] = last / (1 - Math.pow(w, n));
    }
    return out;
  }

  // xs of a series: steps, or the seconds since the run started.
  function xsOf(run, src) {
    const steps = run[src].step;
    if (state.xaxis === 'step') return steps;
    if (src === 'steps') return run.steps.time;
    return steps.map((s) => (run.stepTime.has(s) ? run.stepTime.get(s) : NaN));
  }

  // pathData draws (xs, ys) in plot coordinates: NaN makes a gap; past two
  // points per pixel column, each column keeps its lowest and highest.
  function pathData(xs, ys, sx, sy, width) {
    let d = '';
    let pen = false;
    const dense = xs.length > 2 * width;
    let col = null, lo = 0, hi = 0, loY = 0, hiY = 0;
    const flush = () => {
      if (col === null) return;
      const a = lo < hi ? [loY, hiY] : [hiY, loY];
      d += (pen ? 'L' : 'M') + col + ',' + a[0].toFixed(1) + 'L' + col + ',' + a[1].toFixed(1);
      pen = true;
      col = null;
    };
    for (let i = 0; i < xs.length; i++) {
      const x = xs[i], y = ys[i];
      if (!isFinite(x) || !isFinite(y)) { flush(); pen = false; continue; }
      const px = sx(x), py = sy(y);
      if (!dense) {
        d += (pen ? 'L' : 'M') + px.toFixed(1) + ',' + py.toFixed(1);
        pen = true;
        continue;
      }
      const c = Math.round(px);
      if (c !== col) {
        flush();
        col = c; lo = i; hi = i; loY = py; hiY = py;
      } else if (py < hiY) { hiY = py; hi = i; } else if (py > loY) { loY = py; lo = i; }
    }
    flush();
    return d;
  }

  // ---- charts ----

  function buildCharts() {
    const main = $('charts');
    for (const def of CHARTS) {
      const box = el('section', { class: 'chart', id: 'chart-' + def.id });
      const head = el('div', { class: 'chart-head' });
      head.appendChild(el('h2', {}, def.title));
      const c = { def, on: {}, svg: null, drawn: [] };
      for (const s of def.series) {
        c.on[s.key] = s.on;
        if (def.series.length > 1) {
          const lab = el('label');
          const cb = el('input', { type: 'checkbox', 'data-series': s.key });
          cb.checked = s.on;
          cb.addEventListener('change', () => { c.on[s.key] = cb.checked; redraw(); });
          lab.appendChild(cb);
          lab.appendChild(document.createTextNode(s.label));
          head.appendChild(lab);
        }
      }
      box.appendChild(head);
      c.svg = svg('svg', { role: 'img', 'aria-label': def.title });
      c.svg.addEventListener('mousemove', (ev) => hover(c, ev));
      c.svg.addEventListener('mouseleave', () => { $('tooltip').hidden = true; drawCursor(c, null); });
      box.appendChild(c.svg);
      main.appendChild(box);
      state.charts[def.id] = c;
    }
  }

  function drawChart(c) {
    const s = c.svg;
    const width = Math.max(200, Math.round(s.getBoundingClientRect().width) || 600);
    s.setAttribute('viewBox', '0 0 ' + width + ' ' + HEIGHT);
    while (s.firstChild) s.removeChild(s.firstChild);
    const pw = width - MARGIN.left - MARGIN.right, ph = HEIGHT - MARGIN.top - MARGIN.bottom;
    // The series to draw, and the ranges they span.
    const drawn = [];
    let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
    for (const run of state.runs) {
      if (!run.visible) continue;
      for (const sd of c.def.series) {
        if (!c.on[sd.key]) continue;
        const xs = xsOf(run, sd.src), raw = run[sd.src][sd.field];
        if (!raw.length) continue;
        const ys = sd.smooth ? smooth(raw, state.smoothing) : raw;
        drawn.push({ run, sd, xs, raw, ys });
        for (let i = 0; i < xs.length; i++) {
          if (!isFinite(xs[i]) || !isFinite(raw[i])) continue;
          x0 = Math.min(x0, xs[i]); x1 = Math.max(x1, xs[i]);
          y0 = Math.min(y0, raw[i], ys[i]); y1 = Math.max(y1, raw[i], ys[i]);
        }
      }
    }
    c.drawn = drawn;
    if (!(x1 >= x0)) {
      s.appendChild(svg('text', { class: 'empty', x: width / 2, y: HEIGHT / 2, 'text-anchor': 'middle' },
        c.def.id === 'accuracy' ? 'no eval lines yet' : 'no points yet'));
      return;
    }
    const xt = ticks(x0, x1, Math.max(2, Math.round(pw / 90)));
    const yt = ticks(y0, y1, 5);
    const xlo = xt[0].v, xhi = xt[xt.length - 1].v, ylo = yt[0].v, yhi = yt[yt.length - 1].v;
    const sx = (x) => MARGIN.left + (x - xlo) / (xhi - xlo) * pw;
    const sy = (y) => MARGIN.top + (1 - (y - ylo) / (yhi - ylo)) * ph;
    c.scale = { sx, xlo, xhi, pw };
    const grid = svg('g', { class: 'grid' }), axis = svg('g', { class: 'axis' });
    for (const t of yt) {
      const y = sy(t.v).toFixed(1);
      grid.appendChild(svg('line', { x1: MARGIN.left, x2: MARGIN.left + pw, y1: y, y2: y }));
      axis.appendChild(svg('text', { x: MARGIN.left - 6, y: y, 'text-anchor': 'end', 'dominant-baseline': 'middle' }, t.label));
    }
    for (const t of xt) {
      const x = sx(t.v).toFixed(1);
      grid.appendChild(svg('line', { x1: x, x2: x, y1: MARGIN.top, y2: MARGIN.top + ph }));
      axis.appendChild(svg('text', { x: x, y: HEIGHT - 8, 'text-anchor': 'middle' }, t.label));
    }
    s.appendChild(grid);
    s.appendChild(axis);
    s.appendChild(svg('rect', { class: 'frame', x: MARGIN.left, y: MARGIN.top, width: pw, height: ph }));
    const plot = svg('g', {});
    for (const d of drawn) {
      const color = d.run.color;
      const attrs = { fill: 'none', stroke: color, 'stroke-width': 1.8, 'data-run': d.run.index, 'data-series': d.sd.key, 'data-n': d.raw.length };
      if (d.ys !== d.raw) {
        plot.appendChild(svg('path', { class: 'raw', fill: 'none', stroke: color, 'stroke-width': 1, d: pathData(d.xs, d.raw, sx, sy, pw) }));
      }
      attrs.d = pathData(d.xs, d.ys, sx, sy, pw);
      if (d.sd.marker) attrs['stroke-dasharray'] = d.sd.key === 'epoch' ? '2 3' : '6 3';
      plot.appendChild(svg('path', attrs));
      if (d.sd.marker && d.raw.length <= 400) {
        for (let i = 0; i < d.raw.length; i++) {
          if (!isFinite(d.xs[i]) || !isFinite(d.raw[i])) continue;
          plot.appendChild(svg('circle', { cx: sx(d.xs[i]).toFixed(1), cy: sy(d.raw[i]).toFixed(1), r: 2.6, fill: color }));
        }
      }
    }
    s.appendChild(plot);
  }

  function drawCursor(c, x) {
    const old = c.svg.querySelector('.cursor');
    if (old) old.remove();
    if (x === null) return;
    c.svg.appendChild(svg('line', { class: 'cursor', x1: x, x2: x, y1: MARGIN.top, y2: HEIGHT - MARGIN.bottom }));
  }

  // nearest returns the index of the x in xs (ascending, maybe with NaN)
  // nearest to x.
  function nearest(xs, x) {
    let lo = 0, hi = xs.length - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (xs[mid] < x) lo = mid + 1; else hi = mid;
    }
    if (lo > 0 && Math.abs(xs[lo - 1] - x) < Math.abs(xs[lo] - x)) lo--;
    return lo;
  }

  function hover(c, ev) {
    const tip = $('tooltip');
    if (!c.scale || !c.drawn.length) { tip.hidden = true; return; }
    const r = c.svg.getBoundingClientRect();
    const vb = c.svg.viewBox.baseVal;
    const px = (ev.clientX - r.left) * (vb.width / r.width);
    const { xlo, xhi, pw } = c.scale;
    const x = xlo + (px - MARGIN.left) / pw * (xhi - xlo);
    if (px < MARGIN.left || px > MARGIN.left + pw) { tip.hidden = true; drawCursor(c, null); return; }
    drawCursor(c, px);
    const lines = [state.xaxis === 'step' ? 'step ' + Math.round(x) : 'time ' + fmt(x) + ' s'];
    for (const d of c.drawn) {
      const i = nearest(d.xs, x);
      if (i < 0 || i >= d.xs.length) continue;
      let t = d.run.name + (c.def.series.length > 1 ? ' ' + d.sd.label : '') + ': ' + fmt(d.ys[i]);
      if (d.ys !== d.raw) t += ' (raw ' + fmt(d.raw[i]) + ')';
      t += ' @' + fmt(d.xs[i]);
      lines.push(t);
    }
    tip.textContent = lines.join('\n');
    tip.hidden = false;
    tip.style.left = Math.min(ev.clientX + 14, window.innerWidth - tip.offsetWidth - 8) + 'px';
    tip.style.top = (ev.clientY + 14) + 'px';
  }

  let pending = false;
  function redraw() {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      for (const id in state.charts) drawChart(state.charts[id]);
      for (const run of state.runs) drawRunSummary(run);
      state.redraws++;
    });
  }

  // ---- runs ----

  function buildRuns(list) {
    const nav = $('runs');
    for (const r of list) {
      const run = { index: r.index, name: r.name, dir: r.dir, color: COLORS[r.index % COLORS.length], visible: true, state: '', detail: '' };
      emptyData(run);
      const box = el('div', { class: 'run', id: 'run-' + r.index, title: r.dir });
      const lab = el('label');
      const cb = el('input', { type: 'checkbox', 'data-run': r.index });
      cb.checked = true;
      cb.addEventListener('change', () => { run.visible = cb.checked; redraw(); });
      const sw = el('span', { class: 'swatch' });
      sw.style.background = run.color;
      lab.appendChild(cb);
      lab.appendChild(sw);
      lab.appendChild(document.createTextNode(r.name));
      box.appendChild(lab);
      run.badge = el('span', { class: 'badge' }, '…');
      run.sum = el('span', { class: 'sum' });
      const info = el('button', { type: 'button', class: 'info', 'data-run': r.index, title: 'run.json and the script' }, 'settings');
      info.addEventListener('click', () => openPanel(run));
      box.appendChild(run.badge);
      box.appendChild(run.sum);
      box.appendChild(info);
      nav.appendChild(box);
      state.runs.push(run);
    }
  }

  function drawRunSummary(run) {
    const st = run.summary ? 'done' : run.state || '…';
    run.badge.textContent = st;
    run.badge.className = 'badge ' + st;
    run.badge.title = run.detail || '';
    const parts = [];
    const n = run.steps.step.length;
    if (n) {
      parts.push('step ' + run.steps.step[n - 1]);
      parts.push('loss ' + fmt(run.steps.loss[n - 1]));
    }
    const m = run.evals.accuracy.length;
    if (m && isFinite(run.evals.accuracy[m - 1])) parts.push('test acc ' + fmt(run.evals.accuracy[m - 1]));
    run.sum.textContent = parts.join(' · ');
  }

  // ---- the settings panel ----

  let panelRun = null;
  function openPanel(run) {
    panelRun = run;
    $('panel-title').textContent = run.name;
    const body = $('panel-body');
    body.replaceChildren(el('p', { class: 'note' }, 'loading…'));
    $('panel').hidden = false;
    fetch('api/runs/' + run.index).then((r) => r.json()).then((info) => {
      if (panelRun !== run) return;
      body.replaceChildren();
      body.appendChild(el('p', { class: 'note' }, 'folder: ' + info.dir + (run.detail ? ' — ' + run.detail : '')));
      if (run.summary) {
        body.appendChild(el('h3', {}, 'summary'));
        const t = el('table');
        for (const k of Object.keys(run.summary)) {
          if (k === 'kind') continue;
          const tr = el('tr');
          const v = run.summary[k];
          tr.appendChild(el('td', {}, k));
          tr.appendChild(el('td', {}, typeof v === 'number' ? fmt(v) : String(v)));
          t.appendChild(tr);
        }
        body.appendChild(t);
      }
      body.appendChild(el('h3', {}, 'run.json'));
      if (info.run_json) body.appendChild(el('pre', { id: 'run-json' }, JSON.stringify(info.run_json, null, 2)));
      else body.appendChild(el('p', { class: 'note' }, info.run_json_error));
      body.appendChild(el('h3', {}, 'script'));
      if (!info.script || !info.script.length) {
        body.appendChild(el('p', { class: 'note' }, info.script_error || 'the script copy lists no file'));
        return;
      }
      // The plan is not in the run folder: the command that prints it
      // from the copy of the script, with the run's --set arguments.
      const sets = (info.run_json && info.run_json.sets) || [];
      const cmd = ['gorun plan', info.dir + '/script/' + info.script[0].copy]
        .concat(sets.map((x) => "--set '" + x + "'")).join(' ');
      body.appendChild(el('p', { class: 'note' }, 'its compiled plan (add the --devices or --cluster it ran with):'));
      body.appendChild(el('pre', { id: 'plan-cmd' }, cmd));
      const files = el('div', { class: 'files' });
      const pre = el('pre', { id: 'script-text' });
      const where = el('p', { class: 'note' });
      for (const f of info.script) {
        const b = el('button', { type: 'button', 'data-file': f.index, title: f.path }, f.copy);
        b.addEventListener('click', () => showFile(run, f, b, files, pre, where));
        files.appendChild(b);
      }
      body.appendChild(files);
      body.appendChild(where);
      body.appendChild(pre);
      showFile(run, info.script[0], files.firstChild, files, pre, where);
    }).catch((e) => {
      if (panelRun === run) body.replaceChildren(el('p', { class: 'note' }, 'could not read the settings: ' + e));
    });
  }

  function showFile(run, f, button, files, pre, where) {
    for (const b of files.children) b.classList.toggle('on', b === button);
    where.textContent = f.path + ' (sha256 ' + f.sha256.slice(0, 12) + '…)';
    pre.textContent = 'loading…';
    fetch('api/runs/' + run.index + '/script/' + f.index).then((r) => {
      if (!r.ok) return r.json().then((e) => { throw new Error(e.error); });
      return r.text();
    }).then((text) => { pre.textContent = text; })
      .catch((e) => { pre.textContent = String(e.message || e); });
  }

  function closePanel() { $('panel').hidden = true; panelRun = null; }

  // ---- the event stream ----

  function setStatus(text, cls) {
    const s = $('status');
    s.textContent = text;
    s.className = 'status ' + (cls || '');
  }

  function connect() {
    const es = new EventSource('api/events');
    es.addEventListener('hello', (ev) => {
      const m = JSON.parse(ev.data);
      if (m.runs !== state.runs.length) { location.reload(); return; }
      for (const run of state.runs) emptyData(run);
      state.connected = true;
      setStatus('live', 'live');
      redraw();
    });
    es.addEventListener('lines', (ev) => {
      const m = JSON.parse(ev.data);
      const run = state.runs[m.run];
      if (!run) return;
      for (const line of m.lines) ingest(run, line);
      state.events++;
      redraw();
    });
    es.addEventListener('reset', (ev) => {
      const m = JSON.parse(ev.data);
      const run = state.runs[m.run];
      if (!run) return;
      emptyData(run);
      redraw();
    });
    es.addEventListener('state', (ev) => {
      const m = JSON.parse(ev.data);
      const run = state.runs[m.run];
      if (!run) return;
      run.state = m.state;
      run.detail = m.detail;
      redraw();
    });
    es.onerror = () => {
      state.connected = false;
      setStatus(es.readyState === EventSource.CLOSED ? 'disconnected: reload the page' : 'reconnecting…', 'down');
    };
  }

  function start() {
    buildCharts();
    const sm = $('smoothing');
    sm.addEventListener('input', () => {
      state.smoothing = Number(sm.value);
      $('smoothing-value').textContent = state.smoothing.toFixed(2);
      redraw();
    });
    state.smoothing = Number(sm.value);
    $('xaxis').addEventListener('change', (e) => { state.xaxis = e.target.value; redraw(); });
    $('panel-close').addEventListener('click', closePanel);
    document.addEventListener('keydown', (e) => { if (e.key === 'Escape') closePanel(); });
    window.addEventListener('resize', redraw);
    fetch('api/runs').then((r) => r.json()).then((list) => {
      buildRuns(list);
      document.title = 'gorun board: ' + list.map((r) => r.name).join(', ');
      redraw();
      connect();
    }).catch((e) => setStatus('could not list the runs: ' + e, 'down'));
  }

  state.lib = { ticks, smooth, fmt }; // for the browser test
  start();
})();
