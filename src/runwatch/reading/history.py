"""A run's history as its log tells it: the path of sessions to the final step, the checkpoints
on it, the latest one to resume from, and the checkpoint a divergence rolls back to.

    sessions = records.load_sessions(run_dir)
    cp = latest_checkpoint(sessions)                   # Checkpoint(path, step, session) or None
    target = rollback_target(sessions, verdict)        # Rollback(checkpoint, skip=(a, b)) or None

The *path* to the final step: walking back from the last session, each session takes over from
the step it resumed from (`start.step` in run.json); the session before it on the path is the
latest earlier one that reached that step. Work of a session beyond the step where the next path
session took over was redone (after a crash) or thrown away (after a rollback). `resume`
(a training's own choice of checkpoint), `supervise` (relaunch and roll-back) and `goodput` read
it here. Standard library only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .records import Record, Session

__all__ = [
    "Checkpoint",
    "Rollback",
    "path",
    "checkpoints",
    "latest_checkpoint",
    "rollback_target",
    "valid_records",
    "origin_step",
    "live_sessions",
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


def _int(v: int | float) -> str:
    return str(int(v)) if float(v).is_integer() else str(v)


def valid_records(s: Session) -> list[Record]:
    """The session's records but the invalid ones."""
    return [r for r in s.records if r.kind != "invalid"]


def _last_step(s: Session) -> int | float:
    """The furthest step the session reached (in minimal telemetry an eval line printed by the next
    process, at the step it resumed from, still falls in this session: not its end)."""
    recs = valid_records(s)
    return max(r.step for r in recs) if recs else s.start_step


def origin_step(s: Session, first: bool) -> int | float:
    """The step a session started from (minimal telemetry's first session starts at 0)."""
    if first and s.manifest_entry is None:
        return 0
    return s.start_step


def live_sessions(sessions: list[Session]) -> list[Session]:
    """The sessions with at least one valid record."""
    return [s for s in sessions if valid_records(s)]


def path(sessions: list[Session]) -> list[tuple[Session, int | float]]:
    """The sessions on the path to the final step, oldest first, each with the step up to which it
    is kept (where the next path session took over; the final session: its last step)."""
    live = live_sessions(sessions)
    if not live:
        return []
    out = [(live[-1], _last_step(live[-1]))]
    resume = origin_step(live[-1], len(live) == 1)
    for i in range(len(live) - 2, -1, -1):
        s = live[i]
        origin = origin_step(s, i == 0)
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
            where = _named(r)
            if where is None or (keep is not None and r.step > keep[id(s)]):
                continue
            verified = r.raw.get("verified") if r.raw else None
            out.append(Checkpoint(where, r.step, s.key, verified if isinstance(verified, bool) else None))
    return out


def _named(r: Record) -> str | None:
    """The path a checkpoint record names (`path`; a text log's `ckpt` group), None for any other record."""
    if r.kind != "checkpoint" or not r.raw:
        return None
    for key in ("path", "ckpt"):
        if isinstance(r.raw.get(key), str) and r.raw[key]:
            return str(r.raw[key])
    return None


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
    recs = valid_records(final)
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
            return min(onset, origin_step(final, False) + 1), step
        if r.kind == "train":
            prev_train = r
    return onset, step


def rollback_target(
    sessions: list[Session], kind: str | None, step: int | float, onset: int | float | None, cwd: str | None = None
) -> Rollback | None:
    """The checkpoint a divergence rolls back to: the latest on the path to the latest session whose
    step is below the first step of the window that holds the onset, known to hold what was saved
    then (no later save, at or past that window, wrote the same path: nanoGPT saves every time to
    `out/ckpt.pt`), and whose file, when local, still exists; None when there is none."""
    live = live_sessions(sessions)
    if not live:
        return None
    first_bad, skip_end = _first_bad_step(live[-1], kind, step, step if onset is None else onset)
    every = checkpoints(sessions, on_path=False)
    for cp in reversed(checkpoints(sessions)):
        overwritten = any(o.path == cp.path and o.step >= first_bad for o in every)
        if cp.step < first_bad and not overwritten and _exists(cp.path, cwd) is not False:
            return Rollback(cp, first_bad, (cp.step + 1, skip_end))
    return None
