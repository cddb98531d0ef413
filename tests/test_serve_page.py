"""The run page people compare runs on, in a real headless Chromium driven with its own mouse,
keyboard and touch events (tests/cdp.py): overlay, smoothing, zoom, markers, CSV, many runs.

Runs are written by real producers (RunLogger, a real `runwatch supervise`, a hand-written
loop's minimal JSONL that the tests append to while a page is open).
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import statistics
import time
from collections.abc import Iterator
from typing import Any

import pytest

from cdp import Browser
from serve_runs import WAIT, Served, minimal, supervised, sweep

SCREENSHOTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_screenshots")
SWEEP = {"a": 1e-3, "b": 3e-4, "c": 1e-4}
LIVE = "live/train.jsonl"

# Every polyline of a chart, as the page drew it: run, key, class, stroke, opacity, and points.
LINES = """((chart) => Array.from(document.querySelectorAll(`figure[data-chart="${chart}"] svg polyline`)).map(p => ({
  run: p.getAttribute('data-run'), key: p.getAttribute('data-key'), cls: p.getAttribute('class'),
  stroke: p.getAttribute('stroke'), opacity: parseFloat(getComputedStyle(p).opacity),
  points: p.getAttribute('points').trim().split(/\\s+/).map(xy => xy.split(',').map(Number))})))"""
TICKS = """((chart, axis) => Array.from(document.querySelectorAll(`figure[data-chart="${chart}"] svg .tick.${axis}`))
  .map(t => t.textContent))"""


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("page") / "runs"
    sweep(root / "sweep", SWEEP, steps=300)
    supervised(root / "rolled", "spike@36")
    (root / "live").mkdir()
    minimal(root / LIVE, range(1, 201))
    (root / "spiky").mkdir()
    with open(root / "spiky" / "train.jsonl", "w") as f:  # one wild value at step 50, never rolled back
        for step in range(1, 101):
            loss = 100.0 if step == 50 else 1.0 + 0.1 * math.sin(step)
            f.write(json.dumps({"step": step, "t": 1_700_000_000.0 + 30 * step, "loss": loss}) + "\n")
    return root


@pytest.fixture(scope="module")
def served(root):
    with Served(root) as s:
        s.wait_run("spiky/train.jsonl", lambda r: r["step"] == 100, "at step 100")
        for rel in ("sweep/a", "sweep/b", "sweep/c", "rolled"):
            s.wait_run(rel, lambda r: r["step"] is not None and r["ended"] is not None, "ended")
        s.wait_run(LIVE, lambda r: r["step"] == 200, "at step 200")
        yield s


@contextlib.contextmanager
def open_page(chromium: str, url: str, profile: str, **kw: Any) -> Iterator[Browser]:
    """The page in a headless Chromium; the test fails if the page threw an exception."""
    with Browser(chromium, url, profile, **kw) as b:
        yield b
        b.evaluate("1")  # read the events that came meanwhile
        assert b.exceptions == []


def last_step(root) -> int:
    with open(root / LIVE) as f:
        return json.loads(f.read().splitlines()[-1])["step"]


def append_and_wait(b: Browser, served: Served, root, n: int = 20) -> int:
    """Append n records to the live run; wait until the open page has drawn them."""
    last = last_step(root)
    draws = b.evaluate("window.__runwatch.draws")
    minimal(root / LIVE, range(last + 1, last + n + 1))
    served.wait_run(LIVE, lambda r: r["step"] == last + n, f"at step {last + n}")
    b.wait_for(f"window.__runwatch.draws > {draws}")
    return last + n


def page_text_is_clean(b: Browser) -> None:
    text = b.evaluate("document.body.innerText")
    for word in ("null", "undefined", "None", "NaN"):
        assert word not in text.split() and f" {word}" not in text, (word, text[:2000])


def hex_rgb(h: str) -> str:
    return f"rgb({int(h[1:3], 16)}, {int(h[3:5], 16)}, {int(h[5:7], 16)})"


def shot(b: Browser, name: str) -> None:
    os.makedirs(SCREENSHOTS, exist_ok=True)
    import base64

    data = b.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
    with open(os.path.join(SCREENSHOTS, f"{name}.png"), "wb") as f:
        f.write(base64.b64decode(data))


def test_compare_overlays_runs_in_one_colour_each_with_a_legend_that_hides_a_run(served, root, chromium, tmp_path):
    url = served.url + "compare?run=sweep/a&run=sweep%2Fb&run=sweep/c&run=" + LIVE + "&run=gone/run"
    with open_page(chromium, url, str(tmp_path / "profile")) as b:
        b.wait_for("document.querySelectorAll('.legend .legend-item').length === 4")
        assert "Missing: gone/run" in b.evaluate("document.querySelector('.missing').textContent")
        legend = b.evaluate(
            "Array.from(document.querySelectorAll('.legend li')).map(li => [li.getAttribute('data-path'),"
            " li.querySelector('.legend-item').textContent, getComputedStyle(li.querySelector('.swatch')).backgroundColor,"
            " li.querySelector('.legend-item').getAttribute('aria-pressed')])"
        )
        paths = ["sweep/a", "sweep/b", "sweep/c", LIVE]
        assert [x[0] for x in legend] == paths and [x[1] for x in legend] == paths
        assert all(x[3] == "true" for x in legend) and len({x[2] for x in legend}) == 4
        colour = {x[0]: x[2] for x in legend}
        titles = b.evaluate("Array.from(document.querySelectorAll('.chart-title')).map(t => t.textContent)")
        assert titles[:4] == ["loss", "learning rate", "gradient norm", "throughput (tokens/s)"]
        strokes = {}
        for chart in ("loss", "lr"):
            lines = b.evaluate(f"{LINES}('{chart}')")
            assert {ln["run"] for ln in lines} == set(paths)
            for ln in lines:  # one colour per run, on every chart, the legend's
                assert hex_rgb(ln["stroke"]) == colour[ln["run"]]
                strokes.setdefault(ln["run"], ln["stroke"])
            for axis in ("x", "y"):
                ticks = b.evaluate(f"{TICKS}('{chart}', '{axis}')")
                assert len(ticks) >= 2 and all(float(t) == float(t) for t in ticks), ticks
        # hide sweep/b with a real click on its legend entry
        b.click(*b.center('.legend li[data-path="sweep/b"] .legend-item'))
        b.wait_for(
            "document.querySelector('.legend li[data-path=\"sweep/b\"] .legend-item').getAttribute('aria-pressed') === 'false'"
        )
        assert {ln["run"] for ln in b.evaluate(f"{LINES}('loss')")} == {"sweep/a", "sweep/c", LIVE}
        # new data: the page redraws, sweep/b stays hidden, the colours stay
        append_and_wait(b, served, root)
        lines = b.evaluate(f"{LINES}('loss')")
        assert {ln["run"] for ln in lines} == {"sweep/a", "sweep/c", LIVE}
        assert all(ln["stroke"] == strokes[ln["run"]] for ln in lines)
        shot(b, "compare")
        b.key("Enter", "Enter", 13)  # the entry still has the keyboard's focus: Enter shows the run again
        b.wait_for(f"new Set(({LINES})('loss').map(l => l.run)).size === 4")
        page_text_is_clean(b)


def tb_smooth(ys: list[float], w: float) -> list[float]:
    """TensorBoard's classic smoothing (its line chart's `classicSmoothing`), written again here."""
    if all(y == ys[0] for y in ys):
        return ys
    last, out = 0.0, []
    for n, y in enumerate(ys, start=1):
        last = last * w + (1 - w) * y
        out.append(last / (1 - w**n))
    return out


def test_smoothing_is_tensorboards_debiased_ema_with_the_raw_series_faint_behind(served, root, chromium, tmp_path):
    with open_page(chromium, served.url + "run/sweep/a", str(tmp_path / "profile")) as b:
        b.wait_for("!!document.querySelector('figure[data-chart=\"loss\"] polyline')")
        slider = b.evaluate(
            "(() => { const s = document.querySelector('input[type=range]');"
            " return [s.getAttribute('aria-label'), s.min, s.max, s.value]; })()"
        )
        assert slider == ["smoothing", "0", "0.999", "0.6"]
        api = served.json("/api/run/sweep/a")
        ys = [p[1] for p in api["charts"][0]["series"][0]["points"]]
        for w in (0.6, 0.95):
            got = b.evaluate(f"RW.smooth({json.dumps(ys)}, {w})")
            assert all(math.isclose(g, e, rel_tol=1e-12) for g, e in zip(got, tb_smooth(ys, w), strict=True))

        def loss_lines():
            lines = [ln for ln in b.evaluate(f"{LINES}('loss')") if ln["key"] == "loss"]
            return [ln for ln in lines if "raw" in ln["cls"]], [ln for ln in lines if "raw" not in ln["cls"]]

        def pixels_fit(line, values):
            # the drawn y pixels are an affine image of the values (a linear y axis; pixels to 0.1)
            px = [p[1] for p in line["points"]]
            fit = statistics.linear_regression(values, px)
            return max(abs(fit.intercept + fit.slope * v - p) for v, p in zip(values, px, strict=True)) < 0.2

        def drawn_with(w):
            deadline = time.monotonic() + WAIT
            while not pixels_fit(loss_lines()[1][0], tb_smooth(ys, w) if w else ys):
                assert time.monotonic() < deadline, f"never drawn with smoothing {w}"
                time.sleep(0.1)
            return loss_lines()

        raw, smoothed = loss_lines()
        assert len(raw) == 1 and len(smoothed) == 1 and raw[0]["opacity"] < 0.5 and smoothed[0]["opacity"] == 1
        assert pixels_fit(smoothed[0], tb_smooth(ys, 0.6)) and pixels_fit(raw[0], ys)
        # the keyboard moves the slider: End is 0.999, Home is 0 (no smoothing: the raw line alone)
        b.evaluate("document.querySelector('input[type=range]').focus()")
        b.key("End", "End", 35)
        b.wait_for("document.querySelector('input[type=range]').value === '0.999'")
        b.wait_for("document.querySelector('output.smooth-value').textContent === '0.999'")
        drawn_with(0.999)
        b.key("Home", "Home", 36)
        b.wait_for("document.querySelector('input[type=range]').value === '0'")
        raw, smoothed = drawn_with(0)
        assert raw == [] and len(smoothed) == 1
        b.key("PageUp", "PageUp", 33)
        b.wait_for("parseFloat(document.querySelector('input[type=range]').value) > 0")


def test_smoothing_and_a_drag_zoom_survive_a_live_append(served, root, chromium, tmp_path):
    with open_page(chromium, served.url + "run/" + LIVE, str(tmp_path / "profile")) as b:
        b.wait_for("!!document.querySelector('figure[data-chart=\"loss\"] polyline')")
        full = [float(t) for t in b.evaluate(f"{TICKS}('loss', 'x')")]
        assert full[-1] >= 150
        b.evaluate(
            "(() => { const s = document.querySelector('input[type=range]'); s.value = '0.9';"
            " s.dispatchEvent(new Event('input', {bubbles: true})); })()"
        )
        # drag across the middle of the loss chart's plot, with the mouse
        box = b.evaluate(
            "(() => { const s = document.querySelector('figure[data-chart=\"loss\"] svg'); s.scrollIntoView({block: 'center'});"
            " const r = s.getBoundingClientRect(); const w = s.viewBox.baseVal.width;"
            " return [r.x, r.y, r.width, r.height, w]; })()"
        )
        x, y, w, h, vw = box
        scale = w / vw
        left, right = x + 62 * scale, x + (vw - 14) * scale  # the plot's edges (chart.js: L and R)
        b.drag(left + 0.3 * (right - left), y + h / 2, left + 0.6 * (right - left), y + h / 2)
        b.wait_for("!document.querySelector('button.reset').disabled")
        zoomed = [float(t) for t in b.evaluate(f"{TICKS}('loss', 'x')")]
        first, last = 1, last_step(root)  # the x axis spans the run's steps; the drag covered 30 % to 60 %
        lo, hi = first + 0.25 * (last - first), first + 0.65 * (last - first)
        assert zoomed and lo <= zoomed[0] and zoomed[-1] <= hi, (full, zoomed)
        assert "(zoomed)" in b.evaluate(
            "document.querySelector('figure[data-chart=\"loss\"] svg').getAttribute('aria-label')"
        )
        assert b.evaluate(f"{TICKS}('lr', 'x')") == b.evaluate(f"{TICKS}('loss', 'x')")  # one x range for every chart
        new_last = append_and_wait(b, served, root)
        b.wait_for(f"document.querySelector('.run > .facts').textContent.includes('{new_last}')")
        assert [float(t) for t in b.evaluate(f"{TICKS}('loss', 'x')")] == zoomed  # the zoom is kept
        assert b.evaluate("document.querySelector('input[type=range]').value") == "0.9"  # and the smoothing
        assert any("raw" in ln["cls"] for ln in b.evaluate(f"{LINES}('loss')"))
        shot(b, "zoomed-live")
        # a double click goes back to the whole run, now longer
        b.click(left + 0.5 * (right - left), y + h / 2, count=2)
        b.wait_for("document.querySelector('button.reset').disabled")
        ticks = [float(t) for t in b.evaluate(f"{TICKS}('loss', 'x')")]
        assert ticks[-1] > zoomed[-1] and ticks[-1] >= new_last - 50
        # the keyboard: + zooms around the middle, 0 resets
        b.evaluate("document.querySelector('figure[data-chart=\"loss\"] .plot-holder').focus()")
        b.key("+", "Equal", 187)
        b.wait_for("!document.querySelector('button.reset').disabled")
        b.key("0", "Digit0", 48)
        b.wait_for("document.querySelector('button.reset').disabled")


def test_log_scale_time_axes_and_outliers(served, chromium, tmp_path):
    with open_page(chromium, served.url + "run/spiky/train.jsonl", str(tmp_path / "profile")) as b:
        b.wait_for("!!document.querySelector('figure[data-chart=\"loss\"] polyline')")
        y_max = lambda: max(float(t) for t in b.evaluate(f"{TICKS}('loss', 'y')"))  # noqa: E731
        assert y_max() >= 100  # the spike sets the scale
        draws = b.evaluate("window.__runwatch.draws")
        b.click(*b.center("#outliers"))  # "ignore outliers": the scale of the other 99 values
        b.wait_for(f"window.__runwatch.draws > {draws}")
        assert y_max() < 2
        b.evaluate("document.getElementById('outliers').focus()")
        b.key(" ", "Space", 32)  # and off again, with the keyboard
        b.wait_for("!document.getElementById('outliers').checked")
        b.wait_for(f"Math.max(...({TICKS})('loss', 'y').map(Number)) >= 100")
        # log scale: the loss's pixels follow log10 of the values
        b.click(*b.center("#logy"))
        b.wait_for(
            "document.querySelector('figure[data-chart=\"loss\"] .axis-label').textContent.includes('log scale y')"
        )
        b.evaluate(
            "(() => { const s = document.querySelector('input[type=range]'); s.value = '0';"
            " s.dispatchEvent(new Event('input', {bubbles: true})); })()"
        )
        b.wait_for(f"({LINES})('loss').length === 1")
        line = b.evaluate(f"{LINES}('loss')")[0]
        ys = [p[1] for p in served.json("/api/run/spiky/train.jsonl")["charts"][0]["series"][0]["points"]]
        fit = statistics.linear_regression([math.log10(y) for y in ys], [p[1] for p in line["points"]])
        assert all(
            abs(fit.intercept + fit.slope * math.log10(y) - p[1]) < 0.2 for y, p in zip(ys, line["points"], strict=True)
        )
        assert "1" in b.evaluate(f"{TICKS}('loss', 'y')") and "100" in b.evaluate(f"{TICKS}('loss', 'y')")
        # the x axis: wall time (clock labels), then time since the first record
        b.evaluate(
            "(() => { const x = document.getElementById('xmode'); x.value = 'wall';"
            " x.dispatchEvent(new Event('change', {bubbles: true})); })()"
        )
        b.wait_for(f"({TICKS})('loss', 'x').every(t => /^\\d\\d:\\d\\d$/.test(t))")
        b.evaluate(
            "(() => { const x = document.getElementById('xmode'); x.value = 'relative';"
            " x.dispatchEvent(new Event('change', {bubbles: true})); })()"
        )
        b.wait_for(f"({TICKS})('loss', 'x').every(t => / min$/.test(t))")  # 100 records 30 s apart
        ticks = [float(t.split()[0]) for t in b.evaluate(f"{TICKS}('loss', 'x')")]
        assert ticks[0] >= 0 and ticks[-1] <= 99 * 30 / 60
        assert "time since start" in b.evaluate(
            "document.querySelector('figure[data-chart=\"loss\"] .axis-label').textContent"
        )
        page_text_is_clean(b)


def test_the_csv_link_gives_the_api_values(served, chromium, tmp_path):
    with open_page(chromium, served.url + "run/sweep/b", str(tmp_path / "profile")) as b:
        b.wait_for("!!document.querySelector('a.csv')")
        link = b.evaluate(
            "(() => { const a = Array.from(document.querySelectorAll('a')).find(a => a.textContent === 'CSV');"
            " return [a.getAttribute('href'), a.hasAttribute('download')]; })()"
        )
        assert link == ["/api/run/sweep/b.csv", True]
        b.evaluate(
            "Promise.all([fetch('/api/run/sweep/b.csv').then(r => r.text().then(t => [r.headers.get('content-type'), t])),"
            " fetch('/api/run/sweep/b').then(r => r.json())]).then(x => { window.__got = x; })"
        )
        ctype, text = b.wait_for("window.__got")[0]
        api = b.evaluate("window.__got[1]")
    assert ctype == "text/csv; charset=utf-8"
    rows = list(csv.reader(io.StringIO(text)))
    head, rows = rows[0], rows[1:]
    assert head[:4] == ["step", "loss", "eval_loss", "lr"] and len(rows) == 300
    by_step = {float(r[0]): dict(zip(head, r, strict=True)) for r in rows}
    n = 0
    for chart in api["charts"]:
        for s in chart["series"]:
            for x, y, _ in s["points"]:
                assert f"{float(by_step[float(x)][s['key']]):.6g}" == f"{y:.6g}"
                n += 1
    assert n >= 300 * 3


def test_a_rolled_back_run_is_drawn_once_along_its_path_with_its_markers(served, chromium, tmp_path):
    with open_page(chromium, served.url + "run/rolled", str(tmp_path / "profile")) as b:
        b.wait_for("!!document.querySelector('figure[data-chart=\"loss\"] polyline')")
        assert (
            b.evaluate("document.querySelector('figure[data-chart=\"loss\"] svg').getAttribute('data-points')") == "12"
        )
        for line in b.evaluate(f"{LINES}('loss')"):
            xs = [p[0] for p in line["points"]]
            assert xs == sorted(xs) and len(set(xs)) == len(xs) == 12  # one line, never back in time
        marks = b.evaluate(
            "Array.from(document.querySelectorAll('figure[data-chart=\"loss\"] g.marker')).map(g => [g.getAttribute('data-type'),"
            " g.getAttribute('aria-label'), g.querySelector('title').textContent, g.querySelector('line').getAttribute('x1')])"
        )
        types = [m[0] for m in marks]
        assert types.count("rollback") == 1 and types.count("warn") == 1 and types.count("checkpoint") == 6
        rollback = next(m for m in marks if m[0] == "rollback")
        assert rollback[1] == rollback[2] == "rollback to step 30 (ckpt-30.json), attempt 2"
        spike = next(m for m in marks if m[0] == "warn")  # rolled back past: recovered, not a stop
        assert spike[1].startswith("loss_spike (recovered) at step 45: ") and "recovered: the run went on" in spike[1]
        # the rollback's line stands at step 30: the sixth point of the loss line (steps 5, 10, ...)
        smoothed = next(ln for ln in b.evaluate(f"{LINES}('loss')") if "raw" not in ln["cls"])
        assert abs(float(rollback[3]) - smoothed["points"][5][0]) < 0.2
        for chart in ("lr", "grad_norm", "throughput"):  # markers on every chart
            assert (
                b.evaluate(f"document.querySelectorAll('figure[data-chart=\"{chart}\"] g.marker-rollback').length") == 1
            )
        rows = b.evaluate("Array.from(document.querySelectorAll('table.attempts tbody tr')).map(r => r.innerText)")
        assert "OK done step=60" in rows[0] and "loss_spike (divergence) at step 45" in rows[1]
        page_text_is_clean(b)
        shot(b, "rolled")


def test_a_fault_a_relaunch_went_on_from_is_listed_as_recovered(tmp_path_factory, chromium, tmp_path):
    root = tmp_path_factory.mktemp("recovered")
    supervised(root / "preempted", "sigterm@15")  # its session ends `interrupted`; the relaunch completes
    with Served(root) as s:
        listed = s.wait_run("preempted", lambda r: r["ended"] is not None and r["step"] == 60, "ended")
        assert (listed["findings"], listed["warnings"], listed["verdict"]["state"]) == (1, 1, "ok")
        with open_page(chromium, s.url, str(tmp_path / "list")) as b:  # nothing that stops: no "1 finding"
            b.wait_for("document.body.innerText.includes('preempted')")
            assert "finding" not in b.evaluate("document.body.innerText")
        with open_page(chromium, s.url + "run/preempted", str(tmp_path / "run")) as b:
            b.wait_for("!!document.querySelector('ul.findings li')")
            items = b.evaluate(
                "Array.from(document.querySelectorAll('ul.findings li')).map(li => [li.className, li.innerText])"
            )
            assert len(items) == 1 and items[0][0] == "sev-warn", items
            assert items[0][1].startswith("interrupted") and "recovered" in items[0][1], items
            assert "recovered: the run went on in session" in items[0][1]
            b.wait_for("!!document.querySelector('figure[data-chart=\"loss\"] g.marker-warn')")
            page_text_is_clean(b)


def test_a_thousand_runs_filter_sort_and_select(tmp_path_factory, chromium, tmp_path):
    root = tmp_path_factory.mktemp("many") / "runs"
    for i in range(1000):
        d = root / f"group-{i % 10}" / f"run-{i:04d}"
        d.mkdir(parents=True)
        minimal(d / "train.jsonl", range(1, 11 + i % 37))
    with Served(root) as s:
        deadline = time.monotonic() + WAIT
        while sum(r["step"] is not None for r in s.json("/api/runs")["runs"]) < 1000:
            assert time.monotonic() < deadline
            time.sleep(0.5)
        with open_page(chromium, s.url, str(tmp_path / "profile")) as b:
            b.wait_for("document.querySelectorAll('tbody tr.run').length === 1000")
            visible = "Array.from(document.querySelectorAll('tbody tr.run')).filter(r => !r.hidden).map(r => r.getAttribute('data-path'))"
            b.click(*b.center("input#filter"))
            b.type("RUN-00")  # any case: run-0000 ... run-0099
            b.wait_for(f"{visible}.length === 100")
            assert all("/run-00" in p for p in b.evaluate(visible))
            assert b.evaluate("document.querySelector('.count').textContent") == "100 of 1000 runs shown"
            stamp = b.evaluate("document.getElementById('live').textContent")
            b.wait_for(f"document.getElementById('live').textContent !== {json.dumps(stamp)}")  # a refresh came
            assert len(b.evaluate(visible)) == 100  # the filter stays
            b.click(*b.center("thead th:nth-child(4) button"))  # "Step"
            assert b.evaluate("document.querySelector('thead th:nth-child(4)').textContent") == "Step"
            b.wait_for("document.querySelector('thead th:nth-child(4)').getAttribute('aria-sort') === 'ascending'")
            steps = b.evaluate(
                "Array.from(document.querySelectorAll('tbody tr.run')).filter(r => !r.hidden).map(r => parseInt(r.querySelector('td.step').textContent))"
            )
            assert steps == sorted(steps) and steps[0] == 10
            b.key("Enter", "Enter", 13)  # the header's button has the focus: descending
            b.wait_for("document.querySelector('thead th:nth-child(4)').getAttribute('aria-sort') === 'descending'")
            first, second = b.evaluate(visible)[:2]
            b.click(*b.center(f'tr[data-path="{first}"] input.select'))
            b.evaluate(f"document.querySelector('tr[data-path=\"{second}\"] input.select').focus()")
            b.key(" ", "Space", 32)
            b.wait_for("document.getElementById('compare').textContent === 'Compare 2 selected'")
            stamp = b.evaluate("document.getElementById('live').textContent")
            b.wait_for(f"document.getElementById('live').textContent !== {json.dumps(stamp)}")  # a refresh came
            checked = "Array.from(document.querySelectorAll('input.select:checked')).map(c => c.closest('tr').getAttribute('data-path'))"
            assert sorted(b.evaluate(checked)) == sorted([first, second])  # the selection stays
            href = b.evaluate("document.getElementById('compare').getAttribute('href')")
            assert href == f"/compare?run={first.replace('/', '%2F')}&run={second.replace('/', '%2F')}"
            shot(b, "many")
            b.click(*b.center("#compare"))
            b.wait_for("location.pathname === '/compare' && document.querySelectorAll('.legend-item').length === 2")


def test_on_a_phone_a_finger_zooms_and_nothing_overflows(served, chromium, tmp_path):
    with open_page(chromium, served.url + "run/sweep/c", str(tmp_path / "profile"), size="390,844") as b:
        b.call("Emulation.setDeviceMetricsOverride", width=390, height=844, deviceScaleFactor=2, mobile=True)
        b.call("Emulation.setTouchEmulationEnabled", enabled=True, maxTouchPoints=5)
        b.call("Page.reload")
        b.wait_for(
            "document.querySelector('figure[data-chart=\"loss\"] polyline') && document.readyState === 'complete'"
        )
        assert b.evaluate("document.documentElement.scrollWidth") <= 390
        x, y = b.center('figure[data-chart="loss"] svg')
        b.touch_drag(x - 90, y, x + 60, y)
        b.wait_for("!document.querySelector('button.reset').disabled")
        b.tap(x, y)
        b.tap(x, y)
        b.wait_for("document.querySelector('button.reset').disabled")
        if b.evaluate("matchMedia('(pointer: coarse)').matches"):
            heights = b.evaluate(
                "Array.from(document.querySelectorAll('.controls button, .controls a, .legend-item, .ctl'))"
                ".map(e => e.getBoundingClientRect().height)"
            )
            assert min(heights) >= 43.5, heights
        shot(b, "run-phone-touch")
