"""`runwatch check`: the record rules replayed over a log as it stands (every session).

Standard library only. The command line is in `watchdog` (it shares the watch's options).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidRunError, UsageError
from ..reading.nosignal import holds_something, no_signal_message
from ..reading.readers import ReadOptions
from ..reading.records import RecordSource, parser_for, resolve_target
from ..reading.source import reached  # the step a log reached: one definition for check, status and the page
from .rules import Finding, Replay, RuleOptions, fmt_step
from .verdict import exit_status

__all__ = ["CheckResult", "check", "reached", "name_loss_key"]


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
        return [f for f in self.findings if not f.stops]

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
        """What `runwatch check --json` prints: every finding (stops and warnings), the verdict
        line, and the class and onset of the first stop (null when there is none)."""
        first = self.first_stop
        return {
            "findings": [f.to_json() for f in self.findings],
            "warnings": len(self.warnings),
            "last_step": self.last_step,
            "torn_line": self.torn_line,
            "verdict": self.lines()[-1],
            "class": first.cls if first else None,
            "onset": first.to_json()["onset"] if first else None,
        }

    def lines(self) -> list[str]:
        """`FINDING` (a stop) and `WARNING` lines in log order, then the verdict line."""
        out = [f.line("FINDING" if f.stops else "WARNING") for f in self.findings]
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
    rules = Replay(opts, parser.start_step, parser.max_steps)
    last_step: int | float = parser.start_step(parser.latest_session()) or 0 if parser.mode == "v1" else 0
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
    return CheckResult(name_loss_key(findings, parser.loss_key), last_step, torn[0] if torn else None, parser.notes)


def name_loss_key(findings: list[Finding], loss_key: str | None) -> list[Finding]:
    """The findings, the first one saying which key the train loss was read from (a log without `loss`)."""
    if not findings or not loss_key:
        return findings
    first = findings[0]
    return [dataclasses.replace(first, message=f"{first.message} (train loss read from {loss_key!r})"), *findings[1:]]
