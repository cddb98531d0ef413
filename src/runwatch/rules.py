"""The watchdog's record rules (docs/WATCHDOG.md, "Rules on records"): records in, findings out.

Each rule is a small unit with one method, `look(record)`, that says whether its condition holds
at that record (a message), does not hold (None), or that the rule does not look at this record
(`SKIP`: its condition is neither re-evaluated nor cleared there). `Rules` runs them in the order
docs/WATCHDOG.md lists, reports a rule once when its condition starts to hold and again only after it has
cleared, and reports at most one finding per record: the first in that order. Everything a rule
remembers is plain JSON (`state_dict()` / `load_state_dict()`), so a watch can be saved and resumed.

Rules never print or exit: the watchdog decides what a finding means. Standard library only.

Longer than 500 lines on purpose: the rules' options (about 150 lines of declarations with
their help), one short class a rule and the `Rules` that orders them are read together; a rule's
option, its class and its place in the order change in one commit.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError
from .options import (
    GREATER_1,
    HALF_TO_1,
    INT_0,
    INT_1,
    NON_NEGATIVE,
    NUMBER,
    OPEN_01,
    POSITIVE,
    TEXT,
    TEXTS,
    option,
    validate,
)
from .records import Record, parse_maps

__all__ = [
    "Finding",
    "Rule",
    "RuleOptions",
    "Rules",
    "RULE_ORDER",
    "SKIP",
    "Replay",
    "CLASSES",
    "verdict_class",
    "fmt_step",
    "replay",
]

_RECORD_COMMANDS = ("watch", "check", "plot")


@dataclass(frozen=True)
class RuleOptions:
    """What a replay of a log takes (`check`, `plot`, and `watch` on top): the record rules'
    thresholds and how to read the log's keys. A bad value raises ConfigError naming the option."""

    metric: str = option(
        "auroc",
        TEXT,
        "eval metric whose chance level is 0.5: metrics.NAME of a val record, eval_NAME in minimal telemetry",
        metavar="NAME",
        commands=_RECORD_COMMANDS,
    )
    metric_min: float = option(
        0.70,
        HALF_TO_1,
        "at a val record from --metric-after-step: below 1-X is "
        "inverted_metric (labels look inverted), below X stuck_metric",
        metavar="X",
        commands=_RECORD_COMMANDS,
    )
    metric_after_step: int = option(
        500,
        INT_0,
        "judge the eval metric only at steps >= N (it starts near chance)",
        metavar="N",
        commands=_RECORD_COMMANDS,
    )
    chance_loss: float | None = option(
        None,
        NUMBER,
        "loss_at_chance: the loss at chance level (binary cross-entropy: 0.693); the rule is off when unset",
        none=True,
        metavar="X",
        commands=_RECORD_COMMANDS,
    )
    chance_after_step: int = option(
        400, INT_0, "loss_at_chance looks only at train records from step N", metavar="N", commands=_RECORD_COMMANDS
    )
    chance_patience: int = option(
        3,
        INT_1,
        "loss_at_chance: the last K train records all at or above chance",
        metavar="K",
        commands=_RECORD_COMMANDS,
    )
    chance_tolerance: float = option(
        0.02, NON_NEGATIVE, "loss_at_chance: at chance means a loss >= X - T", metavar="T", commands=_RECORD_COMMANDS
    )
    grad_max: float = option(
        50.0, POSITIVE, "grad_explosion: pre-clip gradient norm above X", metavar="X", commands=_RECORD_COMMANDS
    )
    grad_min: float = option(
        1e-3, NON_NEGATIVE, "grad_collapse: pre-clip gradient norm below Y", metavar="Y", commands=_RECORD_COMMANDS
    )
    grad_patience: int = option(
        3,
        INT_1,
        "grad_explosion, grad_collapse and nonfinite_grad need K consecutive train records",
        metavar="K",
        commands=_RECORD_COMMANDS,
    )
    throughput_drop: float = option(
        0.25,
        OPEN_01,
        "throughput_drop: throughput below (1-F) x the session's baseline",
        metavar="F",
        commands=_RECORD_COMMANDS,
    )
    throughput_baseline_steps: int = option(
        200,
        INT_1,
        "the baseline is the median throughput of the session's first N steps (its first record left out)",
        metavar="N",
        commands=_RECORD_COMMANDS,
    )
    throughput_patience: int = option(
        3, INT_1, "throughput_drop needs K consecutive slow train records", metavar="K", commands=_RECORD_COMMANDS
    )
    spike_factor: float = option(
        3.0,
        GREATER_1,
        "loss_spike: loss above F x the median of the records before",
        metavar="F",
        commands=_RECORD_COMMANDS,
    )
    spike_window: int = option(
        20, INT_1, "loss_spike: the median is over the W train records before", metavar="W", commands=_RECORD_COMMANDS
    )
    spike_patience: int = option(
        2, INT_1, "loss_spike needs K consecutive spiking train records", metavar="K", commands=_RECORD_COMMANDS
    )
    collapse_patience: int = option(
        5,
        INT_1,
        "loss_collapse: K consecutive train records with loss exactly 0",
        metavar="K",
        commands=_RECORD_COMMANDS,
    )
    overfit_tolerance: float = option(
        0.10,
        NON_NEGATIVE,
        "overfitting: eval loss above (1+F) x the best so far",
        metavar="F",
        commands=_RECORD_COMMANDS,
    )
    overfit_patience: int = option(
        3, INT_1, "overfitting needs K consecutive such eval records", metavar="K", commands=_RECORD_COMMANDS
    )

    map: tuple[str, ...] = option(
        (),
        TEXTS,
        "read a minimal telemetry key from another key of the log",
        metavar="CANONICAL=SOURCE",
        commands=(*_RECORD_COMMANDS, "status"),
        expect="a list of CANONICAL=SOURCE strings",
    )

    def __post_init__(self) -> None:
        validate(self)
        parse_maps(self.map)
        if self.grad_min >= self.grad_max:
            raise ConfigError(f"watch.grad_min must be < watch.grad_max {self.grad_max:g}, got {self.grad_min:g}")

    @property
    def maps(self) -> dict[str, str]:
        """`--map` as {canonical: source}."""
        return parse_maps(self.map)


# What a relaunch can do about each kind of anomaly (docs/WATCHDOG.md, "Verdict classes").
TRANSIENT = "transient"  # resume from the latest checkpoint: may well succeed
DIVERGENCE = "divergence"  # resume from a checkpoint saved before the trouble began: may succeed
FATAL = "fatal"  # a relaunch repeats it: a person must change the recipe, data or code
CLASSES: dict[str, str] = {
    "process_exit": TRANSIENT,
    "stall": TRANSIENT,
    "rank_stall": TRANSIENT,
    "interrupted": TRANSIENT,
    "straggler": TRANSIENT,
    "nonfinite_loss": DIVERGENCE,
    "nonfinite_grad": DIVERGENCE,
    "loss_spike": DIVERGENCE,
    "grad_explosion": DIVERGENCE,
}


def verdict_class(kind: str | None) -> str | None:
    """The class of an anomaly kind (`fatal` for every kind not listed); None for no anomaly."""
    return None if kind is None else CLASSES.get(kind, FATAL)


class _Skip:
    """The type of `SKIP`."""

    def __repr__(self) -> str:
        return "SKIP"


SKIP = _Skip()  # `look` result: this rule does not look at this record
Look = str | None | _Skip  # what `look` says: a message (the condition holds), None (it does not), SKIP


def fmt_step(step: int | float) -> str:
    """A step as verdict lines print it (`step=120`)."""
    if type(step) is float and step.is_integer():
        return str(int(step))
    return f"{step:g}" if type(step) is float else str(step)


def _g(x: float) -> str:
    return f"{x:.4g}"


@dataclass(frozen=True, slots=True)
class Finding:
    """One anomaly: its kind (docs/WATCHDOG.md), the step of the triggering record, and a message."""

    kind: str
    step: int | float
    message: str
    session: str | None = None
    onset: int | float | None = None  # the step of the streak's first record (None: `step`)

    def line(self, prefix: str = "ANOMALY") -> str:
        """`ANOMALY <kind> step=N: <message>` (or with `FINDING`)."""
        return f"{prefix} {self.kind} step={fmt_step(self.step)}: {self.message}"

    @property
    def cls(self) -> str:
        """The verdict class of the kind: `transient`, `divergence` or `fatal`."""
        return verdict_class(self.kind) or FATAL

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "class": self.cls,
            "step": self.step,
            "onset": self.step if self.onset is None else self.onset,
            "message": self.message,
            "session": self.session,
        }


class Rule:
    """One record rule. Subclasses set `kind`, `name` and implement `look`."""

    kind = ""
    name = ""
    _fields: tuple[str, ...] = ()  # the attributes that make up the state
    # The record kinds the rule may look at ("eval values": any record that carries eval values);
    # `Rules` calls a rule only for these, so the others cost nothing. `look` may still SKIP.
    looks_at: frozenset[str] = frozenset({"train"})

    def __init__(self, opts: Any) -> None:
        self.opts = opts

    def look(self, rec: Record) -> Look:
        raise NotImplementedError

    def onset(self, rec: Record) -> int | float:
        """The step where the condition that `look` just reported began (default: this record's)."""
        return rec.step

    def state_dict(self) -> dict[str, Any]:
        out = {}
        for f in self._fields:
            v = getattr(self, f)
            out[f] = list(v) if isinstance(v, deque) else v
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for f in self._fields:
            cur = getattr(self, f)
            if f not in state:  # a state saved before the field existed
                continue
            v = state[f]
            setattr(self, f, deque(v, maxlen=cur.maxlen) if isinstance(cur, deque) else v)


class _Streak(Rule):
    """K consecutive looked-at records for which `hit` holds."""

    _fields: tuple[str, ...] = ("streak", "first")
    patience = 1

    def __init__(self, opts: Any) -> None:
        super().__init__(opts)
        self.streak = 0
        self.first: int | float | None = None  # the step of the streak's first record

    def step_streak(self, hit: bool, step: int | float) -> bool:
        self.streak, self.first = _extend(self.streak, self.first, hit, step)
        return self.streak >= self.patience

    def onset(self, rec: Record) -> int | float:
        return rec.step if self.first is None else self.first


# --- train-record rules, in reporting order ---------------------------------------------------------


class InvalidLog(Rule):
    kind = name = "invalid_log"
    looks_at = frozenset({"train", "eval", "checkpoint", "end", "fatal", "invalid", "other"})

    def look(self, rec: Record) -> Look:
        return rec.error if rec.kind == "invalid" else None


class NonfiniteLoss(Rule):
    kind = name = "nonfinite_loss"
    looks_at = frozenset({"train", "fatal", "end"})

    def look(self, rec: Record) -> Look:
        kind = rec.kind
        if kind == "train":
            loss = rec.loss
            if loss is None:
                return None
            if not math.isfinite(loss):
                return f"train loss is {_show_nonfinite(loss)}"
            if loss == 0 and rec.nonfinite_grads > 0:
                return "train loss is exactly 0 with a non-finite gradient norm (a NaN loss filtered by the trainer)"
            return None
        if kind == "fatal":
            return f"FATAL: {rec.error}"
        if kind == "end":
            if rec.reason == "nonfinite_loss":
                return "session ended with reason nonfinite_loss" + (f": {rec.error}" if rec.error else "")
            return None
        return SKIP


class NonfiniteGrad(_Streak):
    kind = name = "nonfinite_grad"

    def look(self, rec: Record) -> Look:
        if rec.kind != "train":
            return SKIP
        self.patience = self.opts.grad_patience
        if self.step_streak(rec.nonfinite_grads > 0, rec.step):
            return f"non-finite gradient norms in {self.streak} consecutive train records"
        return None


class GradExplosion(_Streak):
    kind = name = "grad_explosion"

    def look(self, rec: Record) -> Look:
        g = rec.grad_mean
        if rec.kind != "train" or g is None:
            return SKIP
        self.patience = self.opts.grad_patience
        if self.step_streak(g > self.opts.grad_max, rec.step):
            return f"gradient norm {_g(g)} > {_g(self.opts.grad_max)} for {self.streak} consecutive train records"
        return None


class GradCollapse(_Streak):
    kind = name = "grad_collapse"

    def look(self, rec: Record) -> Look:
        g = rec.grad_mean
        if rec.kind != "train" or g is None:
            return SKIP
        self.patience = self.opts.grad_patience
        if self.step_streak(g < self.opts.grad_min, rec.step):
            return f"gradient norm {_g(g)} < {_g(self.opts.grad_min)} for {self.streak} consecutive train records"
        return None


# A loss spike is judged against at least this many earlier train records of the session (docs/WATCHDOG.md, `loss_spike`).
SPIKE_MIN_HISTORY = 5


class LossSpike(_Streak):
    kind = name = "loss_spike"
    _fields: tuple[str, ...] = ("window", "seen", "streak", "first")

    def __init__(self, opts: Any) -> None:
        super().__init__(opts)
        self.window: deque[float] = deque(maxlen=opts.spike_window)
        self.seen = 0

    def look(self, rec: Record) -> Look:
        loss = rec.loss
        if rec.kind != "train" or loss is None or not math.isfinite(loss):
            return SKIP
        result: Look = SKIP
        if self.seen >= SPIKE_MIN_HISTORY:
            median = _median(self.window)
            if median > 0:
                limit = self.opts.spike_factor * median
                self.streak, self.first = _extend(self.streak, self.first, loss > limit, rec.step)
                result = None
                if self.streak >= self.opts.spike_patience:
                    result = (
                        f"loss {_g(loss)} > {_g(self.opts.spike_factor)} x median {_g(median)} of the "
                        f"previous {len(self.window)} train records for {self.streak} consecutive records"
                    )
        self.window.append(loss)
        self.seen += 1
        return result


class LossCollapse(_Streak):
    kind = name = "loss_collapse"

    def look(self, rec: Record) -> Look:
        if rec.kind != "train" or rec.loss is None:
            return SKIP
        self.patience = self.opts.collapse_patience
        if self.step_streak(rec.loss == 0, rec.step):
            return f"train loss exactly 0 for {self.streak} consecutive train records"
        return None


class LossAtChance(Rule):
    kind = name = "loss_at_chance"
    _fields: tuple[str, ...] = ("flags", "steps")

    def __init__(self, opts: Any) -> None:
        super().__init__(opts)
        self.flags: deque[bool] = deque(maxlen=opts.chance_patience)
        self.steps: deque[int | float] = deque(maxlen=opts.chance_patience)

    def onset(self, rec: Record) -> int | float:
        return self.steps[0] if self.steps else rec.step

    def look(self, rec: Record) -> Look:
        x = self.opts.chance_loss
        if x is None or rec.kind != "train" or rec.loss is None:
            return SKIP
        floor = x - self.opts.chance_tolerance
        # `not loss < floor`: a diverging (inf/NaN) loss counts as at or above chance
        self.flags.append(rec.step >= self.opts.chance_after_step and not rec.loss < floor)
        self.steps.append(rec.step)
        if len(self.flags) == self.flags.maxlen and all(self.flags):
            return (
                f"loss {_g(rec.loss)} >= {_g(floor)} (chance {_g(x)} - tolerance {_g(self.opts.chance_tolerance)}) "
                f"for the last {len(self.flags)} train records"
            )
        return None


class ThroughputDrop(_Streak):
    kind = name = "throughput_drop"
    _fields: tuple[str, ...] = ("start_step", "first_seen", "samples", "baseline", "streak", "first")

    def __init__(self, opts: Any, start_step: int | float | None = None) -> None:
        super().__init__(opts)
        self.start_step = start_step
        self.first_seen = False
        self.samples: list[float] = []
        self.baseline: float | None = None

    def look(self, rec: Record) -> Look:
        tp = rec.throughput
        if rec.kind != "train":
            return SKIP
        if not self.first_seen:  # the session's first train record: warm-up, compilation
            self.first_seen = True
            if self.start_step is None:
                self.start_step = rec.step
            return SKIP
        if tp is None or not math.isfinite(tp):
            return SKIP
        if rec.step <= self.start_step + self.opts.throughput_baseline_steps:
            self.samples.append(tp)
            return SKIP
        if self.baseline is None:
            if not self.samples:
                return SKIP  # no baseline in this session: the rule stays off
            self.baseline = _median(self.samples)
            self.samples = []
        limit = (1 - self.opts.throughput_drop) * self.baseline
        self.streak, self.first = _extend(self.streak, self.first, tp < limit, rec.step)
        if self.streak >= self.opts.throughput_patience:
            return (
                f"throughput {_g(tp)} < {_g(limit)} ((1 - {_g(self.opts.throughput_drop)}) x baseline "
                f"{_g(self.baseline)}) for {self.streak} consecutive train records"
            )
        return None


class SessionError(Rule):
    kind = name = "session_error"
    looks_at = frozenset({"end"})
    reason = "error"  # the session_end reason this rule reports

    def look(self, rec: Record) -> Look:
        if rec.kind != "end":
            return SKIP
        if rec.reason == self.reason:
            return f"session ended with reason {rec.reason}" + (f": {rec.error}" if rec.error else "")
        return None


class Interrupted(SessionError):
    """A session ended by a signal (a scheduler's preemption, Ctrl-C): `transient`, unlike an error."""

    kind = name = "interrupted"
    reason = "interrupted"


# --- eval-value rules -----------------------------------------------------------------------------


class EvalNonfiniteLoss(Rule):
    kind = "nonfinite_loss"
    name = "eval_nonfinite_loss"
    looks_at = frozenset({"eval values"})

    def look(self, rec: Record) -> Look:
        v = rec.eval_loss
        if v is None:
            return SKIP
        return None if math.isfinite(v) else f"eval loss is {_show_nonfinite(v)}"


class Overfitting(_Streak):
    kind = name = "overfitting"
    looks_at = frozenset({"eval values"})
    _fields: tuple[str, ...] = ("best", "streak", "first")

    def __init__(self, opts: Any) -> None:
        super().__init__(opts)
        self.best: float | None = None

    def look(self, rec: Record) -> Look:
        v = rec.eval_loss
        if v is None or not math.isfinite(v):
            return SKIP
        best = self.best
        if best is None:
            self.best = v
            return None
        limit = (1 + self.opts.overfit_tolerance) * best
        self.streak, self.first = _extend(self.streak, self.first, v > limit, rec.step)
        if v < best:
            self.best = v
        if self.streak >= self.opts.overfit_patience:
            return (
                f"eval loss {_g(v)} > {_g(limit)} ((1 + {_g(self.opts.overfit_tolerance)}) x best {_g(best)}) "
                f"for {self.streak} consecutive eval records"
            )
        return None


class _Metric(Rule):
    looks_at = frozenset({"eval values"})

    def value(self, rec: Record) -> float | _Skip:
        m = rec.metrics
        if not m or rec.step < self.opts.metric_after_step:
            return SKIP
        v = m.get(self.opts.metric)
        if (type(v) is not float and type(v) is not int) or not math.isfinite(v):
            return SKIP
        return float(v)


class InvertedMetric(_Metric):
    kind = name = "inverted_metric"

    def look(self, rec: Record) -> Look:
        v = self.value(rec)
        if isinstance(v, _Skip):
            return SKIP
        low = 1 - self.opts.metric_min
        if v < low:
            return f"{self.opts.metric} {_g(v)} < {_g(low)} (1 - metric-min {_g(self.opts.metric_min)}): labels look inverted"
        return None


class StuckMetric(_Metric):
    kind = name = "stuck_metric"

    def look(self, rec: Record) -> Look:
        v = self.value(rec)
        if isinstance(v, _Skip):
            return SKIP
        x = self.opts.metric_min
        if 1 - x <= v < x:
            return f"{self.opts.metric} {_g(v)} < metric-min {_g(x)}: the model looks stuck near chance"
        return None


# The reporting order on one record (docs/WATCHDOG.md, "Rules on records"): train rules, then eval-value rules.
RULE_ORDER: tuple[type[Rule], ...] = (
    InvalidLog,
    NonfiniteLoss,
    NonfiniteGrad,
    GradExplosion,
    GradCollapse,
    LossSpike,
    LossCollapse,
    LossAtChance,
    ThroughputDrop,
    SessionError,
    Interrupted,
    EvalNonfiniteLoss,
    Overfitting,
    InvertedMetric,
    StuckMetric,
)


class Rules:
    """All record rules of one session, run in order; `observe` returns at most one Finding."""

    def __init__(self, opts: Any, start_step: int | float | None = None) -> None:
        self.opts = opts
        self.reset(start_step)

    def reset(self, start_step: int | float | None = None) -> None:
        """A new session: every window, counter and best-so-far value starts over."""
        self.start_step = start_step
        self.rules: list[Rule] = [
            ThroughputDrop(self.opts, start_step) if cls is ThroughputDrop else cls(self.opts) for cls in RULE_ORDER
        ]
        self.active: list[bool] = [False] * len(self.rules)
        off = {"loss_at_chance"} if getattr(self.opts, "chance_loss", None) is None else set()
        by_kind: dict[str, list[tuple[int, Rule]]] = {}
        for kind in ("train", "eval", "checkpoint", "end", "fatal", "invalid", "other", "eval values"):
            by_kind[kind] = [(i, r) for i, r in enumerate(self.rules) if kind in r.looks_at and r.name not in off]
        self._by_kind = by_kind

    def observe(self, rec: Record) -> Finding | None:
        """Apply the rules to `rec`; the first rule in order whose condition started here, or None."""
        found: Finding | None = None
        active = self.active
        rules = self._by_kind[rec.kind]
        if rec.eval_loss is not None or rec.metrics or rec.kind == "eval":
            rules = rules + self._by_kind["eval values"]
        for i, rule in rules:
            msg = rule.look(rec)
            if isinstance(msg, _Skip):
                continue
            if msg is None:
                active[i] = False
            elif not active[i]:
                active[i] = True
                if found is None:
                    found = Finding(rule.kind, rec.step, msg, rec.session, rule.onset(rec))
        return found

    def state_dict(self) -> dict[str, Any]:
        """Every rule's memory as plain JSON."""
        return {
            "start_step": self.start_step,
            "rules": {r.name: {"active": a, **r.state_dict()} for r, a in zip(self.rules, self.active)},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore `state_dict()` (same options)."""
        self.reset(state["start_step"])
        for i, rule in enumerate(self.rules):
            s = state["rules"].get(rule.name)
            if s is None:  # a rule added since the state was saved starts fresh
                continue
            self.active[i] = bool(s["active"])
            rule.load_state_dict(s)


class Replay:
    """The rules of every session of a log as it stands (`check`, `plot`, `smoke`): each session is
    judged on its own, from its first record, by its own `Rules`."""

    def __init__(self, opts: Any, start_step: Callable[[str], int | None] | None = None) -> None:
        self.opts = opts
        self.start_step = start_step or (lambda session: None)
        self.engines: dict[str, Rules] = {}

    def engine(self, session: str) -> Rules:
        """The rules of `session` (created at its first record)."""
        eng = self.engines.get(session)
        if eng is None:
            eng = self.engines[session] = Rules(self.opts, self.start_step(session))
        return eng

    def observe(self, rec: Record) -> Finding | None:
        return self.engine(rec.session).observe(rec)


def replay(records: Iterable[Record], opts: Any, start_steps: dict[str, int | None] | None = None) -> list[Finding]:
    """Every finding of `records` (all sessions; a new session restarts the rules)."""
    r = Replay(opts, (start_steps or {}).get)
    return [f for f in map(r.observe, records) if f is not None]


def _extend(streak: int, first: int | float | None, hit: bool, step: int | float) -> tuple[int, int | float | None]:
    """A streak counter and the step of its first record, after one more looked-at record."""
    if not hit:
        return 0, None
    return streak + 1, step if streak == 0 else first


def _median(values: Any) -> float:
    s = sorted(values)
    n = len(s)
    if n == 0:
        return 0.0
    mid = n // 2
    return float(s[mid]) if n % 2 else (s[mid - 1] + s[mid]) / 2


def _show_nonfinite(x: float) -> str:
    if math.isnan(x):
        return "NaN"
    return "Infinity" if x > 0 else "-Infinity"
