"""What `runwatch plot` draws of a run, read and judged: `load_run` and the series it returns.

The run is read through `records` (the one parser) and judged by `rules` (the watchdog's own
rules, replayed); `load_run` is the only function that touches either, and keeps plain lists a
session (`SessionSeries`), never Record objects. `plot` draws what it returns. Standard library only.
"""

from __future__ import annotations

import math
import os
import statistics
from dataclasses import dataclass, field
from typing import Any

from ..errors import UsageError
from ..judging import Finding, RuleOptions, Rules, RunReplay, ThroughputDrop, read_verdict
from ..reading import ReadOptions, Record, Target, ThroughputKind, iter_records, parser_for, resolve_target

# The Hugging Face Trainer logs these among its eval_* values; they are timings, not model quality,
# and would stretch the metrics panel's scale (samples/s in the hundreds next to an AUROC).
_NOT_METRICS = frozenset({"runtime", "samples_per_second", "steps_per_second"})


@dataclass
class SessionSeries:
    """What the plot draws of one session: plain lists, no Record objects kept."""

    key: str
    start_step: int | float | None
    # the values are floats, NaN where a record has none (a gap in the line)
    train_step: list[int | float] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    grad_mean: list[float] = field(default_factory=list)
    grad_max: list[float] = field(default_factory=list)
    throughput: list[float] = field(default_factory=list)
    eval_step: list[int | float] = field(default_factory=list)
    eval_loss: list[float] = field(default_factory=list)
    metrics: dict[str, tuple[list[int | float], list[float]]] = field(default_factory=dict)  # name -> (steps, values)
    end_reason: str | None = None
    last_step: int | float = 0
    baseline: float | None = None  # the throughput_drop rule's baseline (None: not enough records)
    baseline_set: bool = False  # the rule has fixed it (False: the median of its samples so far)

    def points(self) -> int:
        return len(self.train_step) + len(self.eval_step)


@dataclass
class PlotView:
    """A run as the plot sees it."""

    target: Target
    title: str
    throughput: ThroughputKind  # what the throughput counts, and its unit
    sessions: list[SessionSeries]
    findings: list[Finding]
    verdict: dict[str, Any] | None  # watchdog.json
    verdict_problem: str | None  # why watchdog.json could not be read


def load_run(target: str, opts: RuleOptions, read: ReadOptions | None = None) -> PlotView:
    """Read `target` through the one record parser and replay the watchdog's rules over it."""
    t = resolve_target(target, read)
    if not os.path.exists(t.log_path):
        raise UsageError(f"plot: {target}: no metrics.jsonl or trainer_state.json")
    parser = parser_for(t, opts.maps)
    sessions: dict[str, SessionSeries] = {}
    rules = RunReplay(opts, parser.start_step)
    findings: list[Finding] = []
    for rec in iter_records(t, parser=parser):
        s = sessions.get(rec.session)
        if s is None:
            s = sessions[rec.session] = SessionSeries(rec.session, parser.start_step(rec.session))
        findings.extend(rules.observe(rec))
        _add(s, rec)
    for key, s in sessions.items():
        s.baseline, s.baseline_set = _baseline(rules.engine(key))
    title = parser.manifest["run_id"] if parser.manifest else os.path.basename(t.log_path)
    verdict, problem = read_verdict(t.run_dir)
    series = list(sessions.values())
    return PlotView(t, title, parser.throughput, series, rules.settle(findings), verdict, problem)


def _add(s: SessionSeries, rec: Record) -> None:
    if rec.kind != "invalid":
        s.last_step = rec.step
    if rec.kind == "train":
        s.train_step.append(rec.step)
        s.loss.append(_num(rec.loss))
        s.lr.append(_num(rec.lr))
        s.grad_mean.append(_num(rec.grad_mean))
        s.grad_max.append(_num(rec.grad_max))
        s.throughput.append(_num(rec.throughput))
    elif rec.kind == "end":
        s.end_reason = rec.reason
    if rec.has_eval and (rec.eval_loss is not None or rec.metrics):
        s.eval_step.append(rec.step)
        s.eval_loss.append(_num(rec.eval_loss))
        for name, value in (rec.metrics or {}).items():
            if name in _NOT_METRICS:
                continue
            steps, values = s.metrics.setdefault(name, ([], []))
            steps.append(rec.step)
            values.append(_num(value))


def _num(v: float | None) -> float:
    """A drawable float: None and non-numbers become NaN (a gap in the line)."""
    return float(v) if type(v) is int or type(v) is float else math.nan


def _baseline(engine: Rules) -> tuple[float | None, bool]:
    """The throughput baseline the watchdog's rule took, or the median of its samples so far."""
    rule = next(r for r in engine.rules if isinstance(r, ThroughputDrop))
    if rule.baseline is not None:
        return rule.baseline, True
    if rule.samples:
        return statistics.median(rule.samples), False
    if not rule.closed and rule.span_seconds > 0:  # the baseline steps so far, shorter than one span
        return rule.span_work / rule.span_seconds, False
    return None, False
