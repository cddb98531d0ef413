"""Per-rank heartbeats: the file format and its strict reader.

Every process that logs writes `RUN_DIR/heartbeats/rank-<k>.json` (see `runwatch.logger.distributed`;
rank 0 for a single process): at every train window (before the window's collective) and at every
phase change; the ranks of a `torch.distributed` run also every `HeartbeatConfig.every_seconds`
from a small background thread; the writer is `distributed.HeartbeatWriter`. This module holds
the file's format (`HeartbeatConfig`, `Heartbeat`, `heartbeat_path`) and its strict reader
(`parse_heartbeat`, `read_heartbeats`), with the standard library only; `ranks` judges them.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from typing import Any, Literal, overload

from ..errors import ConfigError, InvalidRunError
from .jsonio import loads
from .lines import open_run_file
from .rundir import HEARTBEATS

_NAME = re.compile(r"rank-(\d{1,9})\.json")
# A heartbeat is ~700 bytes; 64 KiB bounds what one garbage file can cost a poll over 10k ranks.
MAX_HEARTBEAT_BYTES = 64 * 1024
# Window times a heartbeat keeps: the straggler rule needs K (default 5) consecutive windows per
# rank, and a poll every 5 s may miss a few fast windows between two reads.
HISTORY_WINDOWS = 16
STATES = frozenset({"running", "ended"})
# Names of phases (`RunLogger.phase`, a heartbeat's `phase`, `--phase-stall NAME=S`): short
# identifiers, safe in a file, a flag and a message.
PHASE_NAME = re.compile(r"[a-z][a-z0-9_]*")


@dataclasses.dataclass(frozen=True)
class HeartbeatConfig:
    """How often each rank rewrites its heartbeat between windows, and how often it samples where
    its main thread is (inside a collective or not)."""

    # 30 s: ten refreshes within the default --rank-stall of 300 s (docs/WATCHDOG.md, "Options"), ~0.03 writes/s a rank.
    every_seconds: float = 30.0
    # 10 Hz: a few microseconds of one thread a sample; enough for windows of a second or more.
    sample_seconds: float = 0.1

    def __post_init__(self) -> None:
        for name in ("every_seconds", "sample_seconds"):
            value = getattr(self, name)
            if type(value) not in (int, float) or not math.isfinite(value) or value <= 0:
                raise ConfigError(f"heartbeat.{name} must be a finite number > 0, got {value!r}")


@dataclasses.dataclass(frozen=True)
class Heartbeat:
    """One rank's latest heartbeat."""

    rank: int
    world_size: int
    host: str
    pid: int
    session_id: str
    state: str  # "running" or "ended"
    time: float  # Unix seconds when the file was written
    step: int  # the step the rank's latest window reached, as the rank saw it
    window: int  # windows the rank has closed in this session (0 before the first)
    attempted: int  # attempted updates of the session so far, open window included (progress)
    progress_time: float  # Unix seconds of the rank's latest step() call
    train_seconds: float | None  # the latest window's own train_seconds
    window_seconds: tuple[float, ...]  # train_seconds of the latest windows, oldest first
    busy_seconds: tuple[float, ...]  # the part of them spent outside collectives
    where: str | None  # where the main thread was at the latest sample
    waiting: bool | None  # whether it was inside a collective (or backward) then
    phase: str | None = None  # the phase the process is in (`RunLogger.phase`), None outside one
    phase_since: float | None = None  # Unix seconds since when it is in that phase

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["window_seconds"] = list(self.window_seconds)
        out["busy_seconds"] = list(self.busy_seconds)
        return out

    @property
    def label(self) -> str:
        return f"rank {self.rank} (host {self.host}, pid {self.pid})"


def heartbeat_path(run_dir: str, rank: int) -> str:
    """`RUN_DIR/heartbeats/rank-<rank>.json`."""
    return os.path.join(run_dir, HEARTBEATS, f"rank-{rank}.json")


@overload
def _field(obj: dict[str, Any], key: str, kind: Literal["int"], where: str) -> int: ...
@overload
def _field(obj: dict[str, Any], key: str, kind: Literal["number"], where: str) -> float: ...
@overload
def _field(obj: dict[str, Any], key: str, kind: Literal["number?"], where: str) -> float | None: ...
@overload
def _field(obj: dict[str, Any], key: str, kind: Literal["str"], where: str) -> str: ...
@overload
def _field(obj: dict[str, Any], key: str, kind: Literal["str?"], where: str) -> str | None: ...
@overload
def _field(obj: dict[str, Any], key: str, kind: Literal["bool?"], where: str) -> bool | None: ...
@overload
def _field(obj: dict[str, Any], key: str, kind: Literal["numbers"], where: str) -> list[float]: ...
def _field(obj: dict[str, Any], key: str, kind: str, where: str) -> object:
    """`obj[key]` checked to be of `kind` (None when absent, for the kinds that allow it)."""
    value: Any = obj.get(key)  # decoded JSON, checked below
    t = type(value)
    if kind == "int":
        ok = t is int and value >= 0
    elif kind == "number":
        ok = (t is int or t is float) and math.isfinite(value) and value >= 0
    elif kind == "number?":
        ok = value is None or ((t is int or t is float) and math.isfinite(value) and value >= 0)
    elif kind == "str":
        ok = t is str
    elif kind == "str?":
        ok = value is None or t is str
    elif kind == "bool?":
        ok = value is None or t is bool
    elif kind == "numbers":  # NaN/Infinity tokens never parse; a huge int fails the bound
        ok = (
            t is list
            and len(value) <= HISTORY_WINDOWS
            and all(type(v) is float or type(v) is int for v in value)
            and (not value or (min(value) >= 0 and max(value) < math.inf))
        )
    else:  # pragma: no cover - a typo here
        raise AssertionError(kind)
    if not ok:
        expected = {
            "int": "an int >= 0",
            "number": "a finite number >= 0",
            "number?": "a finite number >= 0 or null",
            "str": "a string",
            "str?": "a string or null",
            "bool?": "a bool or null",
            "numbers": f"a list of at most {HISTORY_WINDOWS} finite numbers >= 0",
        }[kind]
        shown = json.dumps(value, default=repr)
        raise InvalidRunError(f"{where}: {key} must be {expected}, got {shown[:60]}")
    return value


def parse_heartbeat(data: bytes, where: str) -> Heartbeat:
    """One heartbeat file's bytes; InvalidRunError naming `where` when they are not one."""
    obj = loads(data, where)
    if type(obj) is not dict:
        raise InvalidRunError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    state = _field(obj, "state", "str", where)
    if state not in STATES:
        raise InvalidRunError(f"{where}: state must be 'running' or 'ended', got {state!r}")
    window_seconds = _field(obj, "window_seconds", "numbers", where)
    busy_seconds = _field(obj, "busy_seconds", "numbers", where)
    if len(busy_seconds) != len(window_seconds):
        raise InvalidRunError(
            f"{where}: busy_seconds must be as long as window_seconds ({len(window_seconds)}), got {len(busy_seconds)}"
        )
    beat = Heartbeat(
        rank=_field(obj, "rank", "int", where),
        world_size=_field(obj, "world_size", "int", where),
        host=_field(obj, "host", "str", where),
        pid=_field(obj, "pid", "int", where),
        session_id=_field(obj, "session_id", "str", where),
        state=state,
        time=float(_field(obj, "time", "number", where)),
        step=_field(obj, "step", "int", where),
        window=_field(obj, "window", "int", where),
        attempted=_field(obj, "attempted", "int", where),
        progress_time=float(_field(obj, "progress_time", "number", where)),
        train_seconds=_field(obj, "train_seconds", "number?", where),
        window_seconds=tuple(map(float, window_seconds)),
        busy_seconds=tuple(map(float, busy_seconds)),
        where=_field(obj, "where", "str?", where),
        waiting=_field(obj, "waiting", "bool?", where),
        phase=_field(obj, "phase", "str?", where),  # absent (an older writer): None
        phase_since=_field(obj, "phase_since", "number?", where),
    )
    if (beat.phase is None) != (beat.phase_since is None):
        raise InvalidRunError(
            f"{where}: phase and phase_since must both be null or both be set, "
            f"got {beat.phase!r} and {beat.phase_since!r}"
        )
    if beat.rank >= beat.world_size:
        raise InvalidRunError(f"{where}: rank must be < world_size ({beat.world_size}), got {beat.rank}")
    if len(window_seconds) > beat.window:
        raise InvalidRunError(
            f"{where}: window_seconds holds {len(window_seconds)} windows, more than window ({beat.window})"
        )
    return beat


def read_heartbeats(run_dir: str) -> tuple[dict[int, Heartbeat], list[str]]:
    """Every readable heartbeat of `run_dir` by rank, and one problem line per unreadable file.

    A file that is torn, garbage, too large, or names another rank than its file name is reported
    in the problems and left out; nothing here raises on a file's content.
    """
    folder = os.path.join(run_dir, HEARTBEATS)
    beats: dict[int, Heartbeat] = {}
    problems: list[str] = []
    try:
        names = os.listdir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return beats, problems
    except OSError as exc:
        return beats, [f"{HEARTBEATS}: cannot list: {exc.strerror or exc}"]
    for name in names:
        m = _NAME.fullmatch(name)
        if m is None:
            continue  # temp files of a write in progress, and anything else
        where = f"{HEARTBEATS}/{name}"
        try:
            # raw reads: one syscall a file; O_NONBLOCK so that a FIFO in the way cannot block a poll
            fd = open_run_file(os.path.join(folder, name), where, name_directory=False)
            try:
                data = os.read(fd, MAX_HEARTBEAT_BYTES + 1)
            finally:
                os.close(fd)
            if len(data) > MAX_HEARTBEAT_BYTES:
                raise InvalidRunError(f"{where}: larger than {MAX_HEARTBEAT_BYTES} bytes")
            beat = parse_heartbeat(data, where)
            if beat.rank != int(m.group(1)):
                raise InvalidRunError(f"{where}: rank must be {int(m.group(1))} (the file's name), got {beat.rank}")
        except InvalidRunError as exc:
            problems.append(str(exc))
            continue
        except OSError as exc:  # vanished between listdir and open, a directory, permissions
            if isinstance(exc, FileNotFoundError):
                continue
            problems.append(f"{where}: cannot read: {exc.strerror or exc}")
            continue
        beats[beat.rank] = beat
    problems.sort()
    return beats, problems


def current_session(beats: dict[int, Heartbeat]) -> dict[int, Heartbeat]:
    """The heartbeats of the session of the newest heartbeat (files of an earlier session, e.g. of
    ranks beyond a resumed run's smaller world, are left out)."""
    if not beats:
        return {}
    newest = max(beats.values(), key=lambda b: b.time)
    return {k: b for k, b in beats.items() if b.session_id == newest.session_id and k < newest.world_size}
