"""The markers on a run's charts: what happened, at the step where it happened.

    marks = Checkpoints()
    marks.add(rec)                                   # a checkpoint record on the path
    marks.cut(cut)                                   # a rollback: the saves it undid go
    markers(findings, marks, supervision.moves, watchdog)

A marker is `{"type", "step", "time", "title"}`: `type` one of `stop` and `warn` (a finding of the
rules, by its severity: `warn` also for one a later session recovered; absent is `stop`; with its
`kind`), `relaunch`, `rollback` and `checkpoint`; `title` says
what it marks in words (the page shows it as the marker's title and accessible name). Placed at
the step of the finding, of the checkpoint a relaunch or rollback resumed from, or of the save.
Standard library only.
"""

from __future__ import annotations

import os
from typing import Any, NotRequired, TypedDict

from ...reading import Record
from .series import Cut, keeps
from .supervision import Move

# Markers drawn per kind: more would be a solid band on a chart 600 pixels wide.
MAX_FINDING_MARKERS = 200
MAX_CHECKPOINT_MARKERS = 200
# Checkpoint paths remembered, to place a relaunch at the step of the checkpoint it resumed from.
MAX_CHECKPOINT_PATHS = 1000


class Marker(TypedDict):
    """One marker of the charts."""

    type: str
    kind: NotRequired[Any]  # a finding's
    step: Any
    time: Any
    title: str


class Checkpoints:
    """The saves on the path to the final step (the latest ones), and the step of each path saved."""

    def __init__(self) -> None:
        self.saves: list[tuple[float, float | None, str]] = []  # (step, time, path)
        self.steps: dict[str, float] = {}  # path -> step of its latest save

    def add(self, rec: Record) -> None:
        path = rec.raw.get("path") if rec.raw else None
        path = path if isinstance(path, str) else ""
        self.saves.append((rec.step, rec.time, path))
        del self.saves[:-MAX_CHECKPOINT_MARKERS]
        if path:
            self.steps.pop(path, None)
            self.steps[path] = rec.step
            if len(self.steps) > MAX_CHECKPOINT_PATHS:
                del self.steps[next(iter(self.steps))]

    def cut(self, cut: Cut) -> None:
        while self.saves and not keeps(cut, self.saves[-1][0]):
            self.saves.pop()


def _finding(f: dict[str, Any]) -> Marker:
    severity = f.get("severity") or "stop"  # findings without a severity are stops
    said = severity if severity in ("warn", "recovered") else "stop"  # (recovered: a later session went on)
    return {
        "type": "stop" if said == "stop" else "warn",
        "kind": f.get("kind"),
        "step": f.get("step"),
        "time": f.get("time"),
        "title": f"{f.get('kind')} ({said}) at step {f.get('step')}: {f.get('message')}",
    }


def _move(m: Move, checkpoints: Checkpoints) -> Marker | None:
    step = m["checkpoint_step"]
    ckpt = m["checkpoint"] if isinstance(m["checkpoint"], str) else None
    if step is None and ckpt is not None:
        step = checkpoints.steps.get(ckpt)
    if step is None:
        step = m["verdict_step"]  # no checkpoint known: where the attempt before was stopped
    if type(step) not in (int, float):
        return None
    where = f" ({os.path.basename(ckpt)})" if ckpt else ""
    what = "rollback to" if m["event"] == "rollback" else "relaunch from"
    return {
        "type": m["event"],
        "step": step,
        "time": m["time"],
        "title": f"{what} step {step}{where}, attempt {m['attempt']}",
    }


def markers(
    findings: list[dict[str, Any]],
    checkpoints: Checkpoints,
    moves: list[Move],
    watchdog: dict[str, Any] | None,
) -> list[Marker]:
    """Every marker of a run's charts: findings (the rules', then the watchdog's warnings that
    the rules did not find too), relaunches and rollbacks, checkpoints."""
    out = [_finding(f) for f in findings[:MAX_FINDING_MARKERS]]
    seen = {(f.get("kind"), f.get("step")) for f in findings}
    warnings = watchdog.get("warnings") if isinstance(watchdog, dict) else None
    for w in warnings if isinstance(warnings, list) else []:
        if isinstance(w, dict) and (w.get("kind"), w.get("step")) not in seen:
            out.append(_finding({**w, "severity": "warn"}))
    for m in moves:
        marker = _move(m, checkpoints)
        if marker is not None:
            out.append(marker)
    for step, time, path in checkpoints.saves:
        where = f" ({os.path.basename(path)})" if path else ""
        out.append({"type": "checkpoint", "step": step, "time": time, "title": f"checkpoint at step {step}{where}"})
    return out
