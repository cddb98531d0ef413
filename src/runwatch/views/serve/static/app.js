// runwatch serve: the list of runs, one run, or several compared, drawn from the page's JSON and
// kept current by polling the API. Every piece of text from a run (paths, messages, log strings)
// goes in through textContent or setAttribute on a fixed attribute, never as HTML: a run cannot
// put markup on the page. What a person set (filter, sort, selection, smoothing, zoom, hidden
// runs) lives in this script's state, so a refresh redraws the data and keeps all of it.
"use strict";
(function () {
  const RW = window.RW, el = RW.el, add = RW.add, num = RW.num, txt = RW.txt, dur = RW.dur;
  const POLL_MS = 2000;
  const STATES = { anomaly: 1, watching: 1, stale: 1, ok: 1, none: 1 };
  const RANK = { anomaly: 0, stale: 2, watching: 3, none: 4, ok: 5 };
  const init = JSON.parse(document.getElementById("initial").textContent);
  const app = document.getElementById("app");
  const live = document.getElementById("live");

  function encPath(path) { return String(path).split("/").map(encodeURIComponent).join("/"); }
  function runHref(path) { return "/run/" + encPath(path); }
  function csvHref(path) { return "/api/run/" + encPath(path) + ".csv"; }
  function badge(verdict) {
    const state = verdict && STATES[verdict.state] ? verdict.state : "none";
    return el("span", "badge state-" + state, verdict && verdict.label ? verdict.label : "no watchdog");
  }
  function stepText(r) {
    if (r.step === null || r.step === undefined) return "no records yet";
    return num(r.step) + (r.max_steps ? " / " + num(r.max_steps) : "");
  }
  function ago(r) { return r.age_seconds === null || r.age_seconds === undefined ? "–" : dur(r.age_seconds) + " ago"; }
  function note(r) {
    const stops = (r.findings || 0) - (r.warnings || 0);
    if (r.error) return el("span", "error", r.error);
    if (stops > 0) {
      const f = r.first_finding;
      return el("span", "finding", stops + (stops === 1 ? " finding" : " findings") +
        (f ? ": " + txt(f.kind) + " at step " + num(f.step) : ""));
    }
    if (r.catching_up) return el("span", "muted", "reading the log…");
    if (r.ended) return el("span", "muted", "ended: " + txt(r.ended.reason));
    return null;
  }
  function section(title) { return add(el("section", "block"), el("h2", "", title)); }
  function label(cls, text, control) {
    const l = add(el("label", "ctl " + cls), control);
    l.appendChild(document.createTextNode(" " + text));
    return l;
  }
  function checkbox(id) {
    const c = el("input");
    c.type = "checkbox";
    if (id) c.id = id;
    return c;
  }

  // For tests and benchmarks: how many draws so far, how long the last one took (ms), and when the
  // first one ended (ms since the page began loading).
  function noteDraw(ms) {
    const stats = window.__runwatch = window.__runwatch || { draws: 0 };
    stats.draws++;
    stats.lastDrawMs = ms;
    if (stats.firstDrawMs === undefined) stats.firstDrawMs = performance.now();
    document.body.setAttribute("data-draws", String(stats.draws));
  }

  // --- the list ------------------------------------------------------------------------------
  const COLUMNS = [
    { key: "path", head: "Run", cls: "path", value: function (r) { return r.path; } },
    { key: "verdict", head: "Watchdog", value: function (r) { return (RANK[r.verdict && r.verdict.state] || 9) * 1e6 + ((r.findings || 0) - (r.warnings || 0) > 0 || r.error ? 0 : 1); } },
    { key: "step", head: "Step", cls: "step", value: function (r) { return r.step; } },
    { key: "loss", head: "Loss", cls: "num", value: function (r) { return r.loss; } },
    { key: "best_eval", head: "Best eval loss", cls: "num best", value: function (r) { return r.best_eval_loss ? r.best_eval_loss.value : null; } },
    { key: "best_metric", head: "Best metric", cls: "num best", value: function (r) { return r.best_metric ? r.best_metric.value : null; } },
    { key: "goodput", head: "Goodput", cls: "num", value: function (r) { return typeof r.goodput_ratio === "number" ? r.goodput_ratio : null; } },
    { key: "tps", head: "Tokens/s", cls: "num", value: function (r) { return r.tokens_per_second; } },
    { key: "eta", head: "ETA", cls: "num", value: function (r) { return r.eta_seconds; } },
    { key: "age", head: "Last record", cls: "num", value: function (r) { return r.age_seconds; } },
    { key: "warnings", head: "Warnings", cls: "num", value: function (r) { return r.warnings || 0; } },
    { key: "notes", head: "Notes", cls: "notes", value: null },
  ];
  function bestText(b) { return b ? num(b.value) + " @ " + num(b.step) : "–"; }
  function metricText(b) { return b ? txt(b.name) + " " + num(b.value) + " @ " + num(b.step) : "–"; }
  function goodputText(r) { return typeof r.goodput_ratio === "number" ? num(Math.round(r.goodput_ratio * 1000) / 10) + " %" : ""; }

  // The filter: `verdict:ok|anomaly|running|none`, `kind:<kind>` (the verdict's kind or any
  // finding's), `warn:<kind>` (a warning's kind), and plain words (a substring of the path); every
  // term must match. running: the watchdog's verdict is still "watching" (alive or not).
  const VERDICTS = { ok: ["ok"], anomaly: ["anomaly"], running: ["watching", "stale"], none: ["none"] };
  function parseFilter(text) {
    const out = { terms: [], text: "", bad: null };
    const words = [];
    text.toLowerCase().split(/\s+/).filter(Boolean).forEach(function (w) {
      const m = /^(verdict|kind|warn):(.*)$/.exec(w);
      if (!m) { words.push(w); return; }
      if (m[1] === "verdict" && !VERDICTS[m[2]]) out.bad = "verdict: takes ok, anomaly, running or none";
      out.terms.push([m[1], m[2]]);
    });
    out.text = words.join(" ");
    return out;
  }
  function matches(f, r, search) {
    if (f.text && search.indexOf(f.text) < 0) return false;
    return f.terms.every(function (t) {
      const kind = t[1];
      if (t[0] === "verdict") return (VERDICTS[kind] || []).indexOf(r.verdict && r.verdict.state) >= 0;
      const wd = r.watchdog || {};
      if (t[0] === "kind") {
        return (r.verdict && r.verdict.state === "anomaly" && String(wd.kind).toLowerCase() === kind) ||
          (r.finding_kinds || []).some(function (k) { return String(k).toLowerCase() === kind; });
      }
      const warned = (r.warning_kinds || []).concat((wd.warnings || []).map(function (w) { return w && w.kind; }));
      return warned.some(function (k) { return String(k).toLowerCase() === kind; });
    });
  }

  function ListPage(data) {
    const state = { filter: parseFilter(""), sort: null, dir: 1, selected: new Set() };
    const rows = new Map();
    let runs = [];
    const box = el("section", "list");
    const title = add(el("h1"), document.createTextNode("Runs under "), el("code", "", data.root));
    const filter = el("input", "filter");
    filter.type = "search";
    filter.id = "filter";
    filter.placeholder = "filter runs: path, verdict:ok, kind:loss_spike, warn:…";
    filter.setAttribute("aria-label", "filter runs by path, verdict:, kind: or warn:");
    filter.autocomplete = "off";
    const count = el("span", "count muted");
    count.setAttribute("aria-live", "polite");
    const compare = el("a", "button compare", "Compare");
    compare.id = "compare";
    const bar = add(el("div", "toolbar"), add(label("filter-label", "", filter)), count, compare);
    const table = el("table", "runs");
    const headRow = el("tr");
    const all = checkbox("select-all");
    all.setAttribute("aria-label", "select every run shown");
    add(headRow, add(el("th", "select"), all));
    const heads = {};
    COLUMNS.forEach(function (c) {
      const th = el("th");
      th.scope = "col";
      if (c.value) {
        const b = add(el("button", "sort", c.head), el("span", "arrow"));
        b.type = "button";
        b.lastChild.setAttribute("aria-hidden", "true");
        th.setAttribute("aria-sort", "none");
        th.appendChild(b);
        th.addEventListener("click", function () {
          if (state.sort === c.key) state.dir = -state.dir;
          else { state.sort = c.key; state.dir = 1; }
          arrange();
        });
        heads[c.key] = th;
      } else th.textContent = c.head;
      headRow.appendChild(th);
    });
    const body = el("tbody");
    add(table, add(el("thead"), headRow), body);
    const empty = el("p", "muted empty");
    add(box, title, bar, table, empty);
    app.replaceChildren(box);

    filter.addEventListener("input", function () { state.filter = parseFilter(filter.value); arrange(); });
    document.addEventListener("keydown", function (ev) {
      if (ev.key === "/" && document.activeElement !== filter && !/^(INPUT|SELECT|TEXTAREA)$/.test(document.activeElement.tagName)) {
        ev.preventDefault();
        filter.focus();
      }
    });
    all.addEventListener("change", function () {
      runs.forEach(function (r) {
        const row = rows.get(r.path);
        if (row.tr.hidden) return;
        if (all.checked) state.selected.add(r.path); else state.selected.delete(r.path);
        row.box.checked = all.checked;
      });
      selection();
    });

    function selection() {
      const sel = Array.from(state.selected).filter(function (p) { return rows.has(p); });
      compare.textContent = "Compare " + sel.length + " selected";
      if (sel.length) {
        compare.href = "/compare?" + sel.map(function (p) { return "run=" + encodeURIComponent(p); }).join("&");
        compare.removeAttribute("aria-disabled");
      } else {
        compare.removeAttribute("href");
        compare.setAttribute("aria-disabled", "true");
      }
      const shown = runs.filter(function (r) { return !rows.get(r.path).tr.hidden; });
      all.checked = shown.length > 0 && shown.every(function (r) { return state.selected.has(r.path); });
    }
    function setCell(td, sig, content) {
      if (td._sig === sig) return;
      td._sig = sig;
      if (content instanceof Node) td.replaceChildren(content);
      else td.textContent = content;
    }
    function row(r) {
      let x = rows.get(r.path);
      if (!x) {
        const tr = el("tr", "run");
        tr.setAttribute("data-path", r.path);
        const b = checkbox();
        b.className = "select";
        b.setAttribute("aria-label", "select " + r.path);
        b.checked = state.selected.has(r.path);
        b.addEventListener("change", function () {
          if (b.checked) state.selected.add(r.path); else state.selected.delete(r.path);
          selection();
        });
        const cells = {};
        add(tr, add(el("td", "select"), b));
        COLUMNS.forEach(function (c) {
          const td = el("td", c.cls || "");
          td.setAttribute("data-label", c.head);
          cells[c.key] = td;
          tr.appendChild(td);
        });
        const a = el("a", "run-link", r.path);
        a.href = runHref(r.path);
        cells.path.appendChild(a);
        x = { tr: tr, box: b, cells: cells, search: r.path.toLowerCase() };
        rows.set(r.path, x);
      }
      x.run = r;
      const c = x.cells;
      const v = r.verdict || {};
      setCell(c.verdict, v.state + "|" + v.label, badge(v));
      setCell(c.step, stepText(r), stepText(r));
      setCell(c.loss, num(r.loss), num(r.loss));
      setCell(c.best_eval, bestText(r.best_eval_loss), bestText(r.best_eval_loss));
      setCell(c.best_metric, metricText(r.best_metric), metricText(r.best_metric));
      setCell(c.goodput, goodputText(r), goodputText(r));
      setCell(c.tps, num(r.tokens_per_second), num(r.tokens_per_second));
      setCell(c.eta, dur(r.eta_seconds), dur(r.eta_seconds));
      setCell(c.age, ago(r), ago(r));
      setCell(c.warnings, String(r.warnings || 0), r.warnings ? String(r.warnings) : "–");
      const n = note(r);
      setCell(c.notes, n ? n.className + "|" + n.textContent : "", n || "");
      return x;
    }
    // Order (the server's, or a column's), filter, and put the rows in place: only moved rows move.
    function arrange() {
      let order = runs.slice();
      if (state.sort) {
        const col = COLUMNS.find(function (c) { return c.key === state.sort; });
        const idx = new Map(runs.map(function (r, i) { return [r.path, i]; }));
        order.sort(function (a, b) {
          const va = col.value(a), vb = col.value(b);
          const na = va === null || va === undefined, nb = vb === null || vb === undefined;
          if (na !== nb) return na ? 1 : -1; // unknown values last, either way
          if (!na && va !== vb) return (va < vb ? -1 : 1) * state.dir;
          return idx.get(a.path) - idx.get(b.path);
        });
      }
      Object.keys(heads).forEach(function (k) {
        heads[k].setAttribute("aria-sort", state.sort === k ? (state.dir > 0 ? "ascending" : "descending") : "none");
      });
      let shown = 0;
      order.forEach(function (r, i) {
        const x = rows.get(r.path);
        const hide = !matches(state.filter, r, x.search);
        if (x.tr.hidden !== hide) x.tr.hidden = hide;
        if (!hide) shown++;
        if (body.children[i] !== x.tr) body.insertBefore(x.tr, body.children[i] || null);
      });
      while (body.children.length > order.length) body.lastChild.remove();
      count.textContent = runs.length === shown ? runs.length + (runs.length === 1 ? " run" : " runs")
        : shown + " of " + runs.length + " runs shown";
      table.hidden = !runs.length;
      empty.textContent = !runs.length
        ? "No runs found yet (run directories, *.jsonl logs, trainer_state.json and other tools' logs, up to 4 levels down). This page updates by itself."
        : state.filter.bad ? state.filter.bad
        : shown ? "" : "No run matches “" + filter.value + "”.";
      selection();
    }
    function update(d) {
      const t0 = performance.now();
      runs = d.runs || [];
      const now = new Set();
      runs.forEach(function (r) { row(r); now.add(r.path); });
      Array.from(rows.keys()).forEach(function (p) {
        if (!now.has(p)) { rows.get(p).tr.remove(); rows.delete(p); }
      });
      arrange();
      noteDraw(performance.now() - t0);
    }
    update(data);
    return update;
  }

  // --- where a run came from: its recipe, command and provenance --------------------------------
  function show(v) {
    if (v === null || v === undefined || v === "") return "–";
    if (typeof v === "string") return v;
    if (typeof v === "number" || typeof v === "boolean") return String(v);
    return JSON.stringify(v);
  }
  function short(h) { return typeof h === "string" && h ? h.slice(0, 12) : "–"; }
  function bytes(n) {
    if (typeof n !== "number" || !Number.isFinite(n)) return "–";
    const units = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i ? Number(n.toPrecision(3)) : n) + " " + units[i];
  }
  function when(t) { return typeof t === "number" && Number.isFinite(t) ? new Date(t * 1000).toISOString().replace(".000Z", "Z") : "–"; }
  // [[group, name, value], ...]: what a run was started from, as the run page lists it and the
  // compare page lines it up (`forCompare`: a data file by its content, not its modification time).
  function originRows(d, forCompare) {
    const rows = [];
    const recipe = d.recipe && typeof d.recipe === "object" ? d.recipe : {};
    Object.keys(recipe).sort().forEach(function (k) { rows.push(["recipe", k, show(recipe[k])]); });
    const launch = d.launch || null;
    if (launch && Array.isArray(launch.command)) rows.push(["launch", "command", launch.command.map(String).join(" ")]);
    const p = d.provenance || (launch && launch.provenance) || null;
    if (!p) return rows;
    rows.push(["provenance", "argv", Array.isArray(p.argv) ? p.argv.map(String).join(" ") : "–"]);
    rows.push(["provenance", "cwd", show(p.cwd)]);
    const g = p.git && typeof p.git === "object" ? p.git : null;
    rows.push(["provenance", "git commit", g && g.commit ? String(g.commit) : "not in a git repository"]);
    if (g && g.commit) {
      rows.push(["provenance", "git tree", g.dirty === true ? "dirty: diff of " + bytes(g.diff_bytes) + ", sha256 " + short(g.diff_sha256)
        : g.dirty === false ? "clean" : "unknown (git did not answer in time)"]);
    }
    ["python", "torch", "runwatch", "host"].forEach(function (k) { rows.push(["provenance", k, show(p[k])]); });
    (Array.isArray(p.data) ? p.data : []).forEach(function (f) {
      if (!f || typeof f !== "object") return;
      const value = f.error ? "unreadable: " + show(f.error)
        : "sha256 " + short(f.sha256) + " · " + bytes(f.size) + (forCompare ? "" : " · modified " + when(f.mtime));
      rows.push(["data", show(f.path), value]);
    });
    return rows;
  }
  function originTable(d) {
    const rows = originRows(d, false);
    const box = section("Recipe and provenance");
    if (!rows.length) return add(box, el("p", "muted", "This log names no recipe or provenance (run.json and launch.json record them)."));
    const table = el("table", "origin");
    const body = el("tbody");
    rows.forEach(function (r) {
      const th = el("th", "", r[0] === "recipe" || r[0] === "provenance" ? r[1] : r[0] + " " + r[1]);
      th.scope = "row";
      add(body, add(el("tr", "origin-" + r[0]), th, el("td", "", r[2])));
    });
    return add(box, add(table, body));
  }

  // --- groups: runs alike but for their seed (or by a recipe key), one line and a band each -------
  function stable(v) {
    if (v && typeof v === "object" && !Array.isArray(v)) {
      return "{" + Object.keys(v).sort().map(function (k) { return JSON.stringify(k) + ":" + stable(v[k]); }).join(",") + "}";
    }
    return JSON.stringify(v === undefined ? null : v);
  }
  function recipeOf(e) { return e.detail.recipe && typeof e.detail.recipe === "object" ? e.detail.recipe : {}; }
  // [{label, members}] of the entries grouped `by` "seed" (recipes equal but for `seed`) or by a recipe key.
  function groupsOf(list, by) {
    const order = [], byKey = {};
    list.forEach(function (e) {
      const r = recipeOf(e);
      let key;
      if (by === "seed") { const c = Object.assign({}, r); delete c.seed; key = stable(c); } else key = stable(r[by]);
      if (!byKey[key]) { byKey[key] = { key: key, members: [] }; order.push(byKey[key]); }
      byKey[key].members.push(e);
    });
    let named = [];
    if (by === "seed") { // name a group by the recipe keys whose values tell the groups apart
      const keys = {};
      list.forEach(function (e) { Object.keys(recipeOf(e)).forEach(function (k) { if (k !== "seed") keys[k] = true; }); });
      named = Object.keys(keys).sort().filter(function (k) {
        return new Set(order.map(function (g) { return stable(recipeOf(g.members[0])[k]); })).size > 1;
      });
    }
    return order.map(function (g) {
      const r = recipeOf(g.members[0]);
      const name = by === "seed" ? (named.map(function (k) { return k + "=" + show(r[k]); }).join(", ") || "every run")
        : by + "=" + show(r[by]);
      const n = g.members.length;
      return { label: name + " (" + n + (n === 1 ? " run)" : " runs)"), members: g.members };
    });
  }
  function interp(xs, ys, x) {
    if (!xs.length || x < xs[0] || x > xs[xs.length - 1]) return null;
    let lo = 0, hi = xs.length - 1;
    while (lo < hi) { const mid = (lo + hi) >> 1; if (xs[mid] < x) lo = mid + 1; else hi = mid; }
    if (xs[lo] === x || lo === 0) return ys[lo];
    const x0 = xs[lo - 1], x1 = xs[lo];
    return x1 === x0 ? ys[lo] : ys[lo - 1] + (ys[lo] - ys[lo - 1]) * (x - x0) / (x1 - x0);
  }
  const GRID_POINTS = 600;
  // One series of a group: each member's (smoothed) points on a common grid of steps; at each step
  // the mean of the members that reach it, and the band: mean ± standard deviation, or min–max.
  function aggregate(series, w, band) {
    const sm = series.map(function (pts) {
      return { xs: pts.map(function (p) { return p[0]; }), ys: RW.smooth(pts.map(function (p) { return p[1]; }), w) };
    });
    let grid = Array.from(new Set([].concat.apply([], sm.map(function (s) { return s.xs; })))).sort(function (a, b) { return a - b; });
    if (grid.length > GRID_POINTS) {
      const step = (grid.length - 1) / (GRID_POINTS - 1), all = grid;
      grid = [];
      for (let i = 0; i < GRID_POINTS; i++) grid.push(all[Math.round(i * step)]);
    }
    const points = [], spread = [];
    grid.forEach(function (x) {
      const vals = [];
      sm.forEach(function (s) { const v = interp(s.xs, s.ys, x); if (v !== null && Number.isFinite(v)) vals.push(v); });
      if (!vals.length) return;
      const mean = vals.reduce(function (a, b) { return a + b; }, 0) / vals.length;
      let lo, hi;
      if (band === "minmax") { lo = Math.min.apply(null, vals); hi = Math.max.apply(null, vals); } else {
        const sd = vals.length > 1 ? Math.sqrt(vals.reduce(function (a, v) { return a + (v - mean) * (v - mean); }, 0) / (vals.length - 1)) : 0;
        lo = mean - sd; hi = mean + sd;
      }
      points.push([x, mean, null]);
      spread.push([x, lo, hi]);
    });
    return { points: points, band: spread };
  }
  // The chart entries of the groups: one per group, its charts the members' series aggregated.
  function groupEntries(list, by, band, w, hidden) {
    return groupsOf(list, by).map(function (g, gi) {
      const charts = [], seen = {};
      g.members.forEach(function (m) {
        (m.detail.charts || []).forEach(function (c) {
          if (seen[c.name]) return;
          seen[c.name] = true;
          const keys = [];
          g.members.forEach(function (o) {
            const oc = (o.detail.charts || []).find(function (x) { return x.name === c.name; });
            if (oc) oc.series.forEach(function (s) { if (keys.indexOf(s.key) < 0) keys.push(s.key); });
          });
          const series = keys.map(function (key) {
            let name = key;
            const pts = [];
            g.members.forEach(function (o) {
              const oc = (o.detail.charts || []).find(function (x) { return x.name === c.name; });
              const s = oc && oc.series.find(function (x) { return x.key === key; });
              if (s && s.points.length) { pts.push(s.points); name = s.name; }
            });
            const a = aggregate(pts, w, band);
            return { name: name, key: key, points: a.points, band: a.band, last: null };
          }).filter(function (s) { return s.points.length; });
          charts.push({ name: c.name, title: c.title, unit: c.unit, series: series });
        });
      });
      const id = "group:" + g.label;
      return { path: g.label, colour: RW.colour(gi), hidden: hidden.has(id), id: id, group: g,
        detail: { charts: charts, markers: [], first_time: null } };
    });
  }

  // --- one run, or several compared ------------------------------------------------------------
  function RunsPage(kind, data) {
    const names = kind === "compare" ? new URLSearchParams(location.search).getAll("run").filter(Boolean)
      : [data.path];
    const state = { smooth: 0.6, logy: false, outliers: false, xmode: "step", zoom: null, hidden: new Set(),
      groupby: "", band: "std", diffOnly: true };
    let current = null, drawn = "", pending = false;
    const box = el("section", kind === "compare" ? "run compare" : "run");
    const back = el("a", "", "← all runs");
    back.href = "/";
    const h1 = el("h1");
    const facts = el("p", "facts");
    const notes = el("div", "notes");
    // the controls: found by their names, kept across refreshes
    const controls = el("div", "controls");
    controls.setAttribute("role", "group");
    controls.setAttribute("aria-label", "chart settings");
    const slider = el("input");
    slider.type = "range"; slider.id = "smooth"; slider.min = "0"; slider.max = "0.999"; slider.step = "0.001";
    slider.value = String(state.smooth);
    slider.setAttribute("aria-label", "smoothing");
    const shown = el("output", "smooth-value", "0.6");
    shown.htmlFor = "smooth";
    const smoothCtl = add(el("label", "ctl smooth"), document.createTextNode("smoothing "), slider, shown);
    const logy = checkbox("logy");
    const outliers = checkbox("outliers");
    const xmode = el("select");
    xmode.id = "xmode";
    [["step", "step"], ["wall", "wall time"], ["relative", "relative time (since start)"]].forEach(function (o) {
      const opt = el("option", "", o[1]);
      opt.value = o[0];
      xmode.appendChild(opt);
    });
    const reset = el("button", "reset", "reset zoom");
    reset.type = "button";
    reset.disabled = true;
    add(controls, smoothCtl, label("logy", "log scale y", logy), add(el("label", "ctl xmode"), document.createTextNode("x axis "), xmode),
      label("outliers", "ignore outliers", outliers), reset);
    const groupby = el("select");
    groupby.id = "groupby";
    const bandSel = el("select");
    bandSel.id = "band";
    [["std", "mean ± std"], ["minmax", "min–max"]].forEach(function (o) {
      const opt = el("option", "", o[1]);
      opt.value = o[0];
      bandSel.appendChild(opt);
    });
    if (kind === "compare") {
      add(controls, add(el("label", "ctl groupby"), document.createTextNode("group by "), groupby),
        add(el("label", "ctl band"), document.createTextNode("band "), bandSel));
      // (input and change: a keyboard's arrow on a closed select fires either, depending on the platform)
      const regroup = function () {
        if (state.groupby === groupby.value) return;
        state.groupby = groupby.value; state.zoom = null; reset.disabled = true; legendItems(); draw(true);
      };
      const reband = function () { if (state.band !== bandSel.value) { state.band = bandSel.value; draw(true); } };
      ["input", "change"].forEach(function (ev) { groupby.addEventListener(ev, regroup); bandSel.addEventListener(ev, reband); });
    }
    if (kind === "run") {
      const csv = el("a", "csv", "CSV");
      csv.href = csvHref(data.path);
      csv.setAttribute("download", "");
      csv.title = "every record on the path to the final step, as CSV";
      controls.appendChild(csv);
    }
    const legend = el("ul", "legend");
    legend.setAttribute("aria-label", "runs: press one to hide or show it");
    const charts = el("div", "charts");
    const chartSet = new RW.Charts(charts, function (range) { zoomTo(range); });
    const extra = el("div", "extra");
    const differs = el("div", "differs");
    add(box, add(el("p", "crumbs"), back), h1, facts, notes, controls, legend, charts, differs, extra);
    app.replaceChildren(box);

    function zoomTo(range) {
      state.zoom = range;
      reset.disabled = !range;
      draw(true);
    }
    slider.addEventListener("input", function () {
      state.smooth = Math.min(0.999, Math.max(0, parseFloat(slider.value) || 0));
      shown.textContent = String(state.smooth);
      draw(true, true);
    });
    // the differences table's toggle: kept across refreshes (the table is rebuilt, the box is not)
    const diffBox = checkbox("diff-only");
    diffBox.checked = state.diffOnly;
    const diffLabel = label("diff-only", "differences only", diffBox);
    diffBox.addEventListener("change", function () { state.diffOnly = diffBox.checked; if (current) drawDiffs(current); });
    logy.addEventListener("change", function () { state.logy = logy.checked; draw(true); });
    outliers.addEventListener("change", function () { state.outliers = outliers.checked; draw(true); });
    xmode.addEventListener("change", function () { state.xmode = xmode.value; state.zoom = null; reset.disabled = true; draw(true); });
    reset.addEventListener("click", function () { zoomTo(null); });
    let resizeTimer = null;
    window.addEventListener("resize", function () {
      clearTimeout(resizeTimer);
      resizeTimer = setTimeout(function () { draw(true); }, 150);
    });

    function runsOf(d) { return kind === "compare" ? d.runs || [] : [d]; }
    function shownEntries(d) {
      const list = entries(d);
      return kind === "compare" && state.groupby ? groupEntries(list, state.groupby, state.band, state.smooth, state.hidden) : list;
    }
    function entries(d) {
      return runsOf(d).map(function (detail) {
        const i = names.indexOf(detail.path);
        return { path: detail.path, colour: RW.colour(i < 0 ? 0 : i), hidden: state.hidden.has(detail.path), detail: detail };
      });
    }
    // Charts are redrawn when the data or a setting changed (never only because a poll came back);
    // a slider's stream of input events is drawn once a frame.
    function draw(force, nextFrame) {
      if (!current) return;
      if (nextFrame) {
        if (!pending) {
          pending = true;
          requestAnimationFrame(function () { pending = false; draw(true, false); });
        }
        return;
      }
      const list = entries(current);
      const sig = list.map(function (r) {
        const w = r.detail.watchdog && r.detail.watchdog.warnings;
        return r.path + ":" + r.detail.version + ":" + r.hidden + ":" + (w ? w.length : 0);
      }).join("|") + "|" + (charts.clientWidth || 0) + "|" + state.groupby + "|" + state.band;
      if (!force && sig === drawn) return;
      drawn = sig;
      const n = chartSet.render(state.groupby ? shownEntries(current) : list, state);
      if (!n) charts.replaceChildren(el("p", "muted", "Nothing to chart yet."));
      noteDraw(chartSet.lastDrawMs);
    }
    function legendItems() {
      if (kind === "compare" && state.groupby) return groupLegend(shownEntries(current));
      const list = entries(current);
      const items = list.map(function (r) {
        const d = r.detail;
        const b = add(el("button", "legend-item"), el("i", "swatch"), el("span", "name", r.path));
        b.type = "button";
        b.firstChild.style.background = r.colour; // (CSSOM, not a style attribute: allowed by the page's policy)
        b.setAttribute("aria-pressed", r.hidden ? "false" : "true");
        b.title = (r.hidden ? "show " : "hide ") + r.path;
        b.addEventListener("click", function () {
          if (state.hidden.has(r.path)) state.hidden.delete(r.path); else state.hidden.add(r.path);
          legendItems();
          draw(true);
        });
        const li = add(el("li", r.hidden ? "off" : ""), b, badge(d.verdict),
          el("span", "legend-facts", "step " + stepText(d) + " · loss " + num(d.loss)));
        li.setAttribute("data-path", r.path);
        if (kind === "compare") {
          const page = el("a", "", "page");
          page.href = runHref(r.path);
          page.setAttribute("aria-label", "page of " + r.path);
          const csv = el("a", "", "CSV");
          csv.href = csvHref(r.path);
          csv.setAttribute("download", "");
          csv.setAttribute("aria-label", "CSV of " + r.path);
          add(li, page, csv);
        }
        return li;
      });
      // keep the focused entry focused: replace the items in place, by path
      const focused = document.activeElement && document.activeElement.closest ? document.activeElement.closest(".legend li") : null;
      const path = focused ? focused.getAttribute("data-path") : null;
      placeLegend(items, path);
    }
    function groupLegend(groups) {
      const focused = document.activeElement && document.activeElement.closest ? document.activeElement.closest(".legend li") : null;
      const path = focused ? focused.getAttribute("data-path") : null;
      const items = groups.map(function (g) {
        const b = add(el("button", "legend-item"), el("i", "swatch"), el("span", "name", g.path));
        b.type = "button";
        b.firstChild.style.background = g.colour;
        b.setAttribute("aria-pressed", g.hidden ? "false" : "true");
        b.title = (g.hidden ? "show " : "hide ") + g.path + ": " + g.group.members.map(function (m) { return m.path; }).join(", ");
        b.addEventListener("click", function () {
          if (state.hidden.has(g.id)) state.hidden.delete(g.id); else state.hidden.add(g.id);
          legendItems();
          draw(true);
        });
        const li = add(el("li", "group" + (g.hidden ? " off" : "")), b);
        li.setAttribute("data-path", g.path);
        return li;
      });
      placeLegend(items, path);
    }
    function placeLegend(items, path) {
      legend.replaceChildren.apply(legend, items);
      if (path) {
        const again = legend.querySelector("li[data-path=\"" + CSS.escape(path) + "\"] .legend-item");
        if (again) again.focus();
      }
    }
    function update(d) {
      current = d;
      const list = runsOf(d);
      if (kind === "run") {
        document.title = "runwatch · " + d.path;
        h1.replaceChildren(el("code", "", d.path), document.createTextNode(" "), badge(d.verdict));
        facts.textContent = "step " + stepText(d) + " · loss " + num(d.loss) + " · " + num(d.tokens_per_second) +
          " tokens/s · ETA " + dur(d.eta_seconds) + " · last record " + ago(d);
        notes.replaceChildren.apply(notes, (d.errors || []).map(function (e) { return el("p", "error", e); }));
      } else {
        h1.textContent = "Compare " + list.length + (list.length === 1 ? " run" : " runs");
        facts.textContent = list.length ? "" : "Select runs with the boxes on the list of all runs, then press Compare.";
        const missing = (d.missing || []).map(function (m) { return el("code", "", m); });
        const parts = [];
        if (missing.length) {
          parts.push(el("strong", "", "Missing: "));
          missing.forEach(function (m, i) { if (i) parts.push(document.createTextNode(", ")); parts.push(m); });
          parts.push(document.createTextNode(" (no such run under " + d.root + (d.runs && d.runs.length >= d.limit ? ", or beyond the " + d.limit + " runs one page draws" : "") + ")"));
        }
        notes.replaceChildren.apply(notes, missing.length ? [add(el("p", "error missing"), ...parts)] : []);
      }
      if (kind === "compare") groupChoices(entries(d));
      legendItems();
      draw(false);
      if (kind === "run") drawExtra(d); else drawDiffs(d);
    }
    function drawExtra(d) {
      const fs = section("Findings of check (" + (d.findings || 0) + ")");
      if (!d.findings_list.length) add(fs, el("p", "muted", "none: the record rules found nothing"));
      const ul = el("ul", "findings");
      d.findings_list.forEach(function (f) {
        // a recovered finding (a later session went on from it) looks like a warning
        const sev = f.severity === "warn" || f.severity === "recovered" ? "warn" : "stop";
        add(ul, add(el("li", "sev-" + sev), el("b", "", txt(f.kind)), el("span", "sev", sev === "warn" ? f.severity : sev),
          document.createTextNode(" step=" + num(f.step) + ": " + txt(f.message))));
      });
      const parts = [add(fs, ul), originTable(d)];
      if (d.supervise) parts.push(supervision(d.supervise));
      parts.push(add(section("Status"), el("pre", "status", (d.status_lines || []).join("\n"))));
      extra.replaceChildren.apply(extra, parts);
    }
    // The group-by choices: seed (runs alike but for it), then every recipe key of the runs.
    function groupChoices(list) {
      const keys = {};
      list.forEach(function (e) { Object.keys(recipeOf(e)).forEach(function (k) { keys[k] = true; }); });
      const opts = [["", "nothing (one line a run)"], ["seed", "seed: runs alike but for their seed"]].concat(
        Object.keys(keys).sort().filter(function (k) { return k !== "seed"; }).map(function (k) { return [k, k]; }));
      const sig = opts.map(function (o) { return o[0]; }).join("\n");
      if (groupby._sig === sig) return;
      groupby._sig = sig;
      groupby.replaceChildren.apply(groupby, opts.map(function (o) {
        const opt = el("option", "", o[1]);
        opt.value = o[0];
        return opt;
      }));
      if (opts.some(function (o) { return o[0] === state.groupby; })) groupby.value = state.groupby;
      else { state.groupby = ""; groupby.value = ""; }
    }
    // The compared runs' recipes and provenance side by side; a row whose values differ is marked,
    // and with "differences only" (on by default) the rows alike in every run are hidden.
    const diffSummary = el("p", "muted diff-count");
    diffSummary.setAttribute("aria-live", "polite");
    const diffWrap = el("div", "table-wrap");
    const diffSection = add(section("What differs"), add(el("div", "toolbar"), diffLabel, diffSummary), diffWrap);
    function drawDiffs(d) {
      const list = runsOf(d);
      if (list.length < 2) { differs.replaceChildren(); return; }
      if (!differs.firstChild) differs.appendChild(diffSection);
      const cols = list.map(function (r) { return originRows(r, true); });
      const order = [], values = {};
      cols.forEach(function (rows, i) {
        rows.forEach(function (row) {
          const key = row[0] + "\u0000" + row[1];
          if (!values[key]) { values[key] = { group: row[0], name: row[1], by: {} }; order.push(key); }
          values[key].by[i] = row[2];
        });
      });
      const table = el("table", "diff");
      const head = add(el("tr"), el("th", "", ""));
      head.firstChild.scope = "col";
      list.forEach(function (r, i) {
        const th = add(el("th"), el("i", "swatch"), el("code", "", r.path));
        th.scope = "col";
        th.firstChild.style.background = RW.colour(names.indexOf(r.path) < 0 ? i : names.indexOf(r.path));
        head.appendChild(th);
      });
      const body = el("tbody");
      let differing = 0;
      order.forEach(function (key) {
        const v = values[key];
        const cells = list.map(function (_, i) { return v.by[i] === undefined ? "–" : v.by[i]; });
        const same = cells.every(function (c) { return c === cells[0]; });
        if (!same) differing++;
        const th = el("th", "", v.group === "recipe" || v.group === "provenance" ? v.name : v.group + " " + v.name);
        th.scope = "row";
        const tr = add(el("tr", same ? "same" : "differs"), th);
        tr.setAttribute("data-key", v.group + "." + v.name);
        cells.forEach(function (c) { add(tr, el("td", "", c)); });
        tr.hidden = state.diffOnly && same;
        body.appendChild(tr);
      });
      add(table, add(el("thead"), head), body);
      diffSummary.textContent = !order.length ? "None of these runs records a recipe or provenance."
        : differing ? differing + " of " + order.length + " rows differ" + (state.diffOnly ? " (rows alike in every run are hidden)" : "")
        : "The runs' recipes and provenance are the same in every row.";
      const sig = JSON.stringify([state.diffOnly, list.map(function (r) { return r.path; }), order.map(function (k) { return [k, values[k].by]; })]);
      if (diffWrap._sig !== sig) { diffWrap._sig = sig; diffWrap.replaceChildren(table); }
    }
    update(data);
    return update;
  }

  function supervision(s) {
    const box = section("Supervision");
    const budget = function (used, name) {
      const b = s.budgets && s.budgets[name];
      return used + (b !== undefined && b !== null ? " of " + b : "");
    };
    add(box, el("p", "facts", "attempt " + num(s.attempt) + " · restarts " + budget(s.restarts, "restarts") +
      " · rollbacks " + budget(s.rollbacks, "rollbacks") + (s.finished && s.last_event ? " · " + txt(s.last_event.event) : "")));
    if (s.goodput) {
      const g = s.goodput;
      add(box, el("p", "facts", "goodput " + num(g.ratio) + " (" + num(g.steps_kept) + " of " + num(g.steps_run) +
        " steps kept, " + dur(g.seconds_lost) + " lost)"));
    }
    if (s.error) add(box, el("p", "error", s.error));
    const table = el("table", "attempts");
    const head = el("tr");
    ["#", "pid", "began", "checkpoint", "verdict", "end"].forEach(function (h) { add(head, el("th", "", h)); });
    add(table, add(el("thead"), head));
    const body = el("tbody");
    function cell(lbl, text) { const td = el("td", "", text); td.setAttribute("data-label", lbl); return td; }
    s.attempts.slice().reverse().forEach(function (a) {
      const v = a.verdict;
      let verdict = "–";
      if (v && v.kind) verdict = v.kind + (v["class"] ? " (" + v["class"] + ")" : "") + " at step " + num(v.step);
      else if (v) verdict = v.line || ("OK done" + (typeof v.step === "number" ? " at step " + num(v.step) : ""));
      const end = a.end ? a.end.event + (typeof a.end.step === "number" ? " at step " + num(a.end.step) : "")
        : (s.finished ? "–" : "running");
      add(body, add(el("tr"), cell("#", num(a.attempt)), cell("pid", num(a.pid)), cell("began", txt(a.how)),
        cell("checkpoint", a.checkpoint ? String(a.checkpoint) : "–"), cell("verdict", verdict), cell("end", end)));
    });
    return add(box, add(table, body));
  }

  // --- live updates --------------------------------------------------------------------------
  function stamp(ok, text) {
    live.className = "live " + (ok ? "ok" : "down");
    live.textContent = text;
  }
  const update = init.page === "list" ? ListPage(init.data) : RunsPage(init.page, init.data);
  function poll() {
    fetch(init.api, { cache: "no-store", headers: { Accept: "application/json" } }).then(function (res) {
      if (res.status === 404) throw new Error("this run is gone (404)");
      if (!res.ok) throw new Error("HTTP " + res.status);
      return res.json();
    }).then(function (data) {
      update(data);
      stamp(true, "live · " + new Date().toLocaleTimeString());
    }).catch(function (err) {
      stamp(false, "not updating: " + err.message + "; retrying");
    }).then(function () { setTimeout(poll, POLL_MS); });
  }
  stamp(true, "live");
  setTimeout(poll, POLL_MS);
})();
