"""The run logger: schema-v1 telemetry from inside a training loop.

    log = RunLogger("runs/a", recipe={"batch_size": 32, "seq_len": 512,
                                      "gradient_accumulation_steps": 1, "qk_clip_threshold": None})
    with log:
        for batch in data:
            ...
            log.step(loss=loss, lr=sched.get_last_lr()[0], grad_norm=norm)
        with log.phase("eval"):
            ...

`step()` only appends its arguments to a list: tensors stay on their device and are converted
once per window (`window` attempted updates, or `max_window_seconds`), in one `.tolist()` per
device. That conversion is the only host-device sync the logger adds. A single process is a world
of one rank: it takes the same window path as the ranks of a torch.distributed run (window.py,
distributed.py). Standard library only; torch only when the caller passes tensors (already imported).
"""

from __future__ import annotations

import atexit
import contextlib
import math
import os
import time
import warnings
from collections.abc import Iterable, Iterator, Mapping
from types import TracebackType
from typing import Any

from ..errors import ConfigError, NonFiniteLossError, RanksOutOfStepError, RunwatchError
from ..files import (
    END_REASONS,
    ENV_RUN_DIR,
    PHASE_NAME,
    SCHEMA_VERSION,
    HeartbeatConfig,
    capture,
    check_arguments,
    check_checkpoint,
    check_recipe,
    check_start,
    data_paths,
    open_session,
    rank_hardware,
    utc_now,
    validate_manifest,
    window_tokens,
)
from ..files import detect_hardware as detect_hardware
from .convert import Flag, Scalar, as_float_list
from .distributed import HeartbeatWriter, rank_group
from .gpus import GpuSampler
from .signals import SignalGuard, Terminated
from .totals import SessionTotals
from .window import (
    ATTEMPTED,
    BAD,
    BAD_VALUE,
    DEFAULT_WINDOW,
    SECONDS,
    UPDATES,
    OpenWindow,
    columns,
    window_fields,
    window_row,
)
from .window import DEFAULT_MAX_WINDOW_SECONDS as DEFAULT_MAX_WINDOW_SECONDS
from .window import WINDOW_ENV as WINDOW_ENV  # (its former home: kept for one release)
from .window import default_window as default_window


class RunLogger:
    """Writes one schema-v1 session of a run directory: `run.json`, `metrics.jsonl` and the
    process's heartbeat `heartbeats/rank-<r>.json`.

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
        max_window_seconds: a window also closes at the first `step()` this long after it opened;
            None: windows close on `window` alone.
        data: the data files the program reads; each one's size, mtime and a hash of its first and
            last MiB go into the session's `provenance` in run.json (with argv, the git commit,
            the versions and the host: `files.provenance`, taken once, here).

    Under an initialised torch.distributed process group (world size > 1), global rank 0 alone
    writes the log; every rank must call `step()` the same number of times (windows close at the
    same attempted-update counts everywhere, each with one small all_gather: the only sync point
    the logger adds) and leave `with` together. See docs/MULTIRANK.md.
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str] | None = None,
        recipe: dict[str, Any] | None = None,
        optimizers: Iterable[dict[str, Any]] | None = None,
        hardware: dict[str, Any] | None = None,
        window: int | None = None,
        resume_from: dict[str, Any] | None = None,
        *,
        fsync: bool = False,
        heartbeat: HeartbeatConfig | None = None,
        max_window_seconds: float | None = DEFAULT_MAX_WINDOW_SECONDS,
        data: Iterable[str | os.PathLike[str]] | None = None,
    ) -> None:
        data_files = data_paths(data, "RunLogger.data")
        if run_dir is None:
            run_dir = os.environ.get(ENV_RUN_DIR)
            if not run_dir:
                raise ConfigError("RunLogger.run_dir must be a path (or RUNWATCH_RUN_DIR set), got None")
        if window is None:
            window = default_window() or DEFAULT_WINDOW  # (never None with the default fallback)
        optimizers = [] if optimizers is None else list(optimizers)
        check_arguments(window, max_window_seconds, optimizers, hardware, heartbeat)
        self.run_dir = os.fspath(run_dir)
        self.recipe = check_recipe(recipe)
        self.window = window
        self.max_window_seconds = None if max_window_seconds is None else float(max_window_seconds)
        self._due_after = math.inf if max_window_seconds is None else float(max_window_seconds)
        self._full = 4 * window  # len(OpenWindow.values) of a full window (4 values an update)
        start = check_start(resume_from) if resume_from is not None else {"step": 0, "tokens": 0, "skipped": 0}
        self._tokens_per_attempt = window_tokens(self.recipe, 1)
        self._qk_threshold: float | None = self.recipe["qk_clip_threshold"]
        os.makedirs(self.run_dir, exist_ok=True)

        # Only rank 0 of the world (a single process: itself) writes run.json and metrics.jsonl.
        self._group = rank_group()
        self._journal, manifest, self._peers = open_session(self.run_dir, self._group, bool(fsync), resume_from, window)
        self.run_id: str = self._peers[0]["run_id"]
        self.session_id: str = self._peers[0]["session_id"]
        # NVML, imported at the first window's close (if at all), by the rank that writes the log
        self._totals = SessionTotals(self.run_id, self.session_id, start, GpuSampler(enabled=self._group.rank == 0))
        if manifest is not None:
            self._add_session(manifest, start, optimizers, hardware, data_files)

        self._closed = False
        self._mark = time.perf_counter()  # the latest step() (or the end of a phase, val, checkpoint)
        self._window = OpenWindow(self._mark, self._due_after)
        self._attempted_done = 0  # attempted updates of this session in closed windows
        # Whether step() asks if the window is due on time: always in a single process (it reads
        # its own clock); across ranks only while windows are slow (see _close_window).
        self._time_checks = self.max_window_seconds is not None
        self._phase: tuple[str, float] | None = None  # (name, since) of the current phase
        self._beat = HeartbeatWriter(
            self.run_dir,
            self._group.rank,
            self._group.world_size,
            self.session_id,
            self._progress,
            heartbeat if heartbeat is not None else HeartbeatConfig(),
        )
        # A single process starts no refresh thread: a hung training thread stops its heartbeat.
        self._beat.start(start["step"], refresh=not self._group.solo)
        self._signals = SignalGuard()
        self._signals.install()
        atexit.register(self._at_exit)

    def _add_session(
        self,
        manifest: dict[str, Any],
        start: dict[str, int],
        optimizers: list[dict[str, Any]],
        hardware: dict[str, Any] | None,
        data: list[str],
    ) -> None:
        try:
            hw = detect_hardware() if hardware is None else hardware
            if not self._group.solo:
                hw = rank_hardware(hw, self._peers, detected=hardware is None)
            provenance = capture(data=data)
            manifest["sessions"].append(
                {
                    "session_id": self.session_id,
                    "started_at": utc_now(),
                    "start": start,
                    "recipe": self.recipe,
                    "optimizers": optimizers,
                    "hardware": hw,
                    "provenance": provenance,
                }
            )
            # The run's provenance is its latest session's: a relaunch may run other code, and each
            # session keeps its own beside its recipe.
            manifest["provenance"] = provenance
            validate_manifest(manifest, "RunLogger manifest")
            self._journal.write_manifest(manifest)
        except BaseException:
            self._journal.close()
            raise

    # --- the calls of a training loop -------------------------------------------------------

    def step(
        self,
        loss: Scalar,
        lr: Scalar,
        grad_norm: Scalar,
        clipped: Flag = False,
        skipped: Flag = False,
        qk_observed: Scalar | None = None,
        qk_clipped: Scalar | None = None,
        qk_max_logit: Scalar | None = None,
    ) -> None:
        """Record one attempted optimizer update (successful unless `skipped`).

        `loss`, `lr`, `grad_norm` (pre-clip), `clipped`, `skipped` and the QK-Clip counts may be
        Python numbers, numpy scalars or one-element (0-dim) tensors (`convert.Scalar`, `Flag`);
        tensors are kept on their device until the window closes.
        """
        now = time.perf_counter()
        win = self._window
        win.train_seconds += now - self._mark
        self._mark = now
        if self._closed:
            raise RunwatchError(self._closed_message())
        if grad_norm is None:
            raise ConfigError("RunLogger.step: grad_norm must be a number or a one-element tensor, got None")
        qk = qk_observed is not None or qk_clipped is not None
        if qk and self._qk_threshold is None:
            raise ConfigError(
                "RunLogger.step: qk_observed and qk_clipped need recipe.qk_clip_threshold (a positive number), got None"
            )
        # Keep the value, not the autograd graph. (Only a tensor requires grad: mypy cannot narrow
        # on that, and a cast or an isinstance would cost every step.)
        host_loss = type(loss) is float
        if not host_loss and getattr(loss, "requires_grad", False):
            loss = loss.detach()  # type: ignore[union-attr]  # a tensor, see above
        if type(grad_norm) is not float and getattr(grad_norm, "requires_grad", False):
            grad_norm = grad_norm.detach()  # type: ignore[attr-defined]  # a tensor, see above
        values = win.values
        values += (loss, grad_norm, clipped, skipped)  # one C call: a signal cannot split it
        if host_loss and loss - loss != 0.0 and self._group.solo:  # type: ignore[operator]  # a float here
            # NaN or +-Inf: fail loud now (across ranks the window closes together, at its boundary)
            self._close_window()
        win.lr = lr
        if qk:
            win.qk.append(((len(values) >> 2) - 1, qk_observed, qk_clipped, qk_max_logit))
        if len(values) >= self._full or self._time_checks and self._group.agree(now >= win.due):
            self._close_window()

    def val(self, loss: Scalar, metrics: Mapping[str, Scalar] | None = None) -> None:
        """Record an evaluation at the current step: its loss and named metrics (e.g. `auroc`)."""
        self._ensure_open()
        self._close_window_before_record()
        loss_f, *values = as_float_list([loss, *(metrics or {}).values()])  # note: a sync, once per eval
        if not math.isfinite(loss_f):
            self._fail_nonfinite(f"non-finite validation loss {loss_f} at step {self._totals.step}")
        clean: dict[str, float] = {}
        for name, value in zip((metrics or {}).keys(), values):
            if math.isfinite(value):
                clean[str(name)] = value
            else:
                warnings.warn(
                    f"runwatch: val metric {name!r} is {value}; left out of the record", RuntimeWarning, stacklevel=2
                )
        self._write(self._totals.record("val", {"loss": loss_f, "metrics": clean}))
        self._mark = time.perf_counter()

    def checkpoint(
        self, path: str | os.PathLike[str], seconds: float, bytes: int | None = None, verified: bool | None = None
    ) -> None:
        """Record a checkpoint written to `path` in `seconds` (optionally its size, and whether it was
        read back and loaded)."""
        self._ensure_open()
        self._close_window_before_record()
        fields = check_checkpoint(path, seconds, bytes, verified)
        self._write(self._totals.record("checkpoint", fields))
        self._mark = time.perf_counter()

    @contextlib.contextmanager
    def profiling(self) -> Iterator[None]:
        """Time spent inside counts as `profiling_seconds` (steps inside still count as training)."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            now = time.perf_counter()
            self._totals.profiling_seconds += now - t0
            self._mark = now

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Work that makes no train records (`eval`, `checkpoint`, `setup`, ...): the heartbeat
        shows `phase` and `phase_since` while inside, so a watchdog judges it by that phase's limit.

        Entering and leaving write the heartbeat. A phase inside a phase wins while it lasts; on
        leaving it the outer phase is current again, `phase_since` then. Time inside a phase does
        not count as training time (`train_seconds`); leaving it counts as progress.
        """
        if not isinstance(name, str) or PHASE_NAME.fullmatch(name) is None:
            raise ConfigError(f"RunLogger.phase: name must match [a-z][a-z0-9_]* (e.g. 'eval'), got {name!r}")
        self._ensure_open()
        outer = self._phase
        self._set_phase((name, time.time()))
        try:
            yield
        finally:
            self._mark = time.perf_counter()  # the heartbeat's progress_time: now
            self._set_phase(None if outer is None else (outer[0], time.time()))

    def state_dict(self) -> dict[str, Any]:
        """Counters to save inside a checkpoint; pass them back as `resume_from` when resuming.

        Closes the open window first, so that the log and the checkpoint agree. Under
        torch.distributed the window stays open (closing it is a collective, and often only rank 0
        saves); its updates are counted in as this rank saw them.
        """
        self._ensure_open()
        self._close_window_before_record()
        totals = self._totals
        step, tokens, skipped = totals.step, totals.tokens, totals.skipped
        win = self._window
        if not self._group.solo and win.values:
            skips = sum(1 for s in as_float_list(win.values[3::4]) if s)  # note: a sync, once per checkpoint
            step += win.attempted - skips
            tokens += self._tokens_per_attempt * win.attempted
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
    def closed(self) -> bool:
        """Whether the session has ended."""
        return self._closed

    @property
    def current_step(self) -> int:
        """Successful updates so far (written windows only)."""
        return self._totals.step

    def close(self, reason: str = "normal", error: str | None = None) -> None:
        """End the session: close the open window and write `session_end`. Idempotent."""
        if self._closed:
            return
        if reason not in END_REASONS:
            raise ConfigError(f"RunLogger.close: reason must be one of {sorted(END_REASONS)}, got {reason!r}")
        out_of_step: RanksOutOfStepError | None = None
        try:
            if self._journal.failed is None:
                # Across ranks only a normal end closes the open window (a collective that every
                # rank reaches together); after an error or a signal the other ranks may never
                # come, so the open window is left out of the counters and the log alike.
                if reason == "normal" or (reason != "nonfinite_loss" and self._group.solo):
                    try:
                        self._close_window(final=True)
                    except NonFiniteLossError:
                        return  # the session was ended there, with reason nonfinite_loss
                    except RanksOutOfStepError as exc:
                        out_of_step, reason, error = exc, "error", str(exc)
                self._end_record(reason, None if error is None else str(error))
        finally:
            self._release()
        if out_of_step is not None:
            raise out_of_step

    def __enter__(self) -> RunLogger:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._closed:
            return
        if exc_type is None:
            self.close("normal")
        elif issubclass(exc_type, KeyboardInterrupt):
            self.close("interrupted", "SIGTERM" if issubclass(exc_type, Terminated) else "KeyboardInterrupt")
        else:
            self.close("error", f"{exc_type.__name__}: {exc}")

    # --- windows and records ----------------------------------------------------------------

    def _close_window_before_record(self) -> None:
        """Close the open window before a val or checkpoint record, or state_dict(): a single
        process does; across ranks the window waits for its boundary (those calls may come from
        rank 0 alone), and the record carries the step of the last closed window."""
        if self._group.solo:
            self._close_window()

    def _close_window(self, final: bool = False) -> None:
        """Close the window on every rank at once: convert its values (one sync), post the
        heartbeat, gather one short row per rank (one collective; a single process: its own row);
        the gathered rows, the same on every rank, decide everything that follows."""
        win = self._window
        n = win.attempted
        if self._closed or (n == 0 and (not final or self._group.solo)):
            return
        values = win.convert()
        row = window_row(values, n, win.train_seconds)
        if n:
            # Before the collective: a rank blocked in it has shown that it got here, and a rank
            # that never arrives has not.
            self._beat.window(self._totals.step + int(row[UPDATES]), win.train_seconds)
        col = columns(self._group.gather(row))
        counts = col[ATTEMPTED]
        if min(counts) != max(counts):
            lo, hi = counts.index(min(counts)), counts.index(max(counts))
            raise RanksOutOfStepError(
                f"ranks out of step at a window close: rank {lo} had {int(counts[lo])} attempted updates, "
                f"rank {hi} {int(counts[hi])}; every rank must call RunLogger.step() the same number of times"
            )
        if self.max_window_seconds is not None and not self._group.solo:
            # Ranks ask rank 0 whether a window is due on time (a CPU broadcast a step) only while
            # rank 0's windows take more than half of max_window_seconds: fast windows never do.
            per_attempt = col[SECONDS][0] / max(1, n)
            self._time_checks = per_attempt * self.window > self.max_window_seconds / 2
        cut = int(min(col[BAD]))
        if cut < n:
            culprit = min(range(len(counts)), key=lambda k: (col[BAD][k], k))
            value = col[BAD_VALUE][culprit]
            # The fatal path alone gathers twice: every rank now knows the cut, and the updates
            # before it form the last window.
            prefix = columns(self._group.gather(window_row(values, cut, win.train_seconds))) if cut > 0 else None
            self._emit(prefix, cut, values.lr, True)  # allow_empty
            on_rank = "" if self._group.solo else f" on rank {culprit}"
            self._fail_nonfinite(
                f"non-finite loss {value}{on_rank} at the attempted update after step {self._totals.step}"
            )
        self._emit(col, n, values.lr, False)

    def _emit(self, col: list[tuple[float, ...]] | None, attempted: int, lr: float, allow_empty: bool) -> None:
        """Write the train window of the first `attempted` updates from the gathered rows' columns.
        A window holds at least one successful update: skipped attempts wait for one; if the
        session ends first (allow_empty), they are left out of the counters and the log alike."""
        fields = window_fields(col, attempted, self._tokens_per_attempt, lr, self._qk_threshold) if col else None
        if fields is None:
            if allow_empty:
                self._reset_window(attempted)
            return
        # The counters and the record are committed together: a SIGTERM in between would leave a
        # session_end whose totals count a window the log does not hold.
        with self._signals:
            self._totals.add_window(fields)
            self._reset_window(attempted)
            self._journal.append_line(self._totals.train_line(fields))

    def _reset_window(self, attempted: int) -> None:
        self._attempted_done += attempted
        self._window = OpenWindow(time.perf_counter(), self._due_after)

    def _progress(self) -> tuple[int, float]:
        """(attempted updates of the session so far, perf_counter of the latest step()); read by
        the heartbeat writer, so no cost in step()."""
        return self._attempted_done + self._window.attempted, self._mark

    def _set_phase(self, phase: tuple[str, float] | None) -> None:
        self._phase = phase
        if not self._closed:
            self._beat.phase(*(phase or (None, None)))

    def _end_record(self, reason: str, error: str | None) -> None:
        self._write(self._totals.end_record(reason, error), sync=True)

    def _fail_nonfinite(self, message: str) -> None:
        self._end_record("nonfinite_loss", message)
        self._release()
        raise NonFiniteLossError(f"runwatch: {message}; session ended (reason nonfinite_loss)")

    def _write(self, rec: dict[str, Any], sync: bool = False) -> None:
        with self._signals:  # a signal waits until the record is written (or cut back)
            self._journal.append(rec, sync)

    def _release(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._journal.close()
        self._beat.end()
        self._signals.restore()
        atexit.unregister(self._at_exit)
        self._signals.deliver_pending()  # one that came while a failing write was in progress

    def _ensure_open(self) -> None:
        if self._closed:
            raise RunwatchError(self._closed_message())

    def _closed_message(self) -> str:
        return f"RunLogger of {self.run_dir} is closed (session {self.session_id})"

    def _at_exit(self) -> None:
        if self._closed or os.getpid() != self._signals.pid:
            return
        with contextlib.suppress(Exception):
            if self._signals.terminated:
                self.close("interrupted", "SIGTERM")
            else:
                self.close("error", "the process exited without RunLogger.close()")
