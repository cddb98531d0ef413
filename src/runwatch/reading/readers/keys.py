"""Other tools' metric names → the canonical keys of minimal telemetry, and values grouped by step.

    keys = KeyMap({"loss": "train/total"})        # --map loss=train/total
    keys.canonical({"step": 3, "train/loss": 0.5, "lr-AdamW": 1e-4, "val_auroc": 0.9})
    # → {"step": 3, "loss": 0.5, "lr": 1e-4, "eval_auroc": 0.9, ...the original keys}

Without `--map`, the common names of TensorBoard, MLflow, Lightning and the Hugging Face
Trainer map to the canonical keys (`ALIASES`, first present wins; `eval/X`, `val/X`, `val_X` →
`eval_X`). A `--map CANONICAL=SOURCE` replaces the aliases of its key: the key is read only from
SOURCE. The original keys stay in the record (rules read only canonical ones).

`StepGrouper` turns values that come one at a time (TensorBoard scalars, MLflow metric rows) into
one train record and one eval record a step. Standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .base import BaseReader, Item

# canonical key -> the names read for it when no --map names it, in order (first present wins)
ALIASES: dict[str, tuple[str, ...]] = {
    # integer step keys (they win over a fractional `epoch`: LLaMA-Factory's `current_steps`, W&B's `_step`)
    "step": ("step", "global_step", "trainer/global_step", "current_steps", "iteration", "iter", "it", "Step", "_step"),
    "t": ("t", "time", "wall_time"),
    "loss": ("loss", "train/loss", "train_loss", "train_loss_step", "train/loss_step"),
    "lr": ("lr", "learning_rate", "train/learning_rate", "train/lr"),  # then any `lr-*` (Lightning)
    "grad_norm": ("grad_norm", "train/grad_norm"),
    "sps": (
        "sps",
        "samples_per_second",
        "train_samples_per_second",
        "train/samples_per_second",
        "samples_per_sec",
        "train/samples_per_sec",
        "throughput",
        "train/throughput",
    ),
    "FATAL": ("FATAL",),
}
# `eval/X`, `val/X`, `val_X`, `validation/X` → `eval_X` (an `eval_X` key itself wins)
EVAL_PREFIXES = ("eval/", "val/", "val_", "validation/", "metrics/", "test/")

# Task metrics by the last part of their name, and which way is better: "max" (higher) or "min".
# A name ending in `*` matches any name that starts with the rest (`rouge1`, `rougeL`); `map*` only
# where no letter follows (`map50`, `map50-95`, `map@0.5`; not `mape`, an error that is better lower).
TASK_METRICS: tuple[tuple[str, str], ...] = (
    ("accuracy", "max"),
    ("acc", "max"),
    ("f1", "max"),
    ("auroc", "max"),
    ("auc", "max"),
    ("map*", "max"),
    ("precision", "max"),
    ("recall", "max"),
    ("rouge*", "max"),
    ("bleu", "max"),
    ("exact_match", "max"),
    ("wer", "min"),
    ("cer", "min"),
    ("perplexity", "min"),
)


def task_metric_direction(name: str) -> str | None:
    """ "max" when `name` is a task metric that is better higher (`eval_accuracy`, `metrics/mAP50(B)`,
    `val/f1`), "min" when better lower (`eval_wer`, `perplexity`), None when it is not one.

    The last part of the name counts (after the last `/` or `.`, and after an `eval_`, `val_` or
    `test_` prefix; a trailing `(B)` dropped), case-insensitively; failing that, its part after
    the last `_` (`top1_accuracy`)."""
    last = name.replace(".", "/").rsplit("/", 1)[-1].lower()
    if last.endswith(")") and "(" in last:
        last = last[: last.rindex("(")]
    for prefix in ("eval_", "val_", "test_", "validation_"):
        if last.startswith(prefix) and len(last) > len(prefix):
            last = last[len(prefix) :]
            break
    for part in (last, last.rsplit("_", 1)[-1]):
        for metric, direction in TASK_METRICS:
            stem = metric[:-1]
            if part == metric or (metric.endswith("*") and part.startswith(stem)):
                if metric == "map*" and part[len(stem) : len(stem) + 1].isalpha():
                    continue
                return direction
    return None


class KeyMap:
    """Renames one record's keys to the canonical ones (the aliases, and `--map` on top)."""

    def __init__(self, maps: dict[str, str] | None = None) -> None:
        self.maps = dict(maps or {})
        self._eval_cache: dict[str, str | None] = {}
        self._plans: dict[tuple[str, ...], list[tuple[str, str | None]]] = {}

    def eval_name(self, key: str) -> str | None:
        """`eval/auroc` → `eval_auroc`; None for a key that is not an eval value."""
        name = self._eval_cache.get(key, "")
        if name != "":
            return name
        name = None
        if key.startswith("eval_") and len(key) > 5:
            name = key
        else:
            for prefix in EVAL_PREFIXES:
                if key.startswith(prefix) and len(key) > len(prefix):
                    name = "eval_" + key[len(prefix) :].replace("/", "_")
                    break
        if len(self._eval_cache) < 4096:  # tags are few; a log of unbounded names must not grow it
            self._eval_cache[key] = name
        return name

    def canonical(self, obj: dict[str, Any]) -> dict[str, Any]:
        """A copy of `obj` with the canonical keys set (originals kept)."""
        # Which key feeds which canonical key depends only on the keys present, and a log repeats
        # the same few key sets: work the assignments out once a key set.
        names = tuple(obj)
        plan = self._plans.get(names)
        if plan is None:
            probe = dict.fromkeys(names, 0)
            plan = [(canon, src) for canon, src in self._plan(probe)]
            if len(self._plans) < 1024:
                self._plans[names] = plan
        out = dict(obj)
        for canon, src in plan:
            if src is None:
                out.pop(canon, None)
            else:
                out[canon] = obj[src]
        return out

    def _plan(self, obj: dict[str, Any]) -> list[tuple[str, str | None]]:
        """(canonical key, the key it is read from, or None: absent) for a record with `obj`'s keys."""
        plan: list[tuple[str, str | None]] = []
        out = dict(obj)
        maps = self.maps
        for canon, names in ALIASES.items():
            if canon in maps:
                continue
            if canon in obj:
                continue
            for name in names:
                if name in obj:
                    out[canon] = 0
                    plan.append((canon, name))
                    break
            else:
                if canon == "lr":
                    for key in obj:
                        if key.startswith("lr-"):
                            out["lr"] = 0
                            plan.append(("lr", key))
                            break
        for key in obj:
            if key.startswith("eval_"):
                continue
            eval_key = self.eval_name(key)
            if eval_key is not None and eval_key not in obj and eval_key not in maps and eval_key not in out:
                out[eval_key] = 0
                plan.append((eval_key, key))
        for canon, source in maps.items():  # a mapped key is read only from its SOURCE
            plan.append((canon, source if source in obj else None))
        return plan


def original_keys(rec: dict[str, Any]) -> list[str]:
    """The keys of a record as its log wrote them: without the canonical keys that `KeyMap` set
    beside the names they were read from (`t` beside `time`, `eval_box_loss` beside `val/box_loss`)."""
    added: set[str] = set()
    for canon, names in ALIASES.items():
        if canon in rec and any(n != canon and n in rec for n in names):
            added.add(canon)
    for key in rec:
        if key.startswith("lr-"):
            added.add("lr")
        for prefix in EVAL_PREFIXES:
            if key.startswith(prefix) and len(key) > len(prefix):
                added.add("eval_" + key[len(prefix) :].replace("/", "_"))
                break
    return [k for k in rec if k not in added]


def split_train_eval(rec: dict[str, Any], is_eval: Callable[[str], bool]) -> list[dict[str, Any]]:
    """A step's grouped values as the records a JSONL producer writes: the train part (with `loss`)
    and the eval part (the eval values, under both names) apart, so that rules see them as they
    would there."""
    if "loss" not in rec:
        return [rec]
    evals = [k for k in rec if k.startswith("eval_") or is_eval(k)]
    if not evals:
        return [rec]
    ev = {"step": rec["step"]}
    if "t" in rec:
        ev["t"] = rec["t"]
    train = dict(rec)
    for k in evals:
        ev[k] = train.pop(k)
    return [train, ev]


class StepGrouper:
    """Collects (step, wall time, key, value) into one record a step, in arrival order.

    A step's record is complete when a value of another step arrives (`add` returns it), or at the
    end (`flush`). A key repeated at one step (a logger that writes per batch under the epoch
    number) keeps its last value: one record, not a new session. `idle()` releases the held step
    when the source has gone quiet for a poll (a live watch cannot wait for the next step to
    know that one is whole); values of that step that arrive later form a record of their own,
    without the keys already applied (a non-finite value is always kept: it is never lost).
    """

    def __init__(self, keys: KeyMap) -> None:
        self.keys = keys
        self.step: int | float | None = None
        self.values: dict[str, Any] = {}
        self.where = ""
        self.wall: float | None = None
        self._is_eval: dict[str, bool] = {}
        self.eval_wall: float | None = None  # the latest wall time of the step's eval values
        self.eval_where = ""  # where the step's first eval value was
        self.released: int | float | None = None  # the step `idle()` released, and its keys
        self.released_keys: set[str] = set()

    def add(self, step: int | float, wall: float | None, key: str, value: Any, where: str) -> list[Item]:
        out: list[Item] = []
        if self.step is not None and step != self.step:
            out = self._emit()
        if self.released is not None:
            if step != self.released:
                self.released, self.released_keys = None, set()
            elif key in self.released_keys and type(value) is float and math.isfinite(value):
                return out  # a value of a step already applied: the applied one stands
        if self.step is None:
            self.step, self.where = step, where
        self.values[key] = value
        is_eval = self._is_eval.get(key)
        if is_eval is None:
            is_eval = self.keys.eval_name(key) is not None
            if len(self._is_eval) < 4096:
                self._is_eval[key] = is_eval
        if not is_eval:
            if wall is not None and (self.wall is None or wall > self.wall):
                self.wall = wall
        else:
            if not self.eval_where:
                self.eval_where = where
            if wall is not None and (self.eval_wall is None or wall > self.eval_wall):
                self.eval_wall = wall
        return out

    def pending(self) -> bool:
        return self.step is not None

    def flush(self) -> list[Item]:
        """The held step's records (at the end of a replay)."""
        return self._emit() if self.step is not None else []

    def idle(self) -> list[Item]:
        """The held step's records, now that the source was quiet for a poll (a live watch)."""
        if self.step is None:
            return []
        step, keys = self.step, set(self.values)
        out = self._emit()
        if self.released == step:
            self.released_keys |= keys
        else:
            self.released, self.released_keys = step, keys
        return out

    def _eval_key(self, key: str) -> bool:
        known = self._is_eval.get(key)
        return known if known is not None else self.keys.eval_name(key) is not None

    def _emit(self) -> list[Item]:
        rec: dict[str, Any] = {"step": self.step}
        wall = self.wall if self.wall is not None else self.eval_wall
        if wall is not None:
            rec["t"] = wall
        for key, value in self.values.items():
            if key != "step" and key != "t":  # the event's own step and time are the record's
                rec[key] = value
        parts = split_train_eval(self.keys.canonical(rec), self._eval_key)
        out: list[Item] = [(self.where, parts[0])]
        if len(parts) == 2:
            if self.eval_wall is not None:
                parts[1]["t"] = self.eval_wall  # each part keeps the time and place of its own values
            out.append((self.eval_where or self.where, parts[1]))
        self.step, self.values, self.wall, self.eval_wall, self.eval_where = None, {}, None, None, ""
        return out

    def state_dict(self) -> dict[str, Any]:
        """The held step as plain JSON (non-finite values as strings)."""
        return {
            "step": self.step,
            "values": {k: _enc(v) for k, v in self.values.items()},
            "where": self.where,
            "wall": self.wall,
            "eval_wall": self.eval_wall,
            "eval_where": self.eval_where,
            "released": self.released,
            "released_keys": sorted(self.released_keys),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = state["step"]
        self.values = {k: _dec(v) for k, v in state["values"].items()}
        self.where = state["where"]
        self.wall = state["wall"]
        self.eval_wall = state["eval_wall"]
        self.eval_where = state["eval_where"]
        self.released = state.get("released")
        self.released_keys = set(state.get("released_keys") or ())


def _enc(v: Any) -> Any:
    if type(v) is float and not math.isfinite(v):
        return repr(v)  # 'nan', 'inf', '-inf': strict JSON has no NaN
    return v


def _dec(v: Any) -> Any:
    return float(v) if v in ("nan", "inf", "-inf") else v


class GroupedReader(BaseReader):
    """A reader whose values are grouped by step (`StepGrouper`: TensorBoard, MLflow): the last
    step is held back until a later value, an idle poll, `release()` or `finish()`."""

    grouper: StepGrouper

    def finish(self) -> list[Item]:
        """The step still held back (the end of a replay, or the process has ended)."""
        return self.grouper.flush()

    def holding(self) -> bool:
        return self.grouper.pending()

    def release(self) -> list[Item]:
        return self.grouper.idle()
