"""Following a benched job's log: its train records as they are written, whatever its format.

`LogTail` reads the log `bench` launched the job for, with `check`'s reading options
(`logs.Reading`), from what it held before the launch on; a schema-v1 log gives its train records
as written, any other log one record per step alike them (see `LogTail`). Standard library only.
"""

from __future__ import annotations

import os
import time
from typing import Any, TypedDict

from ..errors import InsufficientRunError, InvalidRunError
from ..reading import Record, Target
from .logs import Reading


class StepSeconds(TypedDict):
    """Seconds per attempted update: the median and the 10th and 90th percentiles."""

    median: float
    p10: float
    p90: float


def steady_from(train: list[dict[str, Any]], warmup: int) -> list[dict[str, Any]]:
    """The train records after the first `warmup` updates (whole records)."""
    done = 0
    out = []
    for rec in train:
        if done >= warmup:
            out.append(rec)
        done += rec["updates"]
    return out


class LogTail:
    """The new session's train records in the job's log, read as they are written.

    The log is resolved as `check` resolves it (`logs.Reading`: `--format`, `--pattern`, `--run`,
    `--log`, `--map`), again on each poll until it exists. Reading starts after what the log holds
    before the launch, so an earlier session in the same directory is not counted; the first
    session that appears after it is the job's. A schema-v1 log gives its train records as written;
    any other log gives one per record, its updates from the step counter, its time from `t` (else
    when the record was read), its samples from `sps` (samples/s) or `--batch-size`.
    """

    def __init__(self, run_dir: str, reading: Reading, batch_size: int | None = None) -> None:
        from ..reading import RecordSource

        self.run_dir = run_dir
        self.reading = reading
        self.batch_size = batch_size
        self.source = RecordSource(run_dir, read=reading.read_for(run_dir), maps=reading.maps, from_end=True)
        self.session: str | None = None
        self.seq_len = 1
        self.windows = False  # the log's train records are windows of updates with the logger's fields
        self.tokens = False  # its throughput counts tokens (seq_len known)
        self.train: list[dict[str, Any]] = []  # the train records' fields (schema v1's, or made alike)
        self.ended = False
        self.first_time: float | None = None  # when the first record was written (or read)
        self._prev: tuple[int | float, float] | None = None  # (step, time) of the last minimal record
        self._sps_missing = False
        self.wall_clock = False  # some record was timed by when it was read (no `t`)
        # A text log whose `sps` is iterations/s: a time per iteration and no batch size among its groups.
        patterns = reading.read.patterns()
        self._per_iteration = any("(?P<ms_per_iter>" in x for x in patterns) and not any(
            "(?P<batch_size>" in x for x in patterns
        )
        # A log of another format is caught up to its end now: what it holds is not this job's.
        if not self.jsonl_or_absent():
            self.poll(skip=True)

    def jsonl_or_absent(self) -> bool:
        """The log is a JSON-lines log (read from its end already), or not there yet."""
        t = self.source.target
        return not os.path.exists(t.log_path) or t.format == "jsonl"

    @property
    def target(self) -> Target:
        return self.source.target

    def close(self) -> None:
        self.source.close()

    def poll(self, skip: bool = False) -> None:
        """Read what was written since the last poll (`skip`: and forget it). Raises InvalidRunError
        for an invalid record."""
        while True:
            polled = self.source.poll()
            parser = self.source.parser
            now = time.time()
            for rec in polled.records:
                if skip:
                    continue
                if self.session is None:
                    self.session = rec.session
                    self.windows = parser is not None and parser.windows
                    self.tokens = parser is not None and parser.throughput.counts == "tokens"
                    entry = parser.entry(rec.session) if parser is not None else None
                    self.seq_len = entry["recipe"]["seq_len"] if entry else 1
                if rec.session != self.session:
                    continue  # a later session (the job restarted itself): not part of the bench
                if rec.kind == "invalid":
                    raise InvalidRunError(rec.error)
                if rec.kind == "train":
                    if self.windows:
                        assert rec.raw is not None  # always set for a valid schema-v1 record
                        self.train.append(rec.raw)
                        if self.first_time is None:
                            self.first_time = rec.raw["time"]
                    else:
                        self._minimal(rec, now)
                elif rec.kind == "end":
                    self.ended = True
            if not polled.more:
                return

    def _minimal(self, rec: Record, now: float) -> None:
        """A record of minimal telemetry or another tool's log, made alike a schema-v1 train record:
        `updates` from the step counter, `train_seconds` from the time between records, `tokens`
        the samples (`sps` x seconds, else --batch-size x updates; seq_len 1)."""
        t = rec.time if rec.time is not None else now
        if self.first_time is None:
            self.first_time = t
        prev = self._prev
        self._prev = (rec.step, t)
        if prev is None:  # its interval's start is unknown: it only starts the clock
            self.train.append({"updates": 0, "attempted": 0, "train_seconds": 0.0, "tokens": 0, "time": t})
            return
        n = int(rec.step - prev[0])
        if n <= 0:
            return
        seconds = max(0.0, t - prev[1])
        sps = rec.throughput if rec.throughput is not None and rec.throughput > 0 else None
        if sps is not None and self._per_iteration:  # iterations/s (a time per iteration): its own clock
            if rec.time is None:
                seconds = n / sps
            sps = sps * self.batch_size if self.batch_size is not None else None
        elif rec.time is None:
            # read when it was read: records read together share a clock reading, so the time per
            # update is measured over the whole steady span (`span_seconds_per_step`)
            self.wall_clock = True
            if sps is not None:  # the rate alone (equal samples per update): exact over any span
                samples = float(n if self.batch_size is None else n * self.batch_size)
                seconds = samples / sps
                self.train.append(
                    {"updates": n, "attempted": n, "train_seconds": seconds, "tokens": samples, "time": t}
                )
                return
        if sps is not None and seconds > 0:
            samples = sps * seconds
        elif sps is not None:
            samples, seconds = float(n), n / sps
        elif self.batch_size is not None:
            samples = float(self.batch_size * n)
        else:
            samples = 0.0
            self._sps_missing = True
        self.train.append({"updates": n, "attempted": n, "train_seconds": seconds, "tokens": samples, "time": t})

    def span_seconds_per_step(self, measured: list[dict[str, Any]], warmup: int) -> StepSeconds | None:
        """Seconds per update over the steady span, by the clock the records were read with (every
        quantile the same: single updates were not timed); None when the records carry their own times."""
        if not self.wall_clock:
            return None
        steady = steady_from(measured, warmup)
        before = measured[len(measured) - len(steady) - 1] if len(measured) > len(steady) else None
        updates = sum(r["updates"] for r in steady)
        if before is None or not steady or updates <= 0:
            return None
        per = max(0.0, steady[-1]["time"] - before["time"]) / updates
        return {"median": per, "p10": per, "p90": per}

    def check_rates(self) -> None:
        """A log without samples/s needs --batch-size: InsufficientRunError saying so."""
        if self._sps_missing:
            raise InsufficientRunError(
                f"bench: {self.target.log_path} gives steps but no samples/s (`sps`): pass --batch-size N"
                " (samples per update), or log `sps`"
            )

    def updates(self) -> int:
        return sum(r["updates"] for r in self.train)
