"""`runwatch check`: the record rules replayed over a log as it stands (every session).

Standard library only. The command line is in `watchdog` (it shares the watch's options).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from .errors import InvalidRunError, UsageError
from .readers import ReadOptions
from .records import iter_records, parser_for, resolve_target
from .rules import Finding, Replay, RuleOptions, fmt_step
from .verdict import exit_status

__all__ = ["CheckResult", "check"]


@dataclass(slots=True)
class CheckResult:
    """Every finding of a replay, and the step of the last record applied."""

    findings: list[Finding]
    last_step: int | float
    torn_line: int | str | None = None  # a line number; other formats: where (a str)

    @property
    def outcome(self) -> str | None:
        """What decides the exit status (`verdict.exit_status`): None when clean, else the first finding's class."""
        return self.findings[0].cls if self.findings else None

    @property
    def exit_code(self) -> int:
        """The exit status under the default codes (0 clean, 7 findings)."""
        return exit_status(self.outcome)

    def to_json(self) -> dict[str, Any]:
        """What `runwatch check --json` prints: every finding, the verdict line, its class and onset."""
        first = self.findings[0] if self.findings else None
        return {
            "findings": [f.to_json() for f in self.findings],
            "last_step": self.last_step,
            "torn_line": self.torn_line,
            "verdict": self.lines()[-1],
            "class": first.cls if first else None,
            "onset": first.to_json()["onset"] if first else None,
        }

    def lines(self) -> list[str]:
        out = [f.line("FINDING") for f in self.findings]
        out.append(self.findings[0].line() if self.findings else f"OK clean step={fmt_step(self.last_step)}")
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
    rules = Replay(opts, parser.start_step)
    last_step: int | float = parser.start_step(parser.latest_session()) or 0 if parser.mode == "v1" else 0
    try:
        for rec in iter_records(t, parser=parser, on_torn=torn.append):
            if rec.kind != "invalid":
                last_step = rec.step
            f = rules.observe(rec)
            if f is not None:
                findings.append(f)
    except InvalidRunError as exc:  # the log is not a regular file, trainer_state.json is broken, ...
        findings.append(Finding("invalid_log", last_step, str(exc)))
    return CheckResult(findings, last_step, torn[0] if torn else None)
