"""The Hugging Face Trainer's `trainer_state.json`: its `log_history` entries are minimal telemetry.

The Trainer rewrites the file whole at each checkpoint, so the reader re-reads it when its inode,
size or mtime changed and returns the entries beyond those already read. A file that lost entries
(another run wrote it) is read again from its start by a new reader and parser (`Chunk.restart`).
A broken file stays an error until it changes. `max_steps` is the file's own (None when absent or
not a positive int).
"""

from __future__ import annotations

import os
from typing import Any

from ...errors import InvalidRunError
from ...files import loads, read_regular_file
from .base import BaseReader, Chunk, ReadOptions
from .keys import KeyMap

# trainer_state.json is rewritten whole at each checkpoint; a few MB for a long run. Bound it anyway.
MAX_STATE_BYTES = 512 * 1024 * 1024


def open_reader(path: str, keys: KeyMap, read: ReadOptions, chunk_bytes: int | None = None) -> TrainerStateReader:
    return TrainerStateReader(path)  # (the parser applies --map; the file is read whole)


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    return {bool: "bool", int: "number", float: "number", str: "string", list: "array"}.get(
        type(value), type(value).__name__
    )


def load_trainer_state(path: str) -> tuple[list[Any], int | None]:
    """The `log_history` list of a Hugging Face trainer_state.json (NaN tokens allowed) and its
    `max_steps` (None when absent or not a positive int)."""
    name = os.path.basename(path)
    data = read_regular_file(path, name, MAX_STATE_BYTES)
    state = loads(data, name, strict=False)
    history = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(history, list):
        raise InvalidRunError(f"{name}: log_history must be a list, got {_json_type(history)}")
    max_steps = state.get("max_steps")
    return history, max_steps if type(max_steps) is int and max_steps > 0 else None


def read_trainer_state(path: str) -> list[Any]:
    """The `log_history` list of a Hugging Face trainer_state.json."""
    return load_trainer_state(path)[0]


class TrainerStateReader(BaseReader):
    """Re-reads a trainer_state.json when it changed; its new `log_history` entries are the records."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.name = os.path.basename(path)
        self.entries = 0  # log_history entries returned so far
        self._sig: tuple[int, int, int] | None = None  # (inode, size, mtime) when last read
        self._broken: str | None = None  # why that version cannot be read
        self._mtime = 0.0

    def poll(self) -> Chunk:
        chunk = Chunk()
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            chunk.exists = False
            return chunk
        self._mtime = st.st_mtime
        sig = (st.st_ino, st.st_size, st.st_mtime_ns)
        if sig == self._sig:
            if self._broken is not None:
                raise InvalidRunError(self._broken)
            return chunk
        self._sig, self._broken, chunk.grew = sig, None, True
        try:
            history, self.max_steps = load_trainer_state(self.path)
        except InvalidRunError as exc:
            self._broken = str(exc)
            raise
        if len(history) < self.entries:
            chunk.reset, chunk.restart = "rewritten with fewer entries", True
            return chunk
        out = chunk.items
        for i in range(self.entries, len(history)):
            where = f"{self.name}:log_history[{i}]"
            entry = history[i]
            out.append(
                (
                    where,
                    entry
                    if type(entry) is dict
                    else f"{where}: a record must be a JSON object, got {_json_type(entry)}",
                )
            )
        self.entries = len(history)
        return chunk

    def mtime(self) -> float:
        return self._mtime

    def state_dict(self) -> dict[str, Any]:
        return {"entries": self.entries}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.entries = int(state.get("entries") or 0)
        self._sig = None
