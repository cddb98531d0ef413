"""The rules about a session's learning as a whole: `no_progress` and `no_signal`.

- `no_progress` (stop): a run whose train loss never fell from its start. Once it has reached
  `--progress-after` of its `max_steps` (unknown: `--progress-after-records` train records) and
  has at least 2 x `--progress-window` train records, the median of its last window is not below
  (1 - `--progress-min-drop`) x the median of its first losses: its first records, before it
  could have learned — the first 5 % of the records seen (at least 1, at most 20), and never past
  the record where their median first fell by the drop. A run that learned in its first few
  records and sits at its noise floor since fell from its start; a frozen or cycling loss did
  not. `check` judges it once more at the end of each session on its whole length (its last
  half when shorter). A session that resumes the run keeps its first losses (`rules.Rules`).
- `no_signal` (warn): a log that gives no train loss at all (`check`: the whole log; `watch`: its
  first 50 records), naming the keys it saw so that `--map loss=KEY` can fix it.

Each is declared (class, severity, runbook) beside its code, `no_progress`'s options too.
Standard library only.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

from ..options import INT_1, OPEN_01, option
from ..reading import Record, original_keys
from .declaring import FATAL, FRACTION, RECORD_COMMANDS, STOP, WARN, OptionGroup, Runbook
from .rulebase import REFERENCE_RECORDS, SKIP, Look, Rule, SessionFacts, fmt_step, fmt_value, median, slide, spread

# `watch` says `no_signal` after this many records without a train loss.
NO_SIGNAL_RECORDS = 50
# A fall is progress when it is also more than this many times the spread (the median absolute
# deviation) of the last window: outside the run's own noise (the difference of two medians of 20
# noisy records varies by about 0.6 of it).
PROGRESS_SPREADS = 2.0
# The run's first losses are this share of the records seen (at least 1, at most REFERENCE_RECORDS).
PROGRESS_HEAD_SHARE = 0.05
# The end-of-session judgment of a short session compares its halves, of at least this many records.
PROGRESS_MIN_HALF = 8
# Keys named in a no_signal message (more are summed up as "...").
SHOWN_KEYS = 12
KEPT_KEYS = 64


def head_length(losses: list[float], count: int, drop: float) -> int:
    """How many of the run's first `losses` are its start: 5 % of the `count` records seen (at
    least 1, at most 20), cut at the first record whose loss fell below (1 - drop) x the first
    loss (that record included)."""
    n = max(1, min(REFERENCE_RECORDS, len(losses), round(PROGRESS_HEAD_SHARE * count)))
    floor = (1 - drop) * losses[0]
    for i in range(1, n):
        if losses[i] < floor:
            return i + 1
    return n


@dataclass(frozen=True)
class NoProgressOptions(OptionGroup):
    """`no_progress`'s options (`--progress-after` is also `metric_stuck`'s)."""

    progress_after: float = option(
        0.25,
        FRACTION,
        "no_progress is judged once the session has reached F of its max_steps",
        metavar="F",
        commands=RECORD_COMMANDS,
    )
    # 500: without max_steps a slow start cannot be told from a stuck run (a contrastive model whose
    # loss falls 2.5 % in its first 200 records and 10 % by its 1500th); wait longer.
    progress_after_records: int = option(
        500,
        INT_1,
        "no_progress, when max_steps is unknown: judged after N train records",
        metavar="N",
        commands=RECORD_COMMANDS,
    )
    progress_window: int = option(
        20,
        INT_1,
        "no_progress: the median of the last W train losses against that of the first (up to 20); "
        "needs 2 x W train records",
        metavar="W",
        commands=RECORD_COMMANDS,
    )
    progress_min_drop: float = option(
        0.05,
        OPEN_01,
        "no_progress: the last window's median is not below (1-D) x the first's",
        metavar="D",
        commands=RECORD_COMMANDS,
    )


class NoProgress(Rule):
    kind = name = "no_progress"
    cls = FATAL
    severity = STOP
    runbook = Runbook(
        "past a quarter of the run, the median of the last train losses is not 5% below the median of the run's "
        "first losses (before it could have learned): the run never learned",
        "check the learning rate (too low, or a scheduler stuck at 0), that the optimizer steps the model's "
        "parameters (frozen layers, a detached loss), that labels match inputs, and that the loss is the one you "
        "mean; for a run that starts slowly by nature, raise `--progress-after` or set `--max-steps`",
    )
    _fields: tuple[str, ...] = ("head", "tail_steps", "tail", "count")

    def __init__(self, opts: Any, facts: SessionFacts | None = None) -> None:
        super().__init__(opts, facts)
        self.head: list[list[float]] = []  # [step, loss] of the run's first (up to 20) train losses
        self.tail: deque[float] = deque(maxlen=opts.progress_window)  # the losses of its last window
        self.tail_steps: deque[int | float] = deque(maxlen=opts.progress_window)  # and their steps
        self.count = 0
        self._largest: float | None = None  # the last window's largest loss (None: to be worked out)
        self.onset_step: int | float | None = None  # the first step of the last window judged
        self._heads: dict[int, tuple[int, float]] = {}  # head share -> (length, median) once the head is full

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.head = [list(x) for x in self.head]
        self._heads = {}
        self._largest = None

    def onset(self, rec: Record) -> int | float:
        return rec.step if self.onset_step is None else self.onset_step

    def look(self, rec: Record) -> Look:
        loss = rec.loss
        if loss is None or not math.isfinite(loss):
            return SKIP
        self.count = count = self.count + 1
        if len(self.head) < REFERENCE_RECORDS:
            self.head.append([rec.step, loss])
        self._largest = slide(self.tail, loss, self._largest, True)
        self.tail_steps.append(rec.step)
        opts = self.opts
        w = opts.progress_window
        if count < 2 * w:
            return SKIP
        max_steps = self.facts.max_steps
        if max_steps is not None:
            if rec.step < opts.progress_after * max_steps:
                return SKIP
        elif count < opts.progress_after_records:
            return SKIP
        first = self._first()[1]
        largest = self._largest
        if largest is None:
            largest = self._largest = max(self.tail)
        if largest < (1 - opts.progress_min_drop) * first:
            return None  # the whole last window below the first losses' median: progress (the common case, cheap)
        return self._judge(w)

    def final(self) -> str | None:
        """The judgment at the end of the session, on its whole length (its last half when short)."""
        w = min(self.opts.progress_window, self.count // 2)
        if w < min(PROGRESS_MIN_HALF, self.opts.progress_window):
            return None
        return self._judge(w)

    def _first(self) -> tuple[int, float]:
        """(how many, their median) of the run's first losses, as the records seen so far say."""
        key = max(1, min(REFERENCE_RECORDS, round(PROGRESS_HEAD_SHARE * self.count)))
        got = self._heads.get(key)
        if got is None:
            losses = [x[1] for x in self.head]
            n = head_length(losses, self.count, self.opts.progress_min_drop)
            got = (n, median(losses[:n]))
            if len(self.head) >= key:
                self._heads[key] = got
        return got

    def _judge(self, w: int) -> str | None:
        n, first = self._first()
        losses: Any = self.tail
        steps: Any = self.tail_steps
        if w < len(losses):  # the end of a short session: its last half
            losses, steps = list(losses)[-w:], list(steps)[-w:]
        drop = self.opts.progress_min_drop
        if max(losses) < (1 - drop) * first:  # the whole window below: progress (and cheap)
            return None
        last = median(losses)
        # fallen by the drop, and by more than the run's own noise (a loss cycling through a few
        # values, whose medians differ by chance, has not fallen)
        below = last < (1 - drop) * first
        noise = spread(losses, last)
        if below and first - last > PROGRESS_SPREADS * noise:
            return None
        self.onset_step = steps[0]
        head = f"the median {fmt_value(first)} over steps {fmt_step(self.head[0][0])}-{fmt_step(self.head[n - 1][0])}"
        where = f"median train loss {fmt_value(last)} over steps {fmt_step(steps[0])}-{fmt_step(steps[-1])}"
        if below:
            return (
                f"{where} is below {head} by no more than {fmt_value(PROGRESS_SPREADS)} x its spread {fmt_value(noise)}: "
                "the loss has not fallen (it moves within its own noise)"
            )
        return f"{where} is not below (1 - {fmt_value(drop)}) x {head}: the loss has not fallen"


class NoSignal(Rule):
    """No train loss in the log: after `limit` records (watch), or at its end (`final`, check)."""

    kind = name = "no_signal"
    cls = FATAL
    severity = WARN
    runbook = Runbook(
        "the log gives no train loss (the finding names the keys it saw), or the format in use reads no record "
        "of a log that holds something (it names the format, the file and what it saw): nothing can be judged",
        "point one key at the loss with `--map loss=KEY` (a text log: a `(?P<loss>...)` group in `--pattern`), "
        "or log a key named `loss`; for no record at all, give the log's real format (`--format`, `--log`)",
    )
    # A train record always carries a loss: `Rules` marks `loss_seen` for it without a call.
    looks_at = frozenset({"eval", "checkpoint", "end", "fatal", "other"})
    _fields: tuple[str, ...] = ("records", "keys", "loss_seen", "log")

    def __init__(self, opts: Any, facts: SessionFacts | None = None, limit: int | None = NO_SIGNAL_RECORDS) -> None:
        super().__init__(opts, facts)
        self.limit = limit
        self.records = 0
        self.keys: list[str] = []
        self.loss_seen = False
        self.log = ""

    def look(self, rec: Record) -> Look:
        if self.loss_seen:
            return SKIP
        if rec.kind == "train" and rec.loss is not None:
            self.loss_seen = True
            return SKIP
        self.records += 1
        if not self.log:
            self.log = rec.where.split(":", 1)[0]
        if rec.raw and len(self.keys) < KEPT_KEYS:
            keys = self.keys
            for k in original_keys(rec.raw):
                if k != "step" and k != "t" and k not in keys:
                    keys.append(k)
        if self.limit is not None and self.records >= self.limit:
            return self.message()
        return SKIP

    def final(self) -> str | None:
        """At the end of the log: the finding when no record gave a train loss."""
        return self.message() if self.records and not self.loss_seen else None

    def message(self) -> str:
        shown = ", ".join(self.keys[:SHOWN_KEYS]) + (", ..." if len(self.keys) > SHOWN_KEYS else "")
        where = f" in {self.log}" if self.log else ""
        return f"no train loss{where}; keys seen: {shown or 'none'}; use --map loss=KEY"
