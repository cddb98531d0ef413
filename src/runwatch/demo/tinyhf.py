"""A tiny, real Hugging Face `Trainer.train()` on the CPU with runwatch's callback: the demo's
`--framework hf` run.

    python -m runwatch.demo.tinyhf RUN_DIR [--steps 300] [--inject nan|stall|crash|slowdown|explode]

A 2-layer BERT with random weights built from a config (nothing is downloaded) learns the same
generated task as `runwatch.demo.tinytrain`. The Trainer's checkpoints go to RUN_DIR/hf/; runwatch's
log to RUN_DIR (or RUNWATCH_RUN_DIR). A second start on the same RUN_DIR resumes from the latest
checkpoint, which the callback turns into a new session.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .tinytrain import INJECTIONS, VOCAB, parse_fault

if TYPE_CHECKING:
    import torch
    from transformers import TrainerControl, TrainerState, TrainingArguments
    from transformers.modeling_outputs import SequenceClassifierOutput

SEQ_LEN = 16
BATCH = 16


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m runwatch.demo.tinyhf", description=__doc__.splitlines()[0])
    p.add_argument("run_dir")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--step-sleep", type=float, default=0.0, help="extra seconds a step")
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--inject", choices=INJECTIONS, default=None)
    p.add_argument("--inject-at", type=int, default=150)
    p.add_argument("--crash-at", type=int, default=None, help="SIGKILL this process at this step (once)")
    p.add_argument("--ckpt-every", type=int, default=None, help="save every N steps (default: --eval-every)")
    p.add_argument(
        "--fault",
        type=parse_fault,
        action="append",
        default=[],
        metavar="KIND@STEP",
        help="a fault that fires once across relaunches (crash, kill, hang, nan, sigterm); repeatable",
    )
    return p


def _fires(args: argparse.Namespace, kind: str, step: int) -> bool:
    """Whether the fault `kind` is due at `step` and has not fired yet in this run (once only)."""
    if (kind, step) not in args.fault:
        return False
    marker = os.path.join(args.run_dir, f".fault-{kind}-{step}")
    if os.path.exists(marker):
        return False
    open(marker, "w").close()
    return True


def main(argv: Sequence[str] | None = None) -> int:
    opts = _parser().parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainerCallback, TrainingArguments

    from ..errors import NonFiniteLossError
    from ..integrations import HFCallback, auroc_metrics
    from ..reading import resume_checkpoint
    from .tinytrain import make_batch

    resume = resume_checkpoint(run_dir=opts.run_dir)
    # RUNWATCH_SKIP_STEPS: the Trainer replays the data order of a resumed run; leaving out the
    # batches that led into the trouble is shifting the data past them.
    shift = len(resume.skip) * BATCH if resume.skip else 0

    class Sequences(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
        def __init__(self, n: int, seed: int, shift: int = 0) -> None:
            self.x, y = make_batch(0, n, SEQ_LEN, "normal", seed=seed)
            self.y = y.long()
            self.shift = shift

        def __len__(self) -> int:
            return len(self.x)

        def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
            i = (i + self.shift) % len(self.x)
            return {"input_ids": self.x[i], "labels": self.y[i]}

    class Faulty(BertForSequenceClassification):  # type: ignore[no-untyped-call]  # transformers' __init_subclass__ is not annotated
        """Injects the requested fault into the training forward pass from `inject_at` on."""

        global_step: int  # the Trainer's, set by Pace at each step's end

        def forward(
            self, input_ids: torch.Tensor | None = None, labels: torch.Tensor | None = None, **kwargs: Any
        ) -> SequenceClassifierOutput:
            out: SequenceClassifierOutput = super().forward(input_ids=input_ids, labels=labels, **kwargs)
            if self.training and (
                opts.inject == "nan" and self.global_step >= opts.inject_at or _fires(opts, "nan", self.global_step + 1)
            ):
                assert out.loss is not None  # the Trainer passes labels
                out.loss = out.loss * float("nan")
            return out

    class Pace(TrainerCallback):
        """Slows, stalls, kills the run or blows its gradients up on request."""

        exploding = False

        def on_step_begin(
            self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
        ) -> None:
            if opts.inject == "explode" and state.global_step >= opts.inject_at and not self.exploding:
                self.exploding = True  # gradients 1e4x too large from here on; clipping keeps the weights sane
                for p in model.parameters():
                    p.register_hook(lambda g: g * 1e4)  # type: ignore[no-untyped-call]  # torch's register_hook is not annotated

        def on_step_end(
            self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
        ) -> None:
            model.global_step = state.global_step
            fault = opts.inject if opts.inject and state.global_step >= opts.inject_at else None
            marker = os.path.join(opts.run_dir, ".crashed-once")
            if fault == "crash" or (opts.crash_at == state.global_step and not os.path.exists(marker)):
                open(marker, "w").close()
                print(f"step {state.global_step}: crashing (SIGKILL)", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            if fault == "stall" or _fires(opts, "hang", state.global_step):
                print(f"step {state.global_step}: stalling (injected)", flush=True)
                time.sleep(3600)
            if _fires(opts, "crash", state.global_step):
                print(f"step {state.global_step}: crashing (injected)", flush=True)
                os._exit(3)
            for kind, sig in (("kill", signal.SIGKILL), ("sigterm", signal.SIGTERM)):
                if _fires(opts, kind, state.global_step):
                    print(f"step {state.global_step}: {kind} (injected)", flush=True)
                    os.kill(os.getpid(), sig)
            if opts.step_sleep or fault == "slowdown":
                time.sleep(opts.step_sleep * (6 if fault == "slowdown" else 1) + (0.05 if fault == "slowdown" else 0))

    torch.manual_seed(0)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1") or 1))
    config = BertConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=SEQ_LEN,
        num_labels=2,  # type: ignore[call-arg]  # a PreTrainedConfig property, which its __init__ takes through **kwargs
    )
    model = Faulty(config)
    model.global_step = 0
    out_dir = os.path.join(opts.run_dir, "hf")
    targs = TrainingArguments(
        output_dir=out_dir,
        max_steps=opts.steps,
        per_device_train_batch_size=BATCH,
        logging_steps=10,
        eval_strategy="steps",
        eval_steps=opts.eval_every,
        save_steps=opts.ckpt_every or opts.eval_every,
        learning_rate=3e-3,
        use_cpu=True,
        disable_tqdm=True,
        report_to="none",
        seed=0,
        dataloader_num_workers=0,
    )
    trainer = Trainer(
        model=model,
        args=targs,
        train_dataset=Sequences(8000, 0, shift),
        eval_dataset=Sequences(256, 1),
        compute_metrics=auroc_metrics,
        callbacks=[HFCallback(opts.run_dir, seq_len=SEQ_LEN), Pace()],
    )
    # RUNWATCH_RESUME_FROM after a rollback, else the run's latest verified checkpoint; else the
    # Trainer's own latest in output_dir, if any
    latest = os.path.isdir(out_dir) and any(n.startswith("checkpoint-") for n in os.listdir(out_dir))
    if resume.path:
        print(
            f"resuming from {resume.path}" + (f" (rollback {resume.rollback})" if resume.rollback else ""), flush=True
        )
    try:
        trainer.train(resume_from_checkpoint=resume.path or (True if latest else None))
    except NonFiniteLossError as exc:
        print(str(exc), file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        print("interrupted; session ended (reason interrupted)", file=sys.stderr, flush=True)
        return 130
    print(f"done: {opts.steps} steps, run directory {opts.run_dir}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
