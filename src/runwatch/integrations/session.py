"""What the framework callbacks share: their options, the resume state stored in a checkpoint, and
the pending updates of a window. Framework-neutral; standard library only.

A callback keeps the updates it has seen since the last window as `(loss, skipped)` pairs whose
values may be device tensors; `feed` hands them to `RunLogger.step` together and closes the window,
so the logger's one conversion per window is the only host-device sync the callback adds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, InvalidRunError
from ..files import ENV_RUN_DIR, atomic_write_text, dumps, loads
from ..logger import RunLogger, default_window

if TYPE_CHECKING:
    from ..logger import Flag, Scalar


# The file a callback writes into each checkpoint folder it sees saved (HF Trainer); Lightning keeps
# the same dict under this key of the checkpoint.
STATE_FILE = "runwatch_state.json"
STATE_KEY = "runwatch"


@dataclasses.dataclass(frozen=True)
class CallbackOptions:
    """Options of a framework callback, checked on construction.

    run_dir: the run directory; None reads `RUNWATCH_RUN_DIR` (set by `runwatch launch`), else a
        `runwatch` folder in the framework's output directory.
    window: attempted updates per train window. None: `RUNWATCH_WINDOW` when set, else the HF
        Trainer's logging interval; for Lightning, RunLogger's default (10).
    seq_len: tokens per sequence, for the recipe's token count; None: inferred where the framework
        counts tokens (HF `include_num_input_tokens_seen`), else 1 (tokens count samples).
    fsync: fsync `metrics.jsonl` after every record (always at the session's end).
    data: the data files the training reads, fingerprinted into run.json's `provenance`.
    """

    run_dir: str | None = None
    window: int | None = None
    seq_len: int | None = None
    fsync: bool = False
    data: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.run_dir is not None and not isinstance(self.run_dir, (str, os.PathLike)):
            raise ConfigError(f"RunwatchCallback.run_dir must be a path or None, got {self.run_dir!r}")
        if self.window is None:  # frozen: the environment's default is resolved once, here
            object.__setattr__(self, "window", default_window(None))
        for name in ("window", "seq_len"):
            value = getattr(self, name)
            if value is not None and (type(value) is not int or value < 1):
                raise ConfigError(f"RunwatchCallback.{name} must be an int >= 1 or None, got {value!r}")
        if type(self.fsync) is not bool:
            raise ConfigError(f"RunwatchCallback.fsync must be a bool, got {self.fsync!r}")

    def resolve_run_dir(self, output_dir: str | os.PathLike[str] | None) -> str:
        """The run directory: the option, else `RUNWATCH_RUN_DIR`, else `<output_dir>/runwatch`."""
        if self.run_dir is not None:
            return os.fspath(self.run_dir)
        env = os.environ.get(ENV_RUN_DIR)
        if env:
            return env
        return os.path.join(os.fspath(output_dir or "."), "runwatch")


def write_state(folder: str, state: dict[str, Any]) -> str:
    """Write `state` to `folder/runwatch_state.json` atomically (temp file, fsync, rename)."""
    path = os.path.join(folder, STATE_FILE)
    atomic_write_text(path, dumps(state) + "\n")
    return path


def read_state(folder: str) -> dict[str, Any] | None:
    """The state stored in `folder/runwatch_state.json`, or None when there is none."""
    path = os.path.join(folder, STATE_FILE)
    try:
        with open(path, "rb") as f:
            data = f.read(1 << 20)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise InvalidRunError(f"{path}: cannot read: {exc.strerror or exc}") from None
    state = loads(data, path)
    return check_state(state, path)


def check_state(state: Any, where: str) -> dict[str, Any]:
    """Check a stored state: an object with int counters >= 0; return it."""
    if not isinstance(state, dict):
        raise InvalidRunError(f"{where}: the runwatch state must be an object, got {type(state).__name__}")
    for key in ("step", "tokens", "skipped"):
        value = state.get(key)
        if type(value) is not int or value < 0:
            raise InvalidRunError(f"{where}: {key} must be an int >= 0, got {value!r}")
    return state


def resume_state(state: dict[str, Any] | None, step: int, where: str) -> dict[str, Any] | None:
    """The stored state, checked against the framework's own step at resume."""
    if state is None:
        return None
    if state["step"] != step:
        raise InvalidRunError(
            f"{where}: runwatch state is at step {state['step']}, but the training resumes at step {step}"
        )
    return state


def feed(
    log: RunLogger, updates: list[tuple[Scalar, Flag]], lr: Scalar, grad_norm: Scalar, clipped: Flag = False
) -> None:
    """Hand the pending `(loss, skipped)` updates to `log` as one train window and close it.

    Skipped updates (a loss-scale overflow) carry an infinite gradient norm: it was not finite, which
    is why the scaler skipped them. Raises NonFiniteLossError (after the logger ended the session)
    when a loss is not finite.
    """
    for loss, skipped in updates:
        log.step(
            loss=loss,
            lr=lr,
            grad_norm=math.inf if skipped is True else grad_norm,
            clipped=False if skipped is True else clipped,
            skipped=skipped,
        )
    updates.clear()
    log.state_dict()  # closes the open window: one record per framework log interval


def folder_bytes(path: str) -> int | None:
    """Total size of the files under `path` (a file or a folder); None when it cannot be read."""
    try:
        if os.path.isfile(path):
            return os.path.getsize(path)
        total = 0
        for root, _dirs, files in os.walk(path):
            for name in files:
                with contextlib.suppress(OSError):
                    total += os.lstat(os.path.join(root, name)).st_size
        return total
    except OSError:
        return None


class PhaseHolder:
    """The phase a callback is in (`eval` or `checkpoint`), entered in one hook and left in another.

    One at a time: entering a phase leaves the current one first, so the heartbeat always shows
    what the Trainer is doing now. Entering does nothing once the logger is closed.
    """

    def __init__(self) -> None:
        self.name: str | None = None
        self._context: AbstractContextManager[None] | None = None

    def enter(self, log: RunLogger, name: str) -> None:
        """Be in phase `name` (nothing to do when already in it)."""
        if self.name == name:
            return
        self.leave()
        if log.closed:
            return
        context = log.phase(name)
        context.__enter__()
        self._context, self.name = context, name

    def leave(self) -> None:
        """Leave the current phase, if any."""
        context, self._context, self.name = self._context, None, None
        if context is not None:
            context.__exit__(None, None, None)


class _NoSession:
    """Other ranks, and a callback outside training: every session call does nothing
    (one object, not `if enabled:` branches in every hook)."""

    def __getattr__(self, name: str) -> Any:
        return _nothing


def _nothing(*args: Any, **kwargs: Any) -> None:
    return None


NO_SESSION: Any = _NoSession()


def resume_from(resume: str | None, run_dir: str | None) -> str | None:
    """The checkpoint a `resume="auto"` callback names (a framework loads it before any callback
    runs, so the script passes it on); None without `resume`."""
    if resume is None:
        return None
    if resume != "auto":
        raise ConfigError(f"RunwatchCallback.resume must be 'auto' or None, got {resume!r}")
    from ..reading import resume_checkpoint

    return resume_checkpoint(run_dir=run_dir).path
