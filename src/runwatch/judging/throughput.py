"""The record rule on throughput (docs/WATCHDOG.md, "Rules on records"): `throughput_drop`, with
its declarations (class, severity, runbook) and its options beside it. Built on `rulebase`.
Standard library only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..options import INT_1, OPEN_01, POSITIVE, option
from ..reading import Record
from .declaring import FATAL, RECORD_COMMANDS, STOP, OptionGroup, Runbook
from .rulebase import SKIP, Look, SessionFacts, Streak, extend_streak, fmt_value, median


@dataclass(frozen=True)
class ThroughputOptions(OptionGroup):
    """`throughput_drop`'s options (`--throughput-span` is also `status`'s)."""

    throughput_drop: float = option(
        0.25,
        OPEN_01,
        "throughput_drop: throughput below (1-F) x the session's baseline",
        metavar="F",
        commands=RECORD_COMMANDS,
    )
    throughput_baseline_steps: int = option(
        200,
        INT_1,
        "the baseline is the median throughput of the session's first N steps (its first record left out)",
        metavar="N",
        commands=RECORD_COMMANDS,
    )
    throughput_patience: int = option(
        3, INT_1, "throughput_drop needs K consecutive slow spans", metavar="K", commands=RECORD_COMMANDS
    )
    throughput_span: float = option(
        30.0,
        POSITIVE,
        "throughput is judged over spans of at least S seconds of training (consecutive records merged)",
        metavar="S",
        commands=(*RECORD_COMMANDS, "status"),
    )


class ThroughputDrop(Streak):
    """Throughput judged over spans of at least `--throughput-span` seconds of training: records
    are merged until they cover it, so a log with one line per update is judged like a windowed
    one. The baseline is the median over the spans within the baseline steps (the session's first
    record left out; a baseline shorter than one span is one span); patience counts spans."""

    kind = name = "throughput_drop"
    cls = FATAL
    severity = STOP
    runbook = Runbook(
        "throughput stayed below (1 - `--throughput-drop`) x the session's baseline",
        "look at the input pipeline, the disk, other jobs on the node, thermal throttling",
    )
    _fields: tuple[str, ...] = (
        "first_seen",
        "samples",
        "baseline",
        "closed",
        "span_work",
        "span_seconds",
        "prev_step",
        "prev_time",
        "streak",
        "first",
    )

    def __init__(self, opts: Any, facts: SessionFacts | None = None) -> None:
        super().__init__(opts, facts)
        self.first_seen = False
        self.samples: list[float] = []  # the baseline spans' throughputs
        self.baseline: float | None = None
        self.closed = False  # the baseline steps are over (baseline None then: the rule is off)
        self.span_work = 0.0  # throughput x seconds summed over the open span
        self.span_seconds = 0.0
        self.prev_step: int | float | None = None  # the previous train record's step and time
        self.prev_time: float | None = None

    def resumed(self) -> None:
        super().resumed()
        self.first_seen = False  # the resumed session's first record is warm-up again
        self.prev_step = self.prev_time = None
        self.span_work = self.span_seconds = 0.0

    def _seconds(self, rec: Record, tp: float) -> float | None:
        """The training seconds a record covers: its own (schema v1), the time since the previous
        train record, or its updates at its rate (one line per update); None when unknown."""
        if rec.seconds is not None:
            return rec.seconds
        if rec.time is not None and self.prev_time is not None and rec.time > self.prev_time:
            return rec.time - self.prev_time
        if self.prev_step is not None and rec.step > self.prev_step and tp > 0:
            return (rec.step - self.prev_step) / tp
        return None

    def look(self, rec: Record) -> Look:
        if rec.kind != "train":
            return SKIP
        tp = rec.throughput
        ok = tp is not None and math.isfinite(tp)
        seconds = self._seconds(rec, tp) if ok and tp is not None else None
        self.prev_step, self.prev_time = rec.step, rec.time
        facts = self.facts
        if facts.start_step is None:
            facts.start_step = rec.step
        if not self.first_seen:  # the session's first train record: warm-up, compilation
            self.first_seen = True
            return SKIP
        if tp is None or not ok or seconds is None or seconds <= 0:
            return SKIP
        opts = self.opts
        in_baseline = rec.step <= facts.start_step + opts.throughput_baseline_steps
        if not in_baseline and not self.closed:
            self.closed = True
            if not self.samples and self.span_seconds > 0:  # a baseline shorter than one span
                self.samples.append(self.span_work / self.span_seconds)
            self.span_work = self.span_seconds = 0.0
            if self.samples:
                self.baseline = median(self.samples)
                self.samples = []
        self.span_work += tp * seconds
        self.span_seconds += seconds
        if self.span_seconds < opts.throughput_span:
            return SKIP  # the span is still open
        span = self.span_work / self.span_seconds
        self.span_work = self.span_seconds = 0.0
        if in_baseline:
            self.samples.append(span)
            return SKIP
        if self.baseline is None:
            return SKIP  # no baseline in this session: the rule stays off
        limit = (1 - opts.throughput_drop) * self.baseline
        self.streak, self.first = extend_streak(self.streak, self.first, span < limit, rec.step)
        if self.streak >= opts.throughput_patience:
            return (
                f"throughput {fmt_value(span)} < {fmt_value(limit)} ((1 - {fmt_value(opts.throughput_drop)}) x baseline "
                f"{fmt_value(self.baseline)}) for {self.streak} consecutive spans of >= {fmt_value(opts.throughput_span)} s"
            )
        return None
