"""runwatch for Lightning (`lightning` 2.x): `LightningCallback`.

    from runwatch.integrations import LightningCallback
    trainer = lightning.Trainer(..., callbacks=[LightningCallback()])

What maps to what (docs/INTEGRATIONS.md has the whole story):
- each optimizer step (one `on_before_optimizer_step` call, whether the GradScaler then skips it or
  not) is one attempted update, written at the train batch end that follows: its loss is `outputs["loss"]` summed over the accumulated batches (Lightning divides each by
  `accumulate_grad_batches`), its pre-clip gradient norm is computed on the device in
  `on_before_optimizer_step`; both stay tensors until the window closes (one sync per window);
- a val event at each validation end of `fit` (not the sanity check), from `trainer.callback_metrics`:
  `val_loss` (or `val/loss`) is the loss, the other `val_*` (`val/*`) values are the metrics;
- a checkpoint event per checkpoint file written, timed around the strategy's CheckpointIO; the
  logger's state goes into the checkpoint dict under `"runwatch"`, and `fit(ckpt_path=...)` from it
  starts a new session;
- `session_end` at `on_fit_end`, or from `on_exception` (`error`, or `interrupted` for Ctrl-C and
  for SIGTERM, which Lightning turns into its `SIGTERMException`);
- phase `eval` in the heartbeat from `on_validation_start` to `on_validation_end`, phase
  `checkpoint` from `on_save_checkpoint` until the file is written.

A non-finite loss raises `NonFiniteLossError` (after the logger wrote `session_end` with reason
`nonfinite_loss`) at the latest when a window closes or a checkpoint is about to be written, so no
checkpoint is saved after it; Lightning then calls `on_exception` and `fit` raises it. With fp16
mixed precision a non-finite gradient norm is a skipped update (the GradScaler skips it), not a
failure.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

try:
    import torch
    from lightning.fabric.plugins import CheckpointIO
    from lightning.pytorch.callbacks import Callback
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        f"runwatch.integrations.lightning needs lightning and torch: pip install 'runwatch[lightning]' ({exc})"
    ) from None

from ..errors import ConfigError, NonFiniteLossError, Terminated
from ..files import data_paths
from ..logger import RunLogger
from .session import NO_SESSION as _NO_SESSION
from .session import STATE_KEY, CallbackOptions, PhaseHolder, check_state, folder_bytes, resume_from, resume_state

if TYPE_CHECKING:
    from pathlib import Path

    import lightning.pytorch as pl
    from lightning.pytorch.utilities.types import STEP_OUTPUT

    from ..logger import Flag, Scalar


class _TimedCheckpointIO(CheckpointIO):
    """Wraps the strategy's CheckpointIO to report each file it writes (path, seconds) to the session."""

    def __init__(self, inner: CheckpointIO, on_saved: Callable[[str, float], None]) -> None:
        self.inner = inner
        self.on_saved = on_saved

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any = None) -> None:
        t0 = time.perf_counter()
        self.inner.save_checkpoint(checkpoint, path, storage_options=storage_options)
        self.on_saved(os.fspath(path), time.perf_counter() - t0)

    def load_checkpoint(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return self.inner.load_checkpoint(*args, **kwargs)

    def remove_checkpoint(self, path: str | Path) -> None:
        self.inner.remove_checkpoint(path)

    def teardown(self) -> None:
        self.inner.teardown()


class _Session:
    """One `fit` on global rank 0: the logger, the current update's losses, the grad-norm tensor."""

    def __init__(
        self,
        options: CallbackOptions,
        val_prefix: str,
        batch_size: int | None,
        trainer: pl.Trainer,
        stored: dict[str, Any] | None,
    ) -> None:
        self.val_prefix = val_prefix
        self.trainer = trainer
        step = int(trainer.global_step)
        resume = resume_state(stored, step, "the checkpoint's runwatch state")
        per_device = batch_size or self._loader_batch_size(trainer)
        self.seq_len = options.seq_len or (resume or {}).get("seq_len") or 1
        world = max(1, int(trainer.world_size))
        recipe: dict[str, Any] = {
            "batch_size": per_device * world,
            "seq_len": self.seq_len,
            "gradient_accumulation_steps": int(trainer.accumulate_grad_batches),
            "qk_clip_threshold": None,
            "max_steps": int(trainer.max_steps),
            "tokens": "seq_len" if options.seq_len or (resume or {}).get("seq_len") else "samples",
            "framework": "lightning",
        }
        if resume is None and step > 0:
            tokens = step * recipe["batch_size"] * self.seq_len * recipe["gradient_accumulation_steps"]
            warnings.warn(
                f"runwatch: the checkpoint holds no runwatch state; the new session starts at step {step} "
                f"with {tokens} tokens and 0 skipped updates (estimated)",
                RuntimeWarning,
                stacklevel=3,
            )
            resume = {"step": step, "tokens": tokens, "skipped": 0}
        optimizers = [
            {"name": f"optimizer{i}", "algorithm": type(opt).__name__.lower()}
            for i, opt in enumerate(trainer.optimizers)
        ]
        self.log = RunLogger(
            options.resolve_run_dir(trainer.default_root_dir),
            recipe=recipe,
            optimizers=optimizers,
            window=options.window,
            resume_from=resume,
            fsync=options.fsync,
            data=options.data,
        )
        self.run_dir = self.log.run_dir
        self.attempted = 0  # optimizer steps since the last train batch end
        # per optimizer (by id): its parameters, and whether they are on one device
        self.params: dict[int, tuple[list[torch.Tensor], bool]] = {}
        self.lr: Scalar = 0.0
        self.loss: torch.Tensor | None = None  # the current update's loss: a device tensor, summed over batches
        self.grad_norm: torch.Tensor | None = None  # the last pre-clip gradient norm: a device tensor
        self.skipped: Flag = False
        self.clipped: Flag = False
        scaler = getattr(trainer.precision_plugin, "scaler", None)
        self.scaled = scaler is not None  # fp16 with a GradScaler: a non-finite gradient means a skipped update
        self.clip_val = float(trainer.gradient_clip_val or 0.0)
        algorithm = str(getattr(trainer.gradient_clip_algorithm, "value", trainer.gradient_clip_algorithm) or "norm")
        self.clips_norm = self.clip_val > 0 and algorithm == "norm"
        self.strategy = trainer.strategy
        self.inner_io = self.strategy.checkpoint_io
        self.strategy.checkpoint_io = _TimedCheckpointIO(self.inner_io, self.on_saved)
        self.val_warned = False
        self.phase = PhaseHolder()

    @staticmethod
    def _loader_batch_size(trainer: pl.Trainer) -> int:
        loader = trainer.train_dataloader
        size = getattr(loader, "batch_size", None)
        if type(size) is int and size > 0:
            return size
        warnings.warn(
            "runwatch: the training DataLoader has no batch_size; pass batch_size=... to RunwatchCallback "
            "(the recipe counts 1 sequence a batch)",
            RuntimeWarning,
            stacklevel=4,
        )
        return 1

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        self.attempted += 1  # one call per optimizer step, skipped by the scaler or not
        self.lr = optimizer.param_groups[0]["lr"]
        params = self.params.get(id(optimizer))
        if params is None:
            tensors: list[torch.Tensor] = [p for group in optimizer.param_groups for p in group["params"]]
            one_device = len({p.device for p in tensors}) <= 1
            self.params[id(optimizer)] = params = (tensors, one_device)
        grads = [p.grad for p in params[0] if p.grad is not None]
        if not grads:
            return
        # On the device, no sync: the norms of the (unscaled, not yet clipped) gradients. One device:
        # foreach norms stacked (what clip_grad_norm_ does inside, without its grouping overhead).
        if params[1]:
            norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
        else:
            norm = torch.nn.utils.get_total_norm(grads, 2.0, error_if_nonfinite=False)
        self.grad_norm = norm
        self.skipped = ~torch.isfinite(norm) if self.scaled else False
        self.clipped = norm > self.clip_val if self.clips_norm else False

    def on_train_batch_end(self, outputs: STEP_OUTPUT) -> None:
        loss = outputs.get("loss") if type(outputs) is dict or isinstance(outputs, Mapping) else outputs
        if isinstance(loss, torch.Tensor):
            if loss.requires_grad:  # Lightning hands over a detached copy; a custom loop may not
                loss = loss.detach()
            self.loss = loss if self.loss is None else self.loss + loss
        if not self.attempted:
            return  # an accumulation batch: no optimizer step yet
        updates, self.attempted = self.attempted, 0
        loss, self.loss = self.loss, None
        if loss is None:
            loss = float("nan")  # training_step returned no loss, yet the optimizer stepped
        grad = self.grad_norm if self.grad_norm is not None else 0.0
        for _ in range(updates):
            self.log.step(loss=loss, lr=self.lr, grad_norm=grad, clipped=self.clipped, skipped=self.skipped)
        self.grad_norm, self.skipped, self.clipped = None, False, False

    def on_validation_start(self) -> None:
        self.phase.enter(self.log, "eval")

    def on_validation_end(self) -> None:
        try:
            self._validated()
        finally:
            self.phase.leave()

    def _validated(self) -> None:
        metrics = self.trainer.callback_metrics
        prefix = self.val_prefix
        loss_key = next((k for k in (f"{prefix}_loss", f"{prefix}/loss") if k in metrics), None)
        if loss_key is None:
            if not self.val_warned:
                self.val_warned = True
                warnings.warn(
                    f"runwatch: no {prefix}_loss (or {prefix}/loss) logged in validation; no val event",
                    RuntimeWarning,
                    stacklevel=4,
                )
            return
        values = {}
        for key, value in metrics.items():
            if key == loss_key:
                continue
            for sep in ("_", "/"):
                if key.startswith(prefix + sep):
                    values[key[len(prefix) + 1 :]] = value
        self.log.val(loss=metrics[loss_key], metrics=values)  # note: one sync per validation

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        state = self.log.state_dict()  # closes the window: a NaN raises here, before the file is written
        state["seq_len"] = self.seq_len
        checkpoint[STATE_KEY] = state
        self.phase.enter(self.log, "checkpoint")  # until the file is written (on_saved)

    def on_saved(self, path: str, seconds: float) -> None:
        try:
            self.log.checkpoint(path, seconds=seconds, bytes=folder_bytes(path))
        finally:
            self.phase.leave()

    def on_train_batch_start(self) -> None:
        if self.phase.name is not None:
            self.phase.leave()  # a save whose file never reached the CheckpointIO

    def close(self, reason: str, error: str | None = None) -> None:
        self.phase.leave()
        try:
            self.log.close(reason, error)
        finally:
            if self.strategy.checkpoint_io is not self.inner_io:
                self.strategy.checkpoint_io = self.inner_io


class LightningCallback(Callback):
    """Writes a schema-v1 run directory from a Lightning `Trainer.fit()` (only on global rank 0).

    Args:
        run_dir: the run directory; None reads `RUNWATCH_RUN_DIR`, else `<default_root_dir>/runwatch`.
        window: optimizer updates per train window (default 10).
        seq_len: tokens per sequence for the recipe; None: 1 (tokens count samples).
        batch_size: sequences per batch on one device; None reads the training DataLoader's.
        val_prefix: validation metrics are the logged `<prefix>_*` / `<prefix>/*` values.
        fsync: fsync the log after every record.
        resume: "auto" sets `resume_from` to `runwatch.resume_checkpoint().path` (a supervised
            rollback's checkpoint, else the run's latest verified one, else None), for
            `trainer.fit(model, ckpt_path=callback.resume_from)`; None leaves it None.
        data: the data files the training reads, fingerprinted into run.json's `provenance`.
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str] | None = None,
        window: int | None = None,
        seq_len: int | None = None,
        *,
        batch_size: int | None = None,
        val_prefix: str = "val",
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
        if batch_size is not None and (type(batch_size) is not int or batch_size < 1):
            raise ConfigError(f"RunwatchCallback.batch_size must be an int >= 1 or None, got {batch_size!r}")
        if not isinstance(val_prefix, str) or not val_prefix:
            raise ConfigError(f"RunwatchCallback.val_prefix must be a non-empty string, got {val_prefix!r}")
        self.batch_size = batch_size
        self.val_prefix = val_prefix
        self.run_dir: str | None = None  # the run directory, once a fit has begun
        self._stored: dict[str, Any] | None = None
        self._session: _Session = _NO_SESSION  # or _NO_SESSION: outside fit, on the other ranks

    def on_load_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        """Keep the runwatch state of the checkpoint being resumed."""
        stored = checkpoint.get(STATE_KEY)
        self._stored = None if stored is None else check_state(stored, "the checkpoint's runwatch state")

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Start a session (a new one, or one resumed from the checkpoint's runwatch state)."""
        if self._session is not _NO_SESSION:
            self._session.close("error", "fit ended without on_fit_end")
            self._session = _NO_SESSION
        stored, self._stored = self._stored, None
        if trainer.is_global_zero:
            self._session = _Session(self.options, self.val_prefix, self.batch_size, trainer, stored)
            self.run_dir = self._session.run_dir

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        """Training goes on: no validation or save is under way."""
        self._session.on_train_batch_start()

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """A validation during fit: the heartbeat shows phase `eval` until it ends."""
        if not trainer.sanity_checking:
            self._session.on_validation_start()

    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        """The pre-clip gradient norm, on the device."""
        self._session.on_before_optimizer_step(optimizer)

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: STEP_OUTPUT, batch: Any, batch_idx: int
    ) -> None:
        """A batch ended; when the optimizer stepped, that is one attempted update."""
        self._session.on_train_batch_end(outputs)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """A validation during fit (not the sanity check) becomes a val event."""
        if not trainer.sanity_checking:
            self._session.on_validation_end()

    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        """Store the logger's state in the checkpoint (its file is logged once written)."""
        self._session.on_save_checkpoint(checkpoint)

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """End the session normally."""
        session, self._session = self._session, _NO_SESSION
        session.close("normal")

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        """End the session: interrupted (Ctrl-C, SIGTERM) or error; a non-finite loss already ended it."""
        session, self._session = self._session, _NO_SESSION
        if isinstance(exception, NonFiniteLossError):
            session.close("nonfinite_loss")  # already written by the logger; this only restores the IO
        elif isinstance(exception, Terminated) or trainer.received_sigterm:
            # SIGTERM (a scheduler's preemption, a stop): Lightning raises its SIGTERMException at the
            # next batch; if it landed while the logger committed a record, the logger raised Terminated
            session.close("interrupted", "SIGTERM")
        elif isinstance(exception, KeyboardInterrupt):
            session.close("interrupted", type(exception).__name__)
        else:
            session.close("error", f"{type(exception).__name__}: {exception}")


# The earlier name, kept for one release.
RunwatchCallback = LightningCallback
