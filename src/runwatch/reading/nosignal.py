"""What a log held when the format in use read no record of it: the words of a `no_signal`.

    no_signal_message(target, reader)   # "--format tensorboard on runs/x/runs: 412 events in 1 file, no scalar"

A wrong `--format`, a pattern that never matches, a TensorBoard folder whose event files hold no
scalar: the log exists and grows, yet yields nothing to judge. The message names the format, the
file and what was there (lines and the first of them, a CSV's columns, a JSONL record's keys, a
TensorBoard folder's events), from a bounded look at the file's head. Standard library only.
"""

from __future__ import annotations

import json
import os
from typing import Any

from ..files import LAUNCH_HEADER
from .target import Target

# How much of a file is looked at to say what it holds (lines are counted in it: "at least N").
HEAD_BYTES = 1 << 20
# A line shown as what the file holds is cut to this many characters.
SHOWN_CHARS = 80


def _how(t: Target) -> str:
    if t.read.pattern:
        return "--pattern " + " ".join(f"'{p}'" for p in t.read.pattern)
    name = t.read.format or t.format
    return f"--format {name}" if t.read.format else f"{name} (as detected)"


def _head(path: str) -> tuple[bytes, int] | None:
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            return f.read(HEAD_BYTES), size
    except OSError:
        return None


def _shown(line: bytes) -> str:
    text = line.decode("utf-8", "replace").strip()
    return repr(text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "...")


def seen(t: Target, reader: Any = None) -> str:
    """What the log of `t` holds, in a few words (`reader`: the format's open reader, when it can
    say it itself: a TensorBoard folder's events)."""
    said = getattr(reader, "seen", None)
    if callable(said):
        return str(said())
    if os.path.isdir(t.log_path):
        return "a folder"
    got = _head(t.log_path)
    if got is None:
        return "nothing readable"
    head, size = got
    if not head.strip():
        return "an empty file"
    lines = [x for x in head.split(b"\n") if x.strip() and not x.startswith(LAUNCH_HEADER.encode())]
    count = f"{'at least ' if size > len(head) else ''}{len(lines)} line{'s' if len(lines) != 1 else ''}"
    if t.format == "csv" and lines:
        return f"{count}; columns {lines[0].decode('utf-8', 'replace').strip()[:SHOWN_CHARS]}"
    if t.format in ("jsonl", "trainer_state") and lines:
        try:
            first = json.loads(lines[0])
        except ValueError:
            first = None
        if isinstance(first, dict):
            return f"{count}; keys {', '.join(sorted(map(str, first))[:12])}"
    if t.format == "text":
        return f"{count}, none matched; the first: {_shown(lines[0])}" if lines else count
    return f"{count}; the first: {_shown(lines[0])}" if lines else count


def holds_something(path: str) -> bool:
    """The log holds something to read: a folder with an entry, a file with a line besides
    `runwatch launch`'s own headers (a program's output that is not yet there is no log to judge)."""
    if os.path.isdir(path):
        try:
            return bool(os.listdir(path))
        except OSError:
            return False
    got = _head(path)
    if got is None:
        return False
    return any(x.strip() and not x.startswith(LAUNCH_HEADER.encode()) for x in got[0].split(b"\n"))


def no_signal_message(t: Target, reader: Any = None) -> str:
    """`<format> on <log>: <what it holds>, no record`."""
    return f"{_how(t)} on {t.log_path}: {seen(t, reader)}; no record"
