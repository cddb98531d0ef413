"""Benchmark of `runwatch serve` (see benchmarks/README.md, section "Serve").

    python benchmarks/bench_serve.py                      # 1, 10 and 50 runs of 20 MB each
    python benchmarks/bench_serve.py --runs 1 10 50 --mb 100
    python benchmarks/bench_serve.py --runs --list 1000 --list-mb 1             # many runs: the list
    python benchmarks/bench_serve.py --runs --compare 10 --compare-records 100000  # the compare page

For each count of runs: schema-v1 logs of MB megabytes each are written under /tmp (a fast
writer: one JSON template a record), `runwatch serve` starts as its own process on a free port,
and the script measures
- time to first byte of `/` and of `/api/runs` right after start (the reader is still catching up),
- the time to catch up (every run's last step shown),
- once caught up: one record appended to every run, and the time until `/api/runs` shows every
  new step (write -> visible); the time of one full refresh (`/api/runs`, every run's facts) and of
  one run's `/api/run/<path>` (charts included), medians of 20;
- beside it, the peer a user has without the server: `status.status()` of every run in-process
  (it reads each log's tail again on every call);
- the server's resident memory (VmRSS, and its peak VmHWM), and the page weight (HTML + JS + CSS).

`--list N`: N runs of `--list-mb` MB each; once caught up, the server time of a list refresh
(median wall time of 20 `GET /` and of 20 `GET /api/runs`, the page's two requests), and in a
headless Chromium (tests/cdp.py) the page's load: navigation to the first drawing of every row,
and the time the page's script spends on one refresh of the list (`performance.now()` around it),
median of 10 refreshes. `--compare N`: N runs of `--compare-records` records each on one compare
page in Chromium: the time to the first draw of the charts (since navigation start) and the time
one redraw takes when a record arrives in every run (`performance.now()` around the draw), median
of 10; the time one draw takes when the runs are grouped (`group by` seed: their recipes are alike,
so one mean line and band; median of 5); and the server time of one `GET /api/compare`. Logs are
deleted afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
sys.path.insert(0, SRC)

from runwatch.views.status import status

RECIPE = {
    "batch_size": 8,
    "seq_len": 512,
    "gradient_accumulation_steps": 1,
    "qk_clip_threshold": None,
    "max_steps": 10**9,
}
TOKENS = 8 * 512 * 10  # a window of 10 updates


def _record(run_id: str, step: int, t0: float) -> str:
    return (
        json.dumps(
            {
                "run_id": run_id,
                "session_id": "s-1",
                "event": "train",
                "step": step,
                "time": t0 + step / 10,
                "session": {
                    "elapsed_seconds": step / 10,
                    "tokens": step * TOKENS // 10,
                    "tokens_per_second": 40960.0,
                    "profiling_seconds": 0,
                },
                "updates": 10,
                "skipped": 0,
                "attempted": 10,
                "tokens": TOKENS,
                "train_seconds": 1.0,
                "loss": 2.0 + (step % 97) / 1000,
                "lr": 3e-4,
                "grad_norm": {"mean": 0.8, "max": 1.3},
                "nonfinite_grad_norms": 0,
                "grad_clipped_fraction": 0.1,
            },
            separators=(",", ":"),
        )
        + "\n"
    )


def make_run(run_dir: str, size_bytes: int, t0: float, records: int | None = None) -> int:
    """A valid schema-v1 session of about `size_bytes` (or of `records` records); returns its last step."""
    os.makedirs(run_dir)
    run_id = "r-" + os.path.basename(run_dir)
    manifest = {
        "schema_version": 1,
        "run_id": run_id,
        "created_at": "2026-01-01T00:00:00Z",
        "sessions": [
            {
                "session_id": "s-1",
                "started_at": "2026-01-01T00:00:00Z",
                "start": {"step": 0, "tokens": 0, "skipped": 0},
                "recipe": RECIPE,
                "optimizers": [{"name": "all", "algorithm": "adamw"}],
                "hardware": {},
            }
        ],
    }
    with open(os.path.join(run_dir, "run.json"), "w") as f:
        json.dump(manifest, f)
    # The template's step, time and token fields are filled in by %-formatting: much faster than json.dumps.
    tpl = (
        _record(run_id, 123456789, 0.0)
        .replace('"step":123456789', '"step":%(s)d')
        .replace('"time":12345678.9', '"time":%(t).1f')
        .replace('"tokens":505679007744', '"tokens":%(k)d')
    )
    if tpl.count("%(") != 3:
        raise RuntimeError("the record template lost a field")
    step, written, n = 0, 0, 0
    if records is not None:
        size_bytes = records * len(tpl)
    batch = max(1, min(10000, size_bytes // len(tpl)))  # records a write (a 1 MB log is ~2,800)
    with open(os.path.join(run_dir, "metrics.jsonl"), "w") as f:
        while written < size_bytes and (records is None or n < records):
            buf = []
            for _ in range(batch if records is None else min(batch, records - n)):
                n += 1
                step += 10
                buf.append(tpl % {"s": step, "t": t0 + step / 10, "k": step * TOKENS // 10})
            chunk = "".join(buf)
            f.write(chunk)
            written += len(chunk)
    return step


def _get(url: str) -> tuple[float, float, bytes]:
    """(seconds to the first byte, seconds in all, body)."""
    t = time.perf_counter()
    with urllib.request.urlopen(url, timeout=600) as res:
        first = res.read(1)
        ttfb = time.perf_counter() - t
        body = first + res.read()
    return ttfb, time.perf_counter() - t, body


def _mem(pid: int) -> tuple[int, int]:
    rss = hwm = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) * 1024
    return rss, hwm


def _serve(root: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "runwatch", "serve", root, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONPATH": SRC},
    )
    assert proc.stdout is not None
    return proc, proc.stdout.readline().rsplit(" at ", 1)[1].strip()


def bench(n_runs: int, mb: int) -> dict:
    root = tempfile.mkdtemp(prefix="rw-serve-bench-", dir="/tmp")
    t0 = time.time() - 10**6
    try:
        t = time.perf_counter()
        last = {f"run-{i:02d}": make_run(os.path.join(root, f"run-{i:02d}"), mb * 2**20, t0) for i in range(n_runs)}
        write_s = time.perf_counter() - t
        proc, url = _serve(root)
        try:
            started = time.perf_counter()
            ttfb_page, _, page = _get(url)
            ttfb_api, _, _ = _get(url + "api/runs")
            while True:
                runs = json.loads(_get(url + "api/runs")[2])["runs"]
                if len(runs) == n_runs and all(r["step"] == last[r["path"]] for r in runs):
                    break
                time.sleep(0.2)
            catchup_s = time.perf_counter() - started
            _, peak = _mem(proc.pid)
            # growing logs: one record more in every run, then until all are visible
            t = time.perf_counter()
            for rel in last:
                last[rel] += 10
                with open(os.path.join(root, rel, "metrics.jsonl"), "a") as f:
                    f.write(_record("r-" + rel, last[rel], t0))
            while True:
                runs = json.loads(_get(url + "api/runs")[2])["runs"]
                if all(r["step"] == last[r["path"]] for r in runs):
                    break
                time.sleep(0.02)
            visible_s = time.perf_counter() - t
            full = statistics.median(_get(url + "api/runs")[1] for _ in range(20))
            one_times, one_bytes = [], 0
            for _ in range(20):
                _, secs, body = _get(url + "api/run/run-00")
                one_times.append(secs)
                one_bytes = len(body)
            one = statistics.median(one_times)
            rss, _ = _mem(proc.pid)
            js = len(_get(url + "static/app.js")[2])
            css = len(_get(url + "static/style.css")[2])
            run_page = len(_get(url + "run/run-00")[2])
        finally:
            proc.terminate()
            proc.wait(timeout=60)
        peers = []
        for _ in range(5):
            t = time.perf_counter()
            for rel in last:
                status(os.path.join(root, rel), gpus=False)
            peers.append(time.perf_counter() - t)
        return {
            "runs": n_runs,
            "mb": mb,
            "write_s": write_s,
            "ttfb_page_ms": ttfb_page * 1e3,
            "ttfb_api_ms": ttfb_api * 1e3,
            "catchup_s": catchup_s,
            "visible_s": visible_s,
            "full_refresh_ms": full * 1e3,
            "one_run_ms": one * 1e3,
            "one_run_kb": one_bytes / 1024,
            "status_peer_ms": statistics.median(peers) * 1e3,
            "rss_mb": rss / 2**20,
            "peak_rss_mb": peak / 2**20,
            "list_page_kb": len(page) / 1024,
            "run_page_kb": run_page / 1024,
            "js_kb": js / 1024,
            "css_kb": css / 1024,
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _caught_up(url: str, last: dict[str, int]) -> float:
    """Wait until /api/runs shows every run at its last step (asked every 2 s, as a page does: while
    the logs are read, every run's facts change and each list costs its full price); the seconds it took."""
    t = time.perf_counter()
    while True:
        runs = json.loads(_get(url + "api/runs")[2])["runs"]
        if len(runs) == len(last) and all(r["step"] == last[r["path"]] for r in runs):
            return time.perf_counter() - t
        time.sleep(2.0)


def _browser(chromium: str, url: str):  # type: ignore[no-untyped-def]
    sys.path.insert(0, os.path.join(os.path.dirname(SRC), "tests"))
    from cdp import Browser

    return Browser(chromium, url, tempfile.mkdtemp(prefix="rw-bench-chromium-"), timeout=600, catch=False)


def bench_list(n_runs: int, mb: float, chromium: str | None) -> dict:
    """N runs of `mb` MB: the server time of a list refresh, and the list page in Chromium."""
    root = tempfile.mkdtemp(prefix="rw-serve-list-", dir="/tmp")
    t0 = time.time() - 10**6
    try:
        t = time.perf_counter()
        last = {
            f"run-{i:04d}": make_run(os.path.join(root, f"run-{i:04d}"), int(mb * 2**20), t0) for i in range(n_runs)
        }
        write_s = time.perf_counter() - t
        proc, url = _serve(root)
        try:
            catchup_s = _caught_up(url, last)
            page_s = statistics.median(_get(url)[1] for _ in range(20))
            api_s = statistics.median(_get(url + "api/runs")[1] for _ in range(20))
            out = {"runs": n_runs, "mb": mb, "write_s": write_s, "catchup_s": catchup_s}
            out.update(page_ms=page_s * 1e3, api_ms=api_s * 1e3, page_kb=len(_get(url)[2]) / 1024)
            if chromium:
                with _browser(chromium, url) as b:
                    rows = f"document.querySelectorAll('tbody tr.run').length === {n_runs}"
                    b.wait_for(rows)
                    b.call("Page.reload")  # measured in a browser that is already up
                    b.wait_for(f"window.__runwatch && {rows}")
                    out["load_ms"] = b.evaluate("window.__runwatch.firstDrawMs")
                    refresh = []
                    for _ in range(10):
                        draws = b.evaluate("window.__runwatch.draws")
                        b.wait_for(f"window.__runwatch.draws > {draws}")
                        refresh.append(b.evaluate("window.__runwatch.lastDrawMs"))
                    out["refresh_ms"] = statistics.median(refresh)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
        return out
    finally:
        shutil.rmtree(root, ignore_errors=True)


def bench_compare(n_runs: int, records: int, chromium: str) -> dict:
    """N runs of `records` records on one compare page: first draw, and one redraw per new record."""
    root = tempfile.mkdtemp(prefix="rw-serve-compare-", dir="/tmp")
    t0 = time.time() - 10**6
    try:
        last = {f"run-{i:02d}": make_run(os.path.join(root, f"run-{i:02d}"), 0, t0, records) for i in range(n_runs)}
        proc, url = _serve(root)
        try:
            catchup_s = _caught_up(url, last)
            query = "&".join(f"run={rel}" for rel in last)
            api_s = statistics.median(_get(f"{url}api/compare?{query}")[1] for _ in range(10))
            api_kb = len(_get(f"{url}api/compare?{query}")[2]) / 1024
            with _browser(chromium, f"{url}compare?{query}") as b:
                b.wait_for("window.__runwatch && window.__runwatch.draws >= 1")
                b.call("Page.reload")  # measured in a browser that is already up
                b.wait_for("window.__runwatch && window.__runwatch.draws >= 1")
                first_ms = b.evaluate("window.__runwatch.firstDrawMs")
                first_draw_ms = b.evaluate("window.__runwatch.lastDrawMs")
                redraws = []
                for _ in range(10):
                    draws = b.evaluate("window.__runwatch.draws")
                    for rel in last:
                        last[rel] += 10
                        with open(os.path.join(root, rel, "metrics.jsonl"), "a") as f:
                            f.write(_record("r-" + rel, last[rel], t0))
                    b.wait_for(f"window.__runwatch.draws > {draws}")
                    redraws.append(b.evaluate("window.__runwatch.lastDrawMs"))
                points = b.evaluate(
                    "Array.from(document.querySelectorAll('svg.chart')).reduce((n, s) => n + Number(s.getAttribute('data-points')), 0)"
                )
                # grouped (the runs' recipes are alike: one group of all of them, a mean and a band)
                grouped = []
                if b.evaluate("!!document.getElementById('groupby')"):
                    for choice in ("seed", "", "seed", "", "seed", "", "seed", "", "seed"):
                        draws = b.evaluate("window.__runwatch.draws")
                        b.evaluate(
                            f"(() => {{ const x = document.getElementById('groupby'); x.value = {choice!r};"
                            " x.dispatchEvent(new Event('change', {bubbles: true})); })()"
                        )
                        b.wait_for(f"window.__runwatch.draws > {draws}")
                        if choice:
                            grouped.append(b.evaluate("window.__runwatch.lastDrawMs"))
        finally:
            proc.terminate()
            proc.wait(timeout=60)
        return {
            "runs": n_runs,
            "records": records,
            "catchup_s": catchup_s,
            "api_ms": api_s * 1e3,
            "api_kb": api_kb,
            "first_ms": first_ms,
            "first_draw_ms": first_draw_ms,
            "redraw_ms": statistics.median(redraws),
            "points": points,
            "grouped_ms": statistics.median(grouped) if grouped else None,
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, nargs="*", default=[1, 10, 50], help="counts of runs (none: skip)")
    ap.add_argument("--mb", type=int, default=20, help="megabytes of log per run (default 20)")
    ap.add_argument("--list", type=int, nargs="*", default=[], help="counts of runs for the list's benchmark")
    ap.add_argument("--list-mb", type=float, default=1.0, help="megabytes of log per run of --list (default 1)")
    ap.add_argument("--compare", type=int, nargs="*", default=[], help="counts of runs on one compare page")
    ap.add_argument("--compare-records", type=int, default=100_000, help="records per run of --compare")
    ap.add_argument("--chromium", default=shutil.which("chromium"), help="the browser (default: chromium on PATH)")
    args = ap.parse_args()
    for n in args.list:
        r = bench_list(n, args.list_mb, args.chromium)
        print(
            "| runs x MB | catch-up | server time / (median of 20) | /api/runs (median of 20) | list HTML | "
            "page load: first draw of every row | script time per refresh (median of 10) |"
        )
        print("| --- | --- | --- | --- | --- | --- | --- |")
        print(
            f"| {n} x {args.list_mb:g} MB | {r['catchup_s']:.0f} s | {r['page_ms']:.0f} ms | {r['api_ms']:.0f} ms | "
            f"{r['page_kb']:.0f} KB | {r.get('load_ms', float('nan')):.0f} ms | {r.get('refresh_ms', float('nan')):.0f} ms |",
            flush=True,
        )
    for n in args.compare:
        if not args.chromium:
            raise SystemExit("--compare needs chromium (--chromium PATH)")
        r = bench_compare(n, args.compare_records, args.chromium)
        print(
            "| runs x records | catch-up | /api/compare (KB) | first draw (since navigation; the draw itself) | "
            "redraw on new records (median of 10) | points drawn | grouped draw (median of 5) |"
        )
        print("| --- | --- | --- | --- | --- | --- | --- |")
        print(
            f"| {n} x {args.compare_records} | {r['catchup_s']:.0f} s | {r['api_ms']:.0f} ms ({r['api_kb']:.0f} KB) | "
            f"{r['first_ms']:.0f} ms ({r['first_draw_ms']:.0f} ms) | {r['redraw_ms']:.0f} ms | {r['points']} | "
            f"{'–' if r['grouped_ms'] is None else format(r['grouped_ms'], '.0f') + ' ms'} |",
            flush=True,
        )
    if not args.runs:
        return
    print(
        "| runs x MB | TTFB / | TTFB /api/runs | catch-up | append -> visible (all runs) | full refresh /api/runs | "
        "one run /api/run (KB) | peer: status() of every run | RSS (peak) | page weight: list HTML + JS + CSS; run HTML |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for n in args.runs:
        r = bench(n, args.mb)
        print(
            f"| {n} x {args.mb} MB | {r['ttfb_page_ms']:.1f} ms | {r['ttfb_api_ms']:.1f} ms | {r['catchup_s']:.1f} s | "
            f"{r['visible_s'] * 1e3:.0f} ms | {r['full_refresh_ms']:.1f} ms | {r['one_run_ms']:.1f} ms ({r['one_run_kb']:.0f} KB) | "
            f"{r['status_peer_ms']:.1f} ms | {r['rss_mb']:.0f} MB ({r['peak_rss_mb']:.0f} MB) | "
            f"{r['list_page_kb']:.1f} + {r['js_kb']:.1f} + {r['css_kb']:.1f} KB; {r['run_page_kb']:.0f} KB |",
            flush=True,
        )


if __name__ == "__main__":
    main()
