// runwatch serve: draws the list of runs or one run from the page's JSON, then polls the API.
// Every piece of text from a run (paths, messages, log strings) goes in through textContent or
// setAttribute on a fixed attribute, never as HTML: a run cannot put markup on the page.
"use strict";
(function () {
  var POLL_MS = 2000;
  var SVGNS = "http://www.w3.org/2000/svg";
  var STATES = { anomaly: 1, watching: 1, stale: 1, ok: 1, none: 1 };
  var init = JSON.parse(document.getElementById("initial").textContent);
  var app = document.getElementById("app");
  var live = document.getElementById("live");

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function add(parent) {
    for (var i = 1; i < arguments.length; i++) if (arguments[i]) parent.appendChild(arguments[i]);
    return parent;
  }
  function sv(tag, attrs) {
    var e = document.createElementNS(SVGNS, tag);
    for (var k in attrs) e.setAttribute(k, String(attrs[k]));
    return e;
  }
  function num(v) {
    if (v === null || v === undefined) return "–";
    if (typeof v !== "number") return String(v);
    if (v !== 0 && (Math.abs(v) >= 1e6 || Math.abs(v) < 1e-3)) return v.toExponential(2).replace(/\.?0+e/, "e");
    if (Number.isInteger(v)) return String(v);
    return String(Number(v.toPrecision(4)));
  }
  function dur(s) {
    if (s === null || s === undefined) return "–";
    s = Math.max(0, Math.round(s));
    if (s < 120) return s + " s";
    if (s < 7200) return Math.floor(s / 60) + " min";
    if (s < 172800) return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
    return Math.floor(s / 86400) + " d " + Math.floor((s % 86400) / 3600) + " h";
  }
  function runHref(path) {
    return "/run/" + String(path).split("/").map(encodeURIComponent).join("/");
  }
  function badge(verdict) {
    var state = verdict && STATES[verdict.state] ? verdict.state : "none";
    return el("span", "badge state-" + state, verdict ? verdict.label : "no watchdog");
  }
  function stepText(r) {
    if (r.step === null || r.step === undefined) return "no records yet";
    return num(r.step) + (r.max_steps ? " / " + num(r.max_steps) : "");
  }
  function note(r) {
    if (r.error) return el("span", "error", r.error);
    if (r.findings) {
      var f = r.first_finding;
      return el("span", "finding", r.findings + (r.findings === 1 ? " finding" : " findings") +
        (f ? ": " + f.kind + " at step " + num(f.step) : ""));
    }
    if (r.catching_up) return el("span", "muted", "reading the log…");
    if (r.ended) return el("span", "muted", "ended: " + r.ended.reason);
    return null;
  }
  function cell(label, content, cls) {
    var td = el("td", cls || "");
    td.setAttribute("data-label", label);
    if (content instanceof Node) td.appendChild(content);
    else td.textContent = content;
    return td;
  }

  // --- the list ------------------------------------------------------------------------------
  function drawList(data) {
    var runs = data.runs || [];
    var box = el("section", "list");
    add(box, add(el("h1"), document.createTextNode("Runs under "), el("code", "", data.root)));
    if (!runs.length) {
      add(box, el("p", "muted", "No runs found yet (run directories, *.jsonl logs and trainer_state.json, up to 4 levels down). This page updates by itself."));
    } else {
      var table = el("table", "runs");
      var head = el("tr");
      ["Run", "Watchdog", "Step", "Loss", "Tokens/s", "ETA", "Last record", "Notes"].forEach(function (h) {
        add(head, el("th", "", h));
      });
      add(table, add(el("thead"), head));
      var body = el("tbody");
      runs.forEach(function (r) {
        var tr = el("tr", "run");
        tr.setAttribute("data-path", r.path);
        var a = el("a", "run-link", r.path);
        a.href = runHref(r.path);
        add(tr, cell("Run", a, "path"), cell("Watchdog", badge(r.verdict)), cell("Step", stepText(r), "step"),
          cell("Loss", num(r.loss), "num"), cell("Tokens/s", num(r.tokens_per_second), "num"),
          cell("ETA", dur(r.eta_seconds), "num"), cell("Last record", r.age_seconds === null ? "–" : dur(r.age_seconds) + " ago", "num"),
          cell("Notes", note(r) || "", "notes"));
        add(body, tr);
      });
      add(table, body);
      add(box, table);
    }
    app.replaceChildren(box);
  }

  // --- charts --------------------------------------------------------------------------------
  function ticks(lo, hi, n) {
    var span = hi - lo, raw = span / n, mag = Math.pow(10, Math.floor(Math.log10(raw)));
    var step = [1, 2, 5, 10].map(function (m) { return m * mag; }).find(function (s) { return span / s <= n; }) || raw;
    var out = [];
    for (var v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)));
    return out;
  }
  function drawChart(c, findings) {
    // As wide in user units as on screen (up to 640), so the tick labels keep their size on a phone.
    var W = Math.max(300, Math.min(640, (app.clientWidth || 640) - 40)), H = W < 480 ? 200 : 240;
    var L = 58, R = 14, T = 14, B = 30;
    var xs = [], ys = [], total = 0;
    c.series.forEach(function (s) {
      s.points.forEach(function (p) { xs.push(p[0]); ys.push(p[1]); });
      total += s.points.length;
    });
    var x0 = Math.min.apply(null, xs), x1 = Math.max.apply(null, xs);
    var y0 = Math.min.apply(null, ys), y1 = Math.max.apply(null, ys);
    if (x1 === x0) { x0 -= 1; x1 += 1; }
    if (y1 === y0) { var d = Math.abs(y0) * 0.1 || 1; y0 -= d; y1 += d; }
    var pad = (y1 - y0) * 0.05; y0 -= pad; y1 += pad;
    function X(x) { return L + (x - x0) / (x1 - x0) * (W - L - R); }
    function Y(y) { return T + (y1 - y) / (y1 - y0) * (H - T - B); }
    var svg = sv("svg", { viewBox: "0 0 " + W + " " + H, class: "chart", role: "img", "data-points": total });
    svg.setAttribute("aria-label", c.title);
    ticks(y0, y1, 4).forEach(function (v) {
      add(svg, sv("line", { x1: L, x2: W - R, y1: Y(v), y2: Y(v), class: "grid" }));
      var t = sv("text", { x: L - 6, y: Y(v) + 4, class: "tick", "text-anchor": "end" });
      t.textContent = num(v);
      add(svg, t);
    });
    ticks(x0, x1, 5).forEach(function (v) {
      var t = sv("text", { x: X(v), y: H - 10, class: "tick", "text-anchor": "middle" });
      t.textContent = num(v);
      add(svg, sv("line", { x1: X(v), x2: X(v), y1: H - B, y2: H - B + 4, class: "axis" }), t);
    });
    add(svg, sv("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, class: "axis" }));
    (findings || []).slice(0, 200).forEach(function (f) {
      if (typeof f.step !== "number" || f.step < x0 || f.step > x1) return;
      var g = sv("g", { class: "marker" });
      g.setAttribute("data-kind", f.kind);
      var title = document.createElementNS(SVGNS, "title");
      title.textContent = f.kind + " step=" + num(f.step) + ": " + f.message;
      add(g, title, sv("line", { x1: X(f.step), x2: X(f.step), y1: T, y2: H - B }),
        sv("path", { d: "M" + (X(f.step) - 5) + " " + T + "h10l-5 7z" }));
      add(svg, g);
    });
    c.series.forEach(function (s, i) {
      var runs = [], cur = [];
      s.points.forEach(function (p, k) {
        if (k && p[0] < s.points[k - 1][0]) { runs.push(cur); cur = []; } // a relaunch: steps start again
        cur.push(X(p[0]).toFixed(1) + "," + Y(p[1]).toFixed(1));
      });
      runs.push(cur);
      runs.forEach(function (r) {
        if (r.length === 1) {
          var xy = r[0].split(",");
          add(svg, sv("circle", { cx: xy[0], cy: xy[1], r: 2.5, class: "dot s" + (i % 6) }));
        } else if (r.length) {
          add(svg, sv("polyline", { points: r.join(" "), class: "line s" + (i % 6) }));
        }
      });
    });
    return svg;
  }
  function figure(c, findings) {
    var fig = el("figure", "chart-box");
    fig.setAttribute("data-chart", c.name);
    var cap = add(el("figcaption"), el("span", "chart-title", c.title));
    c.series.forEach(function (s, i) {
      add(cap, add(el("span", "legend"), el("i", "swatch s" + (i % 6)), document.createTextNode(s.name + " " + (s.last ? num(s.last[1]) : ""))));
    });
    return add(fig, cap, drawChart(c, findings));
  }

  // --- one run -------------------------------------------------------------------------------
  function section(title) {
    return add(el("section", "block"), el("h2", "", title));
  }
  function drawSupervision(s) {
    var box = section("Supervision");
    var budget = function (used, name) {
      var b = s.budgets && s.budgets[name];
      return used + (b !== undefined && b !== null ? " of " + b : "");
    };
    add(box, el("p", "facts", "attempt " + num(s.attempt) + " · restarts " + budget(s.restarts, "restarts") +
      " · rollbacks " + budget(s.rollbacks, "rollbacks") + (s.finished ? " · " + s.last_event.event : "")));
    if (s.goodput) {
      var g = s.goodput;
      add(box, el("p", "facts", "goodput " + num(g.ratio) + " (" + num(g.steps_kept) + " of " + num(g.steps_run) +
        " steps kept, " + dur(g.seconds_lost) + " lost)"));
    }
    if (s.error) add(box, el("p", "error", s.error));
    var table = el("table", "attempts");
    var head = el("tr");
    ["#", "pid", "began", "checkpoint", "verdict", "end"].forEach(function (h) { add(head, el("th", "", h)); });
    add(table, add(el("thead"), head));
    var body = el("tbody");
    s.attempts.slice().reverse().forEach(function (a) {
      var v = a.verdict ? a.verdict.kind + (a.verdict["class"] ? " (" + a.verdict["class"] + ")" : "") + " at " + num(a.verdict.step) : "–";
      var end = a.end ? a.end.event + (a.end.step !== null && a.end.step !== undefined ? " at " + num(a.end.step) : "") :
        (s.finished ? "–" : "running");
      add(body, add(el("tr"), cell("#", num(a.attempt)), cell("pid", num(a.pid)), cell("began", a.how),
        cell("checkpoint", a.checkpoint || "–"), cell("verdict", v), cell("end", end)));
    });
    return add(box, add(table, body));
  }
  function drawRun(d) {
    document.title = "runwatch · " + d.path;
    var box = el("section", "run");
    var back = el("a", "", "← all runs");
    back.href = "/";
    add(box, add(el("p", "crumbs"), back));
    add(box, add(el("h1"), el("code", "", d.path), document.createTextNode(" "), badge(d.verdict)));
    add(box, el("p", "facts", "step " + stepText(d) + " · loss " + num(d.loss) + " · " + num(d.tokens_per_second) +
      " tokens/s · ETA " + dur(d.eta_seconds) + " · last record " + (d.age_seconds === null ? "–" : dur(d.age_seconds) + " ago")));
    (d.errors || []).forEach(function (e) { add(box, el("p", "error", e)); });
    var charts = el("div", "charts");
    d.charts.forEach(function (c) { add(charts, figure(c, d.findings_list)); });
    if (!d.charts.length) add(charts, el("p", "muted", "Nothing to chart yet."));
    add(box, charts);
    var fs = section("Findings of check (" + d.findings + ")");
    if (!d.findings_list.length) add(fs, el("p", "muted", "none: the record rules found nothing"));
    var ul = el("ul", "findings");
    d.findings_list.forEach(function (f) {
      add(ul, add(el("li"), el("b", "", f.kind), document.createTextNode(" step=" + num(f.step) + ": " + f.message)));
    });
    add(box, add(fs, ul));
    if (d.supervise) add(box, drawSupervision(d.supervise));
    add(box, add(section("Status"), el("pre", "status", d.status_lines.join("\n"))));
    app.replaceChildren(box);
  }

  // --- live updates --------------------------------------------------------------------------
  function draw(data) {
    if (init.page === "run") drawRun(data);
    else drawList(data);
  }
  function stamp(ok, text) {
    live.className = "live " + (ok ? "ok" : "down");
    live.textContent = text;
  }
  function poll() {
    fetch(init.api, { cache: "no-store", headers: { Accept: "application/json" } }).then(function (res) {
      if (res.status === 404) throw new Error("this run is gone (404)");
      if (!res.ok) throw new Error("HTTP " + res.status);
      return res.json();
    }).then(function (data) {
      draw(data);
      stamp(true, "live · " + new Date().toLocaleTimeString());
    }).catch(function (err) {
      stamp(false, "not updating: " + err.message + "; retrying");
    }).then(function () { setTimeout(poll, POLL_MS); });
  }
  draw(init.data);
  stamp(true, "live");
  setTimeout(poll, POLL_MS);
})();
