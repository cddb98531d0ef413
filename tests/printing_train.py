"""A training that only prints its progress, the way nanoGPT's train.py does, for `--format nanogpt`.

    python tests/printing_train.py OUT_DIR --max_iters=60 --eval_interval=10 [--init_from=resume]
        [--crash_at=35] [--stop_at=35] [--iter_seconds=0.02]

Each iteration prints `iter N: loss X, time Y ms, mfu -100.00%`; every `eval_interval` iterations
`step N: train loss X, val loss Y` and a checkpoint `OUT_DIR/ckpt.json` (the iteration and the
loss so far), as nanoGPT does. `--init_from=resume` continues from that checkpoint, as nanoGPT's
`--init_from=resume`; without it the run starts from iteration 0 whatever is on disk. Faults fire
once across relaunches (a marker file in OUT_DIR): `--crash_at N` raises before iteration N (exit
status 1 with a traceback), `--stop_at N` SIGSTOPs the process before iteration N (a hang that
ignores everything but SIGCONT and SIGKILL). Pure Python: no torch, so a launch takes 30 ms.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import time


def _fires(out_dir: str, name: str, at: int, it: int) -> bool:
    marker = os.path.join(out_dir, f".fault-{name}")
    if it != at or os.path.exists(marker):
        return False
    open(marker, "w").close()
    return True


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out_dir")
    p.add_argument("--max_iters", type=int, default=60)
    p.add_argument("--eval_interval", type=int, default=10)
    p.add_argument("--init_from", default="scratch", choices=("scratch", "resume"))
    p.add_argument("--crash_at", type=int, default=-1)
    p.add_argument("--stop_at", type=int, default=-1)
    p.add_argument("--iter_seconds", type=float, default=0.02)
    args = p.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    ckpt = os.path.join(args.out_dir, "ckpt.json")
    iter_num = 0
    if args.init_from == "resume":
        with open(ckpt) as f:
            iter_num = json.load(f)["iter_num"]
        print(f"Resuming training from {args.out_dir} at iter {iter_num}", flush=True)
    else:
        print("Initializing a new model from scratch", flush=True)
    while True:
        loss = 4.0 * math.exp(-iter_num / 40) + 1.0
        if iter_num % args.eval_interval == 0 and iter_num > 0:
            print(f"step {iter_num}: train loss {loss:.4f}, val loss {loss * 1.05:.4f}", flush=True)
            with open(ckpt + ".tmp", "w") as f:
                json.dump({"iter_num": iter_num}, f)
            os.replace(ckpt + ".tmp", ckpt)
            print(f"saving checkpoint to {args.out_dir}", flush=True)
        if iter_num >= args.max_iters:
            break
        if _fires(args.out_dir, "crash", args.crash_at, iter_num):
            raise RuntimeError(f"injected crash before iter {iter_num}")
        if _fires(args.out_dir, "stop", args.stop_at, iter_num):
            print(f"stopping myself before iter {iter_num}", flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)
        t0 = time.perf_counter()
        time.sleep(args.iter_seconds)
        dt = time.perf_counter() - t0
        iter_num += 1
        print(f"iter {iter_num}: loss {loss:.4f}, time {dt * 1000:.2f}ms, mfu -100.00%", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
