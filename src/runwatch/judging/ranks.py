"""The rank rules of a multi-rank run in a watch, and what `status` says of the ranks, from the
ranks' heartbeats (`files.heartbeats` reads them), with the standard library only, so a watchdog on
any node of a shared file system sees every rank. The rules themselves (`rank_stall`,
`straggler`), their declarations and options are `rankrules`'s.

    monitor = RankMonitor(rank_stall=300, straggler_factor=1.5, straggler_patience=5)
    finding = monitor.poll(run_dir, now)      # a rules.Finding or None, once per poll
    lines = rank_status_lines(run_dir, now)   # at most 4 lines, whatever the number of ranks
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from ..files import Heartbeat, current_session, read_heartbeats
from .rankrules import RANK_STALL, STRAGGLER, fmt_seconds
from .rankrules import StragglerRule as StragglerRule
from .rankrules import rank_stall_finding as rank_stall_finding
from .rules import Finding


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
            return Finding(RANK_STALL.kind, stall[1], stall[2])
        if straggler is not None:
            return Finding(STRAGGLER.kind, straggler[1], straggler[2])
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
            f"newest {fmt_seconds(max(0.0, now - max(b.time for b in beats.values())))} ago"
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
            f"last step {fmt_seconds(max(0.0, now - behind.progress_time))} ago" + (f", {state}" if state else "")
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
