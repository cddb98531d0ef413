"""How fast `supervise` clears a hung torchrun job and starts the next attempt (benchmarks/README.md,
"Stopping a process tree").

    python benchmarks/bench_stop.py [--workers 2 4] [--repeats 3] [--fault stop] [--json OUT]

A real DDP training (`python -m runwatch.demo.tinytrain` under `torchrun --standalone`, gloo on
the CPU, each worker in a session of its own) runs under `runwatch supervise`; the last rank
SIGSTOPs itself (`--fault stop`; or sleeps, `--fault hang`) at step 40, once. Rank 0 waits in
the window's all-reduce, its heartbeat goes on while the frozen rank's does not: `rank_stall`.
Per run, from the verdict (its time in supervise.jsonl):

- `gone`: until every process of the first attempt is gone, as a thread of this script sees it
  (every pid the attempt had — the agent from launch.json, the workers from their heartbeats —
  polled every 10 ms; a zombie counts as gone);
- `stop`: the supervisor's own measure of its stop (the `stop` record's `seconds`), and `stopped`;
- `relaunch`: until the relaunch (its journal record);
- `first record`: until the first train record of the relaunched session.

Also what finding the members costs, as the stop repeats it every 50 ms (median of 200): reading
a launched tree of 4 processes below its waiter (`ProcessTree.members`, the usual way), and the
scan of every process (`proctree.scan`, the fallback when the waiter is gone), each with the
machine as it is and with 300 more sleeping processes.
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
import threading
import time

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
sys.path.insert(0, SRC)

from runwatch.files.heartbeats import read_heartbeats  # noqa: E402
from runwatch.procs.process import alive  # noqa: E402
from runwatch.procs.proctree import ProcessTree, scan, stop  # noqa: E402
from runwatch.reading.records import load_sessions  # noqa: E402
from runwatch.supervising.launch import launch  # noqa: E402

FAULT_STEP = 40
SUPERVISE = ["--poll", "0.2", "--rank-stall", "3", "--stall", "120", "--startup-grace", "240"]
SUPERVISE += ["--backoff", "0", "--restarts", "1"]


class Attempt(threading.Thread):
    """Every pid of the first attempt while it runs; when the last of them is gone (wall time)."""

    def __init__(self, run_dir: str) -> None:
        super().__init__(daemon=True)
        self.run_dir = run_dir
        self.pids: set[int] = set()
        self.first: int | None = None
        self.gone_at: float | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        relaunched = False
        while not self.stop.is_set():
            try:
                with open(os.path.join(self.run_dir, "launch.json")) as f:
                    pid = json.load(f)["pid"]
            except (OSError, ValueError, KeyError):
                time.sleep(0.01)
                continue
            if self.first is None:
                self.first = pid
                self.pids.add(pid)
            relaunched = relaunched or pid != self.first
            if not relaunched:
                beats, _ = read_heartbeats(self.run_dir)
                self.pids.update(b.pid for b in beats.values() if b.pid not in self.pids and alive(b.pid))
            if len(self.pids) > 1 and not any(alive(p) for p in self.pids):
                self.gone_at = time.time()
                return
            time.sleep(0.01)


def _one(base: str, workers: int, fault: str, i: int) -> dict:
    run_dir = os.path.join(base, f"w{workers}-{fault}-{i}")
    os.makedirs(run_dir)
    watcher = Attempt(run_dir)
    watcher.start()
    cmd = [sys.executable, "-m", "runwatch", "supervise", run_dir, *SUPERVISE, "--"]
    cmd += [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={workers}"]
    cmd += ["--monitor_interval=0.2", "-m", "runwatch.demo.tinytrain", run_dir, "--steps", "80", "--window", "5"]
    cmd += ["--ckpt-every", "20", "--eval-every", "1000", "--step-sleep", "0.02", "--fault", f"{fault}@{FAULT_STEP}"]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=SRC)
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    watcher.stop.set()
    watcher.join(5)
    with open(os.path.join(run_dir, "supervise.jsonl")) as f:
        journal = [json.loads(line) for line in f]
    verdict = next(r for r in journal if r["event"] == "verdict")
    stop = next((r for r in journal if r["event"] == "stop"), None)
    relaunch = next((r for r in journal if r["event"] == "relaunch"), None)
    first = None
    if relaunch is not None:
        later = [s for s in load_sessions(run_dir) if s.records and (s.records[0].time or 0) > relaunch["time"]]
        first = next((r.time for r in later[0].records if r.kind == "train"), None) if later else None
    t = verdict["time"]
    return {
        "workers": workers,
        "fault": fault,
        "exit": res.returncode,
        "last_line": (res.stdout.strip().splitlines() or [""])[-1],
        "verdict": verdict["kind"],
        "processes": len(watcher.pids),
        "stopped": stop and stop.get("stopped"),
        "stop_seconds": stop and stop.get("seconds"),
        "gone_seconds": round(watcher.gone_at - t, 2) if watcher.gone_at else None,
        "relaunch_seconds": round(relaunch["time"] - t, 2) if relaunch else None,
        "first_record_seconds": round(first - t, 2) if first else None,
    }


def _ms(fn, n: int = 200) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


FAMILY = "import subprocess, sys, time\n[subprocess.Popen(['sleep', '600'], start_new_session=True) for _ in range(3)]\ntime.sleep(600)"


def _costs(base: str) -> dict:
    """ms to read the members of a launched 4-process tree, and to scan every process."""
    launch(os.path.join(base, "family"), [sys.executable, "-c", FAMILY])
    tree = ProcessTree.of_launch(os.path.join(base, "family"))
    while len(tree.members()) < 4:
        time.sleep(0.05)
    out = {"processes": len(scan() or {}), "members_ms": _ms(tree.members), "scan_ms": _ms(scan)}
    sleepers = [subprocess.Popen(["sleep", "600"]) for _ in range(300)]
    try:
        out["members_ms_300_more"] = _ms(tree.members)
        out["scan_ms_300_more"] = _ms(scan)
    finally:
        for s in sleepers:
            s.kill()
            s.wait()
        stop(tree, 5)
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, nargs="+", default=[2, 4])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--fault", choices=("stop", "hang"), default="stop")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    base = tempfile.mkdtemp(prefix="runwatch-stop-")
    rows = []
    try:
        costs = _costs(base)
        n = costs["processes"]
        print(
            f"members of a 4-process tree: {costs['members_ms']:.2f} ms with {n} processes on the machine, "
            f"{costs['members_ms_300_more']:.2f} ms with {n + 300}; scan of every process: {costs['scan_ms']:.2f} ms, "
            f"{costs['scan_ms_300_more']:.2f} ms (medians of 200)",
            flush=True,
        )
        for workers in args.workers:
            for i in range(args.repeats):
                row = _one(base, workers, args.fault, i)
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(
        "\n| workers | runs | verdict | processes stopped | verdict → all gone (s) | stop's own (s) | → relaunch (s) | → first record (s) |"
    )
    print("| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    for workers in args.workers:
        mine = [r for r in rows if r["workers"] == workers]

        def med(key: str) -> str:
            vals = [r[key] for r in mine if r[key] is not None]
            return f"{statistics.median(vals):.2f} ({min(vals):.2f}–{max(vals):.2f})" if vals else "-"

        kinds = ", ".join(sorted({str(r["verdict"]) for r in mine}))
        stopped = ", ".join(sorted({str(r["stopped"]) for r in mine}))
        print(
            f"| {workers} | {len(mine)} | {kinds} | {stopped} | {med('gone_seconds')} | {med('stop_seconds')} | "
            f"{med('relaunch_seconds')} | {med('first_record_seconds')} |"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"costs": costs, "runs": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
