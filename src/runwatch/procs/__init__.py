"""The training's processes: alive or not, how they ended, the proof that runwatch launched them, and
stopping a whole process tree. Standard library only (Linux `/proc`).

    from runwatch.procs import alive, read_exit, ProcessTree

    if not alive(pid):
        ended = read_exit("runs/a", pid)       # the exit status the waiter recorded, or None

This is the layer's face: every name below is imported on first use from the module that defines it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import lazy

if TYPE_CHECKING:
    from .launched import not_launched as not_launched
    from .launched import not_supervisor as not_supervisor
    from .launched import refusal as refusal
    from .process import Exit as Exit
    from .process import alive as alive
    from .process import how_ended as how_ended
    from .process import launch_info as launch_info
    from .process import launched_here as launched_here
    from .process import read_exit as read_exit
    from .process import read_pid_file as read_pid_file
    from .process import wait_exit as wait_exit
    from .proctree import ProcessTree as ProcessTree
    from .proctree import start_ticks as start_ticks
    from .waiter import reap as reap
    from .waiter import subreaper as subreaper

# The public names, module -> names: this face's __all__.
_PUBLIC: dict[str, tuple[str, ...]] = {
    ".launched": ("not_launched", "not_supervisor", "refusal"),
    ".process": (
        "Exit",
        "alive",
        "how_ended",
        "read_exit",
        "wait_exit",
        "read_pid_file",
        "launched_here",
        "launch_info",
    ),
    ".proctree": ("ProcessTree", "start_ticks"),
    ".waiter": ("reap", "subreaper"),
}
# The other names the modules listed as exported before the faces: importable from here for one
# release, not in __all__ (import them from the face, or better, use a public name).
_KEPT: dict[str, tuple[str, ...]] = {
    ".launched": ("NOT_STOPPED",),
    ".process": ("valid_pid", "oom_line", "launched_group", "STOP_GRACE_SECONDS", "OOM_PATTERNS"),
    ".proctree": (
        "Proc",
        "Stopped",
        "scan",
        "signal_all",
        "environ",
        "carries_marker",
        "unproven",
        "KILL_WAIT_SECONDS",
    ),
}
_WHERE = lazy.index(_PUBLIC, _KEPT)

__all__ = lazy.public(_PUBLIC)


def __getattr__(name: str) -> Any:
    return lazy.resolve(__name__, globals(), _WHERE, name)


def __dir__() -> list[str]:
    return lazy.listing(globals(), _WHERE)
