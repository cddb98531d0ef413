"""`runwatch demo`: the whole supervision loop on a tiny real training, on the CPU.

    runwatch demo                       # one `runwatch supervise` through a crash, a NaN and a hang: done
    runwatch demo --inject stall        # one fault (nan, stall, crash, slowdown, explode): caught, exit 7
    runwatch demo --framework hf        # the same around a real Hugging Face Trainer run

Every part is the real one: the training is `python -m runwatch.demo.tinytrain` (or `runwatch.demo.tinyhf`),
the supervisor is `runwatch supervise` in its own process (relaunching after the crash and the hang,
rolling back after the NaN), a single injected fault is shown to `runwatch watch`. The demo exits 0
when everything behaved as shown (the run completed, or the injected fault was caught as its kind);
2 with one line naming what to install when PyTorch is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from ..files import RunDir
from ..judging import summarize
from ..supervising import goodput_line
from ..supervising.launch import launch

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
    _say(
        f"      $ runwatch launch {run_dir} -- {' '.join(os.path.basename(c) if i == 0 else c for i, c in enumerate(cmd))}"
    )
    _say(f"      launched pid {info['pid']}; output in {os.path.join(run_dir, 'stdout.log')}")
    _say(f"      $ runwatch watch {run_dir} {' '.join(WATCH_OPTIONS)}")
    watcher = subprocess.Popen(
        [sys.executable, "-m", "runwatch", "watch", run_dir, *WATCH_OPTIONS],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    done_checkins = 0
    next_at = time.monotonic() + 6.0
    while watcher.poll() is None:
        time.sleep(0.2)
        if done_checkins < checkins and time.monotonic() >= next_at and os.path.exists(RunDir(run_dir).metrics):
            done_checkins += 1
            next_at = time.monotonic() + 8.0
            _say(f"      $ runwatch status {run_dir}      (check-in {done_checkins})")
            out = subprocess.run(
                [sys.executable, "-m", "runwatch", "status", run_dir], capture_output=True, text=True
            ).stdout
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
    code, verdict = _supervise(
        run_dir,
        _train_cmd(args.framework, run_dir, args.steps, "--inject", args.inject, "--inject-at", str(at)),
        checkins=1,
    )
    caught = code == 7 and verdict.startswith(f"ANOMALY {kind} ")
    _say(
        f"[2/2] {'caught' if caught else 'NOT caught'}: watchdog.json = {_read(os.path.join(run_dir, 'watchdog.json'))}"
    )
    return 0 if caught else 1


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return "(none)"


# The supervised demo: three faults, each once, at these fractions of the run (a crash, a NaN, a hang):
# two relaunches and one rollback, then the run completes.
SUPERVISE_OPTIONS = ["--poll", "0.2", "--stall", "3", "--startup-grace", "120", "--backoff", "1", "--exit-grace", "10"]


def _full(args: argparse.Namespace, run_dir: str) -> int:
    steps = args.steps
    crash, nan, hang = steps * 7 // 30, steps * 15 // 30 - 3, steps * 22 // 30
    faults = ["--fault", f"crash@{crash}", "--fault", f"nan@{nan}", "--fault", f"hang@{hang}"]
    cmd = _train_cmd(args.framework, run_dir, steps, "--ckpt-every", str(max(10, steps // 6)), *faults)
    _say(f"[1/3] training {steps} steps under runwatch supervise, with three faults injected (each once):")
    _say(f"      a crash at step {crash}, a NaN loss at step {nan}, a hang at step {hang}")
    shown = " ".join(os.path.basename(c) if i == 0 else c for i, c in enumerate(cmd))
    _say(f"      $ runwatch supervise {run_dir} {' '.join(SUPERVISE_OPTIONS)} -- {shown}")
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "runwatch", "supervise", run_dir, *SUPERVISE_OPTIONS, "--", *cmd],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    last = ""
    for line in proc.stdout or ():
        line = line.rstrip("\n")
        if (
            line.startswith("runwatch watch: new session")
            or line.endswith(last.removeprefix("runwatch supervise: "))
            and last
        ):
            continue  # the watch's own note, or the verdict line said twice (stderr, then stdout)
        _say(f"      {line.removeprefix('runwatch supervise: ')}")
        last = line
    proc.wait()
    _say(f"      supervise exit {proc.returncode}: {last}")
    _say(f"[2/3] what it did (RUN_DIR/supervise.jsonl) and the check-in: runwatch status {run_dir}")
    records = []
    with open(RunDir(run_dir).journal, encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    for rec in records:
        what = rec.get("kind") or ("done" if rec["event"] == "verdict" else rec.get("checkpoint") or "")
        extra = f" skip {rec['skip_steps']}" if rec.get("skip_steps") else ""
        _say(f"      attempt {rec['attempt']}  {rec['event']:<9} {what}{extra}")
    out = subprocess.run([sys.executable, "-m", "runwatch", "status", run_dir], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if not line.startswith("gpu"):
            _say(f"        {line}")
    _say(f"[3/3] the acceptance summary of the final session: runwatch summarize {run_dir} --expect-step {steps}")
    result = summarize(run_dir, expect_step=steps)
    _say(
        f"      completed {result['completed']}, {result['sessions']} sessions, last step {result['last_step']}, "
        f"loss {result['loss']['first']:.3f} -> {result['loss']['last']:.3f}"
    )
    g = records[-1].get("goodput") or {}
    events = [r["event"] for r in records]
    ok = (
        proc.returncode == 0
        and last == f"OK done step={steps}"
        and result["completed"]
        and events.count("relaunch") == 2
        and events.count("rollback") == 1
    )
    _say(goodput_line(g))  # the line `supervise` printed and `status` shows: one goodput
    _say(
        "demo: "
        + (
            "a crash, a NaN and a hang were caught and recovered from with no one at the keyboard"
            if ok
            else "something did not go as shown above"
        )
    )
    return 0 if ok else 1


def _check_requirements(framework: str) -> None:
    """One line saying what to install when the demo's training cannot run here."""
    import importlib.util

    from ..errors import UsageError

    need = ["torch"] + (["transformers"] if framework == "hf" else [])
    missing = [name for name in need if importlib.util.find_spec(name) is None]
    if missing:
        extra = "hf" if framework == "hf" else "torch"
        raise UsageError(f"runwatch demo needs {' and '.join(missing)}: pip install 'runwatch[{extra}]'")


def run(args: argparse.Namespace) -> int:
    """The demo; see the module docstring."""
    base = args.dir or tempfile.mkdtemp(prefix="runwatch-demo-")
    name = f"{args.framework}-{args.inject}" if args.inject else args.framework
    run_dir = os.path.abspath(os.path.join(base, name))
    if os.path.exists(RunDir(run_dir).manifest):
        from ..errors import UsageError

        raise UsageError(f"demo: {run_dir} already holds a run; pass another --dir")
    _check_requirements(args.framework)
    if args.steps is None:
        args.steps = 300 if args.framework == "hf" else 600 if args.inject else 300
    _say(f"runwatch demo ({args.framework}): run directory {run_dir}")
    code = _inject(args, run_dir) if args.inject else _full(args, run_dir)
    _say(f"every run of the demo in a browser: runwatch serve {os.path.abspath(base)}")
    return code
