"""Chaos benchmark of `runwatch supervise` (see benchmarks/README.md, section "Supervise: chaos").

    python benchmarks/bench_chaos.py [--seeds 3] [--steps 400] [--ckpt-every 50 25] [--torchrun N] [--json OUT]

A real tiny training (`python -m runwatch.demo.tinytrain`, torch on the CPU) runs under
`runwatch supervise`, with one fault injected at a random step of every 100 (each fires once,
whatever the relaunches), the kinds drawn in turn from crash (exit without session_end), SIGKILL,
hang, NaN loss, loss spike and SIGTERM (preemption), and a hang at exit after the last step. Per
fault kind: whether the supervisor's verdict named it, the time from the fault to the verdict, from
the verdict to the next train record of the relaunched session, and the steps redone or thrown
away. Per run: goodput (the time ratio, with steps kept / steps run beside it) as each surface
gives it (the line `supervise` prints, its journal, `runwatch goodput`, `status`, the page, the MCP
tool `run_status`), and wall time against a fault-free run of the same seed, and the bound the
checkpoint interval sets: with a fault every F steps at a uniformly random step and a checkpoint
every C, each fault costs about C/2 steps, so steps kept / run <= F / (F + C/2). Per
configuration: the wall time broken down as `runwatch goodput` does (`goodput.breakdown`), and the
checkpoint interval Young/Daly advises from the run's own save time and interruption rate against
the one used.

`--torchrun N` runs the same training under `torchrun --standalone --nproc_per_node N` (DDP on
gloo, each worker in a session of its own); every fault fires on the last rank, a worker that does
not write the log, so a crash or a hang there is found by the rank rules or the agent's exit, and
each stop must reach every worker. A kind is counted as detected when the verdict is one a
multi-rank run gives for it (`TORCHRUN_EXPECTED`).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

SRC = os.environ.get("BENCH_SRC") or os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
sys.path.insert(0, SRC)
sys.path.insert(1, os.path.dirname(os.path.abspath(__file__)))

from bench_story import surfaces  # noqa: E402
from runwatch.reading.records import load_sessions  # noqa: E402
from runwatch.supervising.goodput import BUCKETS, breakdown  # noqa: E402

KINDS = ("crash", "kill", "hang", "nan", "spike", "sigterm")
EXPECTED = {
    "crash": "process_exit",
    "kill": "process_exit",
    "hang": "stall",
    "nan": "nonfinite_loss",
    "spike": "loss_spike",
    "sigterm": "interrupted",
    "exit_hang": "done",
}
# Under torchrun the fault is on a worker: rank 0 learns of it through the window's collective or
# the agent, so a crash may show as the agent's exit or as the other rank left waiting.
TORCHRUN_EXPECTED = {
    "crash": ("process_exit", "rank_stall"),
    "kill": ("process_exit", "rank_stall"),
    "hang": ("stall", "rank_stall"),
    "sigterm": ("interrupted", "process_exit", "rank_stall"),
}
FAULT_EVERY = 100
SUPERVISE = ["--poll", "0.2", "--stall", "3", "--startup-grace", "120", "--backoff", "0.5", "--exit-grace", "2"]
# torchrun: ranks write heartbeats; a worker left waiting for a dead one is a rank_stall within seconds
TORCHRUN_SUPERVISE = ["--rank-stall", "3", "--exit-grace", "10"]


def _plan(seed: int, steps: int) -> list[tuple[str, int]]:
    rng = random.Random(seed)
    faults = []
    for i, start in enumerate(range(0, steps - FAULT_EVERY + 1, FAULT_EVERY)):
        kind = KINDS[(seed * 4 + i) % len(KINDS)]
        faults.append((kind, start + rng.randint(10, FAULT_EVERY - 10)))
    return faults + [("exit_hang", steps)]


def _run(
    run_dir: str, steps: int, ckpt: int, faults: list[tuple[str, int]], torchrun: int = 0
) -> tuple[int, float, str, str]:
    launcher = [sys.executable, "-m", "runwatch.demo.tinytrain"]
    extra: list[str] = []
    if torchrun:
        launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={torchrun}"]
        launcher += ["--monitor_interval=0.2", "-m", "runwatch.demo.tinytrain"]
        extra = [*TORCHRUN_SUPERVISE]
    cmd = [
        sys.executable,
        "-m",
        "runwatch",
        "supervise",
        run_dir,
        *SUPERVISE,
        *extra,
        "--restarts",
        "20",
        "--rollbacks",
        "10",
        "--",
        *launcher,
        run_dir,
        "--steps",
        str(steps),
        "--ckpt-every",
        str(ckpt),
        "--eval-every",
        "100",
        "--step-sleep",
        "0.01",
        *(["--window", "5"] if torchrun else []),  # checkpoints (every 25 or 50) fall on window ends
    ]
    for kind, step in faults:
        cmd += ["--fault", f"{kind}@{step}"]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=SRC)
    t0 = time.time()
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    return res.returncode, time.time() - t0, (res.stdout.strip().splitlines() or [""])[-1], res.stderr


def _faults(run_dir: str, faults: list[tuple[str, int]], torchrun: int = 0) -> list[dict]:
    """Per fault: detected, seconds to detect and to recover, steps lost."""
    with open(os.path.join(run_dir, "supervise.jsonl")) as f:
        journal = [json.loads(line) for line in f]
    verdicts = [r for r in journal if r["event"] == "verdict"]
    sessions = load_sessions(run_dir)
    out = []
    for kind, step in faults:
        marker = os.path.join(run_dir, f".fault-{kind}-{step}")
        if not os.path.exists(marker):
            out.append({"kind": kind, "step": step, "fired": False})
            continue
        fired = os.stat(marker).st_mtime
        v = next((r for r in verdicts if r["time"] >= fired), None)
        row = {
            "kind": kind,
            "step": step,
            "fired": True,
            "verdict": v and v["kind"] or (v and "done"),
            "detected": v is not None
            and (v["kind"] or "done")
            in (TORCHRUN_EXPECTED.get(kind, (EXPECTED[kind],)) if torchrun else (EXPECTED[kind],)),
        }
        if v is not None:
            row["detect_seconds"] = round(v["time"] - fired, 2)
            relaunch = next(
                (r for r in journal if r["time"] >= v["time"] and r["event"] in ("relaunch", "rollback")), None
            )
            start = None
            row["recover_seconds"] = None
            if relaunch is not None:  # the session the relaunch opened: the first that starts after it
                later = [
                    s
                    for s in sessions
                    if s.records and s.records[0].time is not None and s.records[0].time > relaunch["time"]
                ]
                start = later[0].start_step if later else None
                first = next((r.time for r in later[0].records if r.kind == "train"), None) if later else None
                row["recover_seconds"] = round(first - v["time"], 2) if first is not None else None
            lost_to = v["step"] if kind in ("nan", "spike") else step
            row["steps_lost"] = max(0, lost_to - start) if start is not None else 0
        out.append(row)
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--ckpt-every", type=int, nargs="+", default=[50, 25])
    p.add_argument("--json", default=None)
    p.add_argument("--torchrun", type=int, default=0, metavar="N", help="run under torchrun with N workers")
    args = p.parse_args()
    base = tempfile.mkdtemp(prefix="runwatch-chaos-")
    results = []
    try:
        for ckpt in args.ckpt_every:
            for seed in range(args.seeds):
                clean = os.path.join(base, f"c{ckpt}-s{seed}-clean")
                code0, wall0, _, _ = _run(clean, args.steps, ckpt, [], args.torchrun)
                run_dir = os.path.join(base, f"c{ckpt}-s{seed}")
                faults = _plan(seed, args.steps)
                code, wall, last, stderr = _run(run_dir, args.steps, ckpt, faults, args.torchrun)
                with open(os.path.join(run_dir, "supervise.jsonl")) as f:
                    journal = [json.loads(line) for line in f]
                final = journal[-1]
                row = {
                    "ckpt_every": ckpt,
                    "seed": seed,
                    "exit": code,
                    "last_line": last,
                    "wall_seconds": round(wall, 1),
                    "clean_exit": code0,
                    "clean_wall_seconds": round(wall0, 1),
                    "goodput": final.get("goodput"),
                    "surfaces": surfaces(base, os.path.basename(run_dir), stderr),
                    "breakdown": breakdown(load_sessions(run_dir), journal),
                    "faults": _faults(run_dir, faults, args.torchrun),
                    "stops": [
                        {"stopped": r.get("stopped"), "seconds": r.get("seconds"), "left": r.get("left")}
                        for r in journal
                        if r["event"] == "stop"
                    ],
                }
                results.append(row)
                g = row["goodput"] or {}
                print(
                    f"ckpt {ckpt} seed {seed}: exit {code} ({last}); goodput {g.get('ratio')} "
                    f"({g.get('steps_kept')}/{g.get('steps_run')}), wall {wall:.1f} s vs {wall0:.1f} s fault-free; "
                    f"stops {[(s['stopped'], s['left']) for s in row['stops']]}",
                    flush=True,
                )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print("\nper fault kind (all runs):")
    print("| kind | fired | detected | detect s (median) | recover s (median) | steps lost (median) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for kind in (*KINDS, "exit_hang"):
        rows = [f for r in results for f in r["faults"] if f["kind"] == kind and f["fired"]]
        if not rows:
            continue

        def med(key: str) -> str:
            vals = [f[key] for f in rows if f.get(key) is not None]
            return f"{statistics.median(vals):g}" if vals else "-"

        print(
            f"| {kind} | {len(rows)} | {sum(f['detected'] for f in rows)} | {med('detect_seconds')} | "
            f"{med('recover_seconds')} | {med('steps_lost')} |"
        )
    print("\nper configuration:")
    print(
        "| checkpoint every | runs | completed | steps kept/run (median, min) | bound F/(F+C/2) | wall vs fault-free (median) |"
    )
    print("| ---: | ---: | ---: | --- | ---: | ---: |")
    for ckpt in args.ckpt_every:
        rows = [r for r in results if r["ckpt_every"] == ckpt]
        # steps kept / steps run, the figure the bound is about (`steps_ratio`; `ratio` before it was the time's)
        ratios = [
            r["goodput"].get("steps_ratio", r["goodput"]["ratio"])
            for r in rows
            if r["goodput"] and r["goodput"].get("steps_ratio", r["goodput"]["ratio"]) is not None
        ]
        slow = [r["wall_seconds"] / r["clean_wall_seconds"] for r in rows]
        bound = FAULT_EVERY / (FAULT_EVERY + ckpt / 2)
        print(
            f"| {ckpt} | {len(rows)} | {sum(r['exit'] == 0 for r in rows)} | "
            f"{statistics.median(ratios):.3f}, {min(ratios):.3f} | {bound:.3f} | {statistics.median(slow):.2f}x |"
        )
    keys = ("supervise", "journal", "goodput", "status", "page", "mcp")
    print(
        "\ngoodput as each surface gives it (the line supervise prints, its journal, `runwatch goodput`, status, page, MCP):"
    )
    print("| checkpoint every | seed | " + " | ".join(keys) + " |")
    print("| ---: | ---: | " + " | ".join("---:" for _ in keys) + " |")
    for r in results:
        print(f"| {r['ckpt_every']} | {r['seed']} | " + " | ".join(str(r["surfaces"].get(k)) for k in keys) + " |")
    print("\nwhere the wall time went (medians over the runs, seconds; share of the wall time):")
    print("| checkpoint every | wall | productive | " + " | ".join(BUCKETS) + " |")
    print("| ---: | ---: | ---: | " + " | ".join("---:" for _ in BUCKETS) + " |")
    for ckpt in args.ckpt_every:
        splits = [r["breakdown"] for r in results if r["ckpt_every"] == ckpt and r["breakdown"]["wall_seconds"]]
        if not splits:
            continue
        wall = statistics.median(s["wall_seconds"] for s in splits)

        def cell(values: list[float]) -> str:
            m = statistics.median(values)
            return f"{m:.1f} ({100 * m / wall:.0f}%)"

        cells = [cell([s["buckets"][b] for s in splits]) for b in BUCKETS]
        print(
            f"| {ckpt} | {wall:.1f} | {cell([s['productive_seconds'] for s in splits])} | " + " | ".join(cells) + " |"
        )
    print("\ncheckpoint interval, advised (Young/Daly) against used (medians over the runs):")
    print("| checkpoint every | save C s | interruptions | M s | advised s | used s | would have saved s |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for ckpt in args.ckpt_every:
        advice = [r["breakdown"]["advice"] for r in results if r["ckpt_every"] == ckpt]

        def med(key: str) -> str:
            vals = [a[key] for a in advice if a[key] is not None]
            return f"{statistics.median(vals):.3g}" if vals else "-"

        print(
            f"| {ckpt} | {med('checkpoint_seconds')} | {med('interruptions')} | {med('mtbi_seconds')} | "
            f"{med('interval_seconds')} | {med('used_interval_seconds')} | {med('saved_seconds')} |"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
