"""What happened to a run since a cursor: the events `wait_for_event` and `runwatch wait --events` give.

    batch = events_since("/runs/a", cursor=None)        # everything so far, and a cursor
    batch = events_since("/runs/a", cursor=batch.cursor)  # only what came after

Events come from three files, each read where it stands, so that a cursor stays good across a
restart of the server, of the agent, or of the supervisor:

- `supervise.jsonl` (the journal): `warning`, `stop` (a verdict the supervisor acted on),
  `relaunch`, `rollback`, `done`, `gave_up`, `preempted`. The cursor holds how many of its records
  were given (the journal is only appended to).
- `watchdog.json` (a watch's record or verdict): its `warnings` (the cursor holds how many, and a
  hash of them, so a new watch's list is told apart), and its final verdict (`done`, or `stop` for
  an anomaly; the cursor holds the verdict's time).
- the log's checkpoint records (the cursor holds how many were given).

A warning (or a stop) seen in two files, the journal and watchdog.json, is one event: the journal's
(under a supervisor, whose journal has them all, watchdog.json is not read for events).
Each event is `{"kind", "time", "step", "what", "message", "source"}`; `what` is the finding's kind
(`loss_spike`) where there is one. The cursor is an opaque string (`j3.w2-5f1c.v0.c1`). Standard
library only.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any

from ...files import JOURNAL, VERDICT, read_json
from ...reading import RecordSource, Target

# Every kind of event, in the order the contract lists them.
KINDS = ("warning", "stop", "relaunch", "rollback", "checkpoint", "done", "gave_up", "preempted")
# Journal records that are events, as the kind they are given as.
_JOURNAL_KINDS = {
    "warning": "warning",
    "verdict": "stop",
    "relaunch": "relaunch",
    "rollback": "rollback",
    "done": "done",
    "gave_up": "gave_up",
    "preempted": "preempted",
}
# How long one call reads a log for its checkpoints (a long log is caught up over several calls).
READ_SECONDS = 2.0
# The journal is read up to this many bytes from the cursor's record on (a call catches up in steps).
MAX_JOURNAL_BYTES = 8 << 20
_CURSOR = re.compile(r"^j(\d+)\.w(\d+)-([0-9a-f]{0,8})\.v([0-9.]+)\.c(\d+)$")


@dataclass
class Cursor:
    """Where a reader of a run's events stands (see the module's docstring)."""

    journal: int = 0  # journal records given
    warnings: int = 0  # watchdog.json warnings given
    warnings_hash: str = ""  # of those warnings' (kind, step)
    verdict_time: float = 0.0  # the watchdog.json verdict given (its time), 0 when none
    checkpoints: int = 0  # the log's checkpoint records given

    def text(self) -> str:
        return f"j{self.journal}.w{self.warnings}-{self.warnings_hash}.v{self.verdict_time!r}.c{self.checkpoints}"

    @classmethod
    def parse(cls, text: str | None) -> Cursor:
        """A cursor from its text (None or "": the run's start); ValueError when it is not one."""
        if not text:
            return cls()
        m = _CURSOR.match(text) if isinstance(text, str) else None
        if m is None:
            raise ValueError(f"not a cursor of this run's events: {text!r} (give one from an earlier result)")
        return cls(int(m[1]), int(m[2]), m[3], float(m[4]), int(m[5]))


@dataclass
class Batch:
    """The events after a cursor, and the cursor after them."""

    events: list[dict[str, Any]] = field(default_factory=list)
    cursor: str = ""
    notes: list[str] = field(default_factory=list)


def parse_kinds(kinds: list[str] | tuple[str, ...] | None, tool: str = "wait_for_event") -> tuple[str, ...]:
    """The kinds asked for (default all); ValueError naming an unknown one."""
    if kinds is None:
        return KINDS
    for k in kinds:
        if k not in KINDS:
            raise ValueError(f"{tool}: unknown event kind {k!r}; known: {', '.join(KINDS)}")
    return tuple(kinds) or KINDS


def _hash(warnings: list[dict[str, Any]]) -> str:
    text = json.dumps([(w.get("kind"), w.get("step")) for w in warnings], default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:8]


def _num(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def journal_records(run_dir: str, start: int) -> tuple[list[dict[str, Any]], int, list[str]]:
    """The journal's records from record `start` on (complete lines only, each with its `_index`),
    how many records there are in all as far as read, and notes (unreadable lines, a cut read)."""
    path = os.path.join(run_dir, JOURNAL)
    notes: list[str] = []
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return [], start, notes
    try:
        import stat

        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return [], start, [f"{JOURNAL} is not a regular file"]
        with os.fdopen(fd, "rb", closefd=False) as f:
            index = 0
            out: list[dict[str, Any]] = []
            read = 0
            for raw in f:
                if not raw.endswith(b"\n"):
                    break  # a torn last line: not complete yet
                index += 1
                if index <= start:
                    continue
                read += len(raw)
                try:
                    rec = json.loads(raw)
                except (ValueError, RecursionError):
                    notes.append(f"{JOURNAL}:{index}: unreadable record skipped")
                    continue
                if isinstance(rec, dict):
                    rec["_index"] = index
                    out.append(rec)
                if read > MAX_JOURNAL_BYTES:
                    notes.append(f"{JOURNAL}: read {read} bytes; the rest comes with the next call")
                    break
            return out, index, notes
    finally:
        os.close(fd)


def _action(rec: dict[str, Any]) -> str | None:
    """What a relaunch or a rollback did, in words (its journal record has no message)."""
    if rec.get("event") not in ("relaunch", "rollback"):
        return None
    ckpt = rec.get("checkpoint")
    return f"attempt {rec.get('attempt')}" + (f" from checkpoint {ckpt}" if ckpt else "")


def _finding_key(kind: object, step: object) -> tuple[str, str]:
    return (str(kind), json.dumps(step))


class CheckpointTail:
    """The checkpoint records of a run's log, followed incrementally (one per run per process)."""

    def __init__(self, target: Target, maps: dict[str, str] | None = None) -> None:
        self.source = RecordSource(target, maps=maps)
        self.checkpoints: list[dict[str, Any]] = []
        self.caught_up = False

    def poll(self, seconds: float = READ_SECONDS) -> list[dict[str, Any]]:
        """The checkpoints read so far, reading for at most `seconds` (`caught_up` says whether the
        log was read to its end: a 1 GB log takes a few calls)."""
        deadline = time.monotonic() + seconds
        while True:
            if time.monotonic() > deadline:
                self.caught_up = False
                return self.checkpoints
            polled = self.source.poll()
            if polled.restarted:
                self.checkpoints = []
            for rec in polled:
                if rec.kind == "checkpoint":
                    raw = rec.raw or {}
                    self.checkpoints.append(
                        {"step": rec.step, "time": rec.time, "path": raw.get("path"), "verified": raw.get("verified")}
                    )
            if not polled.more:
                self.caught_up = True
                return self.checkpoints


def events_since(
    run_dir: str,
    cursor: str | None,
    kinds: tuple[str, ...] = KINDS,
    checkpoints: CheckpointTail | None = None,
) -> Batch:
    """The events of `run_dir` after `cursor` (None: from the run's start), each once, in order of
    time, with the cursor after them. `checkpoints` follows the log (None: no checkpoint events)."""
    cur = Cursor.parse(cursor)
    out: list[dict[str, Any]] = []
    everything, seen, notes = journal_records(run_dir, 0)
    journal = [r for r in everything if r["_index"] > cur.journal]
    # Every warning and stop the journal holds (not only the new ones): watchdog.json repeats them.
    in_journal = {
        _finding_key(r.get("kind"), r.get("step")) for r in everything if r.get("event") in ("warning", "verdict")
    }
    for rec in journal:
        kind = _JOURNAL_KINDS.get(str(rec.get("event")))
        if kind is None or (kind == "stop" and not rec.get("kind")):
            continue  # (a `verdict` record of a run that ended well: its `done` record follows)
        out.append(
            {
                "kind": kind,
                "time": _num(rec.get("time")),
                "step": rec.get("step"),
                "what": rec.get("kind"),
                "class": rec.get("class"),
                "message": rec.get("message") or rec.get("line") or _action(rec),
                "checkpoint": rec.get("checkpoint"),
                "attempt": rec.get("attempt"),
                "source": JOURNAL,
            }
        )
    cur.journal = seen
    # Under a supervisor, the journal has every warning and stop (its watch's too, written a moment
    # after watchdog.json: reading both would give one twice); watchdog.json speaks for a plain watch.
    supervised = bool(everything) or os.path.lexists(os.path.join(run_dir, JOURNAL))
    doc = None if supervised else read_json(os.path.join(run_dir, VERDICT))
    if isinstance(doc, dict):
        warnings = [w for w in doc.get("warnings") or [] if isinstance(w, dict)]
        start = (
            cur.warnings
            if len(warnings) >= cur.warnings and _hash(warnings[: cur.warnings]) == cur.warnings_hash
            else 0
        )
        when = _num(doc.get("polled_at")) or _num(doc.get("time"))
        for w in warnings[start:]:
            if _finding_key(w.get("kind"), w.get("step")) in in_journal:
                continue
            out.append(
                {
                    "kind": "warning",
                    "time": _num(w.get("time")) or when,
                    "step": w.get("step"),
                    "what": w.get("kind"),
                    "class": w.get("class"),
                    "message": w.get("message"),
                    "source": VERDICT,
                }
            )
        cur.warnings, cur.warnings_hash = len(warnings), _hash(warnings)
        vtime = _num(doc.get("time"))
        if doc.get("verdict") in ("done", "anomaly") and vtime is not None and vtime != cur.verdict_time:
            kind = "done" if doc["verdict"] == "done" else "stop"
            repeated = (kind == "done" and any(r.get("event") == "done" for r in everything)) or (
                kind == "stop" and _finding_key(doc.get("kind"), doc.get("step")) in in_journal
            )
            if not repeated:
                out.append(
                    {
                        "kind": kind,
                        "time": vtime,
                        "step": doc.get("step"),
                        "what": doc.get("kind"),
                        "class": doc.get("class"),
                        "message": doc.get("message"),
                        "source": VERDICT,
                    }
                )
            cur.verdict_time = vtime
    if checkpoints is not None:
        found = checkpoints.poll()
        if cur.checkpoints <= len(found):
            start = cur.checkpoints
        else:  # fewer than given: still catching up (after a restart), or the log was rewritten
            start = len(found) if not checkpoints.caught_up else 0
        for c in found[start:]:
            out.append(
                {
                    "kind": "checkpoint",
                    "time": c["time"],
                    "step": c["step"],
                    "what": None,
                    "message": f"checkpoint {c['path']} at step {c['step']}",
                    "source": "log",
                }
            )
        cur.checkpoints = max(len(found), cur.checkpoints) if not checkpoints.caught_up else len(found)
        if not checkpoints.caught_up:
            notes.append("the log's checkpoints: still reading the log; later calls give the rest")
    out.sort(key=lambda e: e["time"] if e["time"] is not None else float("inf"))
    wanted = [{k: v for k, v in e.items() if v is not None} for e in out if e["kind"] in kinds]
    return Batch(wanted, cur.text(), notes)
