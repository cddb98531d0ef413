"""Supervising a run: launching it, relaunching or rolling it back on a verdict (`decide`, a pure
function of the journal and the verdict; `Supervisor` carries its decision out), the supervision
journal, schedulers, the dead-man heartbeat, notifications and goodput.

    from runwatch.supervising import read_journal, supervise_status, decide

    for entry in read_journal("runs/a"): ...   # supervise.jsonl, one entry an event
    st = supervise_status("runs/a")            # the supervisor's counters and last event, or None

`launch` (`runwatch.supervising.launch.launch`) and `goodput` stay at their modules: a package
attribute named like a module of the package is that module once it is imported. This is the
layer's face: every name below is imported on first use from the module that defines it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import lazy

if TYPE_CHECKING:
    from .deadman import DeadMan as DeadMan
    from .goodput import Goodput as Goodput
    from .goodput import breakdown as breakdown
    from .goodput import goodput_line as goodput_line
    from .launch import watch_read as watch_read
    from .notify import Notifier as Notifier
    from .policy import Attempt as Attempt
    from .policy import Decision as Decision
    from .policy import decide as decide
    from .scheduler import SlurmJob as SlurmJob
    from .scheduler import requeue as requeue
    from .supervise import Supervisor as Supervisor
    from .supervisecommand import supervisor_from_args as supervisor_from_args
    from .supervision import ENDS as ENDS
    from .supervision import Counters as Counters
    from .supervision import SuperviseOptions as SuperviseOptions
    from .supervision import last_record as last_record
    from .supervision import read_journal as read_journal
    from .supervision import supervise_status as supervise_status

# The public names, module -> names: this face's __all__.
_PUBLIC: dict[str, tuple[str, ...]] = {
    ".deadman": ("DeadMan",),
    ".goodput": ("Goodput", "breakdown", "goodput_line"),
    ".launch": ("watch_read",),
    ".notify": ("Notifier",),
    ".policy": ("Attempt", "Decision", "decide"),
    ".scheduler": ("SlurmJob", "requeue"),
    ".supervise": ("Supervisor",),
    ".supervisecommand": ("supervisor_from_args",),
    ".supervision": ("SuperviseOptions", "supervise_status", "Counters", "ENDS", "last_record", "read_journal"),
}
# The other names the modules listed as exported before the faces: importable from here for one
# release, not in __all__ (import them from the face, or better, use a public name).
_KEPT: dict[str, tuple[str, ...]] = {
    ".deadman": ("FETCH_TIMEOUT_SECONDS",),
    ".goodput": ("Breakdown", "Advice", "BUCKETS", "run_goodput", "unrecovered_onset"),
    ".launch": ("abandon", "reading_record", "LAUNCH_ENV", "WAITER"),
    ".notify": ("mask_url", "INSTALL_HINT"),
    ".policy": ("MAX_BACKOFF_SECONDS", "progress", "stopped", "rollback_facts"),
    ".preemption": ("PREEMPT_SIGNALS", "StopSignals"),
    ".scheduler": ("SCONTROL_TIMEOUT_SECONDS",),
    ".supervision": ("load_supervise_options", "EVENTS", "append", "journal_entry", "lock_run_dir", "stdout_tail"),
}
_WHERE = lazy.index(_PUBLIC, _KEPT)

__all__ = lazy.public(_PUBLIC)


def __getattr__(name: str) -> Any:
    return lazy.resolve(__name__, globals(), _WHERE, name)


def __dir__() -> list[str]:
    return lazy.listing(globals(), _WHERE)
