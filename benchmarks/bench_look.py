"""Time `runwatch plot` and `runwatch tensorboard` on one generated schema-v1 log, side by side with
`runwatch check` (the parse + rules both share) and with the per-scalar `tensorboard.summary.Writer`.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_look.py [--steps 200000] [--repeat 3]

The log comes from a real RunLogger (window 10: one train record per 10 steps, an eval every 1000
steps). Each command runs in-process; medians of --repeat runs are printed in seconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))

from runwatch.judging.watchdog import check  # noqa: E402
from runwatch.logger.metrics import RunLogger  # noqa: E402
from runwatch.reading.records import iter_records  # noqa: E402
from runwatch.views import plot, tensorboard  # noqa: E402

RECIPE = {"batch_size": 8, "seq_len": 128, "gradient_accumulation_steps": 1, "qk_clip_threshold": None}


def make_log(run_dir: str, steps: int) -> int:
    with RunLogger(run_dir, recipe=RECIPE, hardware={}, window=10) as log:
        for s in range(1, steps + 1):
            log.step(loss=1.0 / s**0.3, lr=1e-3, grad_norm=0.5 + (s % 13) / 13)
            if s % 1000 == 0:
                log.val(loss=0.9 / s**0.3, metrics={"auroc": 0.9})
    with open(os.path.join(run_dir, "metrics.jsonl"), "rb") as f:
        return sum(1 for _ in f)


def per_scalar_writer(run_dir: str, logdir: str) -> None:
    """The peer: TensorBoard's own high-level Writer, one add_scalar call a scalar."""
    from tensorboard.summary import Writer

    writers = {}
    for rec in iter_records(run_dir):
        w = writers.get(rec.session) or writers.setdefault(rec.session, Writer(os.path.join(logdir, rec.session)))
        for tag, value in tensorboard.scalars(rec):
            w.add_scalar(tag, float(value), int(rec.step), wall_time=rec.time)
    for w in writers.values():
        w.close()


def timed(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200_000)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    base = tempfile.mkdtemp(prefix="bench-look-")
    run_dir = os.path.join(base, "run")
    lines = make_log(run_dir, args.steps)
    print(
        f"log: {lines} records ({os.path.getsize(os.path.join(run_dir, 'metrics.jsonl')) / 1e6:.1f} MB), "
        f"median of {args.repeat}"
    )
    rows = [
        ("runwatch check (parse + rules)", lambda: check(run_dir)),
        ("runwatch plot", lambda: plot.snapshot(run_dir)),
        ("runwatch tensorboard", lambda: tensorboard.export(run_dir)),
        ("tensorboard.summary.Writer, a call a scalar", lambda: per_scalar_writer(run_dir, tempfile.mkdtemp(dir=base))),
    ]
    results = {name: timed(fn, args.repeat) for name, fn in rows}
    ref = results["runwatch check (parse + rules)"]
    for name, seconds in results.items():
        print(f"{name:46s} {seconds:8.2f} s   {seconds / ref:5.2f}x check   {lines / seconds:9.0f} records/s")


if __name__ == "__main__":
    main()
