"""A small real training loop for the supervisor's tests: RunLogger, JSON checkpoints, faults.

    python tests/supervise_train.py RUN_DIR --steps 40 --ckpt-every 10 --fault kill@15 --fault nan@25

No torch, so a launch takes a fraction of a second. It resumes through `runwatch.resume_checkpoint()`
and prints what it got (`resume path=... rollback=... skip=...`), so a test can see the environment
a relaunch carried. Each `--fault KIND@STEP` fires once across relaunches (a marker file in RUN_DIR):
kill (SIGKILL), crash (exit 3, no session_end), hang, nan, spike (logged loss 20x for 2 windows),
error (an exception: session_error), error_hang (the same, then the process lingers), sigterm,
exit_hang (the run completes, the process lingers). `--hold PATH@STEP` waits before update STEP
until PATH exists (a test decides when the run may go on). `--ignore-term` ignores SIGTERM (a
program that will not stop: only SIGKILL ends it).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

import runwatch
from runwatch import RunLogger
from runwatch.errors import NonFiniteLossError

RECIPE = {"batch_size": 2, "seq_len": 4, "gradient_accumulation_steps": 1, "qk_clip_threshold": None}


def _fires(run_dir: str, faults: list[str], kind: str, step: int) -> bool:
    if f"{kind}@{step}" not in faults:
        return False
    marker = os.path.join(run_dir, f".fault-{kind}-{step}")
    if os.path.exists(marker):
        return False
    open(marker, "w").close()
    return True


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("run_dir")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--ckpt-every", type=int, default=10)
    p.add_argument("--window", type=int, default=5)
    p.add_argument("--sleep", type=float, default=0.0, help="seconds a step")
    p.add_argument("--fault", action="append", default=[])
    p.add_argument("--hold", default=None, metavar="PATH@STEP")
    p.add_argument("--ignore-term", action="store_true")
    args = p.parse_args()
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    hold_path, _, hold_step = (args.hold or "").rpartition("@")
    r = runwatch.resume_checkpoint()
    print(
        f"resume path={r.path} rollback={r.rollback} skip={r.skip.start}-{r.skip.stop - 1}"
        if r.skip
        else f"resume path={r.path} rollback={r.rollback} skip=none",
        flush=True,
    )
    state = None
    if r.path:
        with open(r.path) as f:
            state = json.load(f)
    step = state["step"] if state else 0
    spike_until = -1
    try:
        with RunLogger(args.run_dir, recipe=RECIPE, hardware={}, window=args.window, resume_from=state) as log:
            while step < args.steps:
                if hold_path and step + 1 == int(hold_step):
                    while not os.path.exists(hold_path):
                        time.sleep(0.02)
                if r.skip and step + 1 == r.skip.start:
                    print(f"skipping steps {r.skip.start}-{r.skip.stop - 1}", flush=True)
                loss = 1.0 / (1.0 + 0.05 * step)
                if _fires(args.run_dir, args.fault, "spike", step + 1):
                    spike_until = step + 2 * args.window
                if step < spike_until:
                    loss *= 20
                if _fires(args.run_dir, args.fault, "nan", step + 1):
                    loss = float("nan")
                for kind in ("error", "error_hang"):
                    if _fires(args.run_dir, args.fault, kind, step + 1):
                        raise RuntimeError(f"injected {kind} at step {step + 1}")
                log.step(loss=loss, lr=1e-3, grad_norm=1.0)
                step += 1
                for kind, act in (
                    ("kill", lambda: os.kill(os.getpid(), signal.SIGKILL)),
                    ("crash", lambda: os._exit(3)),
                    ("sigterm", lambda: os.kill(os.getpid(), signal.SIGTERM)),
                    ("hang", lambda: time.sleep(3600)),
                ):
                    if _fires(args.run_dir, args.fault, kind, step):
                        print(f"step {step}: {kind} (injected)", flush=True)
                        act()
                if args.sleep:
                    time.sleep(args.sleep)
                if step % args.ckpt_every == 0 or step == args.steps:
                    path = os.path.join(args.run_dir, f"ckpt-{step}.json")
                    saved = log.state_dict()
                    with open(path + ".tmp", "w") as f:
                        json.dump(saved, f)
                    os.replace(path + ".tmp", path)
                    log.checkpoint(path, seconds=0.001, verified=True)
    except NonFiniteLossError as exc:
        print(exc, file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        return 143
    except RuntimeError as exc:
        if "error_hang" not in str(exc):
            raise
        time.sleep(3600)  # the session ended with an error; the process never exits
    print(f"done at step {step}", flush=True)
    if _fires(args.run_dir, args.fault, "exit_hang", args.steps):
        time.sleep(3600)
    return 0


if __name__ == "__main__":
    sys.exit(main())
