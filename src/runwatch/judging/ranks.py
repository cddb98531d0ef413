"""The rank rules of a multi-rank run, judged on the ranks' heartbeats (`heartbeats` reads them),
with the standard library only, so a watchdog on any node of a shared file system sees every rank:

- `rank_stall` — a rank stopped while the others went on, or every rank stopped and one is behind
  (or is the only one not waiting inside a collective);
- `straggler` — a rank's window time exceeds F x the median over ranks for K consecutive windows.

    monitor = RankMonitor(rank_stall=300, straggler_factor=1.5, straggler_patience=5)
    finding = monitor.poll(run_dir, now)      # a rules.Finding or None, once per poll
    lines = rank_status_lines(run_dir, now)   # at most 4 lines, whatever the number of ranks

The rules are pure functions of the heartbeats, the time and a small JSON-serialisable state.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from ..files.heartbeats import Heartbeat, current_session, read_heartbeats
from .rules import Finding

__all__ = ["rank_stall_finding", "StragglerRule", "RankMonitor", "rank_status_lines"]

# Busy time below this fraction of a window is idle for the straggler rule: a few samples of a
# 10-Hz sampler in a 1-s window, noise next to a straggler busy for most of it.
IDLE_BUSY_FRACTION = 0.05


def _fmt_seconds(s: float) -> str:
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
                    f"{_fmt_seconds(now - oldest.time)} old while {len(went_on)} other rank(s) went on"
                ),
            )
    if len(live) < 2 or any(now - b.progress_time <= stall for b in live):
        return None
    idle = _fmt_seconds(now - max(b.progress_time for b in live))
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


class RankMonitor:
    """The rank rules for a watchdog's poll loop: call `poll(run_dir, now)` once per poll.

    Returns `(kind, step, message)` with kind `rank_stall` or `straggler` when a rule starts to
    hold, else None. A run without heartbeats, or a single process (a world of one: both rules
    compare ranks), never yields a finding.
    """

    def __init__(self, rank_stall: float = 300.0, straggler_factor: float = 1.5, straggler_patience: int = 5) -> None:
        # The values come validated from the watch's Options (`--rank-stall`, `--straggler-*`).
        self.rank_stall = rank_stall
        self.straggler = StragglerRule(straggler_factor, straggler_patience)
        self.stalled: list[int] | None = None  # [rank, step] reported, until it clears
        self.problems: list[str] = []  # unreadable heartbeat files seen by the last poll

    def state_dict(self) -> dict[str, Any]:
        return {"straggler": self.straggler.state_dict(), "stalled": self.stalled}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.straggler.load_state_dict(state["straggler"])
        self.stalled = None if state["stalled"] is None else [int(v) for v in state["stalled"]]

    def poll(self, run_dir: str, now: float | None = None, ignore: frozenset[str] = frozenset()) -> Finding | None:
        """Read the heartbeats and judge them; `ignore`: sessions never judged (an earlier
        attempt's files, which a relaunch has not yet overwritten)."""
        now = time.time() if now is None else now
        beats, self.problems = read_heartbeats(run_dir)
        if ignore:
            beats = {k: b for k, b in beats.items() if b.session_id not in ignore}
        return self.judge(current_session(beats), now)

    def judge(self, beats: dict[int, Heartbeat], now: float) -> Finding | None:
        """The rules on heartbeats already read (one session's)."""
        stall = rank_stall_finding(beats, now, self.rank_stall)
        straggler = self.straggler.update(beats)
        if stall is None:
            self.stalled = None
        elif self.stalled != [stall[0], stall[1]]:
            self.stalled = [stall[0], stall[1]]
            return Finding("rank_stall", stall[1], stall[2])
        if straggler is not None:
            return Finding("straggler", straggler[1], straggler[2])
        return None


def rank_status_lines(run_dir: str, now: float | None = None, straggler_factor: float = 1.5) -> list[str]:
    """At most four lines on the ranks of a run: how many and where, the most behind, the slowest,
    and unreadable heartbeat files. Empty for a run without heartbeats, and for a single process
    (a world of one: its heartbeat tells nothing the log and the process do not)."""
    now = time.time() if now is None else now
    all_beats, problems = read_heartbeats(run_dir)
    beats = current_session(all_beats)
    lines: list[str] = []
    if beats and max(b.world_size for b in beats.values()) > 1:
        world = max(b.world_size for b in beats.values())
        hosts = len({b.host for b in beats.values()})
        ended = sum(1 for b in beats.values() if b.state == "ended")
        steps = [b.step for b in beats.values()]
        head = (
            f"ranks: {len(beats)}/{world} heartbeats on {hosts} host(s), steps {min(steps)}..{max(steps)}, "
            f"newest {_fmt_seconds(max(0.0, now - max(b.time for b in beats.values())))} ago"
        )
        if ended:
            head += f", {ended} ended"
        missing = [k for k in range(world) if k not in beats]
        if missing:
            shown = ", ".join(str(k) for k in missing[:5])
            head += f"; missing ranks {shown}" + (f" (+{len(missing) - 5} more)" if len(missing) > 5 else "")
        lines.append(head)
        # fewest updates; among equals, a rank not waiting in a collective (the others wait for it)
        behind = min(beats.values(), key=lambda b: (b.attempted, b.waiting is True, b.progress_time, b.rank))
        state = "waiting in a collective" if behind.waiting else (f"in {behind.where}" if behind.where else "")
        lines.append(
            f"most behind: {behind.label} at step {behind.step} (attempted update {behind.attempted}), "
            f"last step {_fmt_seconds(max(0.0, now - behind.progress_time))} ago" + (f", {state}" if state else "")
        )
        timed = {k: b for k, b in beats.items() if b.busy_seconds}
        if len(timed) >= 2:
            latest = min(b.window for b in timed.values())
            times = {}
            for k, b in timed.items():
                i = len(b.busy_seconds) - 1 - (b.window - latest)
                if i >= 0:
                    times[k] = b.busy_seconds[i]
            if len(times) >= 2:
                median = statistics.median(times.values())
                k = max(times, key=lambda r: (times[r], -r))
                ratio = f"{times[k] / median:.2f}x" if median > 0 else "n/a x"
                flag = (
                    f" (straggler threshold {straggler_factor:g}x)"
                    if median > 0 and times[k] > straggler_factor * median
                    else ""
                )
                lines.append(
                    f"slowest: rank {k} (host {timed[k].host}) {ratio} the median window time "
                    f"({times[k]:.3g} s vs {median:.3g} s) at window {latest}{flag}"
                )
    if problems:
        lines.append(f"unreadable heartbeats: {len(problems)} ({problems[0]})")
    return lines
