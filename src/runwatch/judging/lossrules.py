"""The record rules on the train loss (docs/WATCHDOG.md, "Rules on records"): `nonfinite_loss`,
`loss_spike`, `loss_collapse` and `loss_at_chance`, each with its declarations (class, severity,
runbook) and its options beside it. Built on `rulebase`. Standard library only.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

from ..options import GREATER_1, INT_0, INT_1, NON_NEGATIVE, NUMBER, option
from ..reading import Record
from .declaring import DIVERGENCE, FATAL, RECORD_COMMANDS, STOP, OptionGroup, Runbook
from .rulebase import (
    SKIP,
    Look,
    Rule,
    SessionFacts,
    Streak,
    extend_streak,
    fmt_value,
    median,
    show_nonfinite,
    slide,
    spread,
)

# A loss spike is judged against at least this many earlier train records of the session; fewer
# (but at least one) take the early-spike path (docs/WATCHDOG.md, `loss_spike`).
SPIKE_MIN_HISTORY = 5
# A spike exceeds the window's median by more than this many times its spread (`spread`).
SPIKE_SPREADS = 10.0


class NonfiniteLoss(Rule):
    kind = name = "nonfinite_loss"
    cls = DIVERGENCE
    severity = STOP
    runbook = Runbook(
        "a train or eval loss was NaN, infinite or null, a `FATAL` record, or a session that ended `nonfinite_loss`",
        "roll back to a checkpoint before the onset, skip the batches from there to the anomaly, perhaps lower "
        "the learning rate (`runwatch supervise` does the roll-back)",
    )
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


@dataclass(frozen=True)
class LossSpikeOptions(OptionGroup):
    """`loss_spike`'s options."""

    spike_factor: float = option(
        3.0,
        GREATER_1,
        "loss_spike: loss above F x the median of the records before",
        metavar="F",
        commands=RECORD_COMMANDS,
    )
    spike_window: int = option(
        20, INT_1, "loss_spike: the median is over the W train records before", metavar="W", commands=RECORD_COMMANDS
    )
    spike_patience: int = option(
        2, INT_1, "loss_spike needs K consecutive spiking train records", metavar="K", commands=RECORD_COMMANDS
    )
    # 0.1: what a spike must undo of where the session started; heavy-tailed per-batch losses near
    # zero are told apart by the run's own band (a spike is above the window's largest), not by this.
    spike_min_excess: float = option(
        0.1,
        NON_NEGATIVE,
        "loss_spike: the loss must exceed the median by at least E x the reference loss (the median "
        "of the session's first 20 train losses)",
        metavar="E",
        commands=RECORD_COMMANDS,
    )


class LossSpike(Streak):
    """K consecutive losses above F x the median of the records before, by at least E x the
    reference loss, and above the largest of them (the run's own band: a heavy-tailed per-batch
    loss reaches its window's largest often, two records in a row far above it rarely); with fewer
    than 5 records before, against those it has and F x their lowest. The records of a streak stay
    out of the window, so each is judged against the losses before the streak."""

    kind = name = "loss_spike"
    cls = DIVERGENCE
    severity = STOP
    runbook = Runbook(
        "`--spike-patience` train records in a row had a loss far above the median of those before",
        "roll back before the onset and skip those batches (`runwatch supervise` does it); look at the data "
        "of those steps",
    )
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
                    f"loss {fmt_value(loss)} > {fmt_value(opts.spike_factor)} x median {fmt_value(med)} of the previous "
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


@dataclass(frozen=True)
class LossCollapseOptions(OptionGroup):
    """`loss_collapse`'s options."""

    collapse_patience: int = option(
        5,
        INT_1,
        "loss_collapse: K consecutive train records with loss exactly 0",
        metavar="K",
        commands=RECORD_COMMANDS,
    )


class LossCollapse(Streak):
    kind = name = "loss_collapse"
    cls = FATAL
    severity = STOP
    runbook = Runbook(
        "`--collapse-patience` train records in a row had a loss of exactly 0",
        "stop and look for a label or masking bug or a memorised data set: a relaunch repeats it",
    )

    def look(self, rec: Record) -> Look:
        if rec.kind != "train" or rec.loss is None:
            return SKIP
        self.patience = self.opts.collapse_patience
        if self.step_streak(rec.loss == 0, rec.step):
            return f"train loss exactly 0 for {self.streak} consecutive train records"
        return None


@dataclass(frozen=True)
class LossAtChanceOptions(OptionGroup):
    """`loss_at_chance`'s options."""

    chance_loss: float | None = option(
        None,
        NUMBER,
        "loss_at_chance: the loss at chance level (binary cross-entropy: 0.693); the rule is off when unset",
        none=True,
        metavar="X",
        commands=RECORD_COMMANDS,
    )
    chance_after_step: int = option(
        400, INT_0, "loss_at_chance looks only at train records from step N", metavar="N", commands=RECORD_COMMANDS
    )
    chance_patience: int = option(
        3,
        INT_1,
        "loss_at_chance: the last K train records all at or above chance",
        metavar="K",
        commands=RECORD_COMMANDS,
    )
    chance_tolerance: float = option(
        0.02, NON_NEGATIVE, "loss_at_chance: at chance means a loss >= X - T", metavar="T", commands=RECORD_COMMANDS
    )


class LossAtChance(Rule):
    kind = name = "loss_at_chance"
    cls = FATAL
    severity = STOP
    runbook = Runbook(
        "the last train losses stay at or above `--chance-loss`: the model learns nothing",
        "stop and look at the labels, the data pipeline and the learning rate: a relaunch repeats it",
    )
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
                f"loss {fmt_value(rec.loss)} >= {fmt_value(floor)} (chance {fmt_value(x)} - tolerance {fmt_value(self.opts.chance_tolerance)}) "
                f"for the last {len(self.flags)} train records"
            )
        return None
