"""What a hostile run directory costs `runwatch status`: a final line without a newline in
stdout.log and in supervise.jsonl (read back from the end), and the proof of a launch before a stop.

    python benchmarks/bench_untrusted.py [--mib 100] [--src DIR]

`--src` runs `status` from another checkout's `src/` (the figures before the change). Prints one
line per case: seconds of `runwatch status --json` (median of 3) and its peak memory.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time


def _status(run: str, src: str | None) -> tuple[float, float]:
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = src
    times, peak = [], 0.0
    for _ in range(3):
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "runwatch", "status", run, "--json"], env=env, capture_output=True, check=False
        )
        times.append(time.perf_counter() - t0)
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return statistics.median(times), peak


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=100)
    ap.add_argument("--src", default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = os.path.join(tmp, "run")
        os.makedirs(run)
        with open(os.path.join(run, "metrics.jsonl"), "w") as f:
            for s in range(1, 1001):
                f.write(json.dumps({"step": s, "t": 1000.0 + s, "loss": 1.0 / s}) + "\n")
        for name in ("stdout.log", "supervise.jsonl"):
            path = os.path.join(run, name)
            with open(path, "wb") as f:
                f.write(b"x" * (args.mib << 20))  # one final line, no newline
            secs, peak = _status(run, args.src)
            print(f"{name}: a {args.mib} MiB final line without newline: status {secs:.2f} s, peak RSS {peak:.0f} MiB")
            os.unlink(path)

        from runwatch.procs.launched import not_launched
        from runwatch.supervising.launch import launch

        info = launch(run, ["sleep", "30"])
        t0 = time.perf_counter()
        for _ in range(1000):
            not_launched(run, info["pid"])
        per = (time.perf_counter() - t0) / 1000 * 1e6
        print(f"proof of a launch (launch.json, start time, environment marker): {per:.0f} us each")
        os.kill(info["pid"], 9)


if __name__ == "__main__":
    main()
