"""The record rules on the log and the session's end (docs/WATCHDOG.md, "Rules on records"):
`invalid_log`, `session_error` and `interrupted`, with their declarations (class, severity,
runbook). They have no options. Built on `rulebase`. Standard library only.
"""

from __future__ import annotations

from ..reading import Record
from .declaring import FATAL, STOP, TRANSIENT, Runbook
from .rulebase import SKIP, Look, Rule


class InvalidLog(Rule):
    kind = name = "invalid_log"
    cls = FATAL
    severity = STOP
    runbook = Runbook(
        "a line of the log is not a valid record (not JSON, or failing the schema)",
        "read the message (file and line); fix the log writer",
    )
    looks_at = frozenset({"train", "eval", "checkpoint", "end", "fatal", "invalid", "other"})

    def look(self, rec: Record) -> Look:
        return rec.error if rec.kind == "invalid" else None


class SessionError(Rule):
    kind = name = "session_error"
    cls = FATAL
    severity = STOP
    runbook = Runbook(
        "the session ended with an error (an exception in the training code)",
        "read the error; fix the code, then relaunch",
    )
    looks_at = frozenset({"end"})
    reason = "error"  # the session_end reason this rule reports

    def look(self, rec: Record) -> Look:
        if rec.kind != "end":
            return SKIP
        if rec.reason == self.reason:
            return f"session ended with reason {rec.reason}" + (f": {rec.error}" if rec.error else "")
        return None


class Interrupted(SessionError):
    """A session ended by a signal (a scheduler's preemption, Ctrl-C): `transient`, unlike an error."""

    kind = name = "interrupted"
    cls = TRANSIENT
    severity = STOP
    runbook = Runbook(
        "the session ended on a signal: a scheduler's preemption or Ctrl-C",
        "relaunch (`--exit-code transient=75` lets a requeue script do it); `supervise` itself exits 75 "
        "(`preempted`) on a scheduler's SIGTERM or SIGUSR1 and 130 on Ctrl-C (docs/SUPERVISE.md)",
    )
    reason = "interrupted"
