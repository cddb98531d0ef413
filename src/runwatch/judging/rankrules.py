"""The rank rules of a multi-rank run, judged on the ranks' heartbeats (`files.heartbeats` reads
them), pure functions of the heartbeats, the time and a small JSON-serialisable state, each with
its declarations (`PollKind`: class, severity, runbook) and their options (`RankOptions`):

- `rank_stall` (`rank_stall_finding`) — a rank stopped while the others went on, or every rank
  stopped and one is behind (or is the only one not waiting inside a collective);
- `straggler` (`StragglerRule`) — a rank's window time exceeds F x the median over ranks for K
  consecutive windows.

`ranks.RankMonitor` runs them once per poll of a watch. Standard library only.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from ..files import Heartbeat
from ..options import GREATER_1, INT_1, POSITIVE, option
from .declaring import STOP, TRANSIENT, OptionGroup, PollKind, Runbook

# Busy time below this fraction of a window is idle for the straggler rule: a few samples of a
# 10-Hz sampler in a 1-s window, noise next to a straggler busy for most of it.
IDLE_BUSY_FRACTION = 0.05


@dataclass(frozen=True)
class RankOptions(OptionGroup):
    """The rank rules' options (multi-rank runs)."""

    rank_stall: float = option(
        300.0, POSITIVE, "rank_stall: a rank's heartbeat S seconds behind the others' (multi-rank runs)", metavar="S"
    )
    straggler_factor: float = option(
        1.5, GREATER_1, "straggler: a rank's window time above F x the median over ranks", metavar="F"
    )
    straggler_patience: int = option(5, INT_1, "straggler needs K consecutive such windows", metavar="K")


RANK_STALL = PollKind(
    "rank_stall",
    cls=TRANSIENT,
    severity=STOP,
    runbook=Runbook(
        "one rank's heartbeat fell behind the others' or stopped at an earlier step",
        "look at that rank's stack (the message names rank, host and pid), then stop and relaunch",
    ),
)
STRAGGLER = PollKind(
    "straggler",
    cls=TRANSIENT,
    severity=STOP,
    runbook=Runbook(
        "one rank's window time stayed above `--straggler-factor` x the median over ranks",
        "find the slow node (the message names rank and host); exclude it and relaunch",
    ),
)
# The kinds this module declares, in the order of the runbook's poll kinds.
RANK_KINDS = (RANK_STALL, STRAGGLER)


def fmt_seconds(s: float) -> str:
    return f"{s:.0f} s" if s >= 10 else f"{s:.1f} s"


def _more(ranks: list[int]) -> str:
    return "" if len(ranks) <= 1 else f" (and {len(ranks) - 1} more)"


def rank_stall_finding(beats: dict[int, Heartbeat], now: float, stall: float) -> tuple[int, int, str] | None:
    """`(rank, step, message)` of a stalled rank among one session's heartbeats, or None.

    1. A running rank whose heartbeat file is `stall` seconds old while another rank's is fresh
       or that rank has ended after it: the process stopped writing (killed, frozen host).
    2. Every running rank made no progress (no step() call) for `stall` seconds: a rank that
       ended its session early, if any; else the rank with the fewest attempted updates, when
       they differ; else, once every rank has closed a window, the ranks not waiting inside a
       collective while the others are (a sleeping or hung rank makes the rest wait in backward).
    """
    live = sorted((b for b in beats.values() if b.state == "running"), key=lambda b: b.rank)
    if not live:
        return None
    silent = [b for b in live if now - b.time > stall]
    if silent:
        oldest = min(silent, key=lambda b: (b.time, b.rank))
        went_on = [
            b
            for b in beats.values()
            if b.rank != oldest.rank and (now - b.time <= stall or (b.state == "ended" and b.time > oldest.time))
        ]
        if went_on:
            return (
                oldest.rank,
                oldest.step,
                (
                    f"{oldest.label} stopped at step {oldest.step}: its heartbeat is "
                    f"{fmt_seconds(now - oldest.time)} old while {len(went_on)} other rank(s) went on"
                ),
            )
    if len(live) < 2 or any(now - b.progress_time <= stall for b in live):
        return None
    idle = fmt_seconds(now - max(b.progress_time for b in live))
    ended = sorted((b for b in beats.values() if b.state == "ended"), key=lambda b: b.rank)
    if ended:  # ranks leave a session together (its last window is a collective): one left early
        k = ended[0]
        return (
            k.rank,
            k.step,
            (
                f"{k.label}{_more([b.rank for b in ended])} ended at step {k.step} while {len(live)} rank(s) "
                f"still run; no progress on any running rank for {idle}"
            ),
        )
    low = min(b.attempted for b in live)
    high = max(b.attempted for b in live)
    if low < high:
        behind = [b for b in live if b.attempted == low]
        k = behind[0]
        return (
            k.rank,
            k.step,
            (
                f"{k.label}{_more([b.rank for b in behind])} stopped at step {k.step}, behind the others "
                f"(attempted update {low}, others up to {high}); no progress on any rank for {idle}"
            ),
        )
    waiting = [b for b in live if b.waiting is True]
    running = [b for b in live if b.waiting is False]
    # Before every rank has closed a window, a long first step (compilation, data warm-up) beside
    # a rank already in a collective is normal: only ranks that have trained are judged this way.
    if waiting and running and min(b.window for b in live) >= 1:
        k = running[0]
        return (
            k.rank,
            k.step,
            (
                f"{k.label}{_more([b.rank for b in running])} stopped at step {k.step} outside any collective "
                f"(in {k.where}) while {len(waiting)} rank(s) wait in one (in {waiting[0].where}); "
                f"no progress on any rank for {idle}"
            ),
        )
    return None


class StragglerRule:
    """`straggler`: a rank's busy window time > factor x the median over ranks, K windows running.

    Windows are matched by index across ranks from each heartbeat's recent history; each window is
    judged once, when every rank has reported it. State is plain JSON (`state_dict`).
    """

    def __init__(self, factor: float, patience: int) -> None:
        self.factor = factor
        self.patience = patience
        self.session_id: str | None = None
        self.judged_window = 0
        self.counts: dict[int, int] = {}
        self.active: set[int] = set()

    def state_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "judged_window": self.judged_window,
            "counts": {str(k): v for k, v in sorted(self.counts.items())},
            "active": sorted(self.active),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.session_id = state["session_id"]
        self.judged_window = int(state["judged_window"])
        self.counts = {int(k): int(v) for k, v in state["counts"].items()}
        self.active = {int(k) for k in state["active"]}

    def update(self, beats: dict[int, Heartbeat]) -> tuple[int, int, str] | None:
        """Judge the windows that every rank has reported since the last call."""
        if len(beats) < 2:
            return None
        session = next(iter(beats.values())).session_id
        if session != self.session_id:
            self.session_id, self.judged_window, self.counts, self.active = session, 0, {}, set()
        latest = min(b.window for b in beats.values())
        earliest = max(b.window - len(b.busy_seconds) + 1 for b in beats.values())
        finding = None
        for w in range(max(self.judged_window + 1, earliest), latest + 1):
            times = {k: b.busy_seconds[len(b.busy_seconds) - 1 - (b.window - w)] for k, b in beats.items()}
            windows = [b.window_seconds[len(b.window_seconds) - 1 - (b.window - w)] for b in beats.values()]
            # On a quiet machine the ranks waiting for a straggler are sampled waiting throughout:
            # a median busy time of exactly 0, against which nothing could stand out. Below
            # IDLE_BUSY_FRACTION of the window a rank counts as idle, at that much.
            median = max(statistics.median(times.values()), IDLE_BUSY_FRACTION * statistics.median(windows))
            for k, t in times.items():
                if median > 0 and t > self.factor * median:
                    self.counts[k] = self.counts.get(k, 0) + 1
                else:
                    self.counts.pop(k, None)
                    self.active.discard(k)
            for k in sorted(self.counts):
                if self.counts[k] >= self.patience and k not in self.active and finding is None:
                    self.active.add(k)
                    b = beats[k]
                    finding = (
                        k,
                        b.step,
                        (
                            f"rank {k} (host {b.host}) took {times[k] / median:.1f}x the median window time "
                            f"({times[k]:.3g} s vs {median:.3g} s) for {self.counts[k]} consecutive windows"
                        ),
                    )
        self.judged_window = max(self.judged_window, latest)
        return finding
