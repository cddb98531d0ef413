"""A watch's verdict: done or anomaly, its class and onset, its line, exit code and file.

`watchdog.json` (docs/WATCHDOG.md, "Verdicts and exit codes") is written atomically by
`write_verdict`; `status`, `plot` and `supervise` read it with `read_verdict`. Standard library only.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from .errors import EXIT_ANOMALY, EXIT_OK, InvalidRunError
from .journal import atomic_write_text
from .rules import fmt_step, verdict_class
from .schema import loads, read_regular_file

__all__ = ["Verdict", "write_verdict", "read_verdict", "VERDICT_FILE"]

VERDICT_FILE = "watchdog.json"
# A verdict is a few hundred bytes; the watching record adds the watch's state (rule windows: a few KB).
MAX_VERDICT_BYTES = 1 << 20


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

    @property
    def cls(self) -> str | None:
        """`transient`, `divergence` or `fatal` for an anomaly; None for `done`."""
        return verdict_class(self.kind)

    def line(self) -> str:
        if self.verdict == "done":
            return f"OK done step={fmt_step(self.step)}"
        return f"ANOMALY {self.kind} step={fmt_step(self.step)}: {self.message}"

    def exit_code_with(self, exit_transient: int | None = None) -> int:
        """0 done; 7 anomaly, or `exit_transient` for a transient one when given."""
        if self.verdict == "done":
            return EXIT_OK
        return exit_transient if exit_transient is not None and self.cls == "transient" else EXIT_ANOMALY

    @property
    def exit_code(self) -> int:
        return self.exit_code_with(None)

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


def write_verdict(run_dir: str, verdict: Verdict) -> str:
    """Write `run_dir/watchdog.json` atomically (temp file + fsync + os.replace); return its path."""
    path = os.path.join(run_dir, VERDICT_FILE)
    atomic_write_text(path, json.dumps(verdict.to_json(), allow_nan=False) + "\n")
    return path


def read_verdict(run_dir: str, *, watching: bool = False) -> tuple[dict[str, Any] | None, str | None]:
    """The watchdog's verdict in `run_dir/watchdog.json`, as `(verdict, problem)`.

    `(verdict, None)` for a `done` or `anomaly` verdict (and for the `watching` record of a watch
    still running when `watching=True`); `(None, None)` when there is no file, or while a watch
    runs; `(None, problem)` when the file cannot be read or holds no verdict, `problem` one line
    naming the file (`watchdog.json: malformed JSON: ...`). Read like run.json: a regular file
    only (a FIFO cannot block), bounded, strict JSON.
    """
    path = os.path.join(run_dir, VERDICT_FILE)
    if not os.path.lexists(path):
        return None, None
    try:
        doc = loads(read_regular_file(path, VERDICT_FILE, MAX_VERDICT_BYTES), VERDICT_FILE)
    except InvalidRunError as exc:
        return None, str(exc)
    if isinstance(doc, dict) and doc.get("verdict") == "watching":
        return (doc, None) if watching else (None, None)
    if not isinstance(doc, dict) or doc.get("verdict") not in ("done", "anomaly"):
        return None, f"{VERDICT_FILE}: no verdict"
    return doc, None
