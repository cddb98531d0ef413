"""The run logger: schema-v1 telemetry from inside a training loop (SPEC §1–2).

    log = RunLogger("runs/a", recipe={"batch_size": 32, "seq_len": 512,
                                      "gradient_accumulation_steps": 1, "qk_clip_threshold": None})
    with log:
        for batch in data:
            ...
            log.step(loss=loss, lr=sched.get_last_lr()[0], grad_norm=norm)

`step()` only appends its arguments to small lists: tensors stay on their device and are converted
once per window (`window` attempted updates), in one `.tolist()` per device. That conversion is the
only host-device sync the logger adds. Standard library only; torch is used when the caller passes
tensors (and then it is already imported).
"""

from __future__ import annotations

import atexit
import contextlib
import math
import os
import signal
import socket
import sys
import threading
import time
import warnings
from typing import Any, Iterator

from .errors import NonFiniteLossError, RanksOutOfStepError, RunwatchError
from .distributed import HeartbeatWriter, process_group
from .heartbeats import HeartbeatConfig
from .journal import Journal, NullJournal, new_session_id, utc_now
from .schema import SCHEMA_VERSION, END_REASONS, validate_manifest, window_tokens

__all__ = ["RunLogger", "detect_hardware"]


# Attempted updates per train window: one line per 10 steps keeps the log ~50 bytes a step and the
# per-step cost at a list append, while a stall still shows within one window of steps.
DEFAULT_WINDOW = 10
# Overrides the default window of RunLogger and the callbacks (an explicit `window=` wins):
# `runwatch bench` sets it to 1 so that every update is a train record of its own.
WINDOW_ENV = "RUNWATCH_WINDOW"


def default_window(fallback: int | None = DEFAULT_WINDOW) -> int | None:
    """The window when none is passed: `RUNWATCH_WINDOW` when set (an int >= 1), else `fallback`."""
    text = os.environ.get(WINDOW_ENV, "").strip()
    if not text:
        return fallback
    if not text.isascii() or not text.isdigit() or int(text) < 1:
        from .errors import UsageError

        raise UsageError(f"{WINDOW_ENV} must be an int >= 1, got {text!r}")
    return int(text)


def detect_hardware() -> dict:
    """Host, world size and accelerators, without importing torch when the caller has not."""
    hw: dict[str, Any] = {
        "host": socket.gethostname(),
        "world_size": int(os.environ.get("WORLD_SIZE", "1") or 1),
    }
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        hw["device"] = torch.cuda.get_device_name(0)
        hw["device_count"] = torch.cuda.device_count()
    else:
        hw["device"] = "cpu"
        hw["device_count"] = 0
    return hw


def _host_rss_peak_bytes() -> int | None:
    try:
        import resource
    except ImportError:  # pragma: no cover - not on Unix
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def _check_recipe(recipe: Any) -> dict:
    if not isinstance(recipe, dict):
        raise ValueError(f"RunLogger.recipe must be a dict, got {type(recipe).__name__}")
    recipe = dict(recipe)
    for key in ("batch_size", "seq_len", "gradient_accumulation_steps"):
        if key not in recipe:
            raise ValueError(f"RunLogger.recipe.{key} is required (a positive int)")
        value = recipe[key]
        if type(value) is not int or value < 1:
            raise ValueError(f"RunLogger.recipe.{key} must be a positive int, got {value!r}")
    threshold = recipe.setdefault("qk_clip_threshold", None)
    if threshold is not None and (
        type(threshold) not in (int, float) or not math.isfinite(threshold) or threshold <= 0
    ):
        raise ValueError(f"RunLogger.recipe.qk_clip_threshold must be a positive number or None, got {threshold!r}")
    return recipe


def _check_start(state: Any) -> dict:
    if not isinstance(state, dict):
        raise ValueError(f"RunLogger.resume_from must be a dict from state_dict(), got {type(state).__name__}")
    start = {}
    for key in ("step", "tokens", "skipped"):
        value = state.get(key)
        if type(value) is not int or value < 0:
            raise ValueError(f"RunLogger.resume_from.{key} must be an int >= 0, got {value!r}")
        start[key] = value
    return start


def _device_name() -> str:
    """This process's accelerator (the current CUDA device) or "cpu"; torch only if imported."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        return str(torch.cuda.get_device_name(torch.cuda.current_device()))
    return "cpu"


def _rank_hardware(hw: dict, peers: list[dict], detected: bool) -> dict:
    """`hardware` of a multi-rank session: world size, nodes (distinct hosts), and the device of
    each rank, run-length encoded in rank order (`[{"device": "NVIDIA H200", "ranks": 8}]`) so
    that 10k ranks stay a few bytes."""
    hw = dict(hw)
    runs: list[dict] = []
    for peer in peers:
        if runs and runs[-1]["device"] == peer["device"]:
            runs[-1]["ranks"] += 1
        else:
            runs.append({"device": peer["device"], "ranks": 1})
    extra = {"world_size": len(peers), "nodes": len({p["host"] for p in peers}), "rank_devices": runs}
    for key, value in extra.items():
        if detected:
            hw[key] = value
        else:  # the caller's own keys win
            hw.setdefault(key, value)
    return hw


class _NoHeartbeat:
    """A single process keeps no heartbeat file."""

    def window(self, step: int, train_seconds: float) -> None:
        """Nothing to write."""

    def end(self) -> None:
        """Nothing to stop."""


# The row each rank contributes to a window's all_gather (float64): counts, sums and maxima, so
# that rank 0 can form the window over all ranks from one collective of 14 numbers a rank.
(_ATTEMPTED, _UPDATES, _LOSS_SUM, _FINITE, _GRAD_SUM, _GRAD_MAX, _CLIPPED, _SECONDS, _BAD, _BAD_VALUE,
 _QK_ROWS, _QK_OBSERVED, _QK_CLIPPED, _QK_MAX) = range(14)


def _window_row(n: int, losses: list[float], grads: list[float], clipped: list[float], skips: list[float],
                qk: list[tuple[int, float, float, float]], train_seconds: float, bad: int) -> list[float]:
    """This rank's row for the first `n` attempted updates of its window; `bad` is the index of its
    first non-finite loss (n when none)."""
    ok = [i for i in range(n) if not skips[i]]
    finite = [g for g in grads[:n] if math.isfinite(g)]
    logits = [q[3] for q in qk if math.isfinite(q[3])]
    return [
        float(n), float(len(ok)), math.fsum(losses[i] for i in ok) if bad >= n else 0.0,
        float(len(finite)), math.fsum(finite), max(finite, default=0.0),
        float(sum(1 for i in ok if clipped[i])), float(train_seconds),
        float(bad), losses[bad] if bad < n else 0.0,
        float(len(qk)), math.fsum(q[1] for q in qk), math.fsum(q[2] for q in qk),
        max(logits, default=math.nan),
    ]


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread so that `with RunLogger(...)` ends the session."""


_HOST_NUMBER_TYPES = frozenset({float, int, bool})
_TENSOR_TYPES: dict[type, bool] = {}  # type -> whether it is a torch tensor type (memo)


def _is_tensor_type(t: type) -> bool:
    known = _TENSOR_TYPES.get(t)
    if known is None:
        known = _TENSOR_TYPES[t] = hasattr(t, "device") and hasattr(t, "detach")
    return known


def _as_float_list(values: list) -> list[float]:
    """Python floats for `values` (numbers, numpy scalars, 0-dim tensors): one sync per device."""
    if _HOST_NUMBER_TYPES.issuperset(map(type, values)):  # the common case: plain Python numbers
        return list(map(float, values))
    out: list[Any] = list(values)
    groups: dict[tuple, list[int]] = {}  # (device, dtype) -> indices of the tensors
    for i, v in enumerate(values):
        t = type(v)
        if t in _HOST_NUMBER_TYPES:
            out[i] = float(v)
        elif _is_tensor_type(t):
            key = (v.device, v.dtype)
            group = groups.get(key)
            if group is None:
                groups[key] = [i]
            else:
                group.append(i)
        else:  # numpy scalars and other numbers: host values, no sync
            out[i] = float(v)
    if groups:
        by_device: dict[Any, list[list[int]]] = {}
        for (device, _dtype), group in groups.items():
            by_device.setdefault(device, []).append(group)
        for device, device_groups in by_device.items():
            idx = [i for group in device_groups for i in group]
            # note: this is the logger's only CPU-GPU sync point, once per window and device
            for i, f in zip(idx, _stack_all(device, [[values[i] for i in group] for group in device_groups]).tolist()):
                out[i] = float(f)
    return out


def _stack_all(device: Any, groups: list[list]) -> Any:
    """One 1-d tensor of the one-element tensors in `groups` (one device, one dtype a group)."""
    import torch

    # One stack per dtype: stacking mixed dtypes takes a much slower promoting path.
    parts = [_stack_one_dtype(group) for group in groups]
    if not all(p.dtype is torch.bool or p.is_floating_point() for p in parts):
        # Integers go to float64, as float() would round them (float32 where a device has no float64).
        wide = torch.float64 if device.type in ("cpu", "cuda") else torch.float32
        parts = [p.to(wide) for p in parts]
    # Floats and bools promote to the widest float among them, exactly.
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def _stack_one_dtype(tensors: list) -> Any:
    import torch

    # (Tensors that require grad are stacked with a graph that is dropped at once; no_grad would
    # cost more than it saves.)
    try:
        stacked = torch.stack(tensors)
    except RuntimeError:  # shapes differ, e.g. 0-dim and (1,)
        stacked = None
    if stacked is None or stacked.shape != (len(tensors),):
        # reshape(()) raises the usual error for a tensor of more than one element
        stacked = torch.stack([t.reshape(()) for t in tensors])
    return stacked


class RunLogger:
    """Writes one schema-v1 session of a run directory: `run.json` and `metrics.jsonl`.

    Args:
        run_dir: the run directory; None reads `RUNWATCH_RUN_DIR` (set by `runwatch launch`).
        recipe: `batch_size` (sequences per micro-step, all data-parallel ranks), `seq_len`,
            `gradient_accumulation_steps`, optional `qk_clip_threshold`; other keys are copied.
        optimizers: a list of `{"name": ..., "algorithm": ...}`.
        hardware: a free dict; None detects host, world size and devices.
        window: attempted updates per train window; None: `RUNWATCH_WINDOW`, else 10.
        resume_from: `state_dict()` saved in the checkpoint being resumed; None starts at zero.
        fsync: fsync after every record (always at the session's end).
        heartbeat: how often each rank of a torch.distributed run refreshes its heartbeat.

    Under an initialised torch.distributed process group (world size > 1), global rank 0 alone
    writes the files; every rank must call `step()` the same number of times (windows close at
    the same attempted-update counts everywhere, each with one small all_gather: the only sync
    point the logger adds) and leave `with` together. See docs/MULTIRANK.md.
    """

    def __init__(
        self,
        run_dir: str | os.PathLike | None = None,
        recipe: dict | None = None,
        optimizers: list | None = None,
        hardware: dict | None = None,
        window: int | None = None,
        resume_from: dict | None = None,
        *,
        fsync: bool = False,
        heartbeat: HeartbeatConfig | None = None,
    ) -> None:
        if run_dir is None:
            run_dir = os.environ.get("RUNWATCH_RUN_DIR")
            if not run_dir:
                raise ValueError("RunLogger needs a run directory (run_dir=..., or RUNWATCH_RUN_DIR)")
        if recipe is None:
            raise ValueError("RunLogger.recipe is required: batch_size, seq_len, gradient_accumulation_steps")
        if window is None:
            window = default_window()
        if type(window) is not int or window < 1:
            raise ValueError(f"RunLogger.window must be an int >= 1, got {window!r}")
        optimizers = [] if optimizers is None else list(optimizers)
        for i, opt in enumerate(optimizers):
            if not isinstance(opt, dict) or not isinstance(opt.get("algorithm"), str):
                raise ValueError(f"RunLogger.optimizers[{i}] must be a dict with a string 'algorithm', got {opt!r}")
        if heartbeat is not None and not isinstance(heartbeat, HeartbeatConfig):
            raise ValueError(f"RunLogger.heartbeat must be a HeartbeatConfig or None, got {type(heartbeat).__name__}")
        if hardware is not None and not isinstance(hardware, dict):
            raise ValueError(f"RunLogger.hardware must be a dict or None, got {type(hardware).__name__}")
        self.run_dir = os.fspath(run_dir)
        self.recipe = _check_recipe(recipe)
        self.window = window
        self._fsync = bool(fsync)
        start = _check_start(resume_from) if resume_from is not None else {"step": 0, "tokens": 0, "skipped": 0}
        self._tokens_per_attempt = window_tokens(self.recipe, 1)
        self._qk_threshold = self.recipe["qk_clip_threshold"]

        os.makedirs(self.run_dir, exist_ok=True)
        self._metrics_path = os.path.join(self.run_dir, "metrics.jsonl")
        self._manifest_path = os.path.join(self.run_dir, "run.json")
        # Under torch.distributed only global rank 0 writes run.json and metrics.jsonl; every rank
        # closes the same windows (one all_gather each) and keeps its own heartbeat file.
        self._group = process_group()
        writer = self._group is None or self._group.rank == 0
        failure: BaseException | None = None
        manifest: dict | None = None
        self._journal: Journal | NullJournal = NullJournal()
        if writer:
            try:
                self._journal = Journal(self.run_dir, self._fsync)
                manifest = self._journal.load_or_create_manifest(resume_from)
            except BaseException as exc:
                self._journal.close()
                if self._group is None:
                    raise
                failure = exc  # told to the other ranks first, so that none waits for rank 0
        self.session_id: str = new_session_id()
        while manifest is not None and any(s["session_id"] == self.session_id for s in manifest["sessions"]):
            self.session_id = new_session_id()
        self.run_id: str = manifest["run_id"] if manifest is not None else ""
        if self._group is not None:
            peers = self._group.exchange({  # once per session: who is where, and rank 0's run
                "host": self._group.host, "device": _device_name(), "window": window,
                "run_id": self.run_id, "session_id": self.session_id,
                "error": None if failure is None else f"{type(failure).__name__}: {failure}",
            })
            if failure is not None:
                raise failure
            if peers[0]["error"] is not None:
                raise RunwatchError(f"{self.run_dir}: rank 0 could not open the run: {peers[0]['error']}")
            windows = sorted({p["window"] for p in peers})
            if len(windows) > 1:
                if writer:
                    self._journal.close()
                raise ValueError(f"RunLogger.window must be the same on every rank, got {windows}")
            self.run_id, self.session_id = peers[0]["run_id"], peers[0]["session_id"]
        if manifest is not None:
            try:
                hw = detect_hardware() if hardware is None else hardware
                if self._group is not None:
                    hw = _rank_hardware(hw, peers, detected=hardware is None)
                manifest["sessions"].append({
                    "session_id": self.session_id,
                    "started_at": utc_now(),
                    "start": start,
                    "recipe": self.recipe,
                    "optimizers": optimizers,
                    "hardware": hw,
                })
                validate_manifest(manifest, "RunLogger manifest")
                self._journal.write_manifest(manifest)
            except BaseException:
                self._journal.close()
                raise
        self._closed = False
        # counters: cumulative run totals (written) and this session's attempted tokens
        self._step = start["step"]
        self._tokens_total = start["tokens"]
        self._skipped_total = start["skipped"]
        self._session_tokens = 0
        # the open window
        self._losses: list = []
        self._grads: list = []
        self._clipped: list = []
        self._skips: list = []
        self._qk: list = []  # (index, observed, clipped, max_logit) for steps that report QK-Clip
        self._lr: Any = 0.0
        self._train_seconds = 0.0
        self._profiling_seconds = 0.0
        self._t0 = time.monotonic()
        self._mark = time.perf_counter()
        self._attempted_done = 0  # attempted updates of this session in closed windows
        self._beat: HeartbeatWriter | _NoHeartbeat = _NoHeartbeat()
        if self._group is not None:
            self._beat = HeartbeatWriter(
                self.run_dir, self._group.rank, self._group.world_size, self.session_id,
                self._progress, heartbeat if heartbeat is not None else HeartbeatConfig(),
            )
            self._beat.start(self._step)
        self._terminated = False
        self._pid = os.getpid()  # a forked child (a data-loader worker) must not end the session
        # SIGTERM/SIGINT arriving while a record is being committed wait until it is (see _on_signal)
        self._busy = 0
        self._pending_signal: int | None = None
        self._previous_handlers: dict[int, tuple[Any, Any]] = {}  # signal -> (previous, ours)
        self._install_signal_handlers()
        atexit.register(self._at_exit)

    # --- the calls of a training loop -------------------------------------------------------

    def step(
        self,
        loss: Any,
        lr: Any,
        grad_norm: Any,
        clipped: Any = False,
        skipped: Any = False,
        qk_observed: Any = None,
        qk_clipped: Any = None,
        qk_max_logit: Any = None,
    ) -> None:
        """Record one attempted optimizer update (successful unless `skipped`).

        `loss`, `grad_norm` (pre-clip), `clipped`, `skipped` and the QK-Clip counts may be Python
        numbers or 0-dim tensors; tensors are kept on their device until the window closes.
        """
        now = time.perf_counter()
        self._train_seconds += now - self._mark
        self._mark = now
        if self._closed:
            raise RunwatchError(self._closed_message())
        if type(loss) is float:
            # NaN or +-Inf: fail loud now, no need to wait for the window (a multi-rank window
            # closes on every rank together, so there it waits for the boundary)
            if loss - loss != 0.0 and self._group is None:
                self._losses.append(loss)
                self._grads.append(grad_norm)
                self._clipped.append(clipped)
                self._skips.append(skipped)
                self._close_window()
        elif getattr(loss, "requires_grad", False):
            loss = loss.detach()  # keep the value, not the autograd graph
        if grad_norm is None:
            raise ValueError("RunLogger.step: grad_norm is required (the pre-clip gradient norm)")
        if getattr(grad_norm, "requires_grad", False):
            grad_norm = grad_norm.detach()
        self._busy += 1  # the four lists stay the same length, even if a signal comes in between
        try:
            self._losses.append(loss)
            self._grads.append(grad_norm)
            self._clipped.append(clipped)
            self._skips.append(skipped)
        finally:
            self._busy -= 1
        self._lr = lr
        if qk_observed is not None or qk_clipped is not None:
            if self._qk_threshold is None:
                raise ValueError("RunLogger.step: QK-Clip counts need recipe.qk_clip_threshold")
            self._qk.append((len(self._losses) - 1, qk_observed, qk_clipped, qk_max_logit))
        if len(self._losses) >= self.window:
            self._close_window()
        if self._pending_signal is not None:
            self._deliver_pending_signal()

    def val(self, loss: Any, metrics: dict | None = None) -> None:
        """Record an evaluation at the current step: its loss and named metrics (e.g. `auroc`)."""
        self._ensure_open()
        self._close_window_before_record()
        loss_f, *values = _as_float_list([loss, *(metrics or {}).values()])  # note: a sync, once per eval
        if not math.isfinite(loss_f):
            self._fail_nonfinite(f"non-finite validation loss {loss_f} at step {self._step}")
        clean: dict[str, float] = {}
        for name, value in zip((metrics or {}).keys(), values):
            if math.isfinite(value):
                clean[str(name)] = value
            else:
                warnings.warn(f"runwatch: val metric {name!r} is {value}; left out of the record", RuntimeWarning, stacklevel=2)
        self._write(self._record("val", loss=loss_f, metrics=clean))
        self._mark = time.perf_counter()

    def checkpoint(self, path: str | os.PathLike, seconds: float, bytes: int | None = None, verified: bool | None = None) -> None:
        """Record a checkpoint written to `path` in `seconds` (optionally its size, and whether it was
        read back and loaded)."""
        self._ensure_open()
        self._close_window_before_record()
        seconds = float(seconds)
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"RunLogger.checkpoint: seconds must be a finite number >= 0, got {seconds!r}")
        fields: dict[str, Any] = {"path": os.fspath(path), "seconds": seconds}
        if bytes is not None:
            if type(bytes) is not int or bytes < 0:
                raise ValueError(f"RunLogger.checkpoint: bytes must be an int >= 0, got {bytes!r}")
            fields["bytes"] = bytes
        if verified is not None:
            fields["verified"] = bool(verified)
        self._write(self._record("checkpoint", **fields))
        self._mark = time.perf_counter()

    @contextlib.contextmanager
    def profiling(self) -> Iterator[None]:
        """Time spent inside counts as `profiling_seconds` (steps inside still count as training)."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            now = time.perf_counter()
            self._profiling_seconds += now - t0
            self._mark = now

    def state_dict(self) -> dict:
        """Counters to save inside a checkpoint; pass them back as `resume_from` when resuming.

        Closes the open window first, so that the log and the checkpoint agree. Under
        torch.distributed the window stays open (closing it is a collective, and often only rank 0
        saves); its updates are counted in as this rank saw them.
        """
        self._ensure_open()
        self._close_window_before_record()
        step, tokens, skipped = self._step, self._tokens_total, self._skipped_total
        if self._group is not None and self._losses:
            skips = sum(1 for s in _as_float_list(self._skips) if s)  # note: a sync, once per checkpoint
            step += len(self._losses) - skips
            tokens += self._tokens_per_attempt * len(self._losses)
            skipped += skips
        return {
            "schema_version": SCHEMA_VERSION,
            "run_id": self.run_id,
            "session_id": self.session_id,
            "step": step,
            "tokens": tokens,
            "skipped": skipped,
        }

    @property
    def current_step(self) -> int:
        """Successful updates so far (written windows only)."""
        return self._step

    def close(self, reason: str = "normal", error: str | None = None) -> None:
        """End the session: close the open window and write `session_end`. Idempotent."""
        if self._closed:
            return
        if reason not in END_REASONS:
            raise ValueError(f"RunLogger.close: reason must be one of {sorted(END_REASONS)}, got {reason!r}")
        out_of_step: RanksOutOfStepError | None = None
        try:
            if self._journal.failed is None:
                # Multi-rank: only a normal end closes the open window (a collective that every
                # rank reaches together); after an error or a signal the other ranks may never
                # come, so the open window is left out of the counters and the log alike.
                if reason == "normal" or (reason != "nonfinite_loss" and self._group is None):
                    try:
                        self._close_window(final=True)
                    except NonFiniteLossError:
                        return  # the session was ended there, with reason nonfinite_loss
                    except RanksOutOfStepError as exc:
                        out_of_step, reason, error = exc, "error", str(exc)
                self._write(self._record(
                    "session_end",
                    reason=reason,
                    error=None if error is None else str(error),
                    totals={"tokens": self._tokens_total, "skipped": self._skipped_total},
                ), sync=True)
        finally:
            self._release()
        if out_of_step is not None:
            raise out_of_step

    def __enter__(self) -> "RunLogger":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._closed:
            return
        if exc_type is None:
            self.close("normal")
        elif issubclass(exc_type, KeyboardInterrupt):
            self.close("interrupted", "SIGTERM" if issubclass(exc_type, _Terminated) else "KeyboardInterrupt")
        else:
            self.close("error", f"{exc_type.__name__}: {exc}")

    # --- windows and records ----------------------------------------------------------------

    def _close_window_before_record(self) -> None:
        """Close the open window before a val or checkpoint record, or state_dict(): a single
        process does; under torch.distributed the window waits for its boundary (those calls may
        come from rank 0 alone), and the record carries the step of the last closed window."""
        if self._group is None:
            self._close_window()

    def _close_window(self, final: bool = False) -> None:
        if self._group is not None:
            self._close_window_ranks(final)
            return
        n = len(self._losses)
        if n == 0 or self._closed:
            return
        # Everything the window holds is converted in one call: one sync per device and window.
        qk = self._qk
        qk_values = [v for _, o, c, m in qk for v in (0 if o is None else o, 0 if c is None else c, math.nan if m is None else m)]
        lr = self._lr if self._lr is not None else 0.0
        flat = _as_float_list(self._losses + self._grads + self._clipped + self._skips + [lr] + qk_values)
        losses, grads = flat[:n], flat[n:2 * n]
        clipped, skips = flat[2 * n:3 * n], flat[3 * n:4 * n]
        self._lr = flat[4 * n]
        qk_flat = flat[4 * n + 1:]
        self._qk = [(entry[0], *qk_flat[3 * j:3 * j + 3]) for j, entry in enumerate(qk)]
        # A non-finite loss ends the session: the updates before it form the last window.
        for i, loss in enumerate(losses):
            if not math.isfinite(loss):
                self._keep(i, losses, grads, clipped, skips)
                self._emit_window(allow_empty=True)
                self._fail_nonfinite(f"non-finite loss {loss} at the attempted update after step {self._step}")
        self._keep(n, losses, grads, clipped, skips)
        self._emit_window(allow_empty=False)

    def _keep(self, n: int, losses: list, grads: list, clipped: list, skips: list) -> None:
        self._losses, self._grads, self._clipped, self._skips = losses[:n], grads[:n], clipped[:n], skips[:n]
        self._qk = [q for q in self._qk if q[0] < n]

    def _emit_window(self, allow_empty: bool) -> None:
        losses, grads, clipped, skips = self._losses, self._grads, self._clipped, self._skips
        attempted = len(losses)
        skipped = sum(1 for s in skips if s)
        updates = attempted - skipped
        if updates == 0:
            # A window holds at least one successful update: skipped attempts wait for one. If the
            # session ends first (allow_empty), they are left out of the counters and the log alike.
            if allow_empty:
                self._reset_window()
            return
        finite = [g for g in grads if math.isfinite(g)]
        ok = [i for i in range(attempted) if not skips[i]]
        tokens = self._tokens_per_attempt * attempted
        fields: dict[str, Any] = {
            "updates": updates,
            "skipped": skipped,
            "attempted": attempted,
            "tokens": tokens,
            "train_seconds": max(self._train_seconds, 1e-9),
            "loss": math.fsum(losses[i] for i in ok) / updates,
            "lr": self._lr_value(),
            "grad_norm": {
                "mean": math.fsum(finite) / len(finite) if finite else 0.0,
                "max": max(finite) if finite else 0.0,
            },
            "nonfinite_grad_norms": attempted - len(finite),
            "grad_clipped_fraction": sum(1 for i in ok if clipped[i]) / updates,
        }
        if self._qk:
            fields["qk_clip"] = self._qk_fields()
        self._commit_window(fields)

    def _commit_window(self, fields: dict) -> None:
        # The counters and the record are committed together: a SIGTERM in between would leave a
        # session_end whose totals count a window the log does not hold.
        self._busy += 1
        try:
            self._step += fields["updates"]
            self._tokens_total += fields["tokens"]
            self._skipped_total += fields["skipped"]
            self._session_tokens += fields["tokens"]
            self._reset_window()
            self._write(self._record("train", **fields))
        finally:
            self._busy -= 1
        self._deliver_pending_signal()

    # --- multi-rank windows -----------------------------------------------------------------

    def _close_window_ranks(self, final: bool) -> None:
        """Close the window on every rank at once: heartbeat, then one all_gather of a short row
        per rank; the gathered rows (the same on every rank) decide everything that follows."""
        n = len(self._losses)
        if self._closed or (n == 0 and not final):
            return
        flat = _as_float_list(self._losses + self._grads + self._clipped + self._skips)
        losses, grads = flat[:n], flat[n:2 * n]
        clipped, skips = flat[2 * n:3 * n], flat[3 * n:]
        qk = self._qk_rows()
        bad = next((i for i, v in enumerate(losses) if not math.isfinite(v)), n)
        row = _window_row(n, losses, grads, clipped, skips, qk, self._train_seconds, bad)
        # The heartbeat goes out BEFORE the collective: a rank blocked in it has shown that it got
        # here, and a rank that never arrives has not.
        if n:
            self._beat.window(self._step + int(row[_UPDATES]), self._train_seconds)
        rows = self._group.gather(row)  # type: ignore[union-attr]
        counts = [int(r[_ATTEMPTED]) for r in rows]
        if min(counts) != max(counts):
            lo, hi = counts.index(min(counts)), counts.index(max(counts))
            raise RanksOutOfStepError(
                f"ranks out of step at a window close: rank {lo} had {counts[lo]} attempted updates, "
                f"rank {hi} {counts[hi]}; every rank must call RunLogger.step() the same number of times"
            )
        cut = int(min(r[_BAD] for r in rows))
        if cut < n:
            culprit = min(range(len(rows)), key=lambda k: (rows[k][_BAD], k))
            value = rows[culprit][_BAD_VALUE]
            # The fatal path alone gathers twice: every rank now knows the cut, and the updates
            # before it form the last window, as in a single process.
            prefix = self._group.gather(  # type: ignore[union-attr]
                _window_row(cut, losses, grads, clipped, skips, [q for q in qk if q[0] < cut], self._train_seconds, cut)
            ) if cut > 0 else None
            self._keep(cut, losses, grads, clipped, skips)
            self._emit_rows(prefix, cut, allow_empty=True)
            self._fail_nonfinite(
                f"non-finite loss {value} on rank {culprit} at the attempted update after step {self._step}"
            )
        self._keep(n, losses, grads, clipped, skips)
        self._emit_rows(rows, n, allow_empty=False)

    def _qk_rows(self) -> list[tuple[int, float, float, float]]:
        flat = _as_float_list([v for _, o, c, m in self._qk for v in (o or 0, c or 0, m if m is not None else math.nan)])
        return [(q[0], flat[3 * i], flat[3 * i + 1], flat[3 * i + 2]) for i, q in enumerate(self._qk)]

    def _emit_rows(self, rows: list[list[float]] | None, attempted: int, allow_empty: bool) -> None:
        """Write the train window of gathered rows: loss the mean over ranks, skips and non-finite
        norms the max over ranks, train_seconds the slowest rank's."""
        skipped = int(max(attempted - r[_UPDATES] for r in rows)) if rows else attempted
        updates = attempted - skipped
        if updates <= 0 or rows is None:
            if allow_empty:
                self._reset_window()
            return
        local_updates = math.fsum(r[_UPDATES] for r in rows)
        finite = math.fsum(r[_FINITE] for r in rows)
        fields: dict[str, Any] = {
            "updates": updates,
            "skipped": skipped,
            "attempted": attempted,
            "tokens": self._tokens_per_attempt * attempted,
            "train_seconds": max(max(r[_SECONDS] for r in rows), 1e-9),
            "loss": math.fsum(r[_LOSS_SUM] for r in rows) / local_updates,
            "lr": self._lr_value(),
            "grad_norm": {
                "mean": math.fsum(r[_GRAD_SUM] for r in rows) / finite if finite else 0.0,
                "max": max((r[_GRAD_MAX] for r in rows if r[_FINITE] > 0), default=0.0),
            },
            "nonfinite_grad_norms": int(max(attempted - r[_FINITE] for r in rows)),
            "grad_clipped_fraction": min(1.0, math.fsum(r[_CLIPPED] for r in rows) / local_updates),
        }
        if any(r[_QK_ROWS] > 0 for r in rows):
            observed = int(sum(r[_QK_OBSERVED] for r in rows))
            logits = [r[_QK_MAX] for r in rows if math.isfinite(r[_QK_MAX])]
            fields["qk_clip"] = {
                "threshold": self._qk_threshold,
                "observed_head_updates": observed,
                "clipped_head_updates": min(int(sum(r[_QK_CLIPPED] for r in rows)), observed),
                "max_logit": max(logits) if logits else None,
            }
        self._commit_window(fields)

    def _progress(self) -> tuple[int, float]:
        """(attempted updates of the session so far, perf_counter of the latest step()); read by
        the heartbeat thread, so no cost in step()."""
        return self._attempted_done + len(self._losses), self._mark

    def _qk_fields(self) -> dict:
        # (index, observed, clipped, max_logit), already floats (converted with the window)
        observed = int(sum(q[1] for q in self._qk))
        clipped = int(sum(q[2] for q in self._qk))
        logits = [q[3] for q in self._qk if math.isfinite(q[3])]
        return {
            "threshold": self._qk_threshold,
            "observed_head_updates": observed,
            "clipped_head_updates": min(clipped, observed),
            "max_logit": max(logits) if logits else None,
        }

    def _lr_value(self) -> float:
        lr = self._lr  # a float: converted with the window
        if not math.isfinite(lr) or lr < 0:
            raise ValueError(f"RunLogger.step: lr must be a finite number >= 0, got {lr}")
        return lr

    def _reset_window(self) -> None:
        self._attempted_done += len(self._losses)
        self._losses, self._grads, self._clipped, self._skips, self._qk = [], [], [], [], []
        self._train_seconds = 0.0

    def _record(self, event: str, **fields: Any) -> dict:
        elapsed = time.monotonic() - self._t0
        rec: dict[str, Any] = {
            "run_id": self.run_id,
            "session_id": self.session_id,
            "event": event,
            "step": self._step,
            "time": time.time(),
        }
        rec.update(fields)
        rec["session"] = {
            "elapsed_seconds": elapsed,
            "tokens": self._session_tokens,
            "tokens_per_second": self._session_tokens / elapsed if elapsed > 0 else None,
            "profiling_seconds": self._profiling_seconds,
        }
        memory = self._memory()
        if memory:
            rec["memory"] = memory
        return rec

    def _memory(self) -> dict:
        memory: dict[str, int] = {}
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_initialized() and torch.cuda.is_available():  # cheap test first
            memory["cuda_allocated_peak_bytes"] = int(torch.cuda.max_memory_allocated())
            memory["cuda_reserved_peak_bytes"] = int(torch.cuda.max_memory_reserved())
        rss = _host_rss_peak_bytes()
        if rss is not None:
            memory["host_rss_peak_bytes"] = rss
        return memory

    def _fail_nonfinite(self, message: str) -> None:
        self._write(self._record(
            "session_end",
            reason="nonfinite_loss",
            error=message,
            totals={"tokens": self._tokens_total, "skipped": self._skipped_total},
        ), sync=True)
        self._release()
        raise NonFiniteLossError(f"runwatch: {message}; session ended (reason nonfinite_loss)")

    def _write(self, rec: dict, sync: bool = False) -> None:
        self._busy += 1  # a signal waits until the record is written (or cut back)
        try:
            self._journal.append(rec, sync)
        finally:
            self._busy -= 1
        self._deliver_pending_signal()

    def _release(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._journal.close()
        self._beat.end()
        self._restore_signal_handlers()
        atexit.unregister(self._at_exit)
        self._deliver_pending_signal()  # one that came while a failing write was in progress

    def _ensure_open(self) -> None:
        if self._closed:
            raise RunwatchError(self._closed_message())

    def _closed_message(self) -> str:
        return f"RunLogger of {self.run_dir} is closed (session {self.session_id})"

    # --- signals and exit -------------------------------------------------------------------

    def _install_signal_handlers(self) -> None:
        """Handle SIGTERM (when the program has not) and SIGINT (when Python's default raises
        KeyboardInterrupt) so that a signal never lands between a window's counters and its record.

        SIGTERM raises `_Terminated`, SIGINT `KeyboardInterrupt`, as before; only while a record is
        being committed (`_busy`) is the exception held back until the commit is done.
        """
        if threading.current_thread() is not threading.main_thread():
            return
        wanted = [(signal.SIGTERM, signal.SIG_DFL, self._on_signal),
                  (signal.SIGINT, signal.default_int_handler, self._on_signal)]
        if hasattr(signal, "SIGXFSZ"):
            # Past RLIMIT_FSIZE the kernel sends SIGXFSZ, whose default action kills the process
            # with half a record on disk and no message. CPython ignores it at startup; an embedding
            # program may not. Ignored, write() fails with EFBIG and _write cuts the record back
            # and raises LogWriteError naming the file.
            wanted.append((signal.SIGXFSZ, signal.SIG_DFL, signal.SIG_IGN))
        for signum, default, handler in wanted:
            try:
                current = signal.getsignal(signum)
            except (ValueError, AttributeError):  # pragma: no cover
                continue
            if current is not default:
                continue  # the program handles it itself; leave it be
            signal.signal(signum, handler)
            self._previous_handlers[signum] = (current, handler)

    def _on_signal(self, signum: int, frame: Any) -> None:
        if os.getpid() != self._pid:  # a forked child: behave as if we were not here
            previous = self._previous_handlers[signum][0]
            signal.signal(signum, previous)
            if previous is signal.SIG_DFL:
                os.kill(os.getpid(), signum)
                return
            raise KeyboardInterrupt()  # SIGINT's default_int_handler
        if signum == signal.SIGTERM:
            self._terminated = True
        if self._busy:
            self._pending_signal = signum
            return
        raise _Terminated("SIGTERM") if signum == signal.SIGTERM else KeyboardInterrupt()

    def _deliver_pending_signal(self) -> None:
        signum, self._pending_signal = self._pending_signal, None
        if signum is not None:
            raise _Terminated("SIGTERM") if signum == signal.SIGTERM else KeyboardInterrupt()

    def _restore_signal_handlers(self) -> None:
        if not self._previous_handlers or threading.current_thread() is not threading.main_thread():
            return
        for signum, (previous, ours) in self._previous_handlers.items():
            with contextlib.suppress(ValueError):
                if signal.getsignal(signum) == ours:  # not one installed after ours
                    signal.signal(signum, previous)
        self._previous_handlers = {}

    def _at_exit(self) -> None:
        if self._closed or os.getpid() != self._pid:
            return
        with contextlib.suppress(Exception):
            if self._terminated:
                self.close("interrupted", "SIGTERM")
            else:
                self.close("error", "the process exited without RunLogger.close()")
