"""The watchdog's rules on eval values (docs/WATCHDOG.md, "Rules on records"): a non-finite eval
loss, overfitting, and a metric stuck at chance or inverted.

They look at any record that carries eval values (`looks_at = {"eval values"}`) and are built like
the train-record rules, on `rulebase`'s `Rule` and shared helpers, each with its declarations
(class, severity, runbook) and its options beside it; `rules.Rules` runs them after those.
Standard library only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..options import INT_0, INT_1, NON_NEGATIVE, OPEN_01, TEXT, option
from ..reading import Record
from .declaring import FATAL, FRACTION, RECORD_COMMANDS, STOP, WARN, OptionGroup, Runbook
from .lossrules import NonfiniteLoss
from .rulebase import SKIP, Look, Rule, SessionFacts, Skip, extend_streak, fmt_value, show_nonfinite


def eval_losses(rec: Record) -> list[tuple[str, float]]:
    """The eval loss series a record carries: `eval_loss`, and every eval value whose name ends in
    `loss` (`eval_g0_loss`, `val/box_loss`), each with the name its messages give."""
    out: list[tuple[str, float]] = []
    if rec.eval_loss is not None:
        out.append(("eval loss", rec.eval_loss))
    m = rec.metrics
    if m:
        for name, v in m.items():
            if name[-4:].lower() == "loss" and (type(v) is float or type(v) is int):
                out.append((f"eval_{name}", float(v)))
    return out


class EvalNonfiniteLoss(NonfiniteLoss):
    """`nonfinite_loss` of an eval loss: the kind and its declarations are the train rule's."""

    name = "eval_nonfinite_loss"
    looks_at = frozenset({"eval values"})

    def look(self, rec: Record) -> Look:
        series = eval_losses(rec)
        if not series:
            return SKIP
        for name, v in series:
            if not math.isfinite(v):
                return f"{name} is {show_nonfinite(v)}"
        return None


@dataclass(frozen=True)
class OverfittingOptions(OptionGroup):
    """`overfitting`'s options."""

    overfit_tolerance: float = option(
        0.10,
        NON_NEGATIVE,
        "overfitting: eval loss above (1+F) x the best so far",
        metavar="F",
        commands=RECORD_COMMANDS,
    )
    overfit_patience: int = option(
        3, INT_1, "overfitting needs K consecutive such eval records", metavar="K", commands=RECORD_COMMANDS
    )
    overfit_min_rise: float = option(
        0.1,
        NON_NEGATIVE,
        "overfitting: the eval loss must also rise above its best by G x what it had gained "
        "(its first value - its best)",
        metavar="G",
        commands=RECORD_COMMANDS,
    )


class Overfitting(Rule):
    """K consecutive evals of one eval loss series above (1 + F) x its best so far, and above it by
    at least G x what the series had gained (its first value - its best). The rule holds while any
    series does; its message names the series that started it."""

    kind = name = "overfitting"
    cls = FATAL
    severity = WARN
    runbook = Runbook(
        "eval loss stayed above (1 + `--overfit-tolerance`) x its best for `--overfit-patience` evaluations",
        "keep the best checkpoint; stop early, add regularization or data",
    )
    looks_at = frozenset({"eval values"})
    _fields: tuple[str, ...] = ("series", "message", "since")

    def __init__(self, opts: Any, facts: SessionFacts | None = None) -> None:
        super().__init__(opts, facts)
        self.series: dict[str, list[Any]] = {}  # name -> [first value, best, streak, streak's first step]
        self.message: str | None = None  # while the rule holds: what started it
        self.since: int | float | None = None  # and that streak's first step

    def onset(self, rec: Record) -> int | float:
        return rec.step if self.since is None else self.since

    def look(self, rec: Record) -> Look:
        series = eval_losses(rec)
        if not series:
            return SKIP
        opts = self.opts
        patience = opts.overfit_patience
        looked = False
        for name, v in series:
            if not math.isfinite(v):
                continue
            looked = True
            s = self.series.get(name)
            if s is None:
                if len(self.series) < MAX_EVAL_SERIES:
                    self.series[name] = [v, v, 0, None]
                continue
            first, best, streak, start = s
            limit = (1 + opts.overfit_tolerance) * best
            hit = v > limit and v - best >= opts.overfit_min_rise * (first - best)
            s[2], s[3] = extend_streak(streak, start, hit, rec.step)
            if v < best:
                s[1] = v
            if s[2] >= patience and self.message is None:
                self.message = (
                    f"{name} {fmt_value(v)} > {fmt_value(limit)} ((1 + {fmt_value(opts.overfit_tolerance)}) x best {fmt_value(best)}) "
                    f"for {s[2]} consecutive eval records"
                )
                self.since = s[3]
        if not looked:
            return SKIP
        if any(s[2] >= patience for s in self.series.values()):
            return self.message
        self.message = self.since = None
        return None


# At most this many eval loss series are followed (a log of unbounded names must not grow the state).
MAX_EVAL_SERIES = 64


@dataclass(frozen=True)
class MetricOptions(OptionGroup):
    """The options of the rules on the judged eval metric (`inverted_metric`, `stuck_metric`)."""

    metric: str = option(
        "auroc",
        TEXT,
        "the eval metric judged: metrics.NAME of a val record, eval_NAME in minimal telemetry",
        metavar="NAME",
        commands=RECORD_COMMANDS,
    )
    metric_chance: float = option(
        0.5,
        OPEN_01,
        "the metric's chance level (0.5: a two-class metric such as AUROC; 0.1: accuracy over 10 classes)",
        metavar="C",
        commands=RECORD_COMMANDS,
    )
    metric_min: float = option(
        0.70,
        FRACTION,
        "at a val record from --metric-after-step: below X is stuck_metric; "
        "at chance 0.5 below 1-X is inverted_metric (labels look inverted)",
        metavar="X",
        commands=RECORD_COMMANDS,
    )
    metric_after_step: int = option(
        500,
        INT_0,
        "judge the eval metric only at steps >= N (it starts near chance)",
        metavar="N",
        commands=RECORD_COMMANDS,
    )

    def check_together(self) -> None:
        """`--metric-min` above the chance level (at least 0.5 for a two-class metric)."""
        if self.metric_chance == 0.5 and self.metric_min < 0.5:
            raise ConfigError(f"watch.metric_min must be a number in [0.5, 1], got {self.metric_min:g}")
        if self.metric_min <= self.metric_chance:
            raise ConfigError(
                f"watch.metric_min must be > watch.metric_chance {self.metric_chance:g}, got {self.metric_min:g}"
            )


class _Metric(Rule):
    looks_at = frozenset({"eval values"})

    def value(self, rec: Record) -> float | Skip:
        m = rec.metrics
        if not m or rec.step < self.opts.metric_after_step:
            return SKIP
        v = m.get(self.opts.metric)
        if (type(v) is not float and type(v) is not int) or not math.isfinite(v):
            return SKIP
        return float(v)


class InvertedMetric(_Metric):
    """Only for a two-class metric (chance 0.5): below 1 - metric-min, the labels look inverted."""

    kind = name = "inverted_metric"
    cls = FATAL
    severity = STOP
    runbook = Runbook(
        "the eval metric is below 1 - `--metric-min`: the labels look inverted",
        "stop and check the label mapping and the sign of the score: a relaunch repeats it",
    )

    def look(self, rec: Record) -> Look:
        if self.opts.metric_chance != 0.5:
            return SKIP
        v = self.value(rec)
        if isinstance(v, Skip):
            return SKIP
        low = 1 - self.opts.metric_min
        if v < low:
            return (
                f"{self.opts.metric} {fmt_value(v)} < {fmt_value(low)} (1 - metric-min {fmt_value(self.opts.metric_min)}): "
                f"labels look inverted (chance 0.5)"
            )
        return None


class StuckMetric(_Metric):
    kind = name = "stuck_metric"
    cls = FATAL
    severity = STOP
    runbook = Runbook(
        "the eval metric stays near chance (below `--metric-min`) after `--metric-after-step`",
        "stop and look at the data, the labels and the learning rate: a relaunch repeats it",
    )

    def look(self, rec: Record) -> Look:
        v = self.value(rec)
        if isinstance(v, Skip):
            return SKIP
        x = self.opts.metric_min
        chance = self.opts.metric_chance
        if v < x and (chance != 0.5 or v >= 1 - x):  # below 1 - x at chance 0.5: inverted_metric
            return f"{self.opts.metric} {fmt_value(v)} < metric-min {fmt_value(x)}: the model looks stuck near chance ({fmt_value(chance)})"
        return None


# Task metrics by name (the last part of an eval key, any case): higher is better, lower is better.
_HIGHER = ("accuracy", "acc", "f1", "auroc", "auc", "precision", "recall", "bleu", "exact_match")
_HIGHER_PREFIXES = ("map", "rouge")
_LOWER = ("wer", "cer", "perplexity")
# A task metric is judged once the run has this many evals of it.
METRIC_MIN_EVALS = 4
# `metric_stuck` in a watch of unknown length: after this many train records.
METRIC_STUCK_RECORDS = 200
# A higher-is-better metric in [0, 1] that never exceeds this learned nothing.
METRIC_FLOOR = 0.05
MAX_TASK_METRICS = 16


def task_metric(name: str) -> str | None:
    """`higher` or `lower` for an eval key naming a task metric (`accuracy`, `metrics_mAP50(B)`,
    `val_acc`, `wer`), else None."""
    last = name.lower().split("(", 1)[0].rsplit("/", 1)[-1]
    for key in (*_HIGHER, *_LOWER):
        if last == key or last.endswith("_" + key):
            return "lower" if key in _LOWER else "higher"
    token = last.rsplit("_", 1)[-1]
    if token.startswith(_HIGHER_PREFIXES) or last.startswith(_HIGHER_PREFIXES):
        return "higher"
    return None


@dataclass(frozen=True)
class MetricStuckOptions(OptionGroup):
    """`metric_stuck`'s options (it is judged from `--progress-after` too)."""

    metric_min_gain: float = option(
        0.02,
        NON_NEGATIVE,
        "metric_stuck: a task metric whose best eval is not better than its first by G (absolute for a "
        "metric in [0, 1], else relative) never improved",
        metavar="G",
        commands=RECORD_COMMANDS,
    )


class MetricStuck(Rule):
    """A task metric (by name, with its direction) that never moved: once the run is past
    `--progress-after` of its length (unknown: at the end in `check`, after 200 train records in a
    watch) and has at least 4 evals of it, its evals are all identical, or its best is no better
    than its first by `--metric-min-gain` (absolute for a metric in [0, 1], relative otherwise; not
    asked of a metric in [0, 1] whose first eval is within that gain of its bound), or a
    higher-is-better metric in [0, 1] never exceeds 0.05. A value in (1, 100] of a metric in
    [0, 1] is a percentage."""

    kind = name = "metric_stuck"
    cls = FATAL
    severity = WARN
    runbook = Runbook(
        "a task metric (accuracy, F1, mAP, ... by name; WER, perplexity lower is better) never moved over at least "
        "4 evals: identical evals, a best no better than the first by `--metric-min-gain`, or at most 0.05",
        "a warning: look at the metric's curve; a classifier at its majority class or a detector at mAP 0 learned "
        "nothing of the task (check the labels, the head, the learning rate); raise `--metric-min-gain` or set "
        "`--severity metric_stuck=off` for a metric that starts where it should stay",
    )
    looks_at = frozenset({"train", "eval values"})
    _fields: tuple[str, ...] = ("series", "trains")

    def __init__(self, opts: Any, facts: SessionFacts | None = None) -> None:
        super().__init__(opts, facts)
        self.series: dict[str, list[float]] = {}  # metric -> its eval values (as fractions when in [0, 1])
        self.trains = 0
        self.onset_step: int | float | None = None

    def look(self, rec: Record) -> Look:
        if rec.kind == "train":
            self.trains += 1
        m = rec.metrics
        if not m:
            return SKIP
        looked = False
        for key, v in m.items():
            if (type(v) is not float and type(v) is not int) or not math.isfinite(v):
                continue
            s = self.series.get(key)
            if s is None:
                if len(self.series) >= MAX_TASK_METRICS or task_metric(key) is None:
                    continue
                s = self.series[key] = []
            if len(s) < 10_000:
                s.append(float(v))
            looked = True
        if not looked:
            return SKIP
        max_steps = self.facts.max_steps
        if max_steps is not None:
            if rec.step < self.opts.progress_after * max_steps:
                return SKIP
        elif self.trains < METRIC_STUCK_RECORDS:
            return SKIP
        return self._judge()

    def final(self) -> str | None:
        return self._judge()

    def _judge(self) -> str | None:
        gain = self.opts.metric_min_gain
        for key, values in self.series.items():
            n = len(values)
            if n < METRIC_MIN_EVALS:
                continue
            direction = task_metric(key)
            unit = key.lower().rsplit("/", 1)[-1] not in ("perplexity",) and not key.lower().endswith("perplexity")
            vals = values
            if unit and max(vals) > 1 and max(vals) <= 100 and min(vals) >= 0:
                vals = [x / 100 for x in vals]  # a percentage
            unit = unit and min(vals) >= 0 and max(vals) <= 1
            first = vals[0]
            best = max(vals) if direction == "higher" else min(vals)
            name = f"eval_{key}"
            if max(vals) == min(vals):
                return f"{name} is {fmt_value(first)} at all {n} evals: the task metric never moved"
            better = best - first if direction == "higher" else first - best
            need = gain if unit else gain * abs(first)
            # a metric in [0, 1] whose first eval is within the gain of its bound has no room to gain it
            room = (1 - first if direction == "higher" else first) if unit else math.inf
            if better < need and room >= need:
                return (
                    f"{name}'s best {fmt_value(best)} is not better than its first eval {fmt_value(first)} by "
                    f"{fmt_value(need)} over {n} evals: the task metric never improved"
                )
            if direction == "higher" and unit and best <= METRIC_FLOOR:
                return f"{name} never exceeds {fmt_value(best)} over {n} evals: the model learned nothing of the task"
        return None
