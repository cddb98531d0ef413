"""The supervisor's journal of a run (`RUN_DIR/supervise.jsonl`), read incrementally for the page.

Each line is one action of `runwatch supervise`: at least `time, event, attempt, pid, kind, class,
step, checkpoint`, `event` one of launch, verdict, stop, relaunch, rollback, done, gave_up,
preempted; the last record of an allocation (done, gave_up or preempted: `supervision.ENDS`) adds
`goodput`, and a requeued job's next allocation goes on in the same journal. The view keeps the
attempts (when each began, its pid, the verdict that ended it and what was done about it), the
restarts and rollbacks used so far, the budgets when a record names them (`budgets: {"restarts":
N, "rollbacks": M}`), the goodput, and each relaunch and rollback for the charts' markers
(`moves`). A record of another event (`notify_failed`, `heartbeat_failed`, one a later supervisor
adds) is left out, not an error. Standard library only.
"""

from __future__ import annotations

import os
from typing import Any, TypedDict

from ...files import loads_object
from ...reading import LogFollower
from ...supervising import ENDS

# Attempts shown per run: a run relaunched more often than this shows its latest ones.
MAX_ATTEMPTS = 100
# A journal line longer than this is not a supervisor's record.
MAX_JOURNAL_LINE_BYTES = 64 * 1024
EVENTS = ("launch", "verdict", "stop", "relaunch", "rollback", *ENDS)

# The values below come from the journal's JSON as written (the page shows them as they are): Any.

# The verdict that ended an attempt: `kind` null and `line` "OK done step=N" for a completed run.
AttemptVerdict = TypedDict("AttemptVerdict", {"kind": Any, "class": Any, "step": Any, "line": Any})


class Move(TypedDict):
    """A relaunch or a rollback: when, from which checkpoint, after a verdict at which step."""

    event: str
    attempt: Any
    time: Any
    checkpoint: Any
    checkpoint_step: Any  # the rollback's (the journal names it); None for a relaunch
    verdict_step: Any  # the step of the verdict that ended the attempt before


class AttemptEnd(TypedDict):
    """How an attempt ended: the record that ended it."""

    event: str
    step: Any
    time: Any


class Attempt(TypedDict):
    """One attempt of the supervised run."""

    attempt: Any
    pid: Any
    started: Any
    how: str  # launch, relaunch or rollback (or the first event seen of it)
    checkpoint: Any
    verdict: AttemptVerdict | None
    end: AttemptEnd | None


class SupervisionFacts(TypedDict):
    """The supervision as the run's page shows it."""

    attempt: Any
    restarts: int
    rollbacks: int
    budgets: dict[str, Any] | None
    goodput: dict[str, Any] | None
    finished: bool
    last_event: dict[str, Any] | None
    attempts: list[Attempt]
    error: str | None


class SupervisionView:
    """What `supervise.jsonl` says so far; `refresh()` reads only its new lines."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.follower = LogFollower(path, max_line_bytes=MAX_JOURNAL_LINE_BYTES, chunk_bytes=256 * 1024)
        self._clear()

    def _clear(self) -> None:
        self.present = False
        self.attempts: list[Attempt] = []
        self.restarts = 0
        self.rollbacks = 0
        self.budgets: dict[str, Any] | None = None
        self.goodput: dict[str, Any] | None = None
        self.last: dict[str, Any] | None = None
        self.moves: list[Move] = []
        self.error: str | None = None
        self.unreadable = 0  # lines that are no supervisor record (the last one is named in `error`)

    def refresh(self) -> bool:
        """Read the journal's new lines; True when something changed. InvalidRunError when the
        journal is not a regular file."""
        changed = False
        while True:
            batch = self.follower.poll()
            if not batch.exists:
                return changed
            if batch.reset:
                self._clear()
                changed = True
            self.present = True
            name = os.path.basename(self.path)
            if batch.too_long is not None:
                self.error = f"{name}:{batch.too_long}: line longer than {MAX_JOURNAL_LINE_BYTES} bytes"
                changed = True
            for lineno, raw in batch.lines:
                changed = True
                if not raw.strip():
                    continue
                rec = loads_object(raw)  # strictly: NaN, a nested bomb, invalid UTF-8 are unreadable
                if rec is None or not isinstance(rec.get("event"), str):
                    self.unreadable += 1
                    more = f" ({self.unreadable} in all)" if self.unreadable > 1 else ""
                    self.error = f"{name}:{lineno}: unreadable record skipped{more}"
                    continue
                if rec["event"] not in EVENTS:
                    continue  # notify_failed, or an event of a later supervisor: not an attempt's
                self._apply(rec)
            if not batch.more:
                return changed

    def _apply(self, rec: dict[str, Any]) -> None:
        event = rec["event"]
        self.last = rec
        if isinstance(rec.get("budgets"), dict):
            self.budgets = rec["budgets"]
        if isinstance(rec.get("goodput"), dict):
            self.goodput = rec["goodput"]
        if event == "relaunch":
            self.restarts += 1
        elif event == "rollback":
            self.rollbacks += 1
        attempt = rec.get("attempt")
        if event in ("relaunch", "rollback"):
            before = self.attempts[-1]["verdict"] if self.attempts else None
            self.moves.append(
                {
                    "event": event,
                    "attempt": attempt,
                    "time": rec.get("time"),
                    "checkpoint": rec.get("checkpoint"),
                    "checkpoint_step": rec.get("checkpoint_step"),
                    "verdict_step": before["step"] if before else None,
                }
            )
            del self.moves[:-MAX_ATTEMPTS]
        if event in ("launch", "relaunch", "rollback") or not self.attempts or self.attempts[-1]["attempt"] != attempt:
            if self.attempts and self.attempts[-1]["end"] is None:  # ended by the next one's start
                self.attempts[-1]["end"] = {"event": event, "step": rec.get("step"), "time": rec.get("time")}
            self.attempts.append(
                {
                    "attempt": attempt,
                    "pid": rec.get("pid"),
                    "started": rec.get("time"),
                    "how": event,
                    "checkpoint": rec.get("checkpoint"),
                    "verdict": None,
                    "end": None,
                }
            )
            del self.attempts[:-MAX_ATTEMPTS]
        a = self.attempts[-1]
        if rec.get("pid") is not None:
            a["pid"] = rec["pid"]
        if event == "verdict":
            a["verdict"] = {
                "kind": rec.get("kind"),
                "class": rec.get("class"),
                "step": rec.get("step"),
                "line": rec.get("line"),
            }
        elif event == "stop" or event in ENDS:
            a["end"] = {"event": event, "step": rec.get("step"), "time": rec.get("time")}

    def finished(self) -> bool:
        """The journal's last record ends an allocation (done, gave_up, preempted)."""
        return self.last is not None and self.last.get("event") in ENDS

    def facts(self) -> SupervisionFacts | None:
        """The supervision as JSON (None when the run is not supervised)."""
        if not self.present:
            return None
        return {
            "attempt": self.attempts[-1]["attempt"] if self.attempts else None,
            "restarts": self.restarts,
            "rollbacks": self.rollbacks,
            "budgets": self.budgets,
            "goodput": self.goodput,
            "finished": self.finished(),
            "last_event": self.last,
            "attempts": list(self.attempts),
            "error": self.error,
        }
