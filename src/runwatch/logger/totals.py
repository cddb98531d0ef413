"""What a session's records say about it: the run's and session's ids, the counters written so far
(step, tokens, skipped) and the session's own (elapsed time, tokens, profiling), and the records
built from them (`record`, `train_line`, `end_record`).

`RunLogger` owns one `SessionTotals` and changes its counters only when a window is written
(`add_window`), so a record and the counters it carries always agree. Standard library only.
"""

from __future__ import annotations

import time
from typing import Any

from ..files import dumps, memory_peaks
from .gpus import GpuSampler
from .window import TrainLine


class SessionTotals:
    """The counters of one session of a run, as written, and the records that carry them."""

    def __init__(self, run_id: str, session_id: str, start: dict[str, int], gpus: GpuSampler) -> None:
        self.run_id = run_id
        self.session_id = session_id
        self.step = start["step"]  # cumulative run totals, as written
        self.tokens = start["tokens"]
        self.skipped = start["skipped"]
        self.session_tokens = 0  # this session's attempted tokens
        self.profiling_seconds = 0.0
        self.t0 = time.monotonic()
        self.gpus = gpus  # NVML, imported at the first window's close (if at all)
        self._train_line = TrainLine(run_id, session_id)

    def add_window(self, fields: dict[str, Any]) -> None:
        """Count a train window about to be written (its `updates`, `tokens`, `skipped`)."""
        self.step += fields["updates"]
        tokens = fields["tokens"]
        self.tokens += tokens
        self.skipped += fields["skipped"]
        self.session_tokens += tokens

    def record(self, event: str, fields: dict[str, Any]) -> dict[str, Any]:
        """A record of `event` at the current step and time, with the session's counters."""
        return self.record_at(event, fields, time.monotonic() - self.t0, time.time(), memory_peaks())

    def record_at(
        self, event: str, fields: dict[str, Any], elapsed: float, now: float, memory: dict[str, int]
    ) -> dict[str, Any]:
        tokens = self.session_tokens
        rec: dict[str, Any] = {
            "run_id": self.run_id,
            "session_id": self.session_id,
            "event": event,
            "step": self.step,
            "time": now,
            **fields,
            "session": {
                "elapsed_seconds": elapsed,
                "tokens": tokens,
                "tokens_per_second": tokens / elapsed if elapsed > 0 else None,
                "profiling_seconds": self.profiling_seconds,
            },
        }
        if memory:
            rec["memory"] = memory
        return rec

    def train_line(self, fields: dict[str, Any]) -> str:
        """The train record's line: formatted at once by `TrainLine`, or `dumps` of its dict."""
        elapsed = time.monotonic() - self.t0
        now = time.time()
        memory = memory_peaks()
        gpus = self.gpus.sample()
        if gpus:  # (a key TrainLine does not write: the record is encoded by dumps)
            fields = {**fields, "gpus": gpus}
        tokens = self.session_tokens
        session = (elapsed, tokens, tokens / elapsed if elapsed > 0 else None, self.profiling_seconds)
        line = self._train_line(self.step, now, fields, session, memory)
        return dumps(self.record_at("train", fields, elapsed, now, memory)) if line is None else line

    def end_record(self, reason: str, error: str | None) -> dict[str, Any]:
        """The `session_end` record, with the run's totals."""
        totals = {"tokens": self.tokens, "skipped": self.skipped}
        return self.record("session_end", {"reason": reason, "error": error, "totals": totals})
