"""Per-rank heartbeats: the file format, reading, and the two rank rules of a multi-rank run.

Every process that logs writes `RUN_DIR/heartbeats/rank-<k>.json` (see `runwatch.distributed`;
rank 0 for a single process): at every train window (before the window's collective) and at every
phase change; the ranks of a `torch.distributed` run also every `HeartbeatConfig.every_seconds`
from a small background thread. This module reads them and
judges them, with the standard library only, so a watchdog on any node of a shared file system
sees every rank:

- `rank_stall` — a rank stopped while the others went on, or every rank stopped and one is behind
  (or is the only one not waiting inside a collective);
- `straggler` — a rank's window time exceeds F x the median over ranks for K consecutive windows.

    monitor = RankMonitor(rank_stall=300, straggler_factor=1.5, straggler_patience=5)
    finding = monitor.poll(run_dir, now)      # (kind, step, message) or None, once per poll
    lines = rank_status_lines(run_dir, now)   # at most 4 lines, whatever the number of ranks

The rules are pure functions of the heartbeats, the time and a small JSON-serialisable state.

Longer than 500 lines on purpose: the heartbeat's writer, its strict reader and the rank rules
(`rank_stall`, `straggler`) that read it share one file format, checked in one place.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import statistics
import time
from typing import Any, Literal, overload

from .errors import ConfigError, InvalidRunError
from .rundir import HEARTBEATS
from .schema import loads, open_regular

__all__ = [
    "HISTORY_WINDOWS",
    "HeartbeatConfig",
    "Heartbeat",
    "heartbeat_path",
    "parse_heartbeat",
    "read_heartbeats",
    "current_session",
    "rank_stall_finding",
    "StragglerRule",
    "RankMonitor",
    "rank_status_lines",
]

_NAME = re.compile(r"rank-(\d{1,9})\.json")
# A heartbeat is ~700 bytes; 64 KiB bounds what one garbage file can cost a poll over 10k ranks.
MAX_HEARTBEAT_BYTES = 64 * 1024
# Window times a heartbeat keeps: the straggler rule needs K (default 5) consecutive windows per
# rank, and a poll every 5 s may miss a few fast windows between two reads.
HISTORY_WINDOWS = 16
STATES = frozenset({"running", "ended"})
# Busy time below this fraction of a window is idle for the straggler rule: a few samples of a
# 10-Hz sampler in a 1-s window, noise next to a straggler busy for most of it.
IDLE_BUSY_FRACTION = 0.05


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
            fd = open_regular(os.path.join(folder, name), where, name_directory=False)
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


def _fmt_seconds(s: float) -> str:
    return f"{s:.0f} s" if s >= 10 else f"{s:.1f} s"


def _more(ranks: list[int]) -> str:
    return "" if len(ranks) <= 1 else f" (and {len(ranks) - 1} more)"


def rank_stall_finding(beats: dict[int, Heartbeat], now: float, stall: float) -> tuple[int, int, str] | None:
    """`(rank, step, message)` of a stalled rank among one session's heartbeats, or None.

    1. A running rank whose heartbeat file is `stall` seconds old while another rank's is fresh
       or that rank has ended after it: the process stopped writing (killed, frozen host).
    2. Every running rank made no progress (no step() call) for `stall` seconds: a rank that
       ended its session early, if any; else the rank with the fewest attempted updates, when
       they differ; else, once every rank has closed a window, the ranks not waiting inside a
       collective while the others are (a sleeping or hung rank makes the rest wait in backward).
    """
    live = sorted((b for b in beats.values() if b.state == "running"), key=lambda b: b.rank)
    if not live:
        return None
    silent = [b for b in live if now - b.time > stall]
    if silent:
        oldest = min(silent, key=lambda b: (b.time, b.rank))
        went_on = [
            b
            for b in beats.values()
            if b.rank != oldest.rank and (now - b.time <= stall or (b.state == "ended" and b.time > oldest.time))
        ]
        if went_on:
            return (
                oldest.rank,
                oldest.step,
                (
                    f"{oldest.label} stopped at step {oldest.step}: its heartbeat is "
                    f"{_fmt_seconds(now - oldest.time)} old while {len(went_on)} other rank(s) went on"
                ),
            )
    if len(live) < 2 or any(now - b.progress_time <= stall for b in live):
        return None
    idle = _fmt_seconds(now - max(b.progress_time for b in live))
    ended = sorted((b for b in beats.values() if b.state == "ended"), key=lambda b: b.rank)
    if ended:  # ranks leave a session together (its last window is a collective): one left early
        k = ended[0]
        return (
            k.rank,
            k.step,
            (
                f"{k.label}{_more([b.rank for b in ended])} ended at step {k.step} while {len(live)} rank(s) "
                f"still run; no progress on any running rank for {idle}"
            ),
        )
    low = min(b.attempted for b in live)
    high = max(b.attempted for b in live)
    if low < high:
        behind = [b for b in live if b.attempted == low]
        k = behind[0]
        return (
            k.rank,
            k.step,
            (
                f"{k.label}{_more([b.rank for b in behind])} stopped at step {k.step}, behind the others "
                f"(attempted update {low}, others up to {high}); no progress on any rank for {idle}"
            ),
        )
    waiting = [b for b in live if b.waiting is True]
    running = [b for b in live if b.waiting is False]
    # Before every rank has closed a window, a long first step (compilation, data warm-up) beside
    # a rank already in a collective is normal: only ranks that have trained are judged this way.
    if waiting and running and min(b.window for b in live) >= 1:
        k = running[0]
        return (
            k.rank,
            k.step,
            (
                f"{k.label}{_more([b.rank for b in running])} stopped at step {k.step} outside any collective "
                f"(in {k.where}) while {len(waiting)} rank(s) wait in one (in {waiting[0].where}); "
                f"no progress on any rank for {idle}"
            ),
        )
    return None


class StragglerRule:
    """`straggler`: a rank's busy window time > factor x the median over ranks, K windows running.

    Windows are matched by index across ranks from each heartbeat's recent history; each window is
    judged once, when every rank has reported it. State is plain JSON (`state_dict`).
    """

    def __init__(self, factor: float, patience: int) -> None:
        self.factor = factor
        self.patience = patience
        self.session_id: str | None = None
        self.judged_window = 0
        self.counts: dict[int, int] = {}
        self.active: set[int] = set()

    def state_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "judged_window": self.judged_window,
            "counts": {str(k): v for k, v in sorted(self.counts.items())},
            "active": sorted(self.active),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.session_id = state["session_id"]
        self.judged_window = int(state["judged_window"])
        self.counts = {int(k): int(v) for k, v in state["counts"].items()}
        self.active = {int(k) for k in state["active"]}

    def update(self, beats: dict[int, Heartbeat]) -> tuple[int, int, str] | None:
        """Judge the windows that every rank has reported since the last call."""
        if len(beats) < 2:
            return None
        session = next(iter(beats.values())).session_id
        if session != self.session_id:
            self.session_id, self.judged_window, self.counts, self.active = session, 0, {}, set()
        latest = min(b.window for b in beats.values())
        earliest = max(b.window - len(b.busy_seconds) + 1 for b in beats.values())
        finding = None
        for w in range(max(self.judged_window + 1, earliest), latest + 1):
            times = {k: b.busy_seconds[len(b.busy_seconds) - 1 - (b.window - w)] for k, b in beats.items()}
            windows = [b.window_seconds[len(b.window_seconds) - 1 - (b.window - w)] for b in beats.values()]
            # On a quiet machine the ranks waiting for a straggler are sampled waiting throughout:
            # a median busy time of exactly 0, against which nothing could stand out. Below
            # IDLE_BUSY_FRACTION of the window a rank counts as idle, at that much.
            median = max(statistics.median(times.values()), IDLE_BUSY_FRACTION * statistics.median(windows))
            for k, t in times.items():
                if median > 0 and t > self.factor * median:
                    self.counts[k] = self.counts.get(k, 0) + 1
                else:
                    self.counts.pop(k, None)
                    self.active.discard(k)
            for k in sorted(self.counts):
                if self.counts[k] >= self.patience and k not in self.active and finding is None:
                    self.active.add(k)
                    b = beats[k]
                    finding = (
                        k,
                        b.step,
                        (
                            f"rank {k} (host {b.host}) took {times[k] / median:.1f}x the median window time "
                            f"({times[k]:.3g} s vs {median:.3g} s) for {self.counts[k]} consecutive windows"
                        ),
                    )
        self.judged_window = max(self.judged_window, latest)
        return finding


class RankMonitor:
    """The rank rules for a watchdog's poll loop: call `poll(run_dir, now)` once per poll.

    Returns `(kind, step, message)` with kind `rank_stall` or `straggler` when a rule starts to
    hold, else None. A run without heartbeats, or a single process (a world of one: both rules
    compare ranks), never yields a finding.
    """

    def __init__(self, rank_stall: float = 300.0, straggler_factor: float = 1.5, straggler_patience: int = 5) -> None:
        # The values come validated from the watch's Options (`--rank-stall`, `--straggler-*`).
        self.rank_stall = rank_stall
        self.straggler = StragglerRule(straggler_factor, straggler_patience)
        self.stalled: list[int] | None = None  # [rank, step] reported, until it clears
        self.problems: list[str] = []  # unreadable heartbeat files seen by the last poll

    def state_dict(self) -> dict[str, Any]:
        return {"straggler": self.straggler.state_dict(), "stalled": self.stalled}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.straggler.load_state_dict(state["straggler"])
        self.stalled = None if state["stalled"] is None else [int(v) for v in state["stalled"]]

    def poll(
        self, run_dir: str, now: float | None = None, ignore: frozenset[str] = frozenset()
    ) -> tuple[str, int, str] | None:
        """Read the heartbeats and judge them; `ignore`: sessions never judged (an earlier
        attempt's files, which a relaunch has not yet overwritten)."""
        now = time.time() if now is None else now
        beats, self.problems = read_heartbeats(run_dir)
        if ignore:
            beats = {k: b for k, b in beats.items() if b.session_id not in ignore}
        return self.judge(current_session(beats), now)

    def judge(self, beats: dict[int, Heartbeat], now: float) -> tuple[str, int, str] | None:
        """The rules on heartbeats already read (one session's)."""
        stall = rank_stall_finding(beats, now, self.rank_stall)
        straggler = self.straggler.update(beats)
        if stall is None:
            self.stalled = None
        elif self.stalled != [stall[0], stall[1]]:
            self.stalled = [stall[0], stall[1]]
            return "rank_stall", stall[1], stall[2]
        if straggler is not None:
            return "straggler", straggler[1], straggler[2]
        return None


def rank_status_lines(run_dir: str, now: float | None = None, straggler_factor: float = 1.5) -> list[str]:
    """At most four lines on the ranks of a run: how many and where, the most behind, the slowest,
    and unreadable heartbeat files. Empty for a run without heartbeats, and for a single process
    (a world of one: its heartbeat tells nothing the log and the process do not)."""
    now = time.time() if now is None else now
    all_beats, problems = read_heartbeats(run_dir)
    beats = current_session(all_beats)
    lines: list[str] = []
    if beats and max(b.world_size for b in beats.values()) > 1:
        world = max(b.world_size for b in beats.values())
        hosts = len({b.host for b in beats.values()})
        ended = sum(1 for b in beats.values() if b.state == "ended")
        steps = [b.step for b in beats.values()]
        head = (
            f"ranks: {len(beats)}/{world} heartbeats on {hosts} host(s), steps {min(steps)}..{max(steps)}, "
            f"newest {_fmt_seconds(max(0.0, now - max(b.time for b in beats.values())))} ago"
        )
        if ended:
            head += f", {ended} ended"
        missing = [k for k in range(world) if k not in beats]
        if missing:
            shown = ", ".join(str(k) for k in missing[:5])
            head += f"; missing ranks {shown}" + (f" (+{len(missing) - 5} more)" if len(missing) > 5 else "")
        lines.append(head)
        # fewest updates; among equals, a rank not waiting in a collective (the others wait for it)
        behind = min(beats.values(), key=lambda b: (b.attempted, b.waiting is True, b.progress_time, b.rank))
        state = "waiting in a collective" if behind.waiting else (f"in {behind.where}" if behind.where else "")
        lines.append(
            f"most behind: {behind.label} at step {behind.step} (attempted update {behind.attempted}), "
            f"last step {_fmt_seconds(max(0.0, now - behind.progress_time))} ago" + (f", {state}" if state else "")
        )
        timed = {k: b for k, b in beats.items() if b.busy_seconds}
        if len(timed) >= 2:
            latest = min(b.window for b in timed.values())
            times = {}
            for k, b in timed.items():
                i = len(b.busy_seconds) - 1 - (b.window - latest)
                if i >= 0:
                    times[k] = b.busy_seconds[i]
            if len(times) >= 2:
                median = statistics.median(times.values())
                k = max(times, key=lambda r: (times[r], -r))
                ratio = f"{times[k] / median:.2f}x" if median > 0 else "n/a x"
                flag = (
                    f" (straggler threshold {straggler_factor:g}x)"
                    if median > 0 and times[k] > straggler_factor * median
                    else ""
                )
                lines.append(
                    f"slowest: rank {k} (host {timed[k].host}) {ratio} the median window time "
                    f"({times[k]:.3g} s vs {median:.3g} s) at window {latest}{flag}"
                )
    if problems:
        lines.append(f"unreadable heartbeats: {len(problems)} ({problems[0]})")
    return lines
