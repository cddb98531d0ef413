"""What a sweep is compared on: each run's best values, its goodput so far, where it came from.

    best_point(points, "min")             # {"value": 0.41, "step": 1200}: the best of a chart's points
    task_metric(["eval_loss", "eval_accuracy", "eval_f1"])   # ("eval_accuracy", "max")
    steps = GoodputSteps(origin=0)
    steps.add(rec, updates)               # every train record, in log order
    steps.ratio(reached)                  # steps kept / steps run (`runwatch goodput`'s ratio)
    origin_facts(manifest, launch)        # {"recipe", "provenance", "launch"}: the run page's "what differs"

The best of a series is read from its downsampled points, which keep every bucket's lowest and
highest value: the extremes along the path to the final step are exact. A run's task metric is
the first of its eval metrics that `keys.task_metric_direction` names (in the order of
`keys.TASK_METRICS`: accuracy before f1 before auroc ...), compared in its own direction.
Standard library only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypedDict

from ...reading import TASK_METRICS, task_metric_direction
from .series import Point


class Best(TypedDict):
    """The best value of a series and the step it was reached at."""

    value: float
    step: int | float


class BestMetric(Best):
    """The best value of the run's task metric: its name (without `eval_`) and direction."""

    name: str
    direction: str  # "max" or "min"


def best_point(points: list[Point], direction: str) -> Best | None:
    """The lowest ("min") or highest ("max") of `points` ([step, value, time]); the earliest on a tie."""
    best: Point | None = None
    for p in points:
        if best is None or (p[1] < best[1] if direction == "min" else p[1] > best[1]):
            best = p
    return None if best is None else {"value": best[1], "step": best[0]}


def _rank(key: str) -> int:
    last = key.replace(".", "/").rsplit("/", 1)[-1].lower()
    for i, (metric, _) in enumerate(TASK_METRICS):
        if metric.rstrip("*") in last:
            return i
    return len(TASK_METRICS)


def task_metric(keys: Iterable[str]) -> tuple[str, str] | None:
    """(series key, direction) of the run's task metric among its `eval_<name>` series keys, or None."""
    found = []
    for key in keys:
        if key.startswith("eval_") and key != "eval_loss":
            direction = task_metric_direction(key[5:])
            if direction is not None:
                found.append((_rank(key), key, direction))
    if not found:
        return None
    _, key, direction = min(found)
    return key, direction


class GoodputSteps:
    """Steps run and kept, counted as records arrive, as `runwatch goodput` counts them: a train
    record's `updates` (schema v1), else the steps it moved on within its session (a relaunch's
    first record counts none)."""

    __slots__ = ("origin", "prev", "run", "session")

    def __init__(self) -> None:
        self.origin: int | float | None = None  # the step the run started from
        self.prev: int | float | None = None
        self.run: int | float = 0
        self.session: str | None = None

    def add(self, session: str, step: int | float, updates: int | None, start: int | float | None) -> None:
        """A train record of `session` at `step` (`updates`: schema v1's; `start`: the session's
        start step when run.json says it)."""
        if session != self.session:
            first = self.session is None
            self.session = session
            self.prev = (start if start is not None else 0) if first else None
            if first:
                self.origin = self.prev
        if updates is not None:
            self.run += updates
        elif self.prev is not None and step > self.prev:
            self.run += step - self.prev
        self.prev = step

    def ratio(self, reached: int | float | None) -> float | None:
        """Steps kept (`reached` less the origin) over steps run; None before a step ran."""
        if not self.run or reached is None or self.origin is None:
            return None
        return round(max(0, reached - self.origin) / self.run, 4)


def origin_facts(manifest: dict[str, Any] | None, launch: dict[str, Any] | None) -> dict[str, Any]:
    """The latest session's `recipe` and `provenance` (run.json) and how the run was launched
    (launch.json's `command`, `cwd` and `provenance`); None for what the run does not have."""
    session: dict[str, Any] = {}
    if isinstance(manifest, dict) and isinstance(manifest.get("sessions"), list) and manifest["sessions"]:
        last = manifest["sessions"][-1]
        session = last if isinstance(last, dict) else {}
    recipe = session.get("recipe")
    provenance = session.get("provenance")
    launched = None
    if isinstance(launch, dict):
        launched = {
            "command": launch.get("command") if isinstance(launch.get("command"), list) else None,
            "cwd": launch.get("cwd") if isinstance(launch.get("cwd"), str) else None,
            "provenance": launch.get("provenance") if isinstance(launch.get("provenance"), dict) else None,
        }
    return {
        "recipe": recipe if isinstance(recipe, dict) else None,
        "provenance": provenance if isinstance(provenance, dict) else None,
        "launch": launched,
    }
