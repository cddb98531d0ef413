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
import datetime as _dt
import logging
import math
import os
import secrets
import signal
import socket
import sys
import threading
import time
import warnings
from typing import Any, Iterator

from .errors import InvalidRunError, LogWriteError, NonFiniteLossError, RunLockedError, RunwatchError
from .schema import SCHEMA_VERSION, END_REASONS, dumps, read_manifest, validate_manifest, window_tokens

__all__ = ["RunLogger", "detect_hardware"]

_log = logging.getLogger("runwatch")

# Attempted updates per train window: one line per 10 steps keeps the log ~50 bytes a step and the
# per-step cost at a list append, while a stall still shows within one window of steps.
DEFAULT_WINDOW = 10
_BACKSCAN_CHUNK = 64 * 1024


def _utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _new_run_id() -> str:
    return f"r-{_dt.datetime.now(_dt.timezone.utc):%Y%m%d}-{secrets.token_hex(3)}"


def _new_session_id() -> str:
    return f"s-{_dt.datetime.now(_dt.timezone.utc):%Y%m%dT%H%M%S}-{secrets.token_hex(2)}"


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


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread so that `with RunLogger(...)` ends the session."""


def _as_float_list(values: list) -> list[float]:
    """Python floats for `values` (numbers, numpy scalars, 0-dim tensors): one sync per device."""
    out: list[Any] = list(values)
    by_device: dict[Any, list[int]] = {}
    for i, v in enumerate(values):
        t = type(v)
        if t is float or t is int or t is bool:
            out[i] = float(v)
        elif hasattr(v, "device") and hasattr(v, "detach"):  # a torch tensor
            by_device.setdefault(v.device, []).append(i)
        else:  # numpy scalars and other numbers: host values, no sync
            out[i] = float(v)
    if by_device:
        import torch

        for idx in by_device.values():
            device = values[idx[0]].device
            dtype = torch.float64 if device.type in ("cpu", "cuda") else torch.float32
            stacked = torch.stack([values[i].detach().reshape(()).to(dtype) for i in idx])
            # note: this is the logger's only CPU-GPU sync point, once per window and device
            for i, f in zip(idx, stacked.tolist()):
                out[i] = f
    return out


class RunLogger:
    """Writes one schema-v1 session of a run directory: `run.json` and `metrics.jsonl`.

    Args:
        run_dir: the run directory; None reads `RUNWATCH_RUN_DIR` (set by `runwatch launch`).
        recipe: `batch_size` (sequences per micro-step, all data-parallel ranks), `seq_len`,
            `gradient_accumulation_steps`, optional `qk_clip_threshold`; other keys are copied.
        optimizers: a list of `{"name": ..., "algorithm": ...}`.
        hardware: a free dict; None detects host, world size and devices.
        window: attempted updates per train window.
        resume_from: `state_dict()` saved in the checkpoint being resumed; None starts at zero.
        fsync: fsync after every record (always at the session's end).
    """

    def __init__(
        self,
        run_dir: str | os.PathLike | None = None,
        recipe: dict | None = None,
        optimizers: list | None = None,
        hardware: dict | None = None,
        window: int = DEFAULT_WINDOW,
        resume_from: dict | None = None,
        *,
        fsync: bool = False,
    ) -> None:
        if run_dir is None:
            run_dir = os.environ.get("RUNWATCH_RUN_DIR")
            if not run_dir:
                raise ValueError("RunLogger needs a run directory (run_dir=..., or RUNWATCH_RUN_DIR)")
        if recipe is None:
            raise ValueError("RunLogger.recipe is required: batch_size, seq_len, gradient_accumulation_steps")
        if type(window) is not int or window < 1:
            raise ValueError(f"RunLogger.window must be an int >= 1, got {window!r}")
        optimizers = [] if optimizers is None else list(optimizers)
        for i, opt in enumerate(optimizers):
            if not isinstance(opt, dict) or not isinstance(opt.get("algorithm"), str):
                raise ValueError(f"RunLogger.optimizers[{i}] must be a dict with a string 'algorithm', got {opt!r}")
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
        self._fd = self._open_locked()
        try:
            self._set_torn_tail_aside()
            manifest = self._load_or_create_manifest(resume_from)
            self.run_id: str = manifest["run_id"]
            self.session_id: str = _new_session_id()
            while any(s["session_id"] == self.session_id for s in manifest["sessions"]):
                self.session_id = _new_session_id()
            manifest["sessions"].append({
                "session_id": self.session_id,
                "started_at": _utc_now(),
                "start": start,
                "recipe": self.recipe,
                "optimizers": optimizers,
                "hardware": detect_hardware() if hardware is None else hardware,
            })
            validate_manifest(manifest, "RunLogger manifest")
            self._write_manifest(manifest)
        except BaseException:
            os.close(self._fd)
            raise
        self._size = os.fstat(self._fd).st_size
        self._closed = False
        self._failed: str | None = None
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
        self._terminated = False
        self._pid = os.getpid()  # a forked child (a data-loader worker) must not end the session
        self._previous_sigterm: Any = None
        self._install_sigterm()
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
            if loss - loss != 0.0:  # NaN or +-Inf: fail loud now, no need to wait for the window
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
        self._losses.append(loss)
        self._grads.append(grad_norm)
        self._clipped.append(clipped)
        self._skips.append(skipped)
        self._lr = lr
        if qk_observed is not None or qk_clipped is not None:
            if self._qk_threshold is None:
                raise ValueError("RunLogger.step: QK-Clip counts need recipe.qk_clip_threshold")
            self._qk.append((len(self._losses) - 1, qk_observed, qk_clipped, qk_max_logit))
        if len(self._losses) >= self.window:
            self._close_window()

    def val(self, loss: Any, metrics: dict | None = None) -> None:
        """Record an evaluation at the current step: its loss and named metrics (e.g. `auroc`)."""
        self._ensure_open()
        self._close_window()
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
        self._close_window()
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

        Closes the open window first, so that the log and the checkpoint agree.
        """
        self._ensure_open()
        self._close_window()
        return {
            "schema_version": SCHEMA_VERSION,
            "run_id": self.run_id,
            "session_id": self.session_id,
            "step": self._step,
            "tokens": self._tokens_total,
            "skipped": self._skipped_total,
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
        try:
            if self._failed is None:
                if reason != "nonfinite_loss":
                    try:
                        self._close_window()
                    except NonFiniteLossError:
                        return  # the session was ended there, with reason nonfinite_loss
                self._write(self._record(
                    "session_end",
                    reason=reason,
                    error=None if error is None else str(error),
                    totals={"tokens": self._tokens_total, "skipped": self._skipped_total},
                ), sync=True)
        finally:
            self._release()

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

    def _close_window(self) -> None:
        n = len(self._losses)
        if n == 0 or self._closed:
            return
        flat = _as_float_list(self._losses + self._grads + self._clipped + self._skips)
        losses, grads = flat[:n], flat[n:2 * n]
        clipped, skips = flat[2 * n:3 * n], flat[3 * n:]
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
        self._step += updates
        self._tokens_total += tokens
        self._skipped_total += skipped
        self._session_tokens += tokens
        self._reset_window()
        self._write(self._record("train", **fields))

    def _qk_fields(self) -> dict:
        flat = _as_float_list([v for _, o, c, m in self._qk for v in (o or 0, c or 0, m if m is not None else math.nan)])
        observed = int(sum(flat[0::3]))
        clipped = int(sum(flat[1::3]))
        logits = [m for m in flat[2::3] if math.isfinite(m)]
        return {
            "threshold": self._qk_threshold,
            "observed_head_updates": observed,
            "clipped_head_updates": min(clipped, observed),
            "max_logit": max(logits) if logits else None,
        }

    def _lr_value(self) -> float:
        (lr,) = _as_float_list([self._lr if self._lr is not None else 0.0])
        if not math.isfinite(lr) or lr < 0:
            raise ValueError(f"RunLogger.step: lr must be a finite number >= 0, got {lr}")
        return lr

    def _reset_window(self) -> None:
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
        if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
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

    # --- files ------------------------------------------------------------------------------

    def _open_locked(self) -> int:
        import fcntl

        fd = os.open(self._metrics_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RunLockedError(
                f"{self.run_dir}: in use by another RunLogger (metrics.jsonl is locked); "
                "one writer per run directory"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _set_torn_tail_aside(self) -> None:
        """Move an uncommitted final line (a crash mid-write) to `metrics.jsonl.torn-<ms>`."""
        with open(self._metrics_path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            if size == 0:
                return
            f.seek(size - 1)
            if f.read(1) == b"\n":
                return
            cut = 0
            pos = size
            while pos > 0:
                chunk_start = max(0, pos - _BACKSCAN_CHUNK)
                f.seek(chunk_start)
                chunk = f.read(pos - chunk_start)
                nl = chunk.rfind(b"\n")
                if nl >= 0:
                    cut = chunk_start + nl + 1
                    break
                pos = chunk_start
            aside = f"{self._metrics_path}.torn-{int(time.time() * 1000)}"
            with open(aside, "xb") as out:
                f.seek(cut)
                while True:
                    block = f.read(1 << 20)
                    if not block:
                        break
                    out.write(block)
                out.flush()
                os.fsync(out.fileno())
        os.truncate(self._metrics_path, cut)
        _log.warning("runwatch: moved a torn final line (%d bytes) of %s to %s", size - cut, self._metrics_path, aside)

    def _load_or_create_manifest(self, resume_from: dict | None) -> dict:
        if os.path.exists(self._manifest_path):
            manifest = read_manifest(self.run_dir)
            if resume_from is not None and resume_from.get("run_id") not in (None, manifest["run_id"]):
                raise InvalidRunError(
                    f"{self.run_dir}: resume_from is of run {resume_from['run_id']!r}, "
                    f"but run.json is of run {manifest['run_id']!r}"
                )
            return manifest
        run_id = resume_from.get("run_id") if resume_from is not None else None
        if not isinstance(run_id, str) or not run_id:
            run_id = _new_run_id()
        return {"schema_version": SCHEMA_VERSION, "run_id": run_id, "created_at": _utc_now(), "sessions": []}

    def _write_manifest(self, manifest: dict) -> None:
        tmp = f"{self._manifest_path}.tmp-{os.getpid()}"
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(dumps(manifest) + "\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self._manifest_path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        with contextlib.suppress(OSError):  # make the rename durable
            dfd = os.open(self.run_dir, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)

    def _write(self, rec: dict, sync: bool = False) -> None:
        if self._failed is not None:
            raise LogWriteError(self._failed)
        data = (dumps(rec) + "\n").encode("utf-8")
        view = memoryview(data)
        try:
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
            if sync or self._fsync:
                os.fsync(self._fd)
        except OSError as exc:
            # Leave no half record behind: cut the file back to the last whole line.
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self._size)
            self._failed = f"{self._metrics_path}: cannot write a record: {exc.strerror or exc}"
            raise LogWriteError(exc.errno, self._failed) from None
        self._size += len(data)

    def _release(self) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(OSError):
            os.close(self._fd)
        self._restore_sigterm()
        atexit.unregister(self._at_exit)

    def _ensure_open(self) -> None:
        if self._closed:
            raise RunwatchError(self._closed_message())

    def _closed_message(self) -> str:
        return f"RunLogger of {self.run_dir} is closed (session {self.session_id})"

    # --- signals and exit -------------------------------------------------------------------

    def _install_sigterm(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        try:
            current = signal.getsignal(signal.SIGTERM)
        except (ValueError, AttributeError):  # pragma: no cover
            return
        if current is not signal.SIG_DFL:
            return  # the program handles SIGTERM itself; leave it be

        def on_sigterm(signum: int, frame: Any) -> None:
            if os.getpid() != self._pid:  # a forked child: behave as if we were not here
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGTERM)
                return
            self._terminated = True
            raise _Terminated("SIGTERM")

        self._previous_sigterm = current
        signal.signal(signal.SIGTERM, on_sigterm)

    def _restore_sigterm(self) -> None:
        if self._previous_sigterm is None or threading.current_thread() is not threading.main_thread():
            return
        with contextlib.suppress(ValueError):
            signal.signal(signal.SIGTERM, self._previous_sigterm)
        self._previous_sigterm = None

    def _at_exit(self) -> None:
        if self._closed or os.getpid() != self._pid:
            return
        with contextlib.suppress(Exception):
            if self._terminated:
                self.close("interrupted", "SIGTERM")
            else:
                self.close("error", "the process exited without RunLogger.close()")
