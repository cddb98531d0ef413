"""Text logs: one line a record where a pattern matches (`--pattern REGEX`, or a preset).

Each line (and each `\r`-separated part of it, for progress bars) is tried against the patterns in
order; the first that matches gives the record: its named groups that matched are the keys, the
values that read as numbers numbers. Lines that match no pattern are other output and skipped.
A group `ms_per_iter` (milliseconds an iteration) gives `sps` = 1000 / ms, times `batch_size`
when that group matched too (iterations or samples a second: `throughput_drop` compares a run's
rates with its own baseline, so either works). A pattern without a `step` group (an eval line that
carries none: PaddleNLP, many `print`-style trainers) gives values at the latest step a line gave;
a `ckpt` group names a saved checkpoint (nanoGPT's `saving checkpoint to out`): a record
`{"step": <latest>, "ckpt": <path>}`, read as a checkpoint. Followed by byte offset
(`follow.LogFollower`).
"""

from __future__ import annotations

import ast
import math
import os
import re
from typing import Any

from ..follow import READ_CHUNK_BYTES, LogFollower
from .base import PRESETS, BaseReader, Chunk, ReadOptions
from .csvlog import number
from .keys import KeyMap

# The head of a file searched for a preset's record line, and the lines of it tried.
_SNIFF_BYTES = 64 * 1024
_SNIFF_LINES = 200


def open_reader(path: str, keys: KeyMap, read: ReadOptions, chunk_bytes: int | None = None) -> TextReader:
    return TextReader(path, keys, read.patterns(), chunk_bytes or READ_CHUNK_BYTES)


def sniff(path: str) -> str | None:
    """The preset (`nanogpt`, `megatron`) whose record pattern matches a line of the file's head;
    None for a file whose first line is a JSON object, or that matches none."""
    try:
        with open(path, "rb") as f:
            head = f.read(_SNIFF_BYTES)
    except OSError:
        return None
    if head.lstrip().startswith(b"{") or b"\0" in head:
        return None  # JSONL, or binary
    text = head.decode("utf-8", "replace").splitlines()[:_SNIFF_LINES]
    for name, patterns in PRESETS.items():
        rx = re.compile(patterns[0])  # the train line's pattern
        if any(rx.search(line) for line in text):
            return name
    return None


def matches(path: str, patterns: tuple[str, ...]) -> bool:
    """A line of the file's head matches one of `patterns` (NUL bytes, the padding a file may hold
    where its writer was cut off, dropped first)."""
    try:
        with open(path, "rb") as f:
            head = f.read(_SNIFF_BYTES).replace(b"\0", b"")
    except OSError:
        return False
    text = head.decode("utf-8", "replace").splitlines()[:_SNIFF_LINES]
    return any(rx.search(line) for rx in map(re.compile, patterns) for line in text)


def _dict_literal(text: str) -> dict[str, Any] | None:
    """The numeric items of a printed dict (`{'loss': 0.69, 'epoch': 0.01}`; `nan`, `inf` allowed);
    None when the text is not a dict literal."""
    try:
        value = ast.literal_eval(re.sub(r"\b(nan|inf)\b", r"'\1'", text))
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(value, dict):
        return None
    out: dict[str, Any] = {}
    for k, v in value.items():
        if isinstance(v, str) and v in ("nan", "inf"):
            v = math.nan if v == "nan" else math.inf
        if isinstance(k, str) and type(v) in (int, float):
            out[k] = v
    return out


class TextReader(BaseReader):
    """Follows a text log, turning the lines that match a pattern into records."""

    def __init__(self, path: str, keys: KeyMap, patterns: tuple[str, ...], chunk_bytes: int = READ_CHUNK_BYTES) -> None:
        self.path = path
        self.name = os.path.basename(path)
        self.keys = keys
        self.patterns = [re.compile(p.encode("utf-8")) for p in patterns]
        self.follower = LogFollower(path, chunk_bytes=chunk_bytes)
        self.step: int | float | None = None  # the latest step a line gave

    def _match(self, raw: bytes) -> dict[str, Any] | None:
        for part in raw.split(b"\r") if b"\r" in raw else (raw,):
            for rx in self.patterns:
                m = rx.search(part)
                if m is not None:
                    rec = {k: number(v.decode("utf-8", "replace")) for k, v in m.groupdict().items() if v is not None}
                    literal = rec.pop("dict", None)
                    if literal is not None:
                        values = _dict_literal(str(literal))
                        if values is None:
                            continue  # not a dict of values: other output
                        rec = {**values, **rec}
                    ms = rec.pop("ms_per_iter", None)
                    batch = rec.pop("batch_size", None) if ms is not None else None
                    if isinstance(ms, (int, float)) and ms > 0:  # `number` gives exact ints and floats (no bools)
                        rec["sps"] = 1000.0 / ms * (batch if isinstance(batch, (int, float)) and batch > 0 else 1)
                    step = rec.get("step")
                    if isinstance(step, (int, float)):
                        self.step = step
                    elif "step" not in rec and self.step is not None:
                        rec = {"step": self.step, **rec}  # a line without a step: at the latest one
                    return rec
        return None

    def poll(self) -> Chunk:
        chunk = Chunk()
        batch = self.follower.poll()
        chunk.exists, chunk.grew, chunk.more, chunk.reset = batch.exists, batch.grew, batch.more, batch.reset
        out = chunk.items
        for lineno, raw in batch.lines:  # an over-long line (batch.too_long) is not a record line
            rec = self._match(raw)
            if rec is not None:
                out.append((f"{self.name}:{lineno}", self.keys.canonical(rec)))
        return chunk

    def mtime(self) -> float:
        return self.follower.mtime  # (a text log's unfinished last line is not a record yet: never torn)

    def pending_bytes(self) -> int:
        return self.follower.pending_bytes()

    def state_dict(self) -> dict[str, Any]:
        return {"follower": self.follower.state_dict(), "step": self.step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.follower = LogFollower.from_state(state["follower"])
        self.step = state.get("step")

    def close(self) -> None:
        self.follower.close()
