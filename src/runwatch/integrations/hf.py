"""runwatch for the Hugging Face `transformers` Trainer (v5): `HFCallback`, `auroc_metrics`.

    from runwatch.integrations import HFCallback, auroc_metrics
    trainer = Trainer(model=model, args=args, ..., compute_metrics=auroc_metrics,
                      callbacks=[HFCallback()])

What maps to what (docs/INTEGRATIONS.md has the whole story):
- a train window per Trainer logging interval (`logging_steps`): its updates and skipped updates,
  tokens, mean loss, the learning rate and the pre-clip gradient norm that the Trainer logs;
- a val event per evaluation (`eval_*` metrics → `metrics`), from `on_evaluate` only (the same
  metrics also reach `on_log`);
- a checkpoint event per save, with the logger's state written into the checkpoint folder
  (`checkpoint-N/runwatch_state.json`), from which a resumed run starts its new session;
- `session_end` at the end of training;
- phase `eval` in the heartbeat from the Trainer's decision to evaluate (or its first prediction
  step) until `on_evaluate`, phase `checkpoint` from its decision to save until `on_save`.

The loss: with `logging_nan_inf_filter` on (the default) the Trainer replaces a NaN/Inf step loss by
the running mean of the interval before it reaches any log (a diverged run logs `loss: 0.0`), so the
callback reads each update's loss where the model returns it, through a forward hook on the model:
a device tensor, kept as it is until the window closes (no sync per step). A non-finite loss ends the
session (`nonfinite_loss`), stops the training before its next evaluation or save, and makes
`Trainer.train()` raise `NonFiniteLossError` once the Trainer has finished its own end of training.

The callback forwards each hook to the `TrainerSession` of the current `train()` (`hfsession.py`),
which holds the state the hooks hand each other (the loss hook, the pending updates, the phases,
resume). `RunwatchCallback`, the earlier name of `HFCallback`, stays here for one release.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

try:
    import torch
    from transformers import TrainerCallback
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        f"runwatch.integrations.hf needs transformers and torch: pip install 'runwatch[hf]' ({exc})"
    ) from None

from ..errors import ConfigError
from ..files import data_paths
from ..logger.auroc import auroc
from .hfsession import TrainerSession
from .session import NO_SESSION as _NO_SESSION
from .session import CallbackOptions, resume_from

if TYPE_CHECKING:
    from transformers import TrainerControl, TrainerState, TrainingArguments


class HFCallback(TrainerCallback):
    """Writes a schema-v1 run directory from a `transformers.Trainer` (only on the main process).

    Args:
        run_dir: the run directory; None reads `RUNWATCH_RUN_DIR`, else `<output_dir>/runwatch`.
        window: updates per train window; None (default) follows the Trainer's `logging_steps`.
            A smaller window asks the Trainer for a log line every `window` updates as well.
        seq_len: tokens per sequence for the recipe; None infers it from the Trainer's token count
            when `include_num_input_tokens_seen` is on, else 1 (tokens count samples).
        fsync: fsync the log after every record.
        resume: "auto" sets `resume_from` to `runwatch.resume_checkpoint().path` (a supervised
            rollback's checkpoint, else the run's latest verified one, else None), for
            `trainer.train(resume_from_checkpoint=callback.resume_from)`; None leaves it None.
        data: the data files the training reads, fingerprinted into run.json's `provenance`.
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str] | None = None,
        window: int | None = None,
        seq_len: int | None = None,
        *,
        fsync: bool = False,
        resume: str | None = None,
        data: Iterable[str | os.PathLike[str]] | None = None,
    ) -> None:
        self.options = CallbackOptions(
            run_dir=None if run_dir is None else os.fspath(run_dir),
            window=window,
            seq_len=seq_len,
            fsync=fsync,
            data=tuple(data_paths(data, "RunwatchCallback.data")),
        )
        self.resume_from = resume_from(resume, self.options.run_dir)
        self._session: TrainerSession = _NO_SESSION  # or _NO_SESSION: outside training, on the other ranks
        self.run_dir: str | None = None  # the run directory, once a training has begun

    def on_train_begin(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        model: torch.nn.Module | None = None,
        optimizer: torch.optim.Optimizer | None = None,
        **kwargs: Any,
    ) -> None:
        """Start a session (a new one, or one resumed from the checkpoint's runwatch state)."""
        if self._session is not _NO_SESSION:
            self._session.abandon()
            self._session = _NO_SESSION
        if state.is_world_process_zero:
            self._session = TrainerSession(self.options, args, state, model, optimizer)
            self.run_dir = self._session.run_dir

    def on_step_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """Training goes on: no evaluation or save is under way."""
        self._session.on_step_begin()

    def on_step_end(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        optimizer: torch.optim.Optimizer | None = None,
        **kwargs: Any,
    ) -> None:
        """One optimizer update (or a skipped one) happened."""
        self._session.on_step_end(args, state, control, optimizer)

    def on_prediction_step(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """An evaluation batch: the heartbeat shows phase `eval` until `on_evaluate`."""
        self._session.on_prediction_step()

    def on_epoch_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """Ask for a log before an end-of-epoch evaluation or save; none after a non-finite loss."""
        self._session.on_epoch_end(control)

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, float] | None = None,
        **kwargs: Any,
    ) -> None:
        """A training log closes the window of the updates since the previous one."""
        self._session.on_log(state, control, logs or {})

    def on_evaluate(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        metrics: dict[str, float] | None = None,
        **kwargs: Any,
    ) -> None:
        """An evaluation becomes a val event."""
        self._session.on_evaluate(state, control, metrics or {})

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        """A saved checkpoint: store the logger's state in it, then log a checkpoint event."""
        self._session.on_save(args, state, control)

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """End the session; raise NonFiniteLossError if the loss went non-finite."""
        session, self._session = self._session, _NO_SESSION
        session.on_train_end(state, control)


# The earlier name, kept for one release.
RunwatchCallback = HFCallback


def auroc_metrics(eval_pred: Any) -> dict[str, float]:
    """`compute_metrics` for binary classification: `auroc` and `accuracy` from the logits.

    Takes one logit per example, or two (the score is logit[1] - logit[0]); labels 0/1. AUROC is left
    out when the labels hold a single class or a score is not finite.
    """
    predictions = getattr(eval_pred, "predictions", None)
    labels = getattr(eval_pred, "label_ids", None)
    if predictions is None and isinstance(eval_pred, tuple):
        predictions, labels = eval_pred
    if isinstance(predictions, tuple):
        predictions = predictions[0]
    import numpy as np

    logits = np.asarray(predictions, dtype=np.float64)
    y = np.asarray(labels).reshape(-1)
    if logits.ndim == 2 and logits.shape[1] == 2:
        scores = logits[:, 1] - logits[:, 0]
    elif logits.ndim == 1 or (logits.ndim == 2 and logits.shape[1] == 1):
        scores = logits.reshape(-1)
    else:
        raise ConfigError(f"auroc_metrics: predictions must have shape (N,), (N, 1) or (N, 2), got {logits.shape}")
    if scores.shape[0] != y.shape[0]:
        raise ConfigError(
            f"auroc_metrics: label_ids must hold one label per prediction ({scores.shape[0]}), got {y.shape[0]}"
        )
    out = {"accuracy": float(((scores > 0) == (y > 0.5)).mean()) if y.size else 0.0}
    if np.isfinite(scores).all():
        area = auroc(scores.tolist(), y.tolist())
        if area is not None:
            out["auroc"] = area
    return out
