"""JSONL logs (runwatch's schema v1 and minimal telemetry, any JSONL), followed by byte offset.

The reader hands the log's complete lines to the record parser as they are (`Chunk.lines`): schema
v1 is validated from the bytes, minimal telemetry parsed with NaN allowed. A line longer than the
follower's limit is an `invalid_log` naming its line; a final line without its newline waits (it is
`torn()`). A log truncated or replaced by another file is read again from its start by a new
reader and parser (`Chunk.restart`).
"""

from __future__ import annotations

import json
import os
from typing import Any

from ..follow import READ_CHUNK_BYTES, LogFollower
from .base import BaseReader, Chunk, ReadOptions
from .keys import ALIASES, KeyMap

# The names of a JSONL log that is not a run directory's metrics.jsonl.
SUFFIXES = (".jsonl", ".ndjson")
# The head of a file read for its first record.
_HEAD_BYTES = 64 * 1024


def is_log(path: str) -> bool:
    """The file's first non-blank line is a JSON object with a step: `step`, `epoch` or an alias of
    the step (`global_step`, `iter`, ...): a log of steps, not a data set of JSON lines."""
    try:
        with open(path, "rb") as f:
            head = f.read(_HEAD_BYTES)
    except OSError:
        return False
    line = next((x for x in head.splitlines() if x.strip()), b"")
    try:
        first = json.loads(line)
    except ValueError:  # (a first line longer than the head, too)
        return False
    return isinstance(first, dict) and any(k in first for k in (*ALIASES["step"], "epoch"))


def open_reader(path: str, keys: KeyMap, read: ReadOptions, chunk_bytes: int | None = None) -> JsonlReader:
    return JsonlReader(path, chunk_bytes or READ_CHUNK_BYTES)  # (the parser applies --map)


class JsonlReader(BaseReader):
    """Follows a JSONL log (`follow.LogFollower`)."""

    def __init__(self, path: str, chunk_bytes: int = READ_CHUNK_BYTES) -> None:
        self.path = path
        self.name = os.path.basename(path)
        self.follower = LogFollower(path, chunk_bytes=chunk_bytes)

    def poll(self) -> Chunk:
        batch = self.follower.poll()
        chunk = Chunk(
            lines=batch.lines,
            exists=batch.exists,
            grew=batch.grew,
            more=batch.more,
            reset=batch.reset,
            restart=batch.reset is not None,
        )
        if batch.too_long is not None:
            where = f"{self.name}:{batch.too_long}"
            chunk.items.append((where, f"{where}: line longer than {self.follower.max_line_bytes} bytes"))
        return chunk

    def skip_to_end(self) -> None:
        """Start after what the log holds now (its records are another session's)."""
        self.follower.skip_to_end()

    def torn(self) -> int | None:
        return self.follower.lineno + 1 if self.follower.pending_bytes() else None

    def mtime(self) -> float:
        return self.follower.mtime

    def pending_bytes(self) -> int:
        return self.follower.pending_bytes()

    def state_dict(self) -> dict[str, Any]:
        return self.follower.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.follower.load_state_dict(state)

    def close(self) -> None:
        self.follower.close()
