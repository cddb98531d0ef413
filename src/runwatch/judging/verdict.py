"""A watch's verdict: done or anomaly, its class and onset, its line, exit code and file.

`watchdog.json` (docs/WATCHDOG.md, "Verdicts and exit codes") is written atomically by
`write_verdict`; `status`, `plot` and `supervise` read it with `read_verdict`.

Every command's exit code comes from `exit_status(outcome, codes)`: 0 when nothing is wrong, else
the code of the outcome, an anomaly's class (`transient`, `divergence`, `fatal`) or how a
supervision ended (`preempted`, `gave_up`), as `--exit-code CLASS=N` set it (`parse_exit_codes`).
Standard library only.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import EXIT_ANOMALY, EXIT_OK, EXIT_TEMPFAIL, ConfigError, InvalidRunError
from ..files import VERDICT, atomic_write_text, loads, loads_value, read_regular_file
from .declaring import Runbook
from .rules import Finding, fmt_step, verdict_class

# The verdict of a completed run (`Verdict.done`): not an anomaly kind, but an agent asks about it too.
DONE = "done"
DONE_RUNBOOK = Runbook(
    "the latest session ended normally, the `--done` sentinel appeared, or the process exited with status 0",
    "evaluate, summarize (`runwatch summarize RUN_DIR`), move on",
)
# A verdict is a few hundred bytes; the watching record adds the watch's state (rule windows: a few KB).
MAX_VERDICT_BYTES = 1 << 20
# What `--exit-code CLASS=N` names: the anomaly classes, and two ways a supervision ends.
EXIT_CLASSES = ("transient", "divergence", "fatal", "preempted", "gave_up")
# 7 for every anomaly and a spent budget (the watchdog's code from the start); 75, EX_TEMPFAIL
# (sysexits.h: "try again later"), for a preemption, which is what schedulers' requeue rules key on.
DEFAULT_EXIT_CODES: Mapping[str, int] = {
    "transient": EXIT_ANOMALY,
    "divergence": EXIT_ANOMALY,
    "fatal": EXIT_ANOMALY,
    "preempted": EXIT_TEMPFAIL,
    "gave_up": EXIT_ANOMALY,
}


def parse_exit_codes(pairs: Sequence[str], transient: int | None = None, section: str = "watch") -> dict[str, int]:
    """`["preempted=75", "fatal=3"]` over the defaults, as {class: code}; `transient` is
    `--exit-transient N`, the shorthand of `transient=N`. ConfigError naming the bad entry."""
    codes = dict(DEFAULT_EXIT_CODES)
    given: dict[str, int] = {}
    for pair in pairs:
        cls, eq, text = pair.partition("=")
        cls = cls.strip()
        if not eq or cls not in EXIT_CLASSES:
            raise ConfigError(
                f"{section}.exit_code must be CLASS=N with CLASS one of {', '.join(EXIT_CLASSES)}, got {pair!r}"
            )
        text = text.strip()
        if not text.isdigit() or not 1 <= int(text) <= 255:
            raise ConfigError(f"{section}.exit_code {cls} must be an int in 1..255, got {text!r}")
        given[cls] = int(text)
    if transient is not None:
        if given.get("transient", transient) != transient:
            raise ConfigError(
                f"{section}.exit_transient ({transient}) and {section}.exit_code (transient={given['transient']}) disagree"
            )
        given["transient"] = transient
    codes.update(given)
    return codes


def exit_status(outcome: str | None, codes: Mapping[str, int] | None = None) -> int:
    """The exit status of every command that judges a run: 0 when `outcome` is None (done, a
    clean check), else the code of `outcome` (an anomaly's class, `preempted` or `gave_up`)."""
    if outcome is None:
        return EXIT_OK
    return (codes or DEFAULT_EXIT_CODES).get(outcome, EXIT_ANOMALY)


@dataclass(frozen=True, slots=True)
class Verdict:
    """How a watch ended: `done` (exit 0) or `anomaly` (exit 7)."""

    verdict: str
    kind: str | None
    step: int | float
    message: str
    time: float
    onset: int | float | None = None  # the step where the trouble began (None: `step`)
    last_error: str | None = None  # a dead process's last error line from stdout.log
    warnings: tuple[dict[str, Any], ...] = ()  # the watch's warnings: {"kind", "step", "message"}, the first 20

    @classmethod
    def done(cls, step: int | float, message: str, time: float, warnings: Sequence[dict[str, Any]] = ()) -> Verdict:
        """The verdict of a run that completed: `message` says how (`session ended normally`)."""
        return cls("done", None, step, message, time, warnings=tuple(warnings))

    @classmethod
    def of(
        cls,
        finding: Finding,
        time: float,
        last_error: str | None = None,
        warnings: Sequence[dict[str, Any]] = (),
    ) -> Verdict:
        """The verdict a finding that stops the run decides: its kind, step, message and onset."""
        return cls(
            "anomaly", finding.kind, finding.step, finding.message, time, finding.onset, last_error, tuple(warnings)
        )

    @property
    def cls(self) -> str | None:
        """`transient`, `divergence` or `fatal` for an anomaly; None for `done`."""
        return verdict_class(self.kind)

    def line(self) -> str:
        if self.verdict == "done":
            return f"OK done step={fmt_step(self.step)}"
        return f"ANOMALY {self.kind} step={fmt_step(self.step)}: {self.message}"

    @property
    def outcome(self) -> str | None:
        """What decides the exit status (`exit_status`): None for done, else the class."""
        return None if self.verdict == "done" else (self.cls or "fatal")

    @property
    def exit_code(self) -> int:
        """The exit status under the default codes (0 done, 7 anomaly)."""
        return exit_status(self.outcome)

    def to_json(self) -> dict[str, Any]:
        out = {
            "verdict": self.verdict,
            "kind": self.kind,
            "class": self.cls,
            "step": self.step,
            "onset": None if self.verdict == "done" else (self.step if self.onset is None else self.onset),
            "message": self.message,
            "time": self.time,
            "warnings": list(self.warnings),
        }
        if self.last_error is not None:
            out["last_error"] = self.last_error
        return out


def write_verdict(run_dir: str, verdict: Verdict | dict[str, Any]) -> str:
    """Write `run_dir/watchdog.json` atomically (temp file + fsync + os.replace); return its path.
    The one writer of the file: a verdict, or the watching record (`liveness.watching_record`)
    a running watch keeps there."""
    path = os.path.join(run_dir, VERDICT)
    doc = verdict.to_json() if isinstance(verdict, Verdict) else verdict
    atomic_write_text(path, json.dumps(doc, allow_nan=False) + "\n")
    return path


def read_verdict(run_dir: str, *, watching: bool = False) -> tuple[dict[str, Any] | None, str | None]:
    """The watchdog's verdict in `run_dir/watchdog.json`, as `(verdict, problem)`.

    `(verdict, None)` for a `done` or `anomaly` verdict (and for the `watching` record of a watch
    still running when `watching=True`); `(None, None)` when there is no file, or while a watch
    runs; `(None, problem)` when the file cannot be read or holds no verdict, `problem` one line
    naming the file (`watchdog.json: malformed JSON: ...`). Read like run.json: a regular file
    only (a FIFO cannot block), bounded, strict JSON.
    """
    path = os.path.join(run_dir, VERDICT)
    if not os.path.lexists(path):
        return None, None
    try:
        data = read_regular_file(path, VERDICT, MAX_VERDICT_BYTES)
        doc = loads(data, VERDICT)
    except InvalidRunError as exc:
        return None, str(exc)
    if loads_value(data) is None:  # 1e400: strict JSON, yet no finite number
        return None, f"{VERDICT}: malformed JSON: a number out of range"
    if isinstance(doc, dict) and doc.get("verdict") == "watching":
        return (doc, None) if watching else (None, None)
    if not isinstance(doc, dict) or doc.get("verdict") not in ("done", "anomaly"):
        return None, f"{VERDICT}: no verdict"
    return doc, None
