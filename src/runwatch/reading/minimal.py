"""Minimal telemetry's keys and `--map`, and how its steps and sessions are told.

A minimal-telemetry log (docs/WATCHDOG.md, "What is read") names neither its sessions nor, at
times, its step or its loss; `MinimalSteps`, a base of `parsing.RecordParser`, keeps what tells
them from the records themselves:

- Sessions: a train record whose step does not exceed the previous train record's starts a new
  one (a relaunch), keyed `session-1`, `session-2`, ...; not when it repeats one of the latest
  steps with about its loss (a second writer's copy: INTERLEAVED_STEPS, INTERLEAVED_TOLERANCE),
  nor a record at the same step of a log stepping by epoch or whose sessions are its files
  (TensorBoard, MLflow: `same_step_continues`). `new_session()` is the reader's word that one
  starts (a new event file, a new run).
- Steps: `step`, else an integer step key (`readers.keys.ALIASES`: `global_step`, `iter`, ...),
  else the record's epoch, else its record number (docs/FORMATS.md).
- Loss: `loss`, else the one train key containing `loss` (CatBoost's `Logloss`).

`parse_maps` reads `--map CANONICAL=SOURCE`. Standard library only.
"""

from __future__ import annotations

import math
from typing import Any

from ..errors import UsageError
from .readers.keys import ALIASES, EVAL_PREFIXES

# The canonical keys of minimal telemetry (docs/WATCHDOG.md, "What is read"); `eval_<metric>` is any key starting eval_.
MINIMAL_KEYS = ("step", "t", "loss", "lr", "learning_rate", "grad_norm", "sps", "eval_loss", "FATAL")
# A log written by two processes at once repeats a step among its last few, with about its loss.
INTERLEAVED_STEPS = 4
INTERLEAVED_TOLERANCE = 0.05
# Keys that hold eval values (readers.keys: `eval/`, `val/`, `val_`, `validation/`), never the train loss.
_EVAL_KEY_PREFIXES = ("eval_", *EVAL_PREFIXES)


def parse_maps(items: list[str] | tuple[str, ...] | None) -> dict[str, str]:
    """`["step=iter", "loss=train/loss"]` → {"step": "iter", "loss": "train/loss"}; UsageError if bad."""
    maps: dict[str, str] = {}
    for item in items or ():
        if not isinstance(item, str) or "=" not in item:
            raise UsageError(f"watch.map must be CANONICAL=SOURCE, got {item!r}")
        canon, source = item.split("=", 1)
        if not (canon in MINIMAL_KEYS or (canon.startswith("eval_") and len(canon) > 5)):
            raise UsageError(
                f"watch.map: {canon!r} is not a minimal telemetry key "
                f"(expected one of {', '.join(MINIMAL_KEYS)} or eval_<metric>)"
            )
        if not source:
            raise UsageError(f"watch.map: empty SOURCE in {item!r}")
        if canon in maps:
            raise UsageError(f"watch.map: {canon!r} mapped twice")
        maps[canon] = source
    return maps


def is_number(v: object) -> bool:
    """An int or a float (not a bool)."""
    t = type(v)
    return t is float or t is int


class MinimalSteps:
    """The step and session bookkeeping of minimal telemetry (see the module docstring); its
    state is part of `RecordParser.state_dict()`."""

    def __init__(self, name: str, maps: dict[str, str], same_step_continues: bool) -> None:
        self.name = name
        self.maps = maps
        # A train record at the previous one's step continues the session (TensorBoard, MLflow: their
        # sessions are files and runs, and a live watch may apply a step before its last value came).
        self.same_step_continues = same_step_continues
        self.session: str | None = None  # the session of the last record (invalid lines join it)
        self._last_train_step: float | None = None
        self._relaunches = 0
        self._new_session = False  # `new_session()` was called: the next record with values starts one
        self.last_step: int | float = 0  # step of the last parsed record (invalid lines take it)
        # A log without steps (docs/FORMATS.md): None until decided, then "step", "epoch" or "record".
        self.step_by: str | None = None
        self._counted = 0  # records numbered so far, and the last epoch seen (stepping by them)
        self._epoch: int | float = 0
        # The key read as the loss when the log has no `loss` (None: not decided, "": none).
        self.loss_key: str | None = None
        # The key read as the step when the log has no `step` (None: not decided, "": none).
        self.step_key: str | None = None
        # The latest train steps of the session and their losses: a record that repeats one of
        # them with (about) its loss is a second writer's copy, not a relaunch.
        self._recent: list[tuple[int | float, float]] = []
        self.notes: list[str] = []  # things said once on stderr by the command (drained by it)

    def _keyed_step(self, obj: dict[str, Any]) -> int | float | None:
        """The step of a record without `step` from an integer step key (ALIASES: `global_step`,
        `current_steps`, `iter`, ...), which wins over a fractional `epoch`; decided at the first
        record without `step`. A later record without that key is at the last step seen."""
        if self.step_key is None:
            if "step" in self.maps:
                self.step_key = ""
                return None
            for key in ALIASES["step"][1:]:
                v = obj.get(key)
                if type(v) is int or (type(v) is float and v.is_integer()):
                    self.step_key = key
                    self.notes.append(f"{self.name} has no step field: stepping by its {key!r}")
                    break
            else:
                self.step_key = ""
                return None
        v = obj.get(self.step_key)
        return v if v is not None else self.last_step

    def _counted_step(self, obj: dict[str, Any]) -> int | float:
        """The step of a record of a log that has none: its epoch when the log has epochs (the step
        of the last record that had one), else its record number (1, 2, ...)."""
        self._counted += 1
        epoch = obj.get("epoch")
        good = (type(epoch) is int or type(epoch) is float) and math.isfinite(epoch) and epoch >= 0
        if self.step_by is None:
            self.step_by = "epoch" if good else "record"
            by = "its epoch column" if good else "record number"
            self.notes.append(f"{self.name} has no step column or field: stepping by {by}")
        if self.step_by == "epoch":
            if good and epoch is not None:
                self._epoch = int(epoch) if type(epoch) is float and epoch.is_integer() else epoch
            return self._epoch
        return self._counted

    def _pick_loss_key(self, obj: dict[str, Any]) -> None:
        """No `loss` key: when exactly one train key contains `loss` (any case: CatBoost's
        `Logloss`, `train/box_loss`), it is the loss for the rest of the log; several: none is."""
        if "loss" in self.maps:
            self.loss_key = ""
            return
        found = [k for k in obj if "loss" in k.lower() and not k.startswith(_EVAL_KEY_PREFIXES)]
        if len(found) == 1:
            self.loss_key = found[0]
            self.notes.append(f"{self.name} has no loss key: reading the train loss from {found[0]!r}")
        elif found:
            self.loss_key = ""

    def _minimal_session(self, train_step: int | float | None, starts: bool = True, loss: Any = None) -> str:
        if self.session is None:
            self._relaunches = 1
            self.session = "session-1"
        if self._new_session and starts:
            self._new_session = False
            self._relaunches += 1
            self.session = f"session-{self._relaunches}"
            self._last_train_step = None
            self._recent = []
        if train_step is not None:
            last = self._last_train_step
            # stepping by epoch, several train records of one epoch are one session
            same = self.step_by == "epoch" or self.same_step_continues
            if last is not None and (train_step < last or (train_step == last and not same)):
                if self._copy(train_step, loss):
                    return self.session  # a second writer's copy of a recent step: the session goes on
                self._relaunches += 1
                self.session = f"session-{self._relaunches}"
                self._recent = self._recent[-1:]
            self._last_train_step = train_step
            if is_number(loss):
                recent = self._recent
                recent.append((train_step, float(loss)))
                if len(recent) > INTERLEAVED_STEPS + 1:
                    del recent[1]  # the session's first step stays first
        return self.session

    def _copy(self, step: int | float, loss: Any) -> bool:
        """A train record at one of the session's latest steps (INTERLEAVED_STEPS), past its first
        one, with its loss within INTERLEAVED_TOLERANCE: two processes writing one log, not a
        relaunch (which goes back to a checkpoint, or to the start)."""
        if not is_number(loss) or not math.isfinite(loss) or not self._recent:
            return False
        # the session's first step counts only repeated at once (a relaunch goes back to the start)
        recent = self._recent if step == self._last_train_step else self._recent[1:]
        for s, seen in recent:
            if s == step and abs(loss - seen) <= INTERLEAVED_TOLERANCE * max(abs(seen), 1e-12):
                return True
        return False
