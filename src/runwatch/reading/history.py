"""A run's history as its log tells it: the path of sessions to the final step, the checkpoints
on it, the latest one to resume from, and the checkpoint a divergence rolls back to.

    sessions = records.load_sessions(run_dir)
    cp = latest_checkpoint(sessions)                   # Checkpoint(path, step, session) or None
    target = rollback_target(sessions, verdict)        # Rollback(checkpoint, skip=(a, b)) or None

    trail = Trail()                                    # the same, kept as a follower reads:
    trail.add(rec, parser)                             # each record read (supervise's watch does it)
    cp = trail.latest_checkpoint(cwd)                  # at any time, without reading the log again

The *path* to the final step: walking back from the last session, each session takes over from
the step it resumed from (`start.step` in run.json); the session before it on the path is the
latest earlier one that reached that step. Work of a session beyond the step where the next path
session took over was redone (after a crash) or thrown away (after a rollback). `resume`
(a training's own choice of checkpoint), `supervise` (relaunch and roll-back) and `goodput` read
it here; `Trail` keeps what the latest checkpoint and the highest step need as a follower
reads the log, for a supervisor that asks at every launch. Standard library only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .parsing import Record, RecordParser, Session


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


def session_of(rec: Record, parser: RecordParser | None) -> Session:
    """The (empty) Session that `rec`, its first record, opens: it starts at run.json's
    `start.step` for its session, else at the record's step (a train record; 0 for another)."""
    entry = parser.entry(rec.session) if parser is not None else None  # (run.json's: minimal has none)
    start = entry["start"]["step"] if entry else (rec.step if rec.kind == "train" else 0)
    return Session(rec.session, start, manifest_entry=entry)


class Trail:
    """The log's sessions kept thin as a follower reads them: each session's start, its checkpoint
    events and its furthest valid record -- all that `path`, `checkpoints` and `latest_checkpoint`
    look at -- so that the latest checkpoint and the highest step logged are known at any time
    without reading the log again (`supervise` asks at every launch). A record fed twice (a whole
    read seeded the trail, then a watch caught up over the same records) changes neither answer."""

    def __init__(self) -> None:
        self._sessions: dict[str, Session] = {}  # each session with its checkpoint records
        self._top: dict[str, Record] = {}  # each session's record of the furthest valid step

    def add(self, rec: Record, parser: RecordParser | None) -> None:
        """Take one record as `parser` read it (its session opened by `session_of`, as a whole read does)."""
        s = self._sessions.get(rec.session)
        if s is None:
            s = self._sessions[rec.session] = session_of(rec, parser)
        self._keep(s, rec)

    def seed(self, sessions: list[Session]) -> None:
        """Take a whole read's sessions (a supervisor that adopts a training it did not launch)."""
        for whole in sessions:
            s = self._sessions.get(whole.key)
            if s is None:
                s = self._sessions[whole.key] = Session(
                    whole.key, whole.start_step, manifest_entry=whole.manifest_entry
                )
            for rec in whole.records:
                self._keep(s, rec)

    def clear(self) -> None:
        """Forget every record taken (the log was read again from its start: what came before is void)."""
        self._sessions.clear()
        self._top.clear()

    def _keep(self, s: Session, rec: Record) -> None:
        if rec.kind == "checkpoint":
            s.records.append(rec)
        elif rec.kind != "invalid":
            top = self._top.get(s.key)
            if top is None or rec.step > top.step:
                self._top[s.key] = rec

    def sessions(self) -> list[Session]:
        """The sessions as `path` and `checkpoints` read them: each one's checkpoint events and its
        furthest valid record, in order of first appearance."""
        out = []
        for key, s in self._sessions.items():
            top = self._top.get(key)
            out.append(
                Session(key, s.start_step, [*s.records, top] if top is not None else list(s.records), s.manifest_entry)
            )
        return out

    def latest_checkpoint(self, cwd: str | None = None) -> Checkpoint | None:
        """`latest_checkpoint` of the records taken so far."""
        return latest_checkpoint(self.sessions(), cwd)

    def high_step(self) -> int | float | None:
        """The highest step of a valid record taken so far; None before the first."""
        steps = [r.step for s in self.sessions() for r in s.records]
        return max(steps) if steps else None
