"""How long a preemption takes (see benchmarks/README.md, section "Preemption").

    python benchmarks/bench_preempt.py [--repeats 5] [--steps 3000] [--json OUT]

A real tiny training (`python -m runwatch.demo.tinytrain`, torch on the CPU, a checkpoint every 100
steps) is sent SIGTERM once it has written a checkpoint, three ways side by side in each round:

    bare      the training alone gets SIGTERM (its logger ends the session `interrupted`)
    SIGTERM   `runwatch supervise` gets SIGTERM and passes it on to the training's whole tree
    SIGUSR1   the same with SIGUSR1 (Slurm's `--signal=B:USR1@N`)

Per way: the time from the signal to the exit of the process signalled (the training, or the
supervisor once it has stopped the training, journaled `preempted` and printed its line), the time
from the signal to the training's `session_end` record, and the steps done since the last
checkpoint (the work a requeued run redoes). Medians and 90th percentiles; the supervisor's
overhead as the ratio of its median to the bare training's.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=SRC)


def _records(run_dir: str) -> list[dict]:
    try:
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            return [json.loads(line) for line in f if line.endswith("\n")]
    except (FileNotFoundError, ValueError):
        return []


def _wait_checkpoint(run_dir: str, step: int, timeout: float = 300.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if any(r.get("event") == "checkpoint" and r["step"] >= step for r in _records(run_dir)):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{run_dir}: no checkpoint at step {step} within {timeout:g} s")


def one(way: str, base: str, i: int, steps: int) -> dict:
    run_dir = os.path.join(base, f"{way}-{i}")
    train = [sys.executable, "-m", "runwatch.demo.tinytrain", run_dir, "--steps", str(steps)]
    train += ["--ckpt-every", "100", "--step-sleep", "0.005"]
    if way == "bare":
        os.makedirs(run_dir)
        cmd, sig = train, signal.SIGTERM
    else:
        cmd = [sys.executable, "-m", "runwatch", "supervise", run_dir, "--poll", "0.5", "--", *train]
        sig = signal.SIGTERM if way == "SIGTERM" else signal.SIGUSR1
    out = open(os.path.join(base, f"{way}-{i}.out"), "w")  # noqa: SIM115
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=ENV)
    out.close()
    _wait_checkpoint(run_dir, 200)
    time.sleep(0.3)  # a little way past the checkpoint, as a preemption comes at any step
    t_signal = time.time()
    proc.send_signal(sig)
    code = proc.wait(120)
    t_exit = time.time()
    recs = _records(run_dir)
    end = next((r for r in reversed(recs) if r.get("event") == "session_end"), None)
    last_ckpt = max((r["step"] for r in recs if r.get("event") == "checkpoint"), default=0)
    row = {
        "way": way,
        "exit": code,
        "exit_seconds": round(t_exit - t_signal, 3),
        "session_end_seconds": round(end["time"] - t_signal, 3) if end else None,
        "reason": end["reason"] if end else None,
        "steps_since_checkpoint": (end["step"] if end else recs[-1]["step"]) - last_ckpt,
    }
    if way != "bare":
        with open(os.path.join(run_dir, "supervise.jsonl")) as f:
            journal = [json.loads(line) for line in f]
        stop = next((r for r in journal if r["event"] == "stop"), None)
        row["stop_seconds"] = stop["seconds"] if stop else None
        row["journaled_seconds"] = round(journal[-1]["time"] - t_signal, 3)
        row["last_event"] = journal[-1]["event"]
    return row


def _q(vals: list[float], q: float) -> float:
    vals = sorted(vals)
    return vals[min(len(vals) - 1, round(q * (len(vals) - 1)))]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    ways = ("bare", "SIGTERM", "SIGUSR1")
    rows = []
    with tempfile.TemporaryDirectory(prefix="runwatch-preempt-") as base:
        for i in range(args.repeats):
            for way in ways:  # interleaved: each way sees the same load
                row = one(way, base, i, args.steps)
                rows.append(row)
                print(json.dumps(row), flush=True)
    print(
        "\n| way | runs | exit codes | signal to exit s (median, p90) | signal to session_end s (median) | steps since checkpoint (median) |"
    )
    print("| --- | ---: | --- | --- | ---: | ---: |")
    medians = {}
    for way in ways:
        mine = [r for r in rows if r["way"] == way]
        exits = [r["exit_seconds"] for r in mine]
        ends = [r["session_end_seconds"] for r in mine if r["session_end_seconds"] is not None]
        medians[way] = statistics.median(exits)
        codes = sorted({r["exit"] for r in mine})
        print(
            f"| {way} | {len(mine)} | {codes} | {medians[way]:.3f}, {_q(exits, 0.9):.3f} | "
            f"{statistics.median(ends) if ends else float('nan'):.3f} | "
            f"{statistics.median(r['steps_since_checkpoint'] for r in mine):g} |"
        )
    for way in ways[1:]:
        print(f"{way}: {medians[way] / medians['bare']:.2f}x the bare training's median")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
