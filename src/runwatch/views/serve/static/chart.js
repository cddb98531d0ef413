// runwatch serve: the charts of one run or of several overlaid, as inline SVG, and the helpers
// both pages share (window.RW). Text from a run goes in through textContent or a fixed attribute,
// never as markup. No library: a chart is at most a few thousand points, which SVG draws in
// milliseconds, and every marker stays an element a person (or a screen reader) can point at.
"use strict";
(function () {
  const SVGNS = "http://www.w3.org/2000/svg";
  // One colour per run, by its place in the comparison (no red or amber: those mark findings).
  const PALETTE = ["#1f77b4", "#2ca02c", "#9467bd", "#17becf", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#ff7f0e", "#393b79"];
  const DASH = { eval_loss: "6 4", grad_norm_max: "2 3" };
  const MARKERS = { stop: 1, warn: 1, rollback: 1, relaunch: 1, checkpoint: 1 };

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function add(parent) {
    for (let i = 1; i < arguments.length; i++) if (arguments[i]) parent.appendChild(arguments[i]);
    return parent;
  }
  function sv(tag, attrs) {
    const e = document.createElementNS(SVGNS, tag);
    for (const k in attrs) e.setAttribute(k, String(attrs[k]));
    return e;
  }
  // A value as the page shows it: never "null", "undefined" or "NaN" for something not known.
  function num(v) {
    if (v === null || v === undefined || v === "") return "–";
    if (typeof v !== "number") return String(v);
    if (!Number.isFinite(v)) return String(v);
    if (v !== 0 && (Math.abs(v) >= 1e6 || Math.abs(v) < 1e-3)) return v.toExponential(2).replace(/\.?0+e/, "e");
    if (Number.isInteger(v)) return String(v);
    return String(Number(v.toPrecision(4)));
  }
  function txt(v) {
    return v === null || v === undefined ? "–" : String(v);
  }
  function dur(s) {
    if (s === null || s === undefined || !Number.isFinite(s)) return "–";
    s = Math.max(0, Math.round(s));
    if (s < 120) return s + " s";
    if (s < 7200) return Math.floor(s / 60) + " min";
    if (s < 172800) return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
    return Math.floor(s / 86400) + " d " + Math.floor((s % 86400) / 3600) + " h";
  }
  function colour(i) {
    return PALETTE[((i % PALETTE.length) + PALETTE.length) % PALETTE.length];
  }

  // --- smoothing: TensorBoard's classic exponential moving average, debiased ------------------
  // last = last * w + (1 - w) * y over the finite values, divided by 1 - w^n (n finite values so
  // far) so that the start is not pulled towards 0; a constant series is left as it is.
  function smooth(ys, w) {
    if (!(w > 0) || !ys.length) return ys;
    const first = ys[0];
    if (ys.every(function (y) { return y === first; })) return ys;
    let last = 0, n = 0;
    return ys.map(function (y) {
      if (!Number.isFinite(y)) return y;
      last = last * w + (1 - w) * y;
      n++;
      return last / (w === 1 ? 1 : 1 - Math.pow(w, n));
    });
  }

  // --- scales and ticks -------------------------------------------------------------------------
  function niceStep(span, n) {
    const raw = span / n, mag = Math.pow(10, Math.floor(Math.log10(raw)));
    return [1, 2, 5, 10].map(function (m) { return m * mag; }).find(function (s) { return span / s <= n; }) || raw;
  }
  function linearTicks(lo, hi, n) {
    const step = niceStep(hi - lo, n), out = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)));
    return out;
  }
  function logTicks(lo, hi) { // lo, hi: log10 of the domain
    const out = [], a = Math.ceil(lo - 1e-9), b = Math.floor(hi + 1e-9);
    const mults = b - a < 2 ? [1, 2, 5] : [1];
    for (let p = a - 1; p <= b; p++) {
      mults.forEach(function (m) {
        const v = m * Math.pow(10, p), l = Math.log10(v);
        if (l >= lo - 1e-9 && l <= hi + 1e-9) out.push(Number(v.toPrecision(12)));
      });
    }
    if (out.length < 2) return linearTicks(Math.pow(10, lo), Math.pow(10, hi), 4);
    return out;
  }
  // Time ticks: nice steps in seconds, aligned to the local clock.
  const TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200,
    86400, 172800, 604800];
  function timeTicks(lo, hi, n, local) {
    const step = TIME_STEPS.find(function (s) { return (hi - lo) / s <= n; }) || niceStep(hi - lo, n);
    const shift = local ? -new Date(lo * 1000).getTimezoneOffset() * 60 : 0;
    const out = [];
    for (let v = Math.ceil((lo + shift) / step) * step - shift; v <= hi + 1e-9; v += step) out.push(v);
    return out;
  }
  function pad2(n) { return (n < 10 ? "0" : "") + n; }
  function clock(t, span) {
    const d = new Date(t * 1000);
    const hm = pad2(d.getHours()) + ":" + pad2(d.getMinutes());
    if (span < 600) return hm + ":" + pad2(d.getSeconds());
    if (span < 2 * 86400) return hm;
    return (d.getMonth() + 1) + "/" + d.getDate() + " " + hm;
  }
  function since(s, span) {
    if (span < 180) return Math.round(s) + " s";
    if (span < 3 * 3600) return Number((s / 60).toPrecision(3)) + " min";
    if (span < 3 * 86400) return Number((s / 3600).toPrecision(3)) + " h";
    return Number((s / 86400).toPrecision(3)) + " d";
  }
  // Tick labels that read alike along an axis: as many decimals as the step between ticks needs.
  function tickFormat(ticks, log) {
    if (log || ticks.length < 2) return num;
    const step = Math.abs(ticks[1] - ticks[0]);
    const big = Math.max.apply(null, ticks.map(Math.abs));
    if (big >= 1e6 || (big > 0 && big < 1e-3)) {
      const digits = Math.min(6, Math.max(0, Math.floor(Math.log10(big)) - Math.floor(Math.log10(step) + 1e-9)));
      return function (v) { return v === 0 ? "0" : v.toExponential(digits).replace(/\.?0+e/, "e").replace("e+", "e"); };
    }
    const dec = Math.min(10, Math.max(0, -Math.floor(Math.log10(step) + 1e-9)));
    return function (v) { return v.toFixed(dec); };
  }
  function quantile(sorted, q) {
    const i = (sorted.length - 1) * q, lo = Math.floor(i), hi = Math.ceil(i);
    return sorted[lo] + (sorted[hi] - sorted[lo]) * (i - lo);
  }

  // --- a run's points on the x axis chosen ------------------------------------------------------
  const XLABEL = { step: "step", wall: "wall time", relative: "time since start" };
  function xOf(mode, p, run) {
    if (mode === "step") return p[0];
    const t = p[2];
    if (typeof t !== "number") return null;
    if (mode === "relative") return typeof run.first_time === "number" ? t - run.first_time : null;
    return t;
  }
  // A marker's x: its step, or its time (a finding without one: the time of that step's point).
  function markerX(mode, m, run, lookup) {
    if (mode === "step") return m.step;
    let t = typeof m.time === "number" ? m.time : lookup(m.step);
    if (typeof t !== "number") return null;
    if (mode === "relative") return typeof run.first_time === "number" ? t - run.first_time : null;
    return t;
  }
  function timeLookup(detail) {
    let pts = null;
    (detail.charts || []).forEach(function (c) {
      c.series.forEach(function (s) { if (!pts || s.points.length > pts.length) pts = s.points; });
    });
    return function (step) {
      if (!pts || !pts.length) return null;
      let lo = 0, hi = pts.length - 1;
      while (lo < hi) { const mid = (lo + hi) >> 1; if (pts[mid][0] < step) lo = mid + 1; else hi = mid; }
      return pts[lo][2];
    };
  }

  // --- one chart ----------------------------------------------------------------------------------
  // lines: [{run, label, key, colour, points, band?}] of the visible runs (or groups); opts: the page's
  // state. A group's line comes smoothed already (`band`: [[x, low, high], ...] drawn behind it).
  function bytesText(v) {
    const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let i = 0, n = Math.abs(v);
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (v < 0 ? "-" : "") + Number(n.toPrecision(3)) + " " + units[i];
  }
  function chartSvg(name, title, lines, markers, opts, width, unit) {
    const W = Math.max(280, Math.min(760, width)), H = W < 480 ? 210 : 250;
    const L = 62, R = 14, T = 14, B = 36;
    const mode = opts.xmode, logy = opts.logy;
    let total = 0;
    const drawn = [];
    let fx0 = Infinity, fx1 = -Infinity;
    lines.forEach(function (ln) {
      const xs = [], ys = [];
      ln.points.forEach(function (p) {
        const x = xOf(mode, p, ln.run);
        if (x === null || !Number.isFinite(x)) return;
        if (logy && !(p[1] > 0)) return;
        xs.push(x); ys.push(p[1]);
      });
      total += xs.length;
      if (!xs.length) return;
      xs.forEach(function (x) { if (x < fx0) fx0 = x; if (x > fx1) fx1 = x; });
      let band = null;
      if (ln.band && mode === "step") {
        band = ln.band.filter(function (b) { return !logy || b[1] > 0; });
      }
      drawn.push({ ln: ln, xs: xs, ys: ys, sm: ln.band ? ys : smooth(ys, opts.smooth), band: band });
    });
    // a group, not an img: its markers stay elements a screen reader (or a test) can reach by name
    const svg = sv("svg", { viewBox: "0 0 " + W + " " + H, class: "chart", role: "group", "data-points": total,
      "data-chart": name });
    svg.setAttribute("aria-label", title + " chart" + (opts.zoom ? " (zoomed)" : ""));
    if (!drawn.length) {
      const t = sv("text", { x: W / 2, y: H / 2, class: "empty", "text-anchor": "middle" });
      t.textContent = mode === "step" ? "nothing to draw" : "no time in this log: choose x axis step";
      add(svg, t);
      return { svg: svg, domain: null, geom: null };
    }
    let x0 = fx0, x1 = fx1;
    if (opts.zoom) { x0 = opts.zoom[0]; x1 = opts.zoom[1]; }
    if (x1 === x0) { x0 -= 1; x1 += 1; }
    // y: the visible points (raw values: the faint line must fit too), robust when asked
    let yv = [];
    drawn.forEach(function (d) {
      for (let i = 0; i < d.xs.length; i++) if (d.xs[i] >= x0 && d.xs[i] <= x1) yv.push(d.ys[i]);
      if (d.band) d.band.forEach(function (b) { if (b[0] >= x0 && b[0] <= x1) yv.push(b[1], b[2]); });
    });
    if (!yv.length) drawn.forEach(function (d) { yv = yv.concat(d.ys); });
    if (logy) yv = yv.map(Math.log10);
    let y0, y1;
    if (opts.outliers && yv.length >= 10) {
      const sorted = yv.slice().sort(function (a, b) { return a - b; });
      y0 = quantile(sorted, 0.05); y1 = quantile(sorted, 0.95);
    } else {
      y0 = Math.min.apply(null, yv); y1 = Math.max.apply(null, yv);
    }
    if (y1 === y0) { const dd = Math.abs(y0) * 0.1 || (logy ? 0.5 : 1); y0 -= dd; y1 += dd; }
    const pad = (y1 - y0) * 0.06; y0 -= pad; y1 += pad;
    const PW = W - L - R, PH = H - T - B;
    function X(x) { return L + (x - x0) / (x1 - x0) * PW; }
    function Y(y) { return T + (y1 - (logy ? Math.log10(y) : y)) / (y1 - y0) * PH; }
    // grid and ticks
    const yt = logy ? logTicks(y0, y1) : linearTicks(y0, y1, 4);
    const yfmt = unit === "bytes" ? bytesText : tickFormat(yt, logy);
    yt.forEach(function (v) {
      const y = Y(v);
      if (y < T - 0.5 || y > T + PH + 0.5) return;
      add(svg, sv("line", { x1: L, x2: W - R, y1: y, y2: y, class: "grid" }));
      const t = sv("text", { x: L - 6, y: y + 4, class: "tick y", "text-anchor": "end" });
      t.textContent = yfmt(v);
      add(svg, t);
    });
    const span = x1 - x0, nx = W < 480 ? 3 : 5;
    // a log's own clock (seconds since its start, not Unix time) has no wall time to show
    const clockTime = mode === "wall" && x0 > 1e8;
    const xt = mode === "step" ? linearTicks(x0, x1, nx) : timeTicks(x0, x1, nx, clockTime);
    const xfmt = tickFormat(xt, false);
    xt.forEach(function (v) {
      const t = sv("text", { x: X(v), y: H - 18, class: "tick x", "text-anchor": "middle" });
      t.textContent = mode === "step" ? xfmt(v) : clockTime ? clock(v, span) : since(v, span);
      add(svg, sv("line", { x1: X(v), x2: X(v), y1: T + PH, y2: T + PH + 4, class: "axis" }), t);
    });
    add(svg, sv("line", { x1: L, x2: W - R, y1: T + PH, y2: T + PH, class: "axis" }));
    const xl = sv("text", { x: W - R, y: H - 3, class: "axis-label", "text-anchor": "end" });
    xl.textContent = (mode === "wall" && !clockTime ? "time as logged" : XLABEL[mode]) + (logy ? " · log scale y" : "");
    add(svg, xl);
    // lines, clipped to the plot (a zoom or ignored outliers leave points outside it)
    const clip = "clip-" + name.replace(/[^a-zA-Z0-9_-]/g, "_");
    add(svg, add(sv("defs", {}), add(sv("clipPath", { id: clip }), sv("rect", { x: L, y: T - 1, width: PW, height: PH + 2 }))));
    const plot = sv("g", { "clip-path": "url(#" + clip + ")", class: "plot" });
    const smoothing = opts.smooth > 0;
    drawn.forEach(function (d) {
      const attrs = { stroke: d.ln.colour, "data-run": d.ln.run.path, "data-key": d.ln.key };
      if (DASH[d.ln.key]) attrs["stroke-dasharray"] = DASH[d.ln.key];
      function poly(ys, cls) {
        // a new polyline wherever x goes back (never drawn as a line back in time)
        let cur = [];
        const parts = [cur];
        for (let i = 0; i < d.xs.length; i++) {
          if (i && d.xs[i] < d.xs[i - 1]) { cur = []; parts.push(cur); }
          cur.push(X(d.xs[i]).toFixed(1) + "," + Y(logy ? Math.max(ys[i], 1e-300) : ys[i]).toFixed(1));
        }
        parts.forEach(function (pts) {
          if (pts.length === 1) {
            const xy = pts[0].split(",");
            add(plot, sv("circle", Object.assign({ cx: xy[0], cy: xy[1], r: 2.5, fill: d.ln.colour, class: "dot " + cls }, attrs)));
          } else if (pts.length) {
            add(plot, sv("polyline", Object.assign({ points: pts.join(" "), class: cls }, attrs)));
          }
        });
      }
      if (d.band && d.band.length > 1) { // a group: its spread, as a filled band behind its mean
        const lo = d.band.map(function (b) { return X(b[0]).toFixed(1) + "," + Y(logy ? Math.max(b[1], 1e-300) : b[1]).toFixed(1); });
        const hi = d.band.map(function (b) { return X(b[0]).toFixed(1) + "," + Y(logy ? Math.max(b[2], 1e-300) : b[2]).toFixed(1); });
        const poly0 = sv("polygon", { points: lo.concat(hi.reverse()).join(" "), class: "group-band", fill: d.ln.colour,
          "data-run": d.ln.run.path, "data-key": d.ln.key });
        add(plot, poly0);
      }
      if (smoothing && !d.ln.band) poly(d.ys, "line raw");
      poly(d.sm, smoothing && !d.ln.band ? "line smoothed" : d.ln.band ? "line group" : "line");
      if (d.xs.length <= 40 && d.ln.key.indexOf("eval_") === 0) {  // few points (evals): show each one
        for (let i = 0; i < d.xs.length; i++) {
          if (d.xs[i] < x0 || d.xs[i] > x1) continue;
          add(plot, sv("circle", { cx: X(d.xs[i]).toFixed(1), cy: Y(d.sm[i]).toFixed(1), r: 2.2, fill: d.ln.colour, class: "dot" }));
        }
      }
    });
    add(svg, plot);
    // markers: a line across the plot and a head; title and aria-label say what it marks
    const mg = sv("g", { class: "markers" });
    markers.forEach(function (m) {
      if (m.x === null || m.x < x0 || m.x > x1) return;
      const x = X(m.x).toFixed(1);
      const g = sv("g", { class: "marker marker-" + m.type, "data-type": m.type, "data-step": m.step, role: "img" });
      if (m.kind) g.setAttribute("data-kind", m.kind);
      g.setAttribute("aria-label", m.title);
      g.setAttribute("title", m.title);
      const tt = document.createElementNS(SVGNS, "title");
      tt.textContent = m.title;
      add(g, tt);
      if (m.type === "checkpoint") {
        add(g, sv("line", { x1: x, x2: x, y1: T + PH - 9, y2: T + PH, class: "mark" }),
          sv("circle", { cx: x, cy: T + PH - 11, r: 2.5, class: "head" }));
      } else {
        add(g, sv("line", { x1: x, x2: x, y1: T, y2: T + PH, class: "mark" }));
        const head = m.type === "rollback" ? "M" + x + " " + T + "l5 5l-5 5l-5 -5z"
          : m.type === "relaunch" ? "M" + (Number(x) - 4) + " " + T + "h8v8h-8z"
          : "M" + (Number(x) - 5) + " " + T + "h10l-5 8z";
        add(g, sv("path", { d: head, class: "head" }));
      }
      add(g, sv("line", { x1: x, x2: x, y1: T, y2: T + PH, class: "hit" }));
      add(mg, g);
    });
    add(svg, mg);
    // the zoom's drag band (drawn by the figure's pointer handlers, which outlive this svg)
    add(svg, sv("rect", { x: 0, y: T, width: 0, height: PH, class: "band", visibility: "hidden" }));
    return { svg: svg, domain: [x0, x1, fx0, fx1], geom: { W: W, L: L, PW: PW, x0: x0, x1: x1 } };
  }

  // Drag across the plot to zoom to that range (mouse, pen or a finger moving sideways: the page
  // still scrolls up and down), double-click or double-tap to go back to the whole run. The
  // handlers sit on the figure's holder, not on the svg: a redraw in the middle of a drag (new
  // data arrived) replaces the svg and the drag goes on.
  let lastTap = 0;
  function attachZoom(holder, geom, onZoom) {
    let start = null; // [pixel in svg units, data x] where the drag began
    function svgOf() { return holder.querySelector("svg.chart"); }
    function ux(ev) {
      const svg = svgOf(), g = geom();
      if (!svg || !g) return null;
      const r = svg.getBoundingClientRect();
      return (ev.clientX - r.left) / (r.width || 1) * g.W;
    }
    function dataX(u) {
      const g = geom();
      return g.x0 + (Math.max(g.L, Math.min(g.L + g.PW, u)) - g.L) / g.PW * (g.x1 - g.x0);
    }
    holder.addEventListener("pointerdown", function (ev) {
      const u = ux(ev), g = geom();
      if (ev.button !== 0 || u === null || u < g.L - 4 || u > g.L + g.PW + 4) return;
      start = [u, dataX(u)];
      try { holder.setPointerCapture(ev.pointerId); } catch (e) { /* not capturable: fine */ }
    });
    holder.addEventListener("pointermove", function (ev) {
      if (start === null) return;
      const g = geom(), band = holder.querySelector(".band"), u = ux(ev);
      if (!band || u === null) return;
      const a = g.L + (start[1] - g.x0) / (g.x1 - g.x0) * g.PW; // where the start is on this drawing
      const b = Math.max(g.L, Math.min(g.L + g.PW, u));
      band.setAttribute("x", Math.max(g.L, Math.min(a, b)));
      band.setAttribute("width", Math.abs(b - Math.max(g.L, Math.min(g.L + g.PW, a))));
      band.setAttribute("visibility", "visible");
    });
    function end(ev, cancel) {
      if (start === null) return;
      const s = start, u = ux(ev), band = holder.querySelector(".band");
      start = null;
      if (band) band.setAttribute("visibility", "hidden");
      if (cancel || u === null) return;
      if (Math.abs(u - s[0]) >= 6) {
        const x = dataX(u), lo = Math.min(s[1], x), hi = Math.max(s[1], x);
        if (hi > lo) onZoom([lo, hi]);
      } else if (ev.pointerType !== "mouse") {
        const now = Date.now();
        if (now - lastTap < 350) { lastTap = 0; onZoom(null); } else lastTap = now;
      }
    }
    holder.addEventListener("pointerup", function (ev) { end(ev, false); });
    holder.addEventListener("pointercancel", function (ev) { end(ev, true); });
    holder.addEventListener("dblclick", function (ev) { ev.preventDefault(); onZoom(null); });
  }

  // --- every chart of a page ----------------------------------------------------------------------
  // runs: [{path, colour, hidden, detail}]; state: {smooth, logy, outliers, xmode, zoom};
  // onZoom(range or null). Figures are kept by chart name, so focus and layout survive a redraw.
  function Charts(box, onZoom) {
    this.box = box;
    this.onZoom = onZoom;
    this.figs = {};
    this.domains = {};
    this.geoms = {};
  }
  Charts.prototype.render = function (runs, state) {
    const t0 = performance.now();
    const order = [], titles = {}, series = {}, units = {};
    runs.forEach(function (r) {
      (r.detail.charts || []).forEach(function (c) {
        if (!titles[c.name]) { titles[c.name] = c.title; units[c.name] = c.unit; order.push(c.name); series[c.name] = []; }
        c.series.forEach(function (s) {
          if (series[c.name].indexOf(s.key) < 0) series[c.name].push(s.key);
        });
      });
    });
    const width = (this.box.clientWidth || 640);
    const cols = width >= 900 ? 2 : 1;
    const cw = Math.floor(width / cols) - 26;
    const self = this;
    const seen = {};
    const note = this.box.querySelector(":scope > p");
    if (note) note.remove();
    order.forEach(function (name, index) {
      seen[name] = true;
      let f = self.figs[name];
      if (!f) {
        f = self.figs[name] = { fig: el("figure", "chart-box"), cap: el("figcaption"), holder: el("div", "plot-holder") };
        f.fig.setAttribute("data-chart", name);
        f.holder.tabIndex = 0;
        f.holder.setAttribute("role", "group");
        f.holder.addEventListener("keydown", function (ev) { self.key(name, ev); });
        attachZoom(f.holder, function () { return self.geoms[name]; }, self.onZoom);
        add(f.fig, f.cap, f.holder);
      }
      // in order; a figure already in place is not moved (moving it would drop the keyboard's focus)
      if (self.box.children[index] !== f.fig) self.box.insertBefore(f.fig, self.box.children[index] || null);
      const lines = [], marks = [];
      runs.forEach(function (r) {
        if (r.hidden) return;
        const c = (r.detail.charts || []).find(function (x) { return x.name === name; });
        if (c) c.series.forEach(function (s) {
          lines.push({ run: { path: r.path, first_time: r.detail.first_time }, label: s.name, key: s.key, colour: r.colour,
            points: s.points, band: s.band || null });
        });
        const lookup = timeLookup(r.detail);
        (r.detail.markers || []).forEach(function (m) {
          if (!MARKERS[m.type]) return;
          marks.push({ type: m.type, step: m.step, kind: m.kind,
            title: (runs.length > 1 ? r.path + ": " : "") + m.title,
            x: markerX(state.xmode, m, { first_time: r.detail.first_time }, lookup) });
        });
      });
      const title = titles[name];
      const cap = [el("span", "chart-title", title)];
      series[name].forEach(function (key) {
        const s = runs.length === 1 && !runs[0].hidden ? (runs[0].detail.charts.find(function (x) { return x.name === name; }) || { series: [] }).series.find(function (x) { return x.key === key; }) : null;
        const label = (s ? s.name + " " + (s.last ? (units[name] === "bytes" ? bytesText(s.last[1]) : num(s.last[1])) : "") : key.replace(/_/g, " "));
        cap.push(add(el("span", "key key-" + (DASH[key] ? (key === "eval_loss" ? "dashed" : "dotted") : "solid")), el("i", "stroke"), document.createTextNode(label)));
      });
      f.cap.replaceChildren.apply(f.cap, cap);
      f.holder.setAttribute("aria-label", title + " chart: drag across it to zoom, double-click to reset; keys + and − zoom, arrows pan, 0 resets");
      const out = chartSvg(name, title, lines, marks, state, cw, units[name]);
      self.domains[name] = out.domain;
      self.geoms[name] = out.geom;
      f.holder.replaceChildren(out.svg);
    });
    Object.keys(this.figs).forEach(function (name) {
      if (!seen[name]) { self.figs[name].fig.remove(); delete self.figs[name]; }
    });
    this.lastDrawMs = performance.now() - t0;
    return order.length;
  };
  // The keyboard's zoom: + and − around the middle, arrows move by a fifth, 0 or Escape resets.
  Charts.prototype.key = function (name, ev) {
    const d = this.domains[name];
    if (!d) return;
    const x0 = d[0], x1 = d[1], span = x1 - x0, mid = (x0 + x1) / 2;
    let next;
    if (ev.key === "+" || ev.key === "=") next = [mid - span / 4, mid + span / 4];
    else if (ev.key === "-" || ev.key === "_") next = [mid - span, mid + span];
    else if (ev.key === "ArrowLeft") next = [x0 - span / 5, x1 - span / 5];
    else if (ev.key === "ArrowRight") next = [x0 + span / 5, x1 + span / 5];
    else if (ev.key === "0" || ev.key === "Escape" || ev.key === "Home") next = null;
    else return;
    ev.preventDefault();
    if (next && next[0] <= d[2] && next[1] >= d[3]) next = null; // back to the whole run
    this.onZoom(next);
  };

  window.RW = { el: el, add: add, sv: sv, num: num, txt: txt, dur: dur, colour: colour, smooth: smooth, Charts: Charts };
})();
