"""A tiny, real PyTorch training on the CPU, logged through RunLogger: the demo's and tests' run.

    python -m runwatch.demo.tinytrain RUN_DIR [--steps 600] [--inject nan|stall|crash|slowdown|explode]

The task is binary classification of generated token sequences (is token 1 more frequent than
token 2?), so the loss starts near ln 2 and the validation AUROC climbs towards 1 within a few
hundred steps. Checkpoints go to RUN_DIR/ckpt/ with the logger's state inside; a second start on the
same RUN_DIR resumes from the latest one as a new session. Nothing is downloaded.

Faults for demos and tests: `--inject KIND --inject-at STEP` (from that step on, every time);
`--fault KIND@STEP` (repeatable) fires once across relaunches (a marker file in RUN_DIR remembers it):
`crash` (the process exits at once, no session_end), `kill` (SIGKILL), `hang` (sleeps for an hour),
`stop` (SIGSTOPs itself: frozen until SIGCONT), `nan` (a NaN loss), `spike` (the logged loss 20x for two windows), `sigterm` (a preemption),
`exit_hang` (the run completes, then the process never exits). `--labels inverted|random` gives a
run whose metric is inverted (the held-out labels stay true) or that never learns (labels are noise
everywhere); `--crash-at STEP` kills the process (SIGKILL) once, to show a crash and a resume.

Under `torchrun` (WORLD_SIZE > 1) it is a DDP training on gloo: each rank its own data, rank 0
saves the checkpoints, every rank resumes from them, and `--fault` fires on `--fault-rank` only
(default: the last rank, a worker that does not write the log).

Resuming: `runwatch.resume_checkpoint()` names the checkpoint (RUNWATCH_RESUME_FROM after a
supervised rollback, else the run's latest verified one); the batches of RUNWATCH_SKIP_STEPS are
left out (the data position moves past them and is saved in later checkpoints).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..files import atomic_write
from ..logger.auroc import auroc

if TYPE_CHECKING:
    import torch

    from ..logger import RunLogger

VOCAB = 16
INJECTIONS = ("nan", "stall", "crash", "slowdown", "explode")
FAULTS = ("crash", "kill", "hang", "stop", "nan", "spike", "sigterm", "exit_hang")
# A spike multiplies the logged loss by this for this many windows (the loss_spike rule needs 2).
SPIKE_FACTOR = 20.0
SPIKE_WINDOWS = 2


def parse_fault(text: str) -> tuple[str, int]:
    """`"nan@120"` → ("nan", 120); argparse turns the ValueError into a usage error."""
    kind, at, step = text.partition("@")
    if kind not in FAULTS or not at or not step.isdigit():
        raise argparse.ArgumentTypeError(f"expected KIND@STEP with KIND in {', '.join(FAULTS)}, got {text!r}")
    return kind, int(step)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m runwatch.demo.tinytrain", description=__doc__.splitlines()[0])
    p.add_argument("run_dir")
    p.add_argument("--steps", type=int, default=600, help="optimizer updates in all (default 600)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=16)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--window", type=int, default=None, help="RunLogger window (default: RUNWATCH_WINDOW, else 10)")
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--ckpt-every", type=int, default=100)
    p.add_argument("--step-sleep", type=float, default=0.0, help="extra seconds a step (a slower, more real pace)")
    p.add_argument("--labels", choices=("normal", "inverted", "random"), default="normal")
    p.add_argument("--inject", choices=INJECTIONS, default=None)
    p.add_argument("--inject-at", type=int, default=300)
    p.add_argument("--crash-at", type=int, default=None, help="SIGKILL this process at this step (once)")
    p.add_argument(
        "--fault",
        type=parse_fault,
        action="append",
        default=[],
        metavar="KIND@STEP",
        help=f"a fault that fires once across relaunches ({', '.join(FAULTS)}); repeatable",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--fault-rank", type=int, default=None, help="under torchrun, the rank --fault fires on (default: the last)"
    )
    return p


def make_batch(
    step: int, batch_size: int, seq_len: int, labels: str = "normal", seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generated data: a batch is a pure function of (seed, step); ties between the counts are resolved
    by construction (the last position is set to break them)."""
    import torch

    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    x = torch.randint(0, VOCAB, (batch_size, seq_len), generator=g)
    ones = (x == 1).sum(1)
    twos = (x == 2).sum(1)
    tie = ones == twos
    x[tie, -1] = torch.where(torch.rand(int(tie.sum()), generator=g) < 0.5, 1, 2)
    y = ((x == 1).sum(1) > (x == 2).sum(1)).float()
    if labels == "inverted":
        y = 1.0 - y
    elif labels == "random":
        y = torch.randint(0, 2, (batch_size,), generator=g).float()
    return x, y


def build_model() -> torch.nn.Module:
    from torch import nn

    class TinyClassifier(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(VOCAB, 32)
            self.mlp = nn.Sequential(nn.Linear(32, 32), nn.GELU(), nn.Linear(32, 1))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            logits: torch.Tensor = self.mlp(self.embed(x).mean(1))
            return logits.squeeze(-1)

    return TinyClassifier()


def _save_checkpoint(path: str, payload: dict[str, Any]) -> int:
    import torch

    with atomic_write(path, "wb") as f:
        torch.save(payload, f)
    return os.path.getsize(path)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    import torch

    from ..errors import NonFiniteLossError
    from ..logger import RunLogger

    torch.manual_seed(args.seed)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1") or 1))
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    rank = 0
    if world > 1:  # under torchrun: DDP on gloo
        import torch.distributed as dist

        dist.init_process_group("gloo")
        rank = dist.get_rank()
    args.rank = rank
    args.fault_rank = world - 1 if args.fault_rank is None else args.fault_rank
    net = build_model()
    opt = torch.optim.AdamW(net.parameters(), lr=args.lr)
    from ..reading import resume_checkpoint

    ckpt_dir = os.path.join(args.run_dir, "ckpt")
    os.makedirs(ckpt_dir, exist_ok=True)
    latest = os.path.join(ckpt_dir, "latest.pt")
    resume = resume_checkpoint(default=latest if os.path.exists(latest) else None, run_dir=args.run_dir)
    resume_from = None
    step = 0
    data_offset = 0
    if resume.path is not None:
        state = torch.load(resume.path, weights_only=True)
        net.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        resume_from = state["runwatch"]
        step = resume_from["step"]
        data_offset = int(state.get("data_offset", 0))
        how = f" (rollback {resume.rollback})" if resume.rollback else ""
        print(f"resuming from {resume.path} at step {step}{how}", flush=True)
    model = torch.nn.parallel.DistributedDataParallel(net) if world > 1 else net

    recipe = {
        "batch_size": args.batch_size * world,
        "seq_len": args.seq_len,
        "gradient_accumulation_steps": 1,
        "qk_clip_threshold": None,
        "max_steps": args.steps,
        "task": "binary classification of generated token sequences",
        "num_classes": 2,
        "labels": args.labels,
    }
    crash_marker = os.path.join(args.run_dir, ".crashed-once")
    # Inverted labels are a bug in the training data only: the held-out labels stay true, so the run
    # shows an inverted metric. Random labels are noise everywhere (nothing to learn, metric at chance).
    val_labels = "random" if args.labels == "random" else "normal"
    x_val, y_val = make_batch(-1, 512, args.seq_len, val_labels, seed=args.seed + 7)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    log = RunLogger(
        args.run_dir,
        recipe=recipe,
        optimizers=[{"name": "all", "algorithm": "adamw", "lr": args.lr}],
        window=args.window,
        resume_from=resume_from,
    )
    try:
        with log:
            _train(
                args,
                log,
                model,
                opt,
                loss_fn,
                x_val,
                y_val,
                step,
                ckpt_dir,
                latest,
                crash_marker,
                resume.skip,
                data_offset,
            )
    except NonFiniteLossError as exc:
        print(str(exc), file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        print("interrupted; session ended (reason interrupted)", file=sys.stderr, flush=True)
        return 130
    if world > 1:
        torch.distributed.destroy_process_group()
    print(f"done: {args.steps} steps, run directory {args.run_dir}", flush=True)
    if _fires(args, "exit_hang", args.steps):
        print("training done; not exiting (injected)", flush=True)
        time.sleep(3600)
    return 0


def _fires(args: argparse.Namespace, kind: str, step: int) -> bool:
    """Whether the fault `kind` is due at `step` on this rank and has not fired yet in this run (once only)."""
    if (kind, step) not in args.fault or args.rank != args.fault_rank:
        return False
    marker = os.path.join(args.run_dir, f".fault-{kind}-{step}")
    if os.path.exists(marker):
        return False
    open(marker, "w").close()
    return True


def _train(
    args: argparse.Namespace,
    log: RunLogger,
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    loss_fn: torch.nn.Module,
    x_val: torch.Tensor,
    y_val: torch.Tensor,
    step: int,
    ckpt_dir: str,
    latest: str,
    crash_marker: str,
    skip: range | None = None,
    data_offset: int = 0,
) -> None:
    """The loop: one optimizer update a step, eval and checkpoints on schedule, faults on request."""
    import torch

    spike_until = -1
    while step < args.steps:
        if skip is not None and step + 1 == skip.start:
            data_offset += len(skip)  # leave out the batches that led into the trouble
            print(f"skipping the batches of steps {skip.start}-{skip.stop - 1}", flush=True)
        x, y = make_batch(
            step + data_offset, args.batch_size, args.seq_len, args.labels, seed=args.seed + 1000 * args.rank
        )
        loss = loss_fn(model(x), y)
        fault = args.inject if args.inject and step >= args.inject_at else None
        if _fires(args, "spike", step + 1):
            # the window the logger resolved: --window, else RUNWATCH_WINDOW, else 10
            spike_until = step + SPIKE_WINDOWS * log.window
        shown = loss.detach() * SPIKE_FACTOR if step < spike_until else None
        if fault == "nan" or _fires(args, "nan", step + 1):
            print(f"step {step + 1}: NaN loss (injected)", flush=True)
            loss = loss * float("nan")
        scale = 1e4 if fault == "explode" else 1.0
        opt.zero_grad(set_to_none=True)
        (loss * scale).backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0 * scale)
        opt.step()
        step += 1
        # grad_norm is the pre-clip norm; `explode` scales the loss so it is 1e4x too large
        log.step(
            loss=loss if shown is None else shown,
            lr=opt.param_groups[0]["lr"],
            grad_norm=grad_norm,
            clipped=grad_norm > scale,
        )
        if _fires(args, "hang", step):
            print(f"step {step}: hanging (injected)", flush=True)
            time.sleep(3600)
        if _fires(args, "crash", step):
            print(f"step {step}: crashing (injected)", flush=True)
            os._exit(3)
        if _fires(args, "kill", step):
            print(f"step {step}: killed (SIGKILL, injected)", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        if _fires(args, "stop", step):
            print(f"step {step}: stopped (SIGSTOP, injected)", flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)
        if _fires(args, "sigterm", step):
            print(f"step {step}: preempted (SIGTERM, injected)", flush=True)
            os.kill(os.getpid(), signal.SIGTERM)
        if fault == "stall":
            print(f"step {step}: stalling (injected)", flush=True)
            time.sleep(3600)
        if fault == "crash" or (
            args.crash_at is not None and step == args.crash_at and not os.path.exists(crash_marker)
        ):
            open(crash_marker, "w").close()
            print(f"step {step}: crashing (SIGKILL)", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        if args.step_sleep or fault == "slowdown":
            time.sleep(args.step_sleep * (6 if fault == "slowdown" else 1) + (0.02 if fault == "slowdown" else 0))
        if step % args.eval_every == 0 or step == args.steps:
            model.eval()
            with torch.no_grad():
                logits = model(x_val)
                val_loss = loss_fn(logits, y_val).item()
                acc = ((logits > 0).float() == y_val).float().mean().item()
                area = auroc(logits.tolist(), y_val.tolist())
            model.train()
            metrics = {"accuracy": acc}
            if area is not None:
                metrics["auroc"] = area
            log.val(loss=val_loss, metrics=metrics)
        if (step % args.ckpt_every == 0 or step == args.steps) and args.rank == 0:  # rank 0 saves for all
            t0 = time.perf_counter()
            path = os.path.join(ckpt_dir, f"step-{step}.pt")
            size = _save_checkpoint(
                path,
                {
                    "model": getattr(model, "module", model).state_dict(),
                    "opt": opt.state_dict(),
                    "runwatch": log.state_dict(),
                    "data_offset": data_offset,
                },
            )
            reloaded = torch.load(path, weights_only=True)
            build_model().load_state_dict(reloaded["model"])  # read back and loaded: verified
            _link_latest(path, latest)
            log.checkpoint(path, seconds=time.perf_counter() - t0, bytes=size, verified=True)


def _link_latest(path: str, latest: str) -> None:
    """Point ckpt/latest.pt at `path` atomically (a copy of the bytes; symlinks break on some shares)."""
    with open(path, "rb") as src, atomic_write(latest, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)


if __name__ == "__main__":
    sys.exit(main())
