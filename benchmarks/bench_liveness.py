"""False alarms and hang detection of the watchdog's liveness checks, on real processes.

    python benchmarks/bench_liveness.py [--stall 2] [--poll 0.2] [--json]

1. A matrix of healthy but slow runs, each a real training-like process (RunLogger, sleeping
   steps) watched by a real `runwatch watch --stop-on-anomaly` process: evaluations of 1x, 5x and
   20x `--stall` inside `log.phase("eval")`, and steps so slow that a window of `window` updates
   takes 2x `--stall` (the window closes on `max_window_seconds` instead). Every run must end
   `OK done`: any anomaly is a false alarm.
2. A hang inside a phase (`eval` limit E via `--stall-phase eval=E`): the time from entering the
   phase to the verdict, against E + one poll.
3. The replay of healthy logs (`runwatch check`) written by the same processes: 0 findings.

Standard library plus runwatch; results go to benchmarks/README.md with this command.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")

WRITER = textwrap.dedent("""
    import sys, time
    from runwatch import RunLogger
    run_dir, steps, step_s, eval_every, eval_s, hang = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), \\
        int(sys.argv[4]), float(sys.argv[5]), sys.argv[6] == "hang"
    recipe = {"batch_size": 2, "seq_len": 4, "gradient_accumulation_steps": 1, "qk_clip_threshold": None}
    with RunLogger(run_dir, recipe=recipe, hardware={}, window=10, max_window_seconds=float(sys.argv[7])) as log:
        for i in range(steps):
            time.sleep(step_s)
            log.step(1.0 - i * 1e-3, 1e-3, 1.0)
            if eval_every and (i + 1) % eval_every == 0:
                with log.phase("eval"):
                    time.sleep(3600 if hang else eval_s)
                log.val(0.9)
""")


def _run(
    case: str,
    stall: float,
    poll: float,
    steps: int,
    step_s: float,
    eval_every: int,
    eval_s: float,
    hang: bool,
    max_window: float,
    extra: list[str],
) -> dict:
    run_dir = tempfile.mkdtemp(prefix=f"liveness-{case}-")
    env = dict(os.environ, PYTHONPATH=SRC, OMP_NUM_THREADS="1")
    writer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            WRITER,
            run_dir,
            str(steps),
            str(step_s),
            str(eval_every),
            str(eval_s),
            "hang" if hang else "ok",
            str(max_window),
        ],
        env=env,
    )
    with open(os.path.join(run_dir, "pid"), "w") as f:
        f.write(f"{writer.pid}\n")
    t0 = time.time()
    watch = subprocess.run(
        [
            sys.executable,
            "-m",
            "runwatch",
            "watch",
            run_dir,
            "--poll",
            str(poll),
            "--stall",
            str(stall),
            "--stop-on-anomaly",
            *extra,
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    elapsed = time.time() - t0
    writer.wait()
    line = watch.stdout.strip().splitlines()[-1] if watch.stdout.strip() else watch.stderr.strip()[-200:]
    latency = None
    try:
        with open(os.path.join(run_dir, "heartbeats", "rank-0.json")) as f:
            since = json.load(f).get("phase_since")
        with open(os.path.join(run_dir, "watchdog.json")) as f:
            verdict_time = json.load(f)["time"]
        latency = round(verdict_time - since, 2) if since else None
    except (OSError, ValueError, KeyError):
        pass
    check = subprocess.run(
        [sys.executable, "-m", "runwatch", "check", run_dir], env=env, capture_output=True, text=True
    )
    return {
        "case": case,
        "exit": watch.returncode,
        "line": line,
        "seconds": round(elapsed, 1),
        "phase_to_verdict_seconds": latency,
        "check": check.stdout.strip().splitlines()[-1] if check.stdout.strip() else check.stderr.strip(),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--stall", type=float, default=2.0)
    p.add_argument("--poll", type=float, default=0.2)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    s = a.stall
    rows = []
    # (case, steps, step seconds, eval every, eval seconds, hang, max_window_seconds, extra watch options)
    for mult in (1, 5, 20):
        rows.append(
            _run(
                f"eval {mult}x --stall",
                s,
                a.poll,
                30,
                0.01,
                10,
                mult * s,
                False,
                60.0,
                ["--stall-phase", f"eval={max(60.0, 2 * 20 * s):g}"],
            )
        )
    # a window of 10 updates takes 2x --stall: it closes on time (max_window_seconds = stall / 2)
    rows.append(_run("steps 2x --stall per window", s, a.poll, 30, 2 * s / 10, 0, 0, False, s / 2, []))
    limit = 4 * s
    hang = _run("hang inside eval", s, a.poll, 20, 0.01, 10, 0, True, 60.0, ["--stall-phase", f"eval={limit:g}"])
    # the hang starts after 10 steps (~0.1 s plus start-up); the verdict should come within limit + poll
    hang["limit_plus_poll"] = round(limit + a.poll, 2)
    rows.append(hang)
    if a.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"--stall {s:g}, --poll {a.poll:g}")
    print(f"{'case':32} {'exit':>4} {'s':>6}  verdict / check")
    for r in rows:
        print(f"{r['case']:32} {r['exit']:>4} {r['seconds']:>6}  {r['line'][:90]}")
        print(f"{'':45}{r['check'][:90]}")
    false_alarms = sum(1 for r in rows[:-1] if r["exit"] != 0)
    h = rows[-1]
    print(
        f"false alarms: {false_alarms} of {len(rows) - 1} healthy runs; hang caught: {h['exit'] == 7}, "
        f"{h['phase_to_verdict_seconds']} s after entering the phase (limit + poll = {h['limit_plus_poll']} s)"
    )


if __name__ == "__main__":
    main()
