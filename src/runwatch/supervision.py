"""A supervision's journal, `RUN_DIR/supervise.jsonl` (docs/SUPERVISE.md, "The journal"), and the
run directory's output as the supervisor quotes it.

`runwatch supervise` appends one JSON object a line for each action (`append`: one write of one
whole line, fsynced); `status` reads the last one (`supervise_status`), and a supervisor started
again reads it to continue (`last_record`). Standard library only.
"""

from __future__ import annotations

import json
import os
from typing import Any

from .follow import tail_lines
from .process import alive

__all__ = [
    "JOURNAL",
    "EVENTS",
    "append",
    "last_record",
    "supervise_status",
    "stdout_tail",
    "last_output_line",
]

JOURNAL = "supervise.jsonl"
EVENTS = ("launch", "verdict", "warning", "stop", "relaunch", "rollback", "done", "gave_up", "notify_failed")
# The lines of stdout.log searched for the last thing a program printed.
OUTPUT_TAIL_LINES = 20


def append(run_dir: str, rec: dict[str, Any]) -> None:
    """Append `rec` to the journal as one line (strict JSON), in one write, and fsync it."""
    line = json.dumps(rec, allow_nan=False) + "\n"
    fd = os.open(os.path.join(run_dir, JOURNAL), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def last_record(run_dir: str) -> dict[str, Any] | None:
    """The last complete record of `supervise.jsonl`, read from the end; None when there is none."""
    path = os.path.join(run_dir, JOURNAL)
    try:
        lines, _ = tail_lines(path, 1)
    except OSError:
        return None
    try:
        rec = json.loads(lines[-1]) if lines else None
    except ValueError:
        return None
    return rec if isinstance(rec, dict) else None


def supervise_status(run_dir: str) -> dict[str, Any] | None:
    """The supervision's state for `runwatch status`: attempt, restarts and rollbacks with their
    budgets, the last event, and whether the supervisor still runs; None when never supervised."""
    last = last_record(run_dir)
    if last is None:
        return None
    budgets = last.get("budgets")
    if not isinstance(budgets, dict):
        budgets = {}
    sup = last.get("supervisor")
    running = last.get("event") not in ("done", "gave_up") and type(sup) is int and alive(sup)
    return {
        "attempt": last.get("attempt"),
        "restarts": last.get("restarts"),
        "rollbacks": last.get("rollbacks"),
        "max_restarts": budgets.get("restarts"),
        "max_rollbacks": budgets.get("rollbacks"),
        "event": last.get("event"),
        "supervisor_pid": sup,
        "supervisor_running": running,
    }


def stdout_tail(run_dir: str, n: int) -> list[str]:
    """The last `n` lines of RUN_DIR/stdout.log (each cut at 300 characters)."""
    try:
        lines, _ = tail_lines(os.path.join(run_dir, "stdout.log"), n)
    except OSError:
        return ["(no stdout.log)"]
    return [raw.decode("utf-8", "replace")[:300] for raw in lines]


def last_output_line(run_dir: str) -> str | None:
    """The last non-empty line of stdout.log that runwatch did not write itself."""
    try:
        lines, _ = tail_lines(os.path.join(run_dir, "stdout.log"), OUTPUT_TAIL_LINES)
    except OSError:
        return None
    for raw in reversed(lines):
        text = raw.decode("utf-8", "replace").strip()
        if text and not text.startswith("--- runwatch launch"):
            return text[:200]
    return None
