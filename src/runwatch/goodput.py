"""A run's history as the supervisor reads it: the path to the final step, the checkpoint a
divergence rolls back to, and the goodput of the whole run.

    sessions = records.load_sessions(run_dir)
    target = rollback_target(sessions, verdict)        # Rollback(checkpoint, skip=(a, b)) or None
    figures = goodput(sessions)                        # {"steps_kept", "steps_run", "seconds_lost", ...}

The *path* to the final step: walking back from the last session, each session takes over from
the step it resumed from (`start.step` in run.json); the session before it on the path is the
latest earlier one that reached that step. Work of a session beyond the step where the next path
session took over was redone (after a crash) or thrown away (after a rollback).

Goodput (docs/SUPERVISE.md, "Goodput"):
- `steps_run`: every successful optimizer update the log shows, over all sessions (schema v1:
  the windows' `updates`; minimal telemetry: step differences within a session);
- `steps_kept`: the updates on the path to the final step (the final step minus the run's first
  step): a step redone after a crash or a rollback counts once;
- `seconds_lost`: the wall time from the first session's start to the last record (under
  `supervise`: from the first launch to the end of the supervision), minus the wall time of the
  path's stretches (from a session's start to its record at the step where the next path session
  took over; the final session whole). It is the redone work plus every gap between sessions:
  detection, stop, back-off, the new process's start until its logger opened, and every attempt
  that logged nothing at all.

Standard library only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TypedDict

from .records import Record, Session

__all__ = [
    "Checkpoint",
    "Rollback",
    "Goodput",
    "path",
    "checkpoints",
    "latest_checkpoint",
    "rollback_target",
    "goodput",
]


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """One `checkpoint` event of the log."""

    path: str
    step: int | float
    session: str
    verified: bool | None = None


@dataclass(frozen=True, slots=True)
class Rollback:
    """Where a divergence goes back to: the checkpoint, and the steps whose batches to skip."""

    checkpoint: Checkpoint
    first_bad_step: int | float  # the first step of the window that holds the onset
    skip: tuple[int | float, int | float]  # RUNWATCH_SKIP_STEPS=<a>-<b>

    @property
    def skip_text(self) -> str:
        return f"{_int(self.skip[0])}-{_int(self.skip[1])}"


class Goodput(TypedDict):
    """The goodput figures of a run (the module docstring says what each one counts)."""

    steps_kept: int | float
    steps_run: int | float
    ratio: float | None  # steps_kept / steps_run; None when no step ran
    restarts: int
    rollbacks: int
    seconds_lost: float | None  # None when the sessions' times cannot tell


def _int(v: int | float) -> str:
    return str(int(v)) if float(v).is_integer() else str(v)


def _valid(s: Session) -> list[Record]:
    return [r for r in s.records if r.kind != "invalid"]


def _last_step(s: Session) -> int | float:
    """The furthest step the session reached (in minimal telemetry an eval line printed by the next
    process, at the step it resumed from, still falls in this session: not its end)."""
    recs = _valid(s)
    return max(r.step for r in recs) if recs else s.start_step


def _origin(s: Session, first: bool) -> int | float:
    """The step a session started from (minimal telemetry's first session starts at 0)."""
    if first and s.manifest_entry is None:
        return 0
    return s.start_step


def _live(sessions: list[Session]) -> list[Session]:
    return [s for s in sessions if _valid(s)]


def path(sessions: list[Session]) -> list[tuple[Session, int | float]]:
    """The sessions on the path to the final step, oldest first, each with the step up to which it
    is kept (where the next path session took over; the final session: its last step)."""
    live = _live(sessions)
    if not live:
        return []
    out = [(live[-1], _last_step(live[-1]))]
    resume = _origin(live[-1], len(live) == 1)
    for i in range(len(live) - 2, -1, -1):
        s = live[i]
        origin = _origin(s, i == 0)
        if origin < resume <= _last_step(s):
            out.append((s, resume))
            resume = origin
    out.reverse()
    return out


def checkpoints(sessions: list[Session], *, on_path: bool = True) -> list[Checkpoint]:
    """The checkpoint events of the run in log order (only those on the path when `on_path`)."""
    keep = {id(s): end for s, end in path(sessions)} if on_path else None
    out = []
    for s in sessions:
        if keep is not None and id(s) not in keep:
            continue
        for r in s.records:
            if r.kind != "checkpoint" or not r.raw or not isinstance(r.raw.get("path"), str):
                continue
            if keep is not None and r.step > keep[id(s)]:
                continue
            verified = r.raw.get("verified")
            out.append(Checkpoint(r.raw["path"], r.step, s.key, verified if isinstance(verified, bool) else None))
    return out


def _exists(p: str, cwd: str | None) -> bool | None:
    """Whether a local checkpoint path exists; None when it cannot be checked from here (a URL)."""
    if "://" in p:
        return None
    return os.path.exists(p if os.path.isabs(p) or cwd is None else os.path.join(cwd, p))


def latest_checkpoint(sessions: list[Session], cwd: str | None = None) -> Checkpoint | None:
    """The run's latest checkpoint to resume from: on the path, verified (or not marked
    unverified) and still on disk; the latest one on the path whose file exists otherwise."""
    cps = checkpoints(sessions)
    for cp in reversed(cps):
        if cp.verified is not False and _exists(cp.path, cwd) is not False:
            return cp
    for cp in reversed(cps):
        if _exists(cp.path, cwd):
            return cp
    return None


def _first_bad_step(
    final: Session, kind: str | None, step: int | float, onset: int | float
) -> tuple[int | float, int | float]:
    """(first step of the window that holds the onset, last step to skip)."""
    recs = _valid(final)
    last = recs[-1] if recs else None
    if (
        kind == "nonfinite_loss"
        and last is not None
        and last.kind == "end"
        and last.reason == "nonfinite_loss"
        and last.step == step
    ):
        return step + 1, step + 1  # the attempted update after the session's last step made the NaN
    prev_train: Record | None = None
    for r in recs:
        if r.kind == "train" and r.step == onset:
            if r.raw is not None and type(r.raw.get("updates")) is int:  # schema v1: the window's own size
                return r.step - r.raw["updates"] + 1, step
            if prev_train is not None:  # minimal telemetry: the window began after the record before
                return prev_train.step + 1, step
            return min(onset, _origin(final, False) + 1), step
        if r.kind == "train":
            prev_train = r
    return onset, step


def rollback_target(
    sessions: list[Session], kind: str | None, step: int | float, onset: int | float | None, cwd: str | None = None
) -> Rollback | None:
    """The checkpoint a divergence rolls back to: the latest on the path to the latest session whose
    step is below the first step of the window that holds the onset (and whose file, when local,
    still exists); None when there is none."""
    live = _live(sessions)
    if not live:
        return None
    first_bad, skip_end = _first_bad_step(live[-1], kind, step, step if onset is None else onset)
    for cp in reversed(checkpoints(sessions)):
        if cp.step < first_bad and _exists(cp.path, cwd) is not False:
            return Rollback(cp, first_bad, (cp.step + 1, skip_end))
    return None


def _start_time(s: Session) -> float | None:
    """When the session's logger opened: a v1 record's time minus its session's elapsed seconds."""
    for r in s.records:
        sess = r.raw.get("session") if r.raw else None
        if r.time is not None and isinstance(sess, dict) and type(sess.get("elapsed_seconds")) in (int, float):
            elapsed: int | float = sess["elapsed_seconds"]
            return r.time - elapsed
    return None


def _time_at(s: Session, step: int | float) -> float | None:
    """The time of the session's last record at or before `step`."""
    t = None
    for r in _valid(s):
        if r.step <= step and r.time is not None:
            t = r.time
        elif r.step > step:
            break
    return t


def _updates(sessions: list[Session]) -> int | float:
    total: int | float = 0
    for i, s in enumerate(sessions):
        prev = _origin(s, True) if i == 0 else None
        for r in s.records:
            if r.kind != "train":
                continue
            if r.raw is not None and type(r.raw.get("updates")) is int and "attempted" in r.raw:
                total += r.raw["updates"]
            elif prev is not None and r.step > prev:
                total += r.step - prev  # minimal telemetry: a relaunch's first record counts none
            prev = r.step
    return total


def goodput(
    sessions: list[Session],
    *,
    restarts: int = 0,
    rollbacks: int = 0,
    wall: tuple[float, float] | None = None,
) -> Goodput:
    """`{"steps_kept", "steps_run", "ratio", "restarts", "rollbacks", "seconds_lost"}` (see the
    module docstring); `ratio` and `seconds_lost` are None when they cannot be known.

    `wall`: (first launch, end) as the supervisor saw them; the time lost is then counted over
    that whole span, so attempts that logged nothing (a crash before the first record, a hang
    in start-up) count too, as do the first start-up and the final exit."""
    run = _updates(sessions)
    stretches = path(sessions)
    kept: int | float = 0
    lost: float | None = None
    if stretches:
        kept = stretches[-1][1] - _origin(stretches[0][0], stretches[0][0] is _live(sessions)[0])
        first_start = _start_time(_live(sessions)[0])
        end = _time_at(stretches[-1][0], stretches[-1][1])
        kept_seconds = 0.0
        known = True
        for s, upto in stretches:
            a, b = _start_time(s), _time_at(s, upto)
            if a is None or b is None:
                known = False
                break
            kept_seconds += b - a
        if known and wall is not None:
            lost = round(max(0.0, wall[1] - wall[0] - kept_seconds), 3)
        elif known and first_start is not None and end is not None:
            lost = round(max(0.0, end - first_start - kept_seconds), 3)
    return {
        "steps_kept": kept,
        "steps_run": run,
        "ratio": round(kept / run, 4) if run else None,
        "restarts": restarts,
        "rollbacks": rollbacks,
        "seconds_lost": lost,
    }
