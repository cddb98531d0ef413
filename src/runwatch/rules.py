"""The watchdog's record rules (SPEC §5): records in, findings out.

Each rule is a small unit with one method, `look(record)`, that says whether its condition holds
at that record (a message), does not hold (None), or that the rule does not look at this record
(`SKIP`: its condition is neither re-evaluated nor cleared there). `Rules` runs them in the order
SPEC §5 lists, reports a rule once when its condition starts to hold and again only after it has
cleared, and reports at most one finding per record: the first in that order. Everything a rule
remembers is plain JSON (`state()` / `load()`), so a watch can be saved and resumed.

Rules never print or exit: the watchdog decides what a finding means. Standard library only.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any, Iterable

from .records import Record

__all__ = ["Finding", "Rule", "Rules", "RULE_ORDER", "SKIP", "fmt_step", "replay"]

SKIP: Any = object()  # `look` result: this rule does not look at this record


def fmt_step(step: int | float) -> str:
    """A step as verdict lines print it (`step=120`)."""
    if type(step) is float and step.is_integer():
        return str(int(step))
    return f"{step:g}" if type(step) is float else str(step)


def _g(x: float) -> str:
    return f"{x:.4g}"


@dataclass(frozen=True, slots=True)
class Finding:
    """One anomaly: its kind (SPEC §4), the step of the triggering record, and a message."""

    kind: str
    step: int | float
    message: str
    session: str | None = None

    def line(self, prefix: str = "ANOMALY") -> str:
        """`ANOMALY <kind> step=N: <message>` (or with `FINDING`)."""
        return f"{prefix} {self.kind} step={fmt_step(self.step)}: {self.message}"

    def to_json(self) -> dict:
        return {"kind": self.kind, "step": self.step, "message": self.message, "session": self.session}


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

    def look(self, rec: Record) -> str | None:
        raise NotImplementedError

    def state(self) -> dict:
        out = {}
        for f in self._fields:
            v = getattr(self, f)
            out[f] = list(v) if isinstance(v, deque) else v
        return out

    def load(self, state: dict) -> None:
        for f in self._fields:
            cur = getattr(self, f)
            v = state[f]
            setattr(self, f, deque(v, maxlen=cur.maxlen) if isinstance(cur, deque) else v)


class _Streak(Rule):
    """K consecutive looked-at records for which `hit` holds."""

    _fields = ("streak",)
    patience = 1

    def __init__(self, opts: Any) -> None:
        super().__init__(opts)
        self.streak = 0

    def step_streak(self, hit: bool) -> bool:
        self.streak = self.streak + 1 if hit else 0
        return self.streak >= self.patience


# --- train-record rules, in reporting order ---------------------------------------------------------


class InvalidLog(Rule):
    kind = name = "invalid_log"
    looks_at = frozenset({"train", "eval", "checkpoint", "end", "fatal", "invalid", "other"})

    def look(self, rec: Record) -> str | None:
        return rec.error if rec.kind == "invalid" else None


class NonfiniteLoss(Rule):
    kind = name = "nonfinite_loss"
    looks_at = frozenset({"train", "fatal", "end"})

    def look(self, rec: Record) -> str | None:
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

    def look(self, rec: Record) -> str | None:
        if rec.kind != "train":
            return SKIP
        self.patience = self.opts.grad_patience
        if self.step_streak(rec.nonfinite_grads > 0):
            return f"non-finite gradient norms in {self.streak} consecutive train records"
        return None


class GradExplosion(_Streak):
    kind = name = "grad_explosion"

    def look(self, rec: Record) -> str | None:
        g = rec.grad_mean
        if rec.kind != "train" or g is None:
            return SKIP
        self.patience = self.opts.grad_patience
        if self.step_streak(g > self.opts.grad_max):
            return f"gradient norm {_g(g)} > {_g(self.opts.grad_max)} for {self.streak} consecutive train records"
        return None


class GradCollapse(_Streak):
    kind = name = "grad_collapse"

    def look(self, rec: Record) -> str | None:
        g = rec.grad_mean
        if rec.kind != "train" or g is None:
            return SKIP
        self.patience = self.opts.grad_patience
        if self.step_streak(g < self.opts.grad_min):
            return f"gradient norm {_g(g)} < {_g(self.opts.grad_min)} for {self.streak} consecutive train records"
        return None


# A loss spike is judged against at least this many earlier train records of the session (SPEC §5).
SPIKE_MIN_HISTORY = 5


class LossSpike(Rule):
    kind = name = "loss_spike"
    _fields = ("window", "seen", "streak")

    def __init__(self, opts: Any) -> None:
        super().__init__(opts)
        self.window: deque = deque(maxlen=opts.spike_window)
        self.seen = 0
        self.streak = 0

    def look(self, rec: Record) -> str | None:
        loss = rec.loss
        if rec.kind != "train" or loss is None or not math.isfinite(loss):
            return SKIP
        result: str | None = SKIP
        if self.seen >= SPIKE_MIN_HISTORY:
            median = _median(self.window)
            if median > 0:
                limit = self.opts.spike_factor * median
                self.streak = self.streak + 1 if loss > limit else 0
                result = None
                if self.streak >= self.opts.spike_patience:
                    result = (f"loss {_g(loss)} > {_g(self.opts.spike_factor)} x median {_g(median)} of the "
                              f"previous {len(self.window)} train records for {self.streak} consecutive records")
        self.window.append(loss)
        self.seen += 1
        return result


class LossCollapse(_Streak):
    kind = name = "loss_collapse"

    def look(self, rec: Record) -> str | None:
        if rec.kind != "train" or rec.loss is None:
            return SKIP
        self.patience = self.opts.collapse_patience
        if self.step_streak(rec.loss == 0):
            return f"train loss exactly 0 for {self.streak} consecutive train records"
        return None


class LossAtChance(Rule):
    kind = name = "loss_at_chance"
    _fields = ("flags",)

    def __init__(self, opts: Any) -> None:
        super().__init__(opts)
        self.flags: deque = deque(maxlen=opts.chance_patience)

    def look(self, rec: Record) -> str | None:
        x = self.opts.chance_loss
        if x is None or rec.kind != "train" or rec.loss is None:
            return SKIP
        floor = x - self.opts.chance_tolerance
        # `not loss < floor`: a diverging (inf/NaN) loss counts as at or above chance
        self.flags.append(rec.step >= self.opts.chance_after_step and not rec.loss < floor)
        if len(self.flags) == self.flags.maxlen and all(self.flags):
            return (f"loss {_g(rec.loss)} >= {_g(floor)} (chance {_g(x)} - tolerance {_g(self.opts.chance_tolerance)}) "
                    f"for the last {len(self.flags)} train records")
        return None


class ThroughputDrop(Rule):
    kind = name = "throughput_drop"
    _fields = ("start_step", "first_seen", "samples", "baseline", "streak")

    def __init__(self, opts: Any, start_step: int | None = None) -> None:
        super().__init__(opts)
        self.start_step = start_step
        self.first_seen = False
        self.samples: list = []
        self.baseline: float | None = None
        self.streak = 0

    def look(self, rec: Record) -> str | None:
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
        self.streak = self.streak + 1 if tp < limit else 0
        if self.streak >= self.opts.throughput_patience:
            return (f"throughput {_g(tp)} < {_g(limit)} ((1 - {_g(self.opts.throughput_drop)}) x baseline "
                    f"{_g(self.baseline)}) for {self.streak} consecutive train records")
        return None


class SessionError(Rule):
    kind = name = "session_error"
    looks_at = frozenset({"end"})

    def look(self, rec: Record) -> str | None:
        if rec.kind != "end":
            return SKIP
        if rec.reason in ("error", "interrupted"):
            return f"session ended with reason {rec.reason}" + (f": {rec.error}" if rec.error else "")
        return None


# --- eval-value rules -----------------------------------------------------------------------------


class EvalNonfiniteLoss(Rule):
    kind = "nonfinite_loss"
    name = "eval_nonfinite_loss"
    looks_at = frozenset({"eval values"})

    def look(self, rec: Record) -> str | None:
        v = rec.eval_loss
        if v is None:
            return SKIP
        return None if math.isfinite(v) else f"eval loss is {_show_nonfinite(v)}"


class Overfitting(Rule):
    kind = name = "overfitting"
    looks_at = frozenset({"eval values"})
    _fields = ("best", "streak")

    def __init__(self, opts: Any) -> None:
        super().__init__(opts)
        self.best: float | None = None
        self.streak = 0

    def look(self, rec: Record) -> str | None:
        v = rec.eval_loss
        if v is None or not math.isfinite(v):
            return SKIP
        best = self.best
        if best is None:
            self.best = v
            return None
        limit = (1 + self.opts.overfit_tolerance) * best
        self.streak = self.streak + 1 if v > limit else 0
        if v < best:
            self.best = v
        if self.streak >= self.opts.overfit_patience:
            return (f"eval loss {_g(v)} > {_g(limit)} ((1 + {_g(self.opts.overfit_tolerance)}) x best {_g(best)}) "
                    f"for {self.streak} consecutive eval records")
        return None


class _Metric(Rule):
    looks_at = frozenset({"eval values"})
    def value(self, rec: Record) -> Any:
        m = rec.metrics
        if not m or rec.step < self.opts.metric_after_step:
            return SKIP
        v = m.get(self.opts.metric)
        if (type(v) is not float and type(v) is not int) or not math.isfinite(v):
            return SKIP
        return v


class InvertedMetric(_Metric):
    kind = name = "inverted_metric"

    def look(self, rec: Record) -> str | None:
        v = self.value(rec)
        if v is SKIP:
            return SKIP
        low = 1 - self.opts.metric_min
        if v < low:
            return f"{self.opts.metric} {_g(v)} < {_g(low)} (1 - metric-min {_g(self.opts.metric_min)}): labels look inverted"
        return None


class StuckMetric(_Metric):
    kind = name = "stuck_metric"

    def look(self, rec: Record) -> str | None:
        v = self.value(rec)
        if v is SKIP:
            return SKIP
        x = self.opts.metric_min
        if 1 - x <= v < x:
            return f"{self.opts.metric} {_g(v)} < metric-min {_g(x)}: the model looks stuck near chance"
        return None


# The reporting order on one record (SPEC §5 "Details"): train rules, then eval-value rules.
RULE_ORDER: tuple[type[Rule], ...] = (
    InvalidLog, NonfiniteLoss, NonfiniteGrad, GradExplosion, GradCollapse, LossSpike, LossCollapse,
    LossAtChance, ThroughputDrop, SessionError,
    EvalNonfiniteLoss, Overfitting, InvertedMetric, StuckMetric,
)


class Rules:
    """All record rules of one session, run in order; `observe` returns at most one Finding."""

    def __init__(self, opts: Any, start_step: int | None = None) -> None:
        self.opts = opts
        self.reset(start_step)

    def reset(self, start_step: int | None = None) -> None:
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
            if msg is SKIP:
                continue
            if msg is None:
                active[i] = False
            elif not active[i]:
                active[i] = True
                if found is None:
                    found = Finding(rule.kind, rec.step, msg, rec.session)
        return found

    def state(self) -> dict:
        """Every rule's memory as plain JSON."""
        return {
            "start_step": self.start_step,
            "rules": {r.name: {"active": a, **r.state()} for r, a in zip(self.rules, self.active)},
        }

    def load(self, state: dict) -> None:
        """Restore `state()` (same options)."""
        self.reset(state["start_step"])
        for i, rule in enumerate(self.rules):
            s = state["rules"][rule.name]
            self.active[i] = bool(s["active"])
            rule.load(s)


def replay(records: Iterable[Record], opts: Any, start_steps: dict[str, int | None] | None = None) -> list[Finding]:
    """Every finding of `records` (all sessions; a new session restarts the rules)."""
    engines: dict[str, Rules] = {}
    out = []
    for rec in records:
        eng = engines.get(rec.session)
        if eng is None:
            eng = engines[rec.session] = Rules(opts, (start_steps or {}).get(rec.session))
        f = eng.observe(rec)
        if f is not None:
            out.append(f)
    return out


def _median(values: Any) -> float:
    s = sorted(values)
    n = len(s)
    if n == 0:
        return 0.0
    mid = n // 2
    return s[mid] if n % 2 else (s[mid - 1] + s[mid]) / 2


def _show_nonfinite(x: float) -> str:
    if math.isnan(x):
        return "NaN"
    return "Infinity" if x > 0 else "-Infinity"
