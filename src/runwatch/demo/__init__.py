"""`runwatch demo`: the whole supervision loop on a tiny real training, on the CPU.

    runwatch demo                       # crash -> caught; relaunch -> resumed, check-ins, done; summary; PNG
    runwatch demo --inject stall        # one fault (nan, stall, crash, slowdown, explode): caught, exit 7
    runwatch demo --framework hf        # the same around a real Hugging Face Trainer run

Every part is the real one: the training is `python -m runwatch.demo.tinytrain` (or `runwatch.demo.tinyhf`)
started by `runwatch launch`, the watchdog is `runwatch watch` in its own process, a crash is a real
SIGKILL, a resume a second process picking up the latest checkpoint. The demo exits 0 when
everything behaved as shown (the run completed, or the injected fault was caught as its kind).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from ..launch import launch
from ..summary import summarize

__all__ = ["run", "EXPECTED_KIND"]

# What the watchdog must call each injected fault.
EXPECTED_KIND = {
    "nan": "nonfinite_loss",
    "stall": "stall",
    "crash": "process_exit",
    "slowdown": "throughput_drop",
    "explode": "grad_explosion",
}
# ~40 ms a step makes a 600-step run last ~30 s, like a real (if tiny) job one can watch; the model
# itself needs ~1 ms a step.
STEP_SLEEP = 0.04
# Fast polls and a short stall limit so each fault is caught within seconds, not the defaults' minutes.
WATCH_OPTIONS = ["--poll", "0.5", "--stall", "8", "--startup-grace", "120", "--stop-on-anomaly"]


def _say(text: str = "") -> None:
    print(text, flush=True)


def _train_cmd(framework: str, run_dir: str, steps: int, *extra: str) -> list[str]:
    module = "runwatch.demo.tinyhf" if framework == "hf" else "runwatch.demo.tinytrain"
    return [sys.executable, "-m", module, run_dir, "--steps", str(steps), "--step-sleep", str(STEP_SLEEP), *extra]


def _supervise(run_dir: str, cmd: list[str], checkins: int) -> tuple[int, str]:
    """Launch `cmd` detached, watch it from a separate process, check in `checkins` times; return
    the watchdog's exit status and verdict line."""
    env_backup = os.environ.get("OMP_NUM_THREADS")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        info = launch(run_dir, cmd)
    finally:
        if env_backup is None:
            os.environ.pop("OMP_NUM_THREADS", None)
    _say(f"      $ runwatch launch {run_dir} -- {' '.join(os.path.basename(c) if i == 0 else c for i, c in enumerate(cmd))}")
    _say(f"      launched pid {info['pid']}; output in {os.path.join(run_dir, 'stdout.log')}")
    _say(f"      $ runwatch watch {run_dir} {' '.join(WATCH_OPTIONS)}")
    watcher = subprocess.Popen([sys.executable, "-m", "runwatch", "watch", run_dir, *WATCH_OPTIONS],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    done_checkins = 0
    next_at = time.monotonic() + 6.0
    while watcher.poll() is None:
        time.sleep(0.2)
        if done_checkins < checkins and time.monotonic() >= next_at and os.path.exists(os.path.join(run_dir, "metrics.jsonl")):
            done_checkins += 1
            next_at = time.monotonic() + 8.0
            _say(f"      $ runwatch status {run_dir}      (check-in {done_checkins})")
            out = subprocess.run([sys.executable, "-m", "runwatch", "status", run_dir],
                                 capture_output=True, text=True).stdout
            for line in out.splitlines():
                _say(f"        {line}")
    lines = (watcher.stdout.read() if watcher.stdout else "").strip().splitlines()
    if watcher.stdout:
        watcher.stdout.close()
    verdict = lines[-1] if lines else "(no verdict)"
    _say(f"      watchdog exit {watcher.returncode}: {verdict}")
    return watcher.returncode, verdict


def _inject(args: argparse.Namespace, run_dir: str) -> int:
    kind = EXPECTED_KIND[args.inject]
    at = 150 if args.framework == "hf" else 250
    _say(f"[1/2] training with an injected fault: {args.inject} from step {at}; the watchdog should say {kind}")
    code, verdict = _supervise(run_dir, _train_cmd(args.framework, run_dir, args.steps, "--inject", args.inject,
                                                   "--inject-at", str(at)), checkins=1)
    caught = code == 7 and verdict.startswith(f"ANOMALY {kind} ")
    _say(f"[2/2] {'caught' if caught else 'NOT caught'}: watchdog.json = "
         f"{_read(os.path.join(run_dir, 'watchdog.json'))}")
    return 0 if caught else 1


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return "(none)"


def _full(args: argparse.Namespace, run_dir: str) -> int:
    steps = args.steps
    crash_at = steps * 7 // 12
    _say(f"[1/4] training {steps} steps; the process is killed (SIGKILL) at step {crash_at}")
    code1, verdict1 = _supervise(run_dir, _train_cmd(args.framework, run_dir, steps, "--crash-at", str(crash_at)),
                                 checkins=1)
    _say("[2/4] relaunching the same command: it resumes from the latest checkpoint as a new session")
    code2, verdict2 = _supervise(run_dir, _train_cmd(args.framework, run_dir, steps), checkins=2)
    _say(f"[3/4] the acceptance summary: runwatch summarize {run_dir} --expect-step {steps}")
    result = summarize(run_dir, expect_step=steps)
    _say(json.dumps(result, indent=2, allow_nan=False))
    _say(f"[4/4] a snapshot: runwatch plot {run_dir}")
    try:
        from ..plot import snapshot

        _say(f"      wrote {snapshot(run_dir)['path']}")
    except Exception as exc:  # the [plot] extra missing: the demo itself still succeeded
        _say(f"      no snapshot: {exc}")
    ok = verdict1.startswith("ANOMALY process_exit ") and code2 == 0 and result["completed"]
    _say("demo: " + ("the crash was caught, the resumed run completed and passes the audit" if ok
                     else "something did not go as shown above"))
    return 0 if ok else 1


def run(args: argparse.Namespace) -> int:
    """The demo; see the module docstring."""
    base = args.dir or tempfile.mkdtemp(prefix="runwatch-demo-")
    name = f"{args.framework}-{args.inject}" if args.inject else args.framework
    run_dir = os.path.abspath(os.path.join(base, name))
    if os.path.exists(os.path.join(run_dir, "run.json")):
        from ..errors import UsageError

        raise UsageError(f"demo: {run_dir} already holds a run; pass another --dir")
    if args.steps is None:
        args.steps = 300 if args.framework == "hf" else 600
    _say(f"runwatch demo ({args.framework}): run directory {run_dir}")
    code = _inject(args, run_dir) if args.inject else _full(args, run_dir)
    _say(f"every run of the demo in a browser: runwatch serve {os.path.abspath(base)}")
    return code
