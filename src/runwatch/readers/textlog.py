"""Text logs: one line a record where a pattern matches (`--pattern REGEX`, or a preset).

Each line (and each `\r`-separated part of it, for progress bars) is tried against the patterns in
order; the first that matches gives the record: its named groups that matched are the keys, the
values that read as numbers numbers. Lines that match no pattern are other output and skipped.
A group `ms_per_iter` (milliseconds an iteration) gives `sps` = 1000 / ms, times `batch_size`
when that group matched too (iterations or samples a second: `throughput_drop` compares a run's
rates with its own baseline, so either works). Followed by byte offset (`follow.LogFollower`).
"""

from __future__ import annotations

import os
import re
from typing import Any

from ..follow import LogFollower
from . import Chunk, Item
from .csvlog import number
from .keys import KeyMap

__all__ = ["TextReader"]


class TextReader:
    """Follows a text log, turning the lines that match a pattern into records."""

    def __init__(self, path: str, keys: KeyMap, patterns: tuple[str, ...]) -> None:
        self.path = path
        self.name = os.path.basename(path)
        self.keys = keys
        self.patterns = [re.compile(p.encode("utf-8")) for p in patterns]
        self.follower = LogFollower(path)

    def _match(self, raw: bytes) -> dict[str, Any] | None:
        for part in raw.split(b"\r") if b"\r" in raw else (raw,):
            for rx in self.patterns:
                m = rx.search(part)
                if m is not None:
                    rec = {k: number(v.decode("utf-8", "replace")) for k, v in m.groupdict().items() if v is not None}
                    ms = rec.pop("ms_per_iter", None)
                    batch = rec.pop("batch_size", None) if ms is not None else None
                    if isinstance(ms, (int, float)) and ms > 0:  # `number` gives exact ints and floats (no bools)
                        rec["sps"] = 1000.0 / ms * (batch if isinstance(batch, (int, float)) and batch > 0 else 1)
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

    def finish(self) -> list[Item]:
        return []

    def torn(self) -> str | None:
        return None  # a text log's unfinished last line is not a record yet

    def mtime(self) -> float:
        return self.follower.mtime

    def state_dict(self) -> dict[str, Any]:
        return {"follower": self.follower.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.follower = LogFollower.from_state(state["follower"])

    def close(self) -> None:
        self.follower.close()
