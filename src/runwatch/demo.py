"""`runwatch demo`: a tiny real training on the CPU, crashed once and resumed, then audited.

The training is `python -m runwatch.tinytrain` in a child process, so the crash is a real SIGKILL
and the resume a real second process that picks up the latest checkpoint.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

from .summary import summarize

__all__ = ["run"]

# A pace of ~50 ms a step makes the 600-step run last about half a minute, like a real (if tiny)
# job that one can watch; the model itself needs ~1 ms a step.
STEP_SLEEP = 0.04


def _train(run_dir: str, steps: int, *extra: str) -> int:
    cmd = [sys.executable, "-m", "runwatch.tinytrain", run_dir, "--steps", str(steps),
           "--step-sleep", str(STEP_SLEEP), *extra]
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"), PYTHONUNBUFFERED="1")
    return subprocess.run(cmd, env=env).returncode


def run(args: argparse.Namespace) -> int:
    """Train, crash, resume, summarize; exit 0 when the resumed session completed and passes."""
    base = args.dir or tempfile.mkdtemp(prefix="runwatch-demo-")
    run_dir = os.path.join(base, "run")
    steps = args.steps
    crash_at = steps * 7 // 12
    print(f"runwatch demo: run directory {run_dir}")
    print(f"[1/3] training {steps} steps; the process is killed (SIGKILL) at step {crash_at}")
    rc = _train(run_dir, steps, "--crash-at", str(crash_at))
    print(f"      the training process ended with exit status {rc}")
    print("[2/3] relaunching: it resumes from the latest checkpoint as a new session")
    rc = _train(run_dir, steps)
    print(f"      the training process ended with exit status {rc}")
    print(f"[3/3] the acceptance summary (runwatch summarize {run_dir} --expect-step {steps}):")
    result = summarize(run_dir, expect_step=steps)
    print(json.dumps(result, indent=2, allow_nan=False))
    return 0 if result["completed"] else 1
