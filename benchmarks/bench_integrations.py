"""Overhead of the framework callbacks: steps/s of tiny real trainings with and without them.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_integrations.py [--repeats 5] [--json]

Each repeat runs every variant once, in an order that alternates between repeats (interleaved, so
a slow phase of a busy machine hits both sides alike); the report gives each variant's median
steps/s and the ratio with / without the callback. Steps/s is measured between the framework's
train-begin and train-end hooks (a timing callback placed first), so imports, model building and
Trainer construction are left out and the callback's own start (writing run.json) is in.

- hf: a 2-layer BERT (hidden 32) for sequence classification, random weights from a config, on
  generated token sequences, `Trainer.train()` on the CPU, logging every 10 steps, no evaluation or
  saving (their cost is the framework's, not the callback's).
- lightning: an embedding + MLP classifier (hidden 32), `Trainer.fit()` on the CPU, no validation or
  checkpointing; the callback computes the gradient norm on the device at every update.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import warnings

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))

VOCAB, SEQ, BATCH = 16, 16, 16

# Seconds spent inside the callback (its hooks, the HF forward hook, the logger calls they make),
# summed by wrapping them: a direct measure that a busy machine's drift between runs does not blur.
_inside = [0.0]


def _timed(fn):
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            _inside[0] += time.perf_counter() - t0

    return wrapper


def _time_hooks(callback, names):
    for name in names:
        setattr(callback, name, _timed(getattr(callback, name)))
    return callback


def _hf_run(steps: int, with_callback: bool, root: str) -> float:
    import torch
    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainerCallback, TrainingArguments
    from transformers.trainer_callback import PrinterCallback

    from runwatch.integrations import HFCallback

    class Timer(TrainerCallback):
        def on_train_begin(self, *args, **kwargs):
            self.t0 = time.perf_counter()

        def on_train_end(self, *args, **kwargs):
            self.t1 = time.perf_counter()

    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, VOCAB, (steps * BATCH, SEQ), generator=g)
    y = ((x == 1).sum(1) > (x == 2).sum(1)).long()
    data = [{"input_ids": a, "labels": b} for a, b in zip(x, y)]
    torch.manual_seed(0)
    model = BertForSequenceClassification(
        BertConfig(
            vocab_size=VOCAB,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=SEQ,
            num_labels=2,
        )
    )
    args = TrainingArguments(
        output_dir=root,
        max_steps=steps,
        per_device_train_batch_size=BATCH,
        logging_steps=10,
        eval_strategy="no",
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
        report_to="none",
        seed=0,
        learning_rate=3e-3,
    )
    timer = Timer()
    hooks = ("on_train_begin", "on_step_end", "on_epoch_end", "on_log", "on_evaluate", "on_save", "on_train_end")
    callbacks = [timer] + (
        [_time_hooks(HFCallback(os.path.join(root, "runwatch"), seq_len=SEQ), hooks)] if with_callback else []
    )
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=callbacks)
    trainer.remove_callback(PrinterCallback)  # it prints every log line
    from runwatch.integrations import hfsession

    capture = hfsession.TrainerSession._capture_loss
    hfsession.TrainerSession._capture_loss = _timed(capture)
    try:
        trainer.train()
    finally:
        hfsession.TrainerSession._capture_loss = capture
    return steps / (timer.t1 - timer.t0), timer.t1 - timer.t0


def _lightning_run(steps: int, with_callback: bool, root: str) -> float:
    import lightning as L
    import torch

    from runwatch.integrations import LightningCallback

    class Timer(L.Callback):
        def on_train_start(self, *args):
            self.t0 = time.perf_counter()

        def on_train_end(self, *args):
            self.t1 = time.perf_counter()

    class Classifier(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(VOCAB, 32)
            self.mlp = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.GELU(), torch.nn.Linear(32, 1))

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.binary_cross_entropy_with_logits(self.mlp(self.embed(x).mean(1)).squeeze(-1), y)

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=3e-3)

    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, VOCAB, (steps * 32, SEQ), generator=g)
    y = ((x == 1).sum(1) > (x == 2).sum(1)).float()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=32)
    torch.manual_seed(0)
    timer = Timer()
    hooks = (
        "on_load_checkpoint",
        "on_train_start",
        "on_before_optimizer_step",
        "on_train_batch_end",
        "on_validation_end",
        "on_save_checkpoint",
        "on_fit_end",
        "on_exception",
    )
    callbacks = [timer] + (
        [_time_hooks(LightningCallback(os.path.join(root, "runwatch")), hooks)] if with_callback else []
    )
    trainer = L.Trainer(
        max_steps=steps,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        limit_val_batches=0,
        default_root_dir=root,
        callbacks=callbacks,
    )
    trainer.fit(Classifier(), loader)
    return steps / (timer.t1 - timer.t0), timer.t1 - timer.t0


RUNS = {"hf": _hf_run, "lightning": _lightning_run}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--hf-steps", type=int, default=300)
    p.add_argument("--lightning-steps", type=int, default=1000)
    p.add_argument("--frameworks", default="hf,lightning")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    args = p.parse_args(argv)
    import logging

    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    steps = {"hf": args.hf_steps, "lightning": args.lightning_steps}
    frameworks = [f for f in args.frameworks.split(",") if f]
    rates: dict[tuple[str, bool], list[float]] = {(f, w): [] for f in frameworks for w in (False, True)}
    shares: dict[str, list[float]] = {f: [] for f in frameworks}
    for framework in frameworks:  # one untimed warm-up run each (imports, first-call costs)
        with tempfile.TemporaryDirectory() as root:
            RUNS[framework](20, True, root)
            RUNS[framework](20, False, root)
    for r in range(args.repeats):
        order = [(f, w) for f in frameworks for w in ((False, True) if r % 2 == 0 else (True, False))]
        for framework, with_callback in order:
            with tempfile.TemporaryDirectory() as root:
                _inside[0] = 0.0
                rate, seconds = RUNS[framework](steps[framework], with_callback, root)
                rates[(framework, with_callback)].append(rate)
                if with_callback:
                    shares[framework].append(_inside[0] / seconds)
    results = {}
    for framework in frameworks:
        without = statistics.median(rates[(framework, False)])
        with_cb = statistics.median(rates[(framework, True)])
        results[framework] = {
            "steps": steps[framework],
            "repeats": args.repeats,
            "without_steps_per_second": without,
            "with_steps_per_second": with_cb,
            "ratio": with_cb / without,
            "slower_percent": (1 - with_cb / without) * 100,
            "inside_callback_percent": statistics.median(shares[framework]) * 100,
            "runs_without": rates[(framework, False)],
            "runs_with": rates[(framework, True)],
        }
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(
            f"{'framework':<10} {'steps':>6} {'without (steps/s)':>18} {'with (steps/s)':>15} {'ratio':>7}"
            f" {'slower':>7} {'in callback':>12}"
        )
        for framework, r in results.items():
            print(
                f"{framework:<10} {r['steps']:>6} {r['without_steps_per_second']:>18.1f} {r['with_steps_per_second']:>15.1f}"
                f" {r['ratio']:>7.3f} {r['slower_percent']:>6.1f}% {r['inside_callback_percent']:>11.2f}%"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
