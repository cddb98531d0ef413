"""What every record rule builds on (docs/WATCHDOG.md, "Rules on records").

Each rule is a small class with one method, `look(record)`, that says whether its condition holds
at that record (a message), does not hold (None), or that the rule does not look at this record
(`SKIP`: its condition is neither re-evaluated nor cleared there). `rules.Rules` runs them in order
and turns messages into findings; a rule never prints or exits. Everything a rule remembers is
plain JSON (`state_dict()` / `load_state_dict()`), so a watch can be saved and resumed.

The rules of one session share a `SessionFacts`: where the session started, its `max_steps`
when known, and its reference loss (the median of its first train losses), against which
`loss_spike`, `grad_collapse` and `no_progress` scale their limits. `Streak` is a rule that needs
K consecutive records. The helpers every rule module shares (`median`, `slide`, `spread`,
`extend_streak`, `fmt_step`, `show_nonfinite`) are here too. Standard library only.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any, ClassVar

from ..reading import Record
from .declaring import Runbook

# The session's reference loss is the median of its first (up to) this many train losses.
REFERENCE_RECORDS = 20


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


def fmt_value(x: float) -> str:
    """A value as a finding's message prints it: 4 significant digits (`loss 2.303`)."""
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
    """One record rule. A subclass implements `look` and declares, beside it, what `ruleset` and
    `runbook` collect: `kind` (what it reports), `name` (unique among the rules; a kind may have
    two rules, such as train and eval `nonfinite_loss`), `cls` (the kind's verdict class), `severity`
    (its default: `stop` or `warn`) and `runbook` (what it means, what to do). Its options are an
    `OptionGroup` beside it."""

    kind = ""
    name = ""
    cls: ClassVar[str]
    severity: ClassVar[str]
    runbook: ClassVar[Runbook]
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


class Streak(Rule):
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
