"""`runwatch.heartbeats`, kept for one release where earlier docs and code import it: the per-rank heartbeat files and the rank rules that judge them.

Import from `runwatch.files` and `runwatch.judging` instead. Each name below resolves on first use from where it
lives now; this module exports nothing (no `__all__`) and nothing inside the package imports it.
"""

from __future__ import annotations

from typing import Any

from . import lazy

# module -> the names this module used to export.
_FROM: dict[str, tuple[str, ...]] = {
    "runwatch.files": (
        "HISTORY_WINDOWS",
        "HeartbeatConfig",
        "Heartbeat",
        "heartbeat_path",
        "parse_heartbeat",
        "read_heartbeats",
        "current_session",
    ),
    "runwatch.judging": ("rank_stall_finding", "StragglerRule", "RankMonitor", "rank_status_lines"),
}
_WHERE = lazy.index(_FROM)


def __getattr__(name: str) -> Any:
    return lazy.resolve(__name__, globals(), _WHERE, name)


def __dir__() -> list[str]:
    return lazy.listing(globals(), _WHERE)
