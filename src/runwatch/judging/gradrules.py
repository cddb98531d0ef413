"""The record rules on the gradient norm (docs/WATCHDOG.md, "Rules on records"): `nonfinite_grad`,
`grad_explosion` and `grad_collapse`, with their declarations (class, severity, runbook) and the
options they share beside them. Built on `rulebase`. Standard library only.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..options import GREATER_1, INT_1, NON_NEGATIVE, POSITIVE, option
from ..reading import Record
from .declaring import DIVERGENCE, FATAL, RECORD_COMMANDS, STOP, OptionGroup, Runbook
from .rulebase import SKIP, Look, SessionFacts, Streak, fmt_value, median, slide

# The relative gradient limit, and grad_collapse, need this many finite norms before a record.
GRAD_MIN_HISTORY = 5


@dataclass(frozen=True)
class GradOptions(OptionGroup):
    """The gradient rules' options (`grad_patience` is the three rules')."""

    # Relative by default: warm-up norms (286, 67, 52 in a healthy speech fine-tune) and model
    # families whose norms live at 1e5-1e6 make any absolute limit wrong for someone.
    grad_factor: float = option(
        10.0,
        GREATER_1,
        "grad_explosion: pre-clip gradient norm above F x the median of the records before",
        metavar="F",
        commands=RECORD_COMMANDS,
    )
    grad_window: int = option(
        20,
        INT_1,
        "grad_explosion: the median is over the W train records before (judged from the 6th norm)",
        metavar="W",
        commands=RECORD_COMMANDS,
    )
    grad_max: float | None = option(
        None,
        POSITIVE,
        "grad_explosion also when the norm is above X (an absolute limit, judged from the first record)",
        none=True,
        metavar="X",
        commands=RECORD_COMMANDS,
    )
    grad_min: float = option(
        1e-3,
        NON_NEGATIVE,
        "grad_collapse: pre-clip gradient norm below Y (after 5 records, while the loss is above half "
        "the reference loss)",
        metavar="Y",
        commands=RECORD_COMMANDS,
    )
    grad_patience: int = option(
        3,
        INT_1,
        "grad_explosion, grad_collapse and nonfinite_grad need K consecutive train records",
        metavar="K",
        commands=RECORD_COMMANDS,
    )

    def check_together(self) -> None:
        """`--grad-min` below `--grad-max` when both are set."""
        if self.grad_max is not None and self.grad_min >= self.grad_max:
            raise ConfigError(f"watch.grad_min must be < watch.grad_max {self.grad_max:g}, got {self.grad_min:g}")


class NonfiniteGrad(Streak):
    kind = name = "nonfinite_grad"
    cls = DIVERGENCE
    severity = STOP
    runbook = Runbook(
        "`--grad-patience` train records in a row had a non-finite gradient norm",
        "roll back before the onset and skip those batches; check the loss scaling and the learning rate",
    )

    def look(self, rec: Record) -> Look:
        if rec.kind != "train":
            return SKIP
        self.patience = self.opts.grad_patience
        if self.step_streak(rec.nonfinite_grads > 0, rec.step):
            return f"non-finite gradient norms in {self.streak} consecutive train records"
        return None


class GradExplosion(Streak):
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
    cls = DIVERGENCE
    severity = STOP
    runbook = Runbook(
        "`--grad-patience` train records in a row had a gradient norm above the limit",
        "roll back before the onset; lower the learning rate or clip the gradients",
    )
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
            return f"gradient norm {fmt_value(g)} > {fmt_value(limit)} for {self.streak} consecutive train records"
        return (
            f"gradient norm {fmt_value(g)} > {fmt_value(opts.grad_factor)} x median {fmt_value(med)} of the previous "
            f"{len(window)} train records (and above their largest) for {self.streak} consecutive train records"
            + ("; the loss stayed in its band" if self.mild else "")
        )


class GradCollapse(Streak):
    """Absolute (`--grad-min`), judged after the session's first 5 finite norms and only while the
    loss is above half the reference loss: a converged model's gradients are small by nature."""

    kind = name = "grad_collapse"
    cls = FATAL
    severity = STOP
    runbook = Runbook(
        "`--grad-patience` train records in a row had a gradient norm below `--grad-min`",
        "stop and look at the learning rate, the initialization and frozen parameters: a relaunch repeats it",
    )
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
            return f"gradient norm {fmt_value(g)} < {fmt_value(self.opts.grad_min)} for {self.streak} consecutive train records"
        return None
