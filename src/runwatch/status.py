"""`runwatch.status`, kept for one release where earlier docs and code import it: one short check-in on a run.

Import from `runwatch.views` instead. Each name below resolves on first use from where it
lives now; this module exports nothing (no `__all__`) and nothing inside the package imports it.
"""

from __future__ import annotations

from typing import Any

from . import lazy

# module -> the names this module used to export.
_FROM: dict[str, tuple[str, ...]] = {
    "runwatch.views": (
        "describe",
        "watchdog_facts",
        "format_status",
        "Status",
        "StatusHead",
        "GradNorm",
        "Ended",
        "LastEval",
        "ProcessInfo",
    ),
    "runwatch.views.status": ("status", "add_arguments", "run"),
    "runwatch.files": ("gpu_info", "GpuInfo"),
}
_WHERE = lazy.index(_FROM)


def __getattr__(name: str) -> Any:
    return lazy.resolve(__name__, globals(), _WHERE, name)


def __dir__() -> list[str]:
    return lazy.listing(globals(), _WHERE)
