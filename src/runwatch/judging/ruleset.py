"""The watchdog's record rules, one small class a rule (docs/WATCHDOG.md, "Rules on records").

Each rule has one method, `look(record)`, that says whether its condition holds at that record
(a message), does not hold (None), or that the rule does not look at this record (`SKIP`: its
condition is neither re-evaluated nor cleared there). `rules.Rules` runs them in order and turns
messages into findings; a rule never prints or exits. Everything a rule remembers is plain JSON
(`state_dict()` / `load_state_dict()`), so a watch can be saved and resumed.

The rules of one session share a `SessionFacts`: where the session started, its `max_steps`
when known, and its reference loss (the median of its first train losses), against which
`loss_spike`, `grad_collapse` and `no_progress` scale their limits. The rules on eval values
(`overfitting`, the metric rules) are in `evalrules`, the rules about learning as a whole
(`no_progress`, `no_signal`) in `progress`; all build on `Rule` here. Standard library only.

Longer than 500 lines on purpose: one short class a train-record rule, beside the base and the
helpers every rule module shares; a rule's condition and its message are read together.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from ..reading.records import Record

__all__ = [
    "CLASSES",
    "DEFAULT_SEVERITY",
    "SEVERITIES",
    "verdict_class",
    "SKIP",
    "Skip",
    "Look",
    "Rule",
    "SessionFacts",
    "REFERENCE_RECORDS",
    "SPIKE_MIN_HISTORY",
    "GRAD_MIN_HISTORY",
    "fmt_step",
    "median",
    "slide",
    "spread",
    "extend_streak",
    "show_nonfinite",
]

# The session's reference loss is the median of its first (up to) this many train losses.
REFERENCE_RECORDS = 20
# A loss spike is judged against at least this many earlier train records of the session; fewer
# (but at least one) take the early-spike path (docs/WATCHDOG.md, `loss_spike`).
SPIKE_MIN_HISTORY = 5
# A spike exceeds the window's median by more than this many times its spread (`spread`).
SPIKE_SPREADS = 10.0
# The relative gradient limit, and grad_collapse, need this many finite norms before a record.
GRAD_MIN_HISTORY = 5


class Skip:
    """The type of `SKIP`."""

    def __repr__(self) -> str:
        return "SKIP"


SKIP = Skip()  # `look` result: this rule does not look at this record
Look = str | None | Skip  # what `look` says: a message (the condition holds), None (it does not), SKIP


def fmt_step(step: int | float) -> str:
    """A step as verdict lines print it (`step=120`)."""
    if type(step) is float and step.is_integer():
        return str(int(step))
    return f"{step:g}" if type(step) is float else str(step)


def _g(x: float) -> str:
    return f"{x:.4g}"


def median(values: Any) -> float:
    """The median of a sequence of numbers (0.0 for none)."""
    s = sorted(values)
    n = len(s)
    if n == 0:
        return 0.0
    mid = n // 2
    return float(s[mid]) if n % 2 else (s[mid - 1] + s[mid]) / 2


class SessionFacts:
    """What the rules of one session share: its start step, its `max_steps` (None: unknown), and
    its first train losses, whose median is the reference loss."""

    def __init__(self, start_step: int | float | None = None, max_steps: int | None = None) -> None:
        self.start_step = start_step
        self.max_steps = max_steps
        self.first: list[float] = []  # the session's first (up to REFERENCE_RECORDS) finite train losses
        self._reference: float | None = None

    def add_loss(self, loss: float) -> None:
        """One more finite train loss of the session (after the rules looked at its record)."""
        if len(self.first) < REFERENCE_RECORDS:
            self.first.append(loss)
            self._reference = median(self.first)

    @property
    def reference(self) -> float | None:
        """The median of the session's first (up to 20) train losses; None before any."""
        return self._reference

    def state_dict(self) -> dict[str, Any]:
        return {"first": list(self.first)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.first = [float(x) for x in state.get("first", [])]
        self._reference = median(self.first) if self.first else None


class Rule:
    """One record rule. Subclasses set `kind`, `name` and implement `look`."""

    kind = ""
    name = ""
    _fields: tuple[str, ...] = ()  # the attributes that make up the state
    # The record kinds the rule may look at ("eval values": any record that carries eval values);
    # `Rules` calls a rule only for these, so the others cost nothing. `look` may still SKIP.
    looks_at: frozenset[str] = frozenset({"train"})
    # Set by `look` with the message it returns: the finding is a warning even when the kind stops
    # (`grad_explosion` while the loss stays in its band).
    mild = False

    def __init__(self, opts: Any, facts: SessionFacts | None = None) -> None:
        self.opts = opts
        self.facts = facts if facts is not None else SessionFacts()

    def look(self, rec: Record) -> Look:
        raise NotImplementedError

    def onset(self, rec: Record) -> int | float:
        """The step where the condition that `look` just reported began (default: this record's)."""
        return rec.step

    def resumed(self) -> None:
        """A session that resumes the run goes on with this rule's memory: what is of one session
        only (a streak, the record before) starts over."""

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

    def __init__(self, opts: Any, facts: SessionFacts | None = None) -> None:
        super().__init__(opts, facts)
        self.streak = 0
        self.first: int | float | None = None  # the step of the streak's first record

    def resumed(self) -> None:
        self.streak, self.first = 0, None
        if isinstance(getattr(self, "held", None), list):
            self.held: list[Any] = []

    def step_streak(self, hit: bool, step: int | float) -> bool:
        self.streak, self.first = extend_streak(self.streak, self.first, hit, step)
        return self.streak >= self.patience

    def onset(self, rec: Record) -> int | float:
        return rec.step if self.first is None else self.first


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


# What a finding does (docs/WATCHDOG.md, "Severities"): `stop` ends a watch, drives `supervise` and
# makes `check` exit 7; `warn` is reported and never acted on; `off` turns the rule off.
STOP, WARN, OFF = "stop", "warn", "off"
SEVERITIES = (STOP, WARN, OFF)
# Kinds that warn by default (every other kind stops): a rising eval loss while the task metric
# still improves is a fine-tune's usual course; a log without a loss says nothing about the run.
DEFAULT_SEVERITY: dict[str, str] = {"overfitting": WARN, "no_signal": WARN, "metric_stuck": WARN}


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
                return f"train loss is {show_nonfinite(loss)}"
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
    """Relative: above `--grad-factor` x the median norm of the `--grad-window` records before and
    above the largest of them (a norm the run reached lately and came through is not an explosion;
    a trainer that logs one step's norm is heavy-tailed), once the session has 5 finite norms. The
    records of a streak stay out of the window, so it is judged against the norms before it.
    Absolute (`--grad-max`, when set): from the first record.

    The relative rule's severity follows the loss: a norm out of its band while the loss stays
    inside its own (at most the largest of the window's losses before the streak) is a warning
    (`mild`); a loss that leaves its band, or a loss or norm that is not finite, within the streak
    makes it a stop. Decided at the record where the streak reaches its patience."""

    kind = name = "grad_explosion"
    _fields: tuple[str, ...] = ("window", "losses", "held", "seen", "streak", "first", "loss_out")

    def __init__(self, opts: Any, facts: SessionFacts | None = None) -> None:
        super().__init__(opts, facts)
        self.window: deque[float] = deque(maxlen=opts.grad_window)
        self.losses: deque[float] = deque(maxlen=opts.grad_window)  # the losses beside the window's norms
        self.held: list[list[float]] = []  # [norm, loss] of the streak so far (the window takes them when it ends)
        self.seen = 0  # finite norms of the session so far
        self.loss_out = False  # a loss of the streak left its band (or was not finite)
        self._largest: float | None = None  # the window's largest (None: to be worked out)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self._largest = None

    def look(self, rec: Record) -> Look:
        g = rec.grad_mean
        if rec.kind != "train" or g is None:
            if self.streak and rec.kind == "train" and rec.nonfinite_grads:
                self.loss_out = True  # a norm that is not finite within the streak
            return SKIP
        opts = self.opts
        limit = opts.grad_max
        absolute = limit is not None and g > limit
        relative = False
        window = self.window
        largest = self._largest
        if largest is None and window:
            largest = self._largest = max(window)
        # above the window's largest first (kept as the window moves): the median is then rarely needed
        med = 0.0
        if self.seen >= GRAD_MIN_HISTORY and largest is not None and g > largest:
            med = median(window)
            relative = med > 0 and g > opts.grad_factor * med
        loss = rec.loss
        if relative:
            self.held.append([g, loss if loss is not None and math.isfinite(loss) else math.nan])
        else:
            for x, y in self.held:  # a streak that ended: its norms are part of the run's band now
                largest = slide(window, x, largest, True)
                if y == y:
                    self.losses.append(y)
            self.held = []
            self._largest = slide(window, g, largest, True)
            if loss is not None and math.isfinite(loss):
                self.losses.append(loss)
        self.seen += 1
        if not (absolute or relative) and not self.streak:
            return None  # the common case, without the streak's bookkeeping
        hit = absolute or relative
        if hit:  # the loss beside an out-of-band norm: in its band, or not
            out = loss is not None and (not math.isfinite(loss) or bool(self.losses) and loss > max(self.losses))
            self.loss_out = (self.loss_out and self.streak > 0) or out
        self.patience = opts.grad_patience
        if not self.step_streak(hit, rec.step):
            if not hit:
                self.loss_out = False
            return None
        self.mild = not absolute and not self.loss_out  # an absolute limit the user set always stops
        if absolute:
            return f"gradient norm {_g(g)} > {_g(limit)} for {self.streak} consecutive train records"
        return (
            f"gradient norm {_g(g)} > {_g(opts.grad_factor)} x median {_g(med)} of the previous "
            f"{len(window)} train records (and above their largest) for {self.streak} consecutive train records"
            + ("; the loss stayed in its band" if self.mild else "")
        )


class GradCollapse(_Streak):
    """Absolute (`--grad-min`), judged after the session's first 5 finite norms and only while the
    loss is above half the reference loss: a converged model's gradients are small by nature."""

    kind = name = "grad_collapse"
    _fields: tuple[str, ...] = ("seen", "streak", "first")

    def __init__(self, opts: Any, facts: SessionFacts | None = None) -> None:
        super().__init__(opts, facts)
        self.seen = 0

    def look(self, rec: Record) -> Look:
        g = rec.grad_mean
        if rec.kind != "train" or g is None:
            return SKIP
        self.seen += 1
        if self.seen <= GRAD_MIN_HISTORY:
            return SKIP
        if g >= self.opts.grad_min and not self.streak:
            return None  # the common case, without the streak's bookkeeping
        ref = self.facts.reference
        loss = rec.loss
        learning = ref is None or loss is None or not loss <= 0.5 * ref  # a NaN loss is not "low"
        self.patience = self.opts.grad_patience
        if self.step_streak(learning and g < self.opts.grad_min, rec.step):
            return f"gradient norm {_g(g)} < {_g(self.opts.grad_min)} for {self.streak} consecutive train records"
        return None


class LossSpike(_Streak):
    """K consecutive losses above F x the median of the records before, by at least E x the
    reference loss, and above the largest of them (the run's own band: a heavy-tailed per-batch
    loss reaches its window's largest often, two records in a row far above it rarely); with fewer
    than 5 records before, against those it has and F x their lowest. The records of a streak stay
    out of the window, so each is judged against the losses before the streak."""

    kind = name = "loss_spike"
    _fields: tuple[str, ...] = ("window", "held", "seen", "lowest", "streak", "first")

    def __init__(self, opts: Any, facts: SessionFacts | None = None) -> None:
        super().__init__(opts, facts)
        self.window: deque[float] = deque(maxlen=opts.spike_window)
        self.held: list[float] = []  # the losses of the streak so far (the window takes them when it ends)
        self.seen = 0
        self.lowest: float | None = None  # the lowest finite train loss of the session so far
        self._smallest: float | None = None  # the window's smallest (None: to be worked out)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self._smallest = None

    def look(self, rec: Record) -> Look:
        loss = rec.loss
        if rec.kind != "train" or loss is None or not math.isfinite(loss):
            return SKIP
        result: Look = SKIP
        hit = False
        if self.seen:  # a session's first record is never a spike
            opts = self.opts
            factor = opts.spike_factor
            # the median is at least the window's smallest: a loss below F x that is no spike (and cheap)
            smallest = self._smallest
            if smallest is None:
                smallest = self._smallest = min(self.window)
            if loss <= factor * smallest:
                med = 0.0
            else:
                med = median(self.window)
                hit = med > 0 and loss > factor * med and loss > max(self.window)
            if hit and self.seen < SPIKE_MIN_HISTORY:  # a normal fast first descent is not a spike
                hit = loss > factor * (self.lowest or 0.0)
            if hit:  # a spike that matters: by at least E x the session's reference loss
                ref = self.facts.reference
                hit = loss - med >= (opts.spike_min_excess * ref if ref is not None and ref > 0 else 0.0)
            if hit and len(self.window) >= SPIKE_MIN_HISTORY:  # and far outside the run's own spread
                hit = loss - med > SPIKE_SPREADS * spread(self.window, med)
            self.streak, self.first = extend_streak(self.streak, self.first, hit, rec.step)
            result = None
            if self.streak >= opts.spike_patience:
                result = (
                    f"loss {_g(loss)} > {_g(opts.spike_factor)} x median {_g(med)} of the previous "
                    f"{len(self.window)} train records for {self.streak} consecutive records"
                )
        if hit:
            self.held.append(loss)
        else:
            if self.held:  # a streak that ended: its losses are part of the run's band now
                for x in self.held:
                    self._smallest = slide(self.window, x, self._smallest, False)
                self.held = []
            self._smallest = slide(self.window, loss, self._smallest, False)
        self.seen += 1
        if self.lowest is None or loss < self.lowest:
            self.lowest = loss
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

    def __init__(self, opts: Any, facts: SessionFacts | None = None) -> None:
        super().__init__(opts, facts)
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
    """Throughput judged over spans of at least `--throughput-span` seconds of training: records
    are merged until they cover it, so a log with one line per update is judged like a windowed
    one. The baseline is the median over the spans within the baseline steps (the session's first
    record left out; a baseline shorter than one span is one span); patience counts spans."""

    kind = name = "throughput_drop"
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
                f"throughput {_g(span)} < {_g(limit)} ((1 - {_g(opts.throughput_drop)}) x baseline "
                f"{_g(self.baseline)}) for {self.streak} consecutive spans of >= {_g(opts.throughput_span)} s"
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


def spread(values: Any, med: float) -> float:
    """The robust spread of `values` about their median `med`: the median absolute deviation."""
    return median([abs(x - med) for x in values])


def slide(window: deque[float], x: float, extreme: float | None, largest: bool) -> float | None:
    """Append `x` to `window` and return the window's largest (or smallest) value kept up to date
    without scanning it (`max` of 20 floats costs more than all the rest of a rule); None when the
    value that left was the extreme: the caller works it out again when it needs it."""
    if extreme is not None and window.maxlen is not None and len(window) == window.maxlen and window[0] == extreme:
        window.append(x)  # the extreme leaves: x is the new one if it is at least as extreme
        return x if (x >= extreme if largest else x <= extreme) else None
    window.append(x)
    if extreme is None:
        return x if len(window) == 1 else None
    return x if (x > extreme if largest else x < extreme) else extreme


def extend_streak(
    streak: int, first: int | float | None, hit: bool, step: int | float
) -> tuple[int, int | float | None]:
    """A streak counter and the step of its first record, after one more looked-at record."""
    if not hit:
        return 0, None
    return streak + 1, step if streak == 0 else first


def show_nonfinite(x: float) -> str:
    """How a non-finite value reads in a message: NaN, Infinity or -Infinity."""
    if math.isnan(x):
        return "NaN"
    return "Infinity" if x > 0 else "-Infinity"
