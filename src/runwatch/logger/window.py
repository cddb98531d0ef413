"""A train window, from the updates a training loop hands `RunLogger.step()` to the record's fields.

One builder for every world size. A window holds the attempted updates since the last close, as
they were passed (device tensors stay on their device). At the close they are converted in one
call (`convert.as_numbers`: the logger's one host-device sync), each rank sums them into a
short row of counts, sums and maxima, the rows of all ranks are gathered (for a single process,
the world of one, its own row), and the record's fields are formed from the gathered rows — the
same on every rank, so every rank takes the same decisions from them. `TrainLine` writes the
record's JSON line from them without the JSON encoder (the same text). The window's size
(`default_window`, `RUNWATCH_WINDOW`) and time limit are defined here too. Standard library only.
"""

from __future__ import annotations

import math
import os
from typing import Any

from ..errors import ConfigError
from ..files import ENV_WINDOW, dumps
from .convert import Scalar, as_numbers

# Attempted updates per train window: one line per 10 steps keeps the log ~50 bytes a step and the
# per-step cost at a list append, while a stall still shows within one window of steps.
DEFAULT_WINDOW = 10
# Overrides the default window of RunLogger and the callbacks (an explicit `window=` wins):
# `runwatch bench` sets it to 1 so that every update is a train record of its own.
WINDOW_ENV = ENV_WINDOW


def default_window(fallback: int | None = DEFAULT_WINDOW) -> int | None:
    """The window when none is passed: `RUNWATCH_WINDOW` when set (an int >= 1), else `fallback`."""
    text = os.environ.get(WINDOW_ENV, "").strip()
    if not text:
        return fallback
    if not text.isascii() or not text.isdigit() or int(text) < 1:
        raise ConfigError(f"{WINDOW_ENV} must be an int >= 1, got {text!r}")
    return int(text)


# A window also closes this long after it opened: with slow steps (minutes each) a record still
# comes at least every minute plus one step, well inside a watchdog's default stall limit.
DEFAULT_MAX_WINDOW_SECONDS = 60.0

# The row each rank contributes to a window's gather (float64): counts, sums and maxima, so that
# the window over all ranks comes from one collective of 14 numbers a rank.
(
    ATTEMPTED,
    UPDATES,
    LOSS_SUM,
    FINITE,
    GRAD_SUM,
    GRAD_MAX,
    CLIPPED,
    SECONDS,
    BAD,
    BAD_VALUE,
    QK_ROWS,
    QK_OBSERVED,
    QK_CLIPPED,
    QK_MAX,
) = range(14)
ROW_SIZE = 14


class OpenWindow:
    """The attempted updates since the last window close, and what `step()` measured of them."""

    __slots__ = ("values", "qk", "lr", "train_seconds", "due")

    def __init__(self, opened: float, due_after: float = math.inf) -> None:
        # loss, grad_norm, clipped, skipped of each attempted update, one after the other (step()
        # adds the four in one `+=`, which a signal cannot split; a close reads them as columns)
        self.values: list[Scalar] = []
        # (index, observed, clipped, max_logit) of updates reporting QK-Clip
        self.qk: list[tuple[int, Scalar | None, Scalar | None, Scalar | None]] = []
        self.lr: Scalar | None = 0.0  # the latest learning rate passed (None counts as 0.0)
        self.train_seconds = 0.0
        # perf_counter from which it closes on time (`due_after` seconds after it opened)
        self.due = opened + due_after

    @property
    def attempted(self) -> int:
        """Attempted updates in the window."""
        return len(self.values) >> 2

    def convert(self) -> WindowValues:
        """Every value of the window as host numbers, in one conversion (one sync per device)."""
        values = self.values
        n4 = len(values)
        extra: list[Scalar] = [0.0 if self.lr is None else self.lr]
        for _, o, c, m in self.qk:
            extra += (0 if o is None else o, 0 if c is None else c, math.nan if m is None else m)
        flat = as_numbers(values + extra)
        qk = []
        if self.qk:
            qk_flat = flat[n4 + 1 :]
            qk = [(e[0], qk_flat[3 * j], qk_flat[3 * j + 1], qk_flat[3 * j + 2]) for j, e in enumerate(self.qk)]
        return WindowValues(flat[0:n4:4], flat[1:n4:4], flat[2:n4:4], flat[3:n4:4], float(flat[n4]), qk)


class WindowValues:
    """A window's values as host numbers (floats; Python ints and bools as they were passed):
    per-update lists, the learning rate (a float), the QK-Clip entries."""

    __slots__ = ("losses", "grads", "clipped", "skips", "lr", "qk")

    def __init__(
        self,
        losses: list[float],
        grads: list[float],
        clipped: list[float],
        skips: list[float],
        lr: float,
        qk: list[tuple[int, float, float, float]],
    ) -> None:
        self.losses, self.grads, self.clipped, self.skips, self.lr, self.qk = losses, grads, clipped, skips, lr, qk


def window_row(v: WindowValues, n: int, train_seconds: float) -> list[float]:
    """This rank's row for the first `n` attempted updates of its window. Its entry BAD is the index
    of the first non-finite loss among them (n when there is none)."""
    losses, grads, clipped, skips = v.losses, v.grads, v.clipped, v.skips
    if n < len(losses):  # the updates before a non-finite loss
        losses, grads, clipped, skips = losses[:n], grads[:n], clipped[:n], skips[:n]
    total = sum(losses)
    if total - total == 0.0:  # a finite sum: every loss is finite (the common case, one C call)
        bad = n
    else:  # a non-finite loss, or finite ones whose sum overflows
        bad = next((i for i, loss in enumerate(losses) if not math.isfinite(loss)), n)
    if any(skips):
        ok = [i for i in range(n) if not skips[i]]
        ok_losses, ok_clipped = [losses[i] for i in ok], [clipped[i] for i in ok]
    else:  # the common case: every attempt an update
        ok_losses, ok_clipped = losses, clipped
    total = sum(grads)
    finite = grads if total - total == 0.0 else [g for g in grads if math.isfinite(g)]
    row = [
        float(n),
        float(len(ok_losses)),
        math.fsum(ok_losses) if bad >= n else 0.0,
        float(len(finite)),
        math.fsum(finite),
        float(max(finite, default=0.0)),
        float(len(ok_clipped) - ok_clipped.count(0.0)),
        float(train_seconds),
        float(bad),
        v.losses[bad] if bad < n else 0.0,
        0.0,
        0.0,
        0.0,
        math.nan,
    ]
    qk = [q for q in v.qk if q[0] < n] if v.qk else None
    if qk:
        logits = [q[3] for q in qk if math.isfinite(q[3])]
        row[QK_ROWS:] = (
            float(len(qk)),
            math.fsum(q[1] for q in qk),
            math.fsum(q[2] for q in qk),
            float(max(logits, default=math.nan)),
        )
    return row


def columns(rows: list[list[float]]) -> list[tuple[float, ...]]:
    """The gathered rows as columns: `columns(rows)[k]` holds entry k of every rank's row."""
    return list(zip(*rows))


def window_fields(
    col: list[tuple[float, ...]], attempted: int, tokens_per_attempt: int, lr: float, qk_threshold: float | None
) -> dict[str, Any] | None:
    """The train record's fields from the gathered rows' columns, or None when the window holds no
    successful update (skipped attempts wait for one). Over ranks: loss the mean, skips and
    non-finite norms the max, train_seconds the slowest rank's; a world of one is the same sums."""
    skipped = int(attempted - min(col[UPDATES]))
    updates = attempted - skipped
    if updates <= 0:
        return None
    if not math.isfinite(lr) or lr < 0:
        raise ConfigError(f"RunLogger.step: lr must be a finite number >= 0, got {lr}")
    local_updates = math.fsum(col[UPDATES])
    finites = col[FINITE]
    finite = math.fsum(finites)
    if min(finites) > 0:  # every rank had a finite norm (the common case)
        grad_max = max(col[GRAD_MAX])
    else:  # a rank without one has no maximum
        grad_max = max((g for g, f in zip(col[GRAD_MAX], finites) if f > 0), default=0.0)
    fields: dict[str, Any] = {
        "updates": updates,
        "skipped": skipped,
        "attempted": attempted,
        "tokens": tokens_per_attempt * attempted,
        "train_seconds": max(max(col[SECONDS]), 1e-9),
        "loss": math.fsum(col[LOSS_SUM]) / local_updates,
        "lr": lr,
        "grad_norm": {"mean": math.fsum(col[GRAD_SUM]) / finite if finite else 0.0, "max": grad_max},
        "nonfinite_grad_norms": int(attempted - min(finites)),
        "grad_clipped_fraction": min(1.0, math.fsum(col[CLIPPED]) / local_updates),
    }
    if max(col[QK_ROWS]) > 0:
        observed = int(sum(col[QK_OBSERVED]))
        logits = [m for m in col[QK_MAX] if math.isfinite(m)]
        fields["qk_clip"] = {
            "threshold": qk_threshold,
            "observed_head_updates": observed,
            "clipped_head_updates": min(int(sum(col[QK_CLIPPED])), observed),
            "max_logit": max(logits) if logits else None,
        }
    return fields


# The keys of window_fields() in its order, without the optional qk_clip: the shape TrainLine formats.
TRAIN_FIELDS = (
    "updates",
    "skipped",
    "attempted",
    "tokens",
    "train_seconds",
    "loss",
    "lr",
    "grad_norm",
    "nonfinite_grad_norms",
    "grad_clipped_fraction",
)


class TrainLine:
    """The JSON line (without its newline) of a train record of one session, formatted directly.

    It is the very text `schema.dumps` makes of the record's dict (`RunLogger._record_at`): the same
    keys in the same order, floats and ints as `repr` writes them (as the JSON encoder does).
    Encoding that dict was a third of a window close; this costs the floats' `repr` and one
    f-string. Any other shape (QK-Clip, a key added to `window_fields`, a null tokens_per_second)
    or a non-finite float gets None, and the caller encodes the dict with `dumps`, which refuses
    NaN and Infinity: what may be written is still decided once. tests/test_window.py compares the
    two on random windows.
    """

    __slots__ = ("_head", "_memory", "_tail")

    def __init__(self, run_id: str, session_id: str) -> None:
        # '{"run_id":"r-...","session_id":"s-...","event":"train","step":' (the ids encoded by dumps)
        self._head = dumps({"run_id": run_id, "session_id": session_id, "event": "train", "step": 0})[:-2]
        self._memory: dict[str, int] = {}  # the latest memory, and the line's end that writes it
        self._tail = "}"

    def __call__(
        self,
        step: int,
        now: float,
        f: dict[str, Any],
        session: tuple[float, int, float | None, float],
        memory: dict[str, int],
    ) -> str | None:
        """The line of the record at `step`, written at `now`, of `window_fields` `f`, with
        `session` = (elapsed_seconds, tokens, tokens_per_second, profiling_seconds) and `memory`."""
        elapsed, tokens, per_second, profiling = session
        if per_second is None or len(f) != len(TRAIN_FIELDS):  # (a key renamed fails below, loud)
            return None
        g = f["grad_norm"]
        floats = (now, f["train_seconds"], f["loss"], f["lr"], g["mean"], g["max"], f["grad_clipped_fraction"])
        total = sum(floats) + elapsed + per_second + profiling
        if total - total != 0.0:  # a non-finite float (or a sum past the largest): dumps() decides
            return None
        if memory != self._memory:  # peaks change seldom: the same end as the last line's, mostly
            mem = ",".join([f'"{k}":{v!r}' for k, v in memory.items()])  # (keys of memory_peaks: plain)
            self._memory, self._tail = memory, f',"memory":{{{mem}}}}}' if memory else "}"
        return (
            f'{self._head}{step!r},"time":{now!r},"updates":{f["updates"]!r},"skipped":{f["skipped"]!r},'
            f'"attempted":{f["attempted"]!r},"tokens":{f["tokens"]!r},"train_seconds":{f["train_seconds"]!r},'
            f'"loss":{f["loss"]!r},"lr":{f["lr"]!r},"grad_norm":{{"mean":{g["mean"]!r},"max":{g["max"]!r}}},'
            f'"nonfinite_grad_norms":{f["nonfinite_grad_norms"]!r},'
            f'"grad_clipped_fraction":{f["grad_clipped_fraction"]!r},"session":{{"elapsed_seconds":{elapsed!r},'
            f'"tokens":{tokens!r},"tokens_per_second":{per_second!r},"profiling_seconds":{profiling!r}}}{self._tail}'
        )
