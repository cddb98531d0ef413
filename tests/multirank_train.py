"""A tiny DDP training logged with RunLogger, for `torchrun` (gloo on the CPU).

    OMP_NUM_THREADS=1 python -m torch.distributed.run --nproc_per_node=2 tests/multirank_train.py RUN_DIR

Every rank calls `log.step()` once per update, as RunLogger requires under torch.distributed; rank
0 alone writes the log. Faults for the tests: `--hang-rank K --hang-at N` (rank K sleeps for an
hour before update N), `--slow-rank K --slow-seconds S` (rank K sleeps S before every update; with `--max-window-seconds` windows close on time),
`--kill-rank K --kill-at N` (rank K SIGKILLs itself), `--stop-rank K --stop-at N` (rank K SIGSTOPs
itself: frozen, heartbeat thread and all), `--nan-rank K --nan-at N` (rank K's loss is
NaN at update N), `--extra-rank K --extra-steps N` (rank K calls step() N more times, breaking
the one rule RunLogger sets under torch.distributed). `--once`: each fault fires once across
relaunches (a marker file in RUN_DIR), for a supervisor's relaunch to complete the run.
`--no-pdeathsig`: ranks do not die with torchrun's agent (so a supervisor must find and stop them).
Each rank writes its own losses to RUN_DIR/losses-rank<k>.json at the end.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

from runwatch import NonFiniteLossError, RunLogger, RunwatchError
from runwatch.files.heartbeats import HeartbeatConfig


def _die_with_the_launcher() -> None:
    """torchrun starts each rank in a session of its own, so killing torchrun's process group does
    not reach a rank that hangs: ask the kernel to SIGKILL this rank when its parent (the agent) dies."""
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() == 1:  # the agent died before prctl took effect
            os._exit(1)


def _fires(args: argparse.Namespace, fault: str, rank: int, i: int) -> bool:
    """Whether `fault` fires on this rank before update i (once across launches with --once)."""
    if rank != getattr(args, f"{fault}_rank") or i != getattr(args, f"{fault}_at"):
        return False
    if not args.once:
        return True
    marker = os.path.join(args.run_dir, f".fault-{fault}")
    if os.path.exists(marker):
        return False
    open(marker, "w").close()
    return True


def main() -> int:
    if "--no-pdeathsig" not in sys.argv:
        _die_with_the_launcher()
    p = argparse.ArgumentParser()
    p.add_argument("run_dir")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--window", type=int, default=5)
    p.add_argument("--batch", type=int, default=16, help="samples per rank and update")
    p.add_argument("--heartbeat-seconds", type=float, default=0.5)
    p.add_argument("--sample-seconds", type=float, default=0.01)
    p.add_argument("--pg-timeout", type=float, default=60.0)
    p.add_argument("--once", action="store_true", help="each fault fires once across relaunches")
    p.add_argument("--no-pdeathsig", action="store_true", help="ranks outlive torchrun's agent")
    for fault in ("hang", "kill", "nan", "stop"):
        p.add_argument(f"--{fault}-rank", type=int, default=-1)
        p.add_argument(f"--{fault}-at", type=int, default=-1)
    p.add_argument("--extra-rank", type=int, default=-1, help="this rank calls log.step() --extra-steps more times")
    p.add_argument("--extra-steps", type=int, default=0)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-seconds", type=float, default=0.0)
    p.add_argument("--max-window-seconds", type=float, default=60.0)
    args = p.parse_args()

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.pg_timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(1000 + rank)  # each rank its own data
    w_true = torch.arange(8, dtype=torch.float32) / 8
    losses: list[float] = []
    recipe = {
        "batch_size": args.batch * world,
        "seq_len": 1,
        "gradient_accumulation_steps": 1,
        "qk_clip_threshold": None,
    }
    log = RunLogger(
        args.run_dir,
        recipe=recipe,
        optimizers=[{"name": "all", "algorithm": "sgd"}],
        window=args.window,
        max_window_seconds=args.max_window_seconds,
        heartbeat=HeartbeatConfig(every_seconds=args.heartbeat_seconds, sample_seconds=args.sample_seconds),
    )
    code = 0
    try:
        with log:
            for i in range(1, args.steps + 1):
                if rank == args.slow_rank:
                    time.sleep(args.slow_seconds)
                if _fires(args, "hang", rank, i):
                    print(f"rank {rank} hangs before update {i}", flush=True)
                    time.sleep(3600)
                if _fires(args, "kill", rank, i):
                    print(f"rank {rank} kills itself before update {i}", flush=True)
                    os.kill(os.getpid(), signal.SIGKILL)
                if _fires(args, "stop", rank, i):
                    print(f"rank {rank} stops itself before update {i}", flush=True)
                    os.kill(os.getpid(), signal.SIGSTOP)
                x = torch.randn(args.batch, 8, generator=gen)
                y = (x @ w_true).unsqueeze(1)
                loss = torch.nn.functional.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                if _fires(args, "nan", rank, i):
                    loss = torch.tensor(float("nan"))
                losses.append(float(loss.item()))
                log.step(loss=loss.detach(), lr=0.05, grad_norm=norm)
            if rank == args.extra_rank:  # breaks the rule: every rank calls step() as often
                for _ in range(args.extra_steps):
                    log.step(loss=1.0, lr=0.05, grad_norm=1.0)
    except NonFiniteLossError as exc:
        print(f"rank {rank}: {exc}", flush=True)
        code = 3
    except RunwatchError as exc:
        print(f"rank {rank}: {type(exc).__name__}: {exc}", flush=True)
        code = 4
    with open(os.path.join(args.run_dir, f"losses-rank{rank}.json"), "w") as f:
        json.dump(losses, f)
    dist.destroy_process_group()
    return code


if __name__ == "__main__":
    sys.exit(main())
