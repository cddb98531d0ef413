"""A Hugging Face `Trainer` that knows nothing of runwatch and logs to TensorBoard, as users run it.

    python tests/hf_tb_train.py --output_dir OUT [--max_steps 30] [--save_steps 5] [--resume]
        [--kill_at N] [--step_sleep S] [--nan_from N]

`report_to=["tensorboard"]`, `logging_steps=1`: the Trainer writes `OUT/runs/<date>_<host>/`
itself, one new folder per launch, and its checkpoints to `OUT/checkpoint-N/`. `--resume` resumes
from the latest checkpoint (`trainer.train(resume_from_checkpoint=True)`). Faults fire once across
relaunches (a marker file in OUT): `--kill_at N` SIGKILLs the process at step N; `--nan_from N`
makes every loss from step N on NaN (a divergence). A model of one linear layer on a generated
task: a launch takes a few seconds on the CPU, nothing is downloaded.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--output_dir", required=True)
    p.add_argument("--max_steps", type=int, default=30)
    p.add_argument("--save_steps", type=int, default=5)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--kill_at", type=int, default=-1)
    p.add_argument("--nan_from", type=int, default=-1)
    p.add_argument("--step_sleep", type=float, default=0.0)
    args = p.parse_args()

    import torch
    from torch import nn
    from transformers import Trainer, TrainerCallback, TrainingArguments

    torch.manual_seed(0)
    os.makedirs(args.output_dir, exist_ok=True)

    class Data(torch.utils.data.Dataset):  # type: ignore[type-arg]
        def __init__(self) -> None:
            g = torch.Generator().manual_seed(1)
            self.x = torch.randn(512, 8, generator=g)
            self.y = (self.x[:, 0] > 0).long()

        def __len__(self) -> int:
            return len(self.x)

        def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
            return {"x": self.x[i], "labels": self.y[i]}

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(8, 2)
            self.step = 0

        def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
            loss = nn.functional.cross_entropy(self.lin(x), labels)
            if self.training and args.nan_from >= 0 and self.step >= args.nan_from:
                loss = loss * float("nan")
            return {"loss": loss}

    model = Model()

    class Faults(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):  # type: ignore[no-untyped-def]
            model.step = state.global_step + 1
            if args.step_sleep:
                time.sleep(args.step_sleep)

        def on_step_end(self, a, state, control, **kw):  # type: ignore[no-untyped-def]
            marker = os.path.join(args.output_dir, ".fault-kill")
            if state.global_step == args.kill_at and not os.path.exists(marker):
                open(marker, "w").close()
                time.sleep(1.5)  # let the TensorBoard writer flush this step
                os.kill(os.getpid(), signal.SIGKILL)

    targs = TrainingArguments(
        output_dir=args.output_dir,
        max_steps=args.max_steps,
        per_device_train_batch_size=16,
        learning_rate=0.05,
        logging_steps=1,
        save_steps=args.save_steps,
        report_to=["tensorboard"],
        use_cpu=True,
        dataloader_num_workers=0,
        disable_tqdm=True,
        logging_nan_inf_filter=False,
    )
    trainer = Trainer(model=model, args=targs, train_dataset=Data(), callbacks=[Faults()])
    trainer.train(resume_from_checkpoint=True if args.resume else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
