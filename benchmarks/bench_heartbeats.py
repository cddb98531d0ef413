"""Heartbeats at scale, by simulation: poll and status over N generated rank files.

    .venv/bin/python benchmarks/bench_heartbeats.py [--ranks 4096 16384] [--repeat 7]

For each N: writes N heartbeat files as 8 ranks a host would (one rank hung mid-window, one a
straggler), then times, side by side on the same files and in one run:
  - `RankMonitor.poll` (read + validate every file, both rules): a fresh monitor (judges 16
    windows of history) and a steady one (as in a watch loop: no new window, finding already
    reported), and `rank_status_lines`;
  - a bare stdlib loop: listdir + open + json.loads of every file (the floor any reader pays);
  - an mtime-only scan: listdir + os.stat of every file (what a file-age check alone costs).
Reports medians over --repeat polls (the page cache warm, as for a watchdog polling every 5 s),
the first (cold-ish) poll, the median CPU time, CPU ratios to the bare loop, and the number of status lines.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))

from runwatch.files.rundir import HEARTBEATS
from runwatch.judging.ranks import RankMonitor, rank_status_lines  # noqa: E402


def generate(run_dir: str, n: int, now: float) -> None:
    folder = os.path.join(run_dir, HEARTBEATS)
    os.makedirs(folder, exist_ok=True)
    hung, slow = n // 3, n // 2
    for k in range(n):
        busy = [2.4 if k == slow else 1.0 + (k % 7) * 0.01] * 16
        beat = {
            "rank": k,
            "world_size": n,
            "host": f"node{k // 8:05d}",
            "pid": 10000 + k,
            "session_id": "s-1",
            "state": "running",
            "time": now - (k % 30) * 0.1,
            "step": 1230,
            "window": 123,
            "attempted": 1237,
            "progress_time": now - 400,
            "train_seconds": busy[-1] + 0.2,
            "window_seconds": [b + 0.2 for b in busy],
            "busy_seconds": busy,
            "where": "graph.py:979 in _engine_run_backward",
            "waiting": k != hung,
        }
        if k == hung:
            beat["where"] = "train.py:88 in main"
        with open(os.path.join(folder, f"rank-{k}.json"), "w", encoding="utf-8") as f:
            json.dump(beat, f, separators=(",", ":"))


def timed(fn, repeat: int) -> tuple[float, float, float, object]:
    """(first wall s, median wall s, median CPU s of this process, result): CPU time shows the work
    itself when other jobs share the cores."""
    first_t0 = time.perf_counter()
    result = fn()
    first = time.perf_counter() - first_t0
    times, cpu = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        result = fn()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return first, statistics.median(times), statistics.median(cpu), result


def bare(run_dir: str) -> int:
    folder = os.path.join(run_dir, HEARTBEATS)
    count = 0
    for name in os.listdir(folder):
        with open(os.path.join(folder, name), "rb") as f:
            json.loads(f.read())
        count += 1
    return count


def mtimes(run_dir: str) -> float:
    folder = os.path.join(run_dir, HEARTBEATS)
    return min(os.stat(os.path.join(folder, name)).st_mtime for name in os.listdir(folder))


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, nargs="+", default=[4096, 16384])
    p.add_argument("--repeat", type=int, default=7)
    args = p.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'ranks':>6} {'what':<28} {'first s':>8} {'median s':>9} {'cpu s':>7} {'x bare':>7}  result")
    for n in args.ranks:
        with tempfile.TemporaryDirectory() as run_dir:
            now = time.time()
            generate(run_dir, n, now)
            rows = []
            f, m, c, r = timed(lambda: bare(run_dir), args.repeat)
            base = c
            rows.append(("bare listdir+open+json.loads", f, m, c, f"{r} files"))
            f, m, c, r = timed(lambda: mtimes(run_dir), args.repeat)
            rows.append(("mtime scan (os.stat)", f, m, c, "oldest mtime"))
            f, m, c, r = timed(
                lambda: RankMonitor(rank_stall=300, straggler_patience=5).poll(run_dir, now), args.repeat
            )
            rows.append(("RankMonitor.poll", f, m, c, f"{r[0]}: {r[2][:70]}..." if r else "None"))
            steady = RankMonitor(rank_stall=300, straggler_patience=5)
            steady.poll(run_dir, now)
            f, m, c, r = timed(lambda: steady.poll(run_dir, now), args.repeat)
            rows.append(("RankMonitor.poll, steady", f, m, c, "None (reported once)" if r is None else r[0]))
            f, m, c, lines = timed(lambda: rank_status_lines(run_dir, now), args.repeat)
            rows.append(("rank_status_lines", f, m, c, f"{len(lines)} lines"))
            for what, f, m, c, res in rows:
                print(f"{n:>6} {what:<28} {f:>8.3f} {m:>9.3f} {c:>7.3f} {c / base:>7.2f}  {res}")
            for line in lines:
                print(f"{'':>6}   | {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
