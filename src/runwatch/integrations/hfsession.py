"""One `transformers.Trainer.train()` on the main process, as `HFCallback` (runwatch.integrations.hf) sees it.

`TrainerSession` holds what the Trainer's hooks hand each other: the `RunLogger`, the pending updates
of the window, the forward hook that reads each update's loss where the model returns it (a device
tensor, kept until the window closes: no sync per step), the phases shown in the heartbeat, and
resuming from a checkpoint's runwatch state. The callback only forwards the Trainer's hooks here.

The loss: with `logging_nan_inf_filter` on (the default) the Trainer replaces a NaN/Inf step loss by
the running mean of the interval before it reaches any log (a diverged run logs `loss: 0.0`), hence
the forward hook. A non-finite loss ends the session (`nonfinite_loss`), stops the training before
its next evaluation or save, and makes `Trainer.train()` raise `NonFiniteLossError` once the Trainer
has finished its own end of training.
"""

from __future__ import annotations

import logging
import math
import os
import time
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

try:
    import torch
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        f"runwatch.integrations.hfsession needs transformers and torch: pip install 'runwatch[hf]' ({exc})"
    ) from None

from ..errors import NonFiniteLossError
from ..logger import DEFAULT_MAX_WINDOW_SECONDS, RunLogger
from .session import (
    CallbackOptions,
    PhaseHolder,
    feed,
    folder_bytes,
    read_state,
    resume_state,
    write_state,
)

if TYPE_CHECKING:
    from torch.utils.hooks import RemovableHandle
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from ..logger import Flag, Scalar

_log = logging.getLogger("runwatch")

# RunLogger closes no window by itself: each window ends at a Trainer log (see `feed`), and the
# callback asks for a log once a window is this old (slow steps still give a record a minute).
_NEVER = 1 << 62
MAX_WINDOW_SECONDS = DEFAULT_MAX_WINDOW_SECONDS
# Keys of the Trainer's evaluation metrics that describe the evaluation, not the model.
_EVAL_BOOKKEEPING = (
    "runtime",
    "samples_per_second",
    "steps_per_second",
    "model_preparation_time",
    "jit_compilation_time",
)


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _output_dir(args: TrainingArguments) -> str:
    """`args.output_dir`, which TrainingArguments sets (to its default when not given) on construction."""
    assert args.output_dir is not None
    return args.output_dir


class TrainerSession:
    """One `Trainer.train()` on the main process: the logger, the pending updates, the loss hook."""

    def __init__(
        self,
        options: CallbackOptions,
        args: TrainingArguments,
        state: TrainerState,
        model: torch.nn.Module | None,
        optimizer: torch.optim.Optimizer | None,
    ) -> None:
        self.options = options
        self.args = args
        self.run_dir = options.resolve_run_dir(args.output_dir)
        self.world_size = max(1, int(getattr(args, "world_size", 1) or 1))
        per_device = int(getattr(state, "train_batch_size", None) or args.per_device_train_batch_size)
        self.batch_size = per_device * self.world_size
        self.accumulation = int(args.gradient_accumulation_steps)
        self.counts_tokens = getattr(args, "include_num_input_tokens_seen", "no") not in ("no", False, None)
        self.nonfinite: NonFiniteLossError | None = None
        # (loss tensor or None, skipped) per update since the last window
        self.pending: list[tuple[Scalar | None, bool]] = []
        self.micro: list[torch.Tensor] = []  # losses of the current update's micro-batches
        self.micro_scale: float | None = None
        self.last_grad = 0.0
        self.last_lr = 0.0
        self.last_loss: float | None = None
        self.mark = time.perf_counter()  # end of the last hook before a save, to time the save
        self.tokens_warned = False
        self.eval_warned = False
        self.phase = PhaseHolder()
        self.window_opened = time.monotonic()

        step = self.start_step = int(state.global_step)
        self.resume, self.resume_note = self._find_resume(state, step)
        self.seq_len: int | None = options.seq_len or (self.resume or {}).get("seq_len")
        self.tokens_source: str = (self.resume or {}).get("tokens_source") or ("seq_len" if self.seq_len else "samples")
        self.tokens_seen_mark = int(getattr(state, "num_input_tokens_seen", 0) or 0)
        self.log: RunLogger | None = None
        self.optimizer_name = (
            type(getattr(optimizer, "optimizer", optimizer)).__name__.lower()
            if optimizer is not None
            else str(args.optim)
        )
        self.max_steps = int(state.max_steps)
        if self.seq_len is not None or not self.counts_tokens:
            self._open(self.seq_len or 1)
        # else the first update's token count gives seq_len, and the session opens then (on_step_end)
        self.hook: RemovableHandle | None = (
            model.register_forward_hook(self._capture_loss, with_kwargs=True) if model is not None else None
        )

    # --- setup ------------------------------------------------------------------------------

    def _find_resume(self, state: TrainerState, step: int) -> tuple[dict[str, Any] | None, str | None]:
        if step == 0:
            return None, None
        folders = []
        resume_from_checkpoint = getattr(self.args, "resume_from_checkpoint", None)
        if isinstance(resume_from_checkpoint, str):
            folders.append(resume_from_checkpoint)
        folders.append(os.path.join(_output_dir(self.args), f"{PREFIX_CHECKPOINT_DIR}-{step}"))
        for folder in folders:
            found = resume_state(read_state(folder), step, os.path.join(folder, "runwatch_state.json"))
            if found is not None:
                return found, None
        return None, folders[-1]

    def _open(self, seq_len: int) -> None:
        recipe: dict[str, Any] = {
            "batch_size": self.batch_size,
            "seq_len": seq_len,
            "gradient_accumulation_steps": self.accumulation,
            "qk_clip_threshold": None,
            "max_steps": self.max_steps,
            "learning_rate": float(self.args.learning_rate),
            "tokens": self.tokens_source,
            "framework": "transformers",
        }
        per_update = self.batch_size * seq_len * self.accumulation
        resume = self.resume
        if resume is None and self.resume_note is not None:
            step = self.start_step
            tokens = self.tokens_seen_mark if self.counts_tokens else step * per_update
            warnings.warn(
                f"runwatch: no runwatch state in {self.resume_note}; the new session starts at step {step} "
                f"with {tokens} tokens and 0 skipped updates (estimated)",
                RuntimeWarning,
                stacklevel=3,
            )
            resume = {"step": step, "tokens": tokens, "skipped": 0}
        self.per_update_tokens = per_update
        self.log = RunLogger(
            self.run_dir,
            recipe=recipe,
            optimizers=[
                {
                    "name": "all",
                    "algorithm": self.optimizer_name,
                    "optim": str(getattr(self.args.optim, "value", self.args.optim)),
                }
            ],
            hardware=None,
            window=_NEVER,
            resume_from=resume,
            fsync=self.options.fsync,
            max_window_seconds=None,
            data=self.options.data,
        )
        self.mark = time.perf_counter()

    def _capture_loss(
        self, module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: object
    ) -> None:
        """Forward hook: keep the loss the model returned in training (a device tensor, no sync)."""
        if not module.training or not torch.is_grad_enabled():
            return
        loss = output.get("loss") if isinstance(output, Mapping) else None
        if not isinstance(loss, torch.Tensor):
            return
        loss = loss.detach()
        if loss.dim():
            loss = loss.mean()  # DataParallel returns one loss per device
        # The Trainer treats a loss computed with `num_items_in_batch` as already averaged over the
        # whole accumulated batch (it sums the micro-batches) and otherwise averages the micro-batches.
        if kwargs.get("num_items_in_batch") is not None:
            self.micro_scale = (
                float(self.world_size) if getattr(self.args, "average_tokens_across_devices", False) else 1.0
            )
        else:
            self.micro_scale = None
        self.micro.append(loss)

    # --- hooks --------------------------------------------------------------------------------

    def on_step_end(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        optimizer: torch.optim.Optimizer | None,
    ) -> None:
        micro, self.micro = self.micro, []
        loss: torch.Tensor | None
        if not micro:
            loss = None
        elif self.micro_scale is not None:
            loss = sum(micro[1:], micro[0]) * self.micro_scale if self.micro_scale != 1.0 else sum(micro[1:], micro[0])
        else:
            loss = sum(micro[1:], micro[0]) / len(micro) if len(micro) > 1 else micro[0]
        skipped = bool(getattr(optimizer, "step_was_skipped", False))  # a Python bool accelerate keeps
        self.pending.append((loss, skipped))
        if self.log is None:
            self._open(self._seq_len_from_tokens(state))
        # Each window ends at a Trainer log (it carries the pre-clip gradient norm), so ask for one
        # wherever the Trainer is about to evaluate, save or stop: a NaN is then seen before either.
        if (
            control.should_save
            or control.should_evaluate
            or control.should_training_stop
            or self.options.window is not None
            and len(self.pending) >= self.options.window
            or time.monotonic() - self.window_opened >= MAX_WINDOW_SECONDS
        ):
            control.should_log = True
        self.mark = time.perf_counter()

    def _seq_len_from_tokens(self, state: TrainerState) -> int:
        seen = int(state.num_input_tokens_seen) - self.tokens_seen_mark
        per_sequence, rest = divmod(seen, self.batch_size * self.accumulation)
        if rest or per_sequence < 1:
            warnings.warn(
                f"runwatch: the Trainer counted {seen} tokens in the first update, not a multiple of "
                f"batch size {self.batch_size} x accumulation {self.accumulation}; tokens count samples "
                "(pass seq_len=... to RunwatchCallback)",
                RuntimeWarning,
                stacklevel=3,
            )
            self.tokens_source = "samples"
            return 1
        self.seq_len = per_sequence
        self.tokens_source = "num_input_tokens_seen"
        return per_sequence

    def on_epoch_end(self, control: TrainerControl) -> None:
        if self.nonfinite is not None:
            control.should_save = control.should_evaluate = control.should_log = False
        elif self.pending and (control.should_save or control.should_evaluate):
            control.should_log = True  # the phase is entered at that log
        else:
            self.expect(control)

    def expect(self, control: TrainerControl) -> None:
        """Enter the phase the Trainer goes into next: an evaluation, else a save (it evaluates
        before it saves, right after the training log)."""
        if self.log is None or self.nonfinite is not None:
            return
        if control.should_evaluate:
            self.phase.enter(self.log, "eval")
        elif control.should_save:
            self.phase.enter(self.log, "checkpoint")

    def on_step_begin(self) -> None:
        self.phase.leave()  # a phase no hook closed (a save another callback called off)

    def on_prediction_step(self) -> None:
        if self.phase.name != "eval" and self.log is not None and self.nonfinite is None:
            self.phase.enter(self.log, "eval")  # an evaluation no hook announced (another callback's)

    def on_log(self, state: TrainerState, control: TrainerControl, logs: Mapping[str, object]) -> None:
        if "loss" not in logs or any(k.startswith("eval_") for k in logs):
            return  # evaluation metrics (counted in on_evaluate) and the final summary (`train_loss`)
        loss = _number(logs.get("loss"))
        grad = _number(logs.get("grad_norm"))
        lr = _number(logs.get("learning_rate"))
        if grad is not None:
            self.last_grad = grad
        if lr is not None:
            self.last_lr = lr
        self._flush(state, control, logged_loss=loss)
        self.expect(control)

    def _flush(self, state: TrainerState, control: TrainerControl, logged_loss: float | None = None) -> None:
        """Write the pending updates as one train window."""
        if not self.pending or self.log is None or self.nonfinite is not None:
            return
        updates = self.pending
        if any(loss is None for loss, _ in updates):
            # The model returned no loss (a `compute_loss_func`, label smoothing): use the Trainer's
            # logged mean, and read its NaN filter's signature (loss exactly 0 with a non-finite
            # gradient norm) as the non-finite loss that it is.
            value = logged_loss if logged_loss is not None else self.last_loss
            if value is None:
                return  # no loss known yet: the updates wait for the Trainer's next log
            if value == 0.0 and not math.isfinite(self.last_grad):
                value = math.nan
            updates[:] = [(value, skipped) for _, skipped in updates]
        self.last_loss = logged_loss if logged_loss is not None else self.last_loss
        max_norm = float(getattr(self.args, "max_grad_norm", 0.0) or 0.0)
        clipped = max_norm > 0 and math.isfinite(self.last_grad) and self.last_grad > max_norm
        self._check_tokens(state, len(updates))
        self.window_opened = time.monotonic()
        try:
            # no None left in `updates` (replaced above); feed empties the list, self.pending
            losses = cast("list[tuple[Scalar, Flag]]", updates)
            feed(self.log, losses, lr=self.last_lr, grad_norm=self.last_grad, clipped=clipped)
        except NonFiniteLossError as exc:
            self._stop(control, exc)

    def _check_tokens(self, state: TrainerState, attempted: int) -> None:
        if not self.counts_tokens:
            return
        seen = int(state.num_input_tokens_seen)
        counted, self.tokens_seen_mark = seen - self.tokens_seen_mark, seen
        expected = self.per_update_tokens * attempted
        if counted != expected and not self.tokens_warned:
            self.tokens_warned = True
            warnings.warn(
                f"runwatch: the Trainer counted {counted} tokens in the {attempted} updates before step "
                f"{state.global_step}, the recipe gives {expected}; schema v1 needs a fixed count per "
                "update, so the log follows the recipe",
                RuntimeWarning,
                stacklevel=4,
            )

    def _stop(self, control: TrainerControl, exc: NonFiniteLossError) -> None:
        self.nonfinite = exc
        self.pending.clear()
        control.should_training_stop = True
        control.should_save = control.should_evaluate = False
        _log.error("%s; training stopped before its next evaluation or save", exc)

    def on_evaluate(self, state: TrainerState, control: TrainerControl, metrics: Mapping[str, object]) -> None:
        try:
            self._evaluated(state, control, metrics)
        finally:
            self.phase.leave()
        if control.should_save and self.log is not None and self.nonfinite is None:
            self.phase.enter(self.log, "checkpoint")

    def _evaluated(self, state: TrainerState, control: TrainerControl, metrics: Mapping[str, object]) -> None:
        if self.log is None or self.nonfinite is not None:
            return
        self._flush(state, control)
        if self.nonfinite is not None:
            return
        loss_key = next((k for k in metrics if k.startswith("eval") and k.endswith("_loss")), None)
        if loss_key is None:
            if not self.eval_warned:
                self.eval_warned = True
                warnings.warn(
                    "runwatch: an evaluation without a loss (eval_loss) is not logged", RuntimeWarning, stacklevel=4
                )
            return
        prefix = loss_key[: -len("loss")]
        values = {}
        for key, value in metrics.items():
            number = _number(value)
            if key == loss_key or not key.startswith(prefix) or number is None:
                continue
            name = key[len(prefix) :]
            if name not in _EVAL_BOOKKEEPING:
                values[name] = number
        loss = _number(metrics[loss_key])
        try:
            self.log.val(loss=math.nan if loss is None else loss, metrics=values)
        except NonFiniteLossError as exc:
            self._stop(control, exc)
        self.mark = time.perf_counter()

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl) -> None:
        try:
            self._saved(args, state, control)
        finally:
            self.phase.leave()

    def _saved(self, args: TrainingArguments, state: TrainerState, control: TrainerControl) -> None:
        if self.log is None or self.nonfinite is not None:
            return
        self._flush(state, control)
        if self.nonfinite is not None:
            return
        folder = os.path.join(_output_dir(args), f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
        saved = self.log.state_dict()
        saved["seq_len"] = self.seq_len
        saved["tokens_source"] = self.tokens_source
        if os.path.isdir(folder):
            write_state(folder, saved)
        else:
            _log.warning("runwatch: checkpoint folder %s not found; its runwatch state was not written", folder)
        seconds = time.perf_counter() - self.mark
        self.log.checkpoint(folder, seconds=seconds, bytes=folder_bytes(folder) if os.path.isdir(folder) else None)
        self.mark = time.perf_counter()

    def on_train_end(self, state: TrainerState, control: TrainerControl) -> None:
        self.phase.leave()
        try:
            if self.log is not None and self.nonfinite is None:
                self._flush(state, control)
                if self.nonfinite is None:
                    self.log.close("normal")
        finally:
            self.close_hook()
        if self.nonfinite is not None:
            raise self.nonfinite

    def close_hook(self) -> None:
        if self.hook is not None:
            self.hook.remove()
            self.hook = None

    def abandon(self) -> None:
        """A previous `train()` ended without `on_train_end` (it raised): end its session as an error."""
        self.close_hook()
        self.phase.leave()
        if self.log is not None:
            self.log.close("error", "Trainer.train() ended without on_train_end (an exception)")
