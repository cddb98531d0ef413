"""`runwatch check`: the record rules replayed over a log as it stands (every session).

`RunReplay` is the replay every surface that judges a whole log uses (`check`, the MCP tool
`check_run`, `plot`, the `serve` page): the rules of each session, and the run's history over
them — a fault a later session went on from (a divergence: rolled back past) is recovered, not
the verdict (`recovered_by`).
Standard library only. The command line is in `watchdog` (it shares the watch's options).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidRunError, UsageError
from ..reading import (
    ReadOptions,
    Record,
    RecordSource,
    Session,
    holds_something,
    no_signal_message,
    origin_step,
    parser_for,
    path,
    resolve_target,
)
from ..reading import reached as reached
from .rules import Finding, Replay, RuleOptions, fmt_step, verdict_class
from .ruleset import DIVERGENCE, STOP, TRANSIENT, WARN
from .verdict import exit_status

# The severity of a finding a later session of the run went on from (`RunReplay.settle`): reported,
# never the verdict — `supervise` relaunched after it, and `watch` drops a replaced session's findings.
RECOVERED = "recovered"
# What each severity's line starts with in `check`'s output (and `plot`'s header).
PREFIXES = {STOP: "FINDING", WARN: "WARNING", RECOVERED: "RECOVERED"}


def recoverable(kind: str) -> bool:
    """Whether a later session may answer a stop of `kind`: a `transient` kind, `session_error`,
    or a `divergence` kind (`RunReplay.recovered_by` says whether one did).

    A session that ended with an error and was followed by another is what a relaunch looks
    like from the log: a killed rank takes rank 0 down with a collective's error (`watch` judges
    that `process_exit`, transient, from the heartbeats, which the next session overwrites), or
    someone fixed the code and resumed. A divergence is answered only by a rollback past its
    onset: a later session that started at or before it, so the diverged steps are off the run's
    path. Another `fatal` finding says something about the training itself and stops whichever
    session it is in."""
    return kind == "session_error" or verdict_class(kind) in (TRANSIENT, DIVERGENCE)


def finding_line(f: Finding) -> str:
    """`FINDING`, `WARNING` or `RECOVERED <kind> step=N: <message>`: a finding in `check`'s list."""
    return f.line(PREFIXES.get(f.severity, "FINDING"))


class RunReplay(Replay):
    """The replay of a run's whole log: the rules of each session (`rules.Replay`), and the
    sessions in the order the log gave them, by which `settle` judges the run's history."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sessions: list[str] = []  # in the order of their first records
        self.order: dict[str, int] = {}  # session → its place in `sessions`
        # each session as `history.path` reads it: where it started, and its furthest valid record
        self.outline: dict[str, Session] = {}

    def observe(self, rec: Record) -> tuple[Finding, ...]:
        if rec.session not in self.order:
            self.order[rec.session] = len(self.sessions)
            self.sessions.append(rec.session)
        if rec.kind != "invalid":
            s = self.outline.get(rec.session)
            if s is None:
                start = self.start_step(rec.session)  # run.json's `start.step`; else as `load_sessions` takes it
                entry = None if start is None else {"start": {"step": start}}
                s = self.outline[rec.session] = Session(
                    rec.session, start if start is not None else rec.step if rec.kind == "train" else 0, [rec], entry
                )
            elif rec.step > s.records[0].step:
                s.records[0] = rec
        return super().observe(rec)

    def recovered_by(
        self, kind: str, severity: str, session: str | None, onset: int | float | None = None
    ) -> str | None:
        """The session the run went on in after a stop in `session` a later session answered;
        None when the finding stands. A transient kind or `session_error`: the next session in
        the log. A divergence (`onset`: where it began): the first later session that started
        at or before the onset, when the onset is off the run's path (`history.path`) — rolled
        back past, not merely continued from. Never in the latest session, never a fatal kind."""
        if severity != STOP or session is None or not recoverable(kind):
            return None
        at = self.order.get(session)
        if at is None or at + 1 >= len(self.sessions):
            return None
        if verdict_class(kind) != DIVERGENCE:
            return self.sessions[at + 1]
        if onset is None:
            return None
        kept = {s.key: end for s, end in path(list(self.outline.values()))}
        if session in kept and kept[session] > onset:
            return None  # the diverged steps are on the path: the run went on from them
        for later in self.sessions[at + 1 :]:
            s = self.outline.get(later)
            if s is not None and origin_step(s, False) <= onset:
                return later
        return None

    def settle(self, findings: Iterable[Finding]) -> list[Finding]:
        """`findings` as the run's history judges them: a recovered one is `recovered`, its
        message naming the session the run went on in."""
        out = []
        for f in findings:
            by = self.recovered_by(f.kind, f.severity, f.session, f.step if f.onset is None else f.onset)
            out.append(f if by is None else dataclasses.replace(f, severity=RECOVERED, message=_went_on(f.message, by)))
        return out

    def settle_json(self, findings: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        """`settle` of findings as JSON (`Finding.to_json()` and more keys: the page's)."""
        out = []
        for f in findings:
            by = self.recovered_by(f["kind"], f["severity"], f["session"], f.get("onset"))
            out.append(f if by is None else {**f, "severity": RECOVERED, "message": _went_on(f["message"], by)})
        return out


def _went_on(message: str, session: str) -> str:
    return f"{message}; recovered: the run went on in session {session}"


@dataclass(slots=True)
class CheckResult:
    """Every finding of a replay (stops and warnings, in log order), and the step the log reached."""

    findings: list[Finding]
    last_step: int | float
    torn_line: int | str | None = None  # a line number; other formats: where (a str)
    notes: list[str] = field(default_factory=list)  # said once on stderr (how the log was read)

    @property
    def first_stop(self) -> Finding | None:
        """The finding the verdict repeats: the first one whose severity is `stop`."""
        return next((f for f in self.findings if f.stops), None)

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == WARN]

    @property
    def recovered(self) -> list[Finding]:
        """The stops a later session of the run went on from (`RunReplay.settle`)."""
        return [f for f in self.findings if f.severity == RECOVERED]

    @property
    def outcome(self) -> str | None:
        """What decides the exit status (`verdict.exit_status`): None when clean (warnings only),
        else the class of the first finding that stops."""
        first = self.first_stop
        return first.cls if first is not None else None

    @property
    def exit_code(self) -> int:
        """The exit status under the default codes (0 clean or warnings only, 7 a stop)."""
        return exit_status(self.outcome)

    def to_json(self) -> dict[str, Any]:
        """What `runwatch check --json` prints: every finding (stops, warnings and recovered), the
        verdict line, and the class and onset of the first stop (null when there is none)."""
        first = self.first_stop
        return {
            "findings": [f.to_json() for f in self.findings],
            "warnings": len(self.warnings),
            "recovered": len(self.recovered),
            "last_step": self.last_step,
            "torn_line": self.torn_line,
            "verdict": self.lines()[-1],
            "class": first.cls if first else None,
            "onset": first.to_json()["onset"] if first else None,
        }

    def lines(self) -> list[str]:
        """`FINDING` (a stop), `WARNING` and `RECOVERED` lines in log order, then the verdict line."""
        out = [finding_line(f) for f in self.findings]
        first = self.first_stop
        out.append(first.line() if first is not None else f"OK clean step={fmt_step(self.last_step)}")
        return out


def check(target: str, options: RuleOptions | None = None, read: ReadOptions | None = None) -> CheckResult:
    """Replay every session of `target` as it stands (a torn last line is left out); `read`: how
    to read a log runwatch did not write (`--format`, `--pattern`, `--run`)."""
    opts = options or RuleOptions()
    target = os.fspath(target)
    if not os.path.exists(target):
        raise UsageError(f"check: {target}: no such run directory or log")
    t = resolve_target(target, read)
    if not os.path.exists(t.log_path):
        raise UsageError(f"check: {target}: no metrics.jsonl or trainer_state.json")
    findings: list[Finding] = []
    try:
        parser = parser_for(t, opts.maps)
    except InvalidRunError as exc:
        return CheckResult([Finding("invalid_log", 0, str(exc))], 0)
    torn: list[int | str] = []
    rules = RunReplay(opts, parser.start_step, parser.max_steps)
    last_step: int | float = parser.start_step(parser.latest_session()) or 0
    source = RecordSource(t, parser=parser)
    count = 0
    try:
        for rec in source.records(on_torn=torn.append):
            count += 1
            last_step = reached(last_step, rec)
            findings.extend(rules.observe(rec))
    except InvalidRunError as exc:  # the log is not a regular file, trainer_state.json is broken, ...
        findings.append(Finding("invalid_log", last_step, str(exc)))
    else:
        if count == 0 and holds_something(t.log_path):  # a wrong --format, a pattern that never matches
            findings.append(Finding("no_signal", last_step, no_signal_message(t, source.reader)))
        findings.extend(rules.finish(last_step))
    findings = rules.settle(name_loss_key(findings, parser.loss_key))
    return CheckResult(findings, last_step, torn[0] if torn else None, parser.notes)


def name_loss_key(findings: list[Finding], loss_key: str | None) -> list[Finding]:
    """The findings, the first one saying which key the train loss was read from (a log without `loss`)."""
    if not findings or not loss_key:
        return findings
    first = findings[0]
    return [dataclasses.replace(first, message=f"{first.message} (train loss read from {loss_key!r})"), *findings[1:]]
