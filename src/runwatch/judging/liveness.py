"""Liveness: is the training still working, where does it run, and is the watchdog itself alive.

docs/WATCHDOG.md, "Liveness". What the watch loop needs beyond the records, as small pure
functions of the run directory's files, so `watch`, `status` and `supervise` judge alike:

- `PhaseLimits` and `stall_finding`: `stall` judged phase by phase from the process's heartbeat
  (`heartbeats/rank-<r>.json`, written by the logger on entering and leaving a phase and at every
  window close): inside phase P the limit of P counts from `phase_since`; outside a phase `--stall`
  counts from the later of the last record and the heartbeat's last progress.
- `process_host`: the host `launch.json` (or the heartbeat) names; a process on another host is not
  looked up by pid from here.
- `last_error`: the last error line a dead process printed (traceback, CUDA, NCCL, `Killed`, Slurm).
- `watching_record` / `watchdog_liveness`: the watchdog's own heartbeat in `watchdog.json`.

The kinds the watch reports from these (`stall`, `timeout`, `process_exit`, `oom`) are declared
here (`PollKind`: class, severity, runbook), with their options (`StallOptions`, `PhaseOptions`).

Standard library only.
"""

from __future__ import annotations

import os
import re
import socket
import stat
import time
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError, InvalidRunError
from ..files import (
    LAUNCH_HEADER,
    MAX_HEARTBEAT_BYTES,
    Heartbeat,
    heartbeat_path,
    parse_heartbeat,
    read_heartbeats,
    read_tail,
)
from ..files import PHASE_NAME as PHASE_NAME  # (a heartbeat's phase names: the format's)
from ..options import POSITIVE, TEXTS, option
from ..procs import launch_info
from .declaring import FATAL, STOP, TRANSIENT, OptionGroup, PollKind, Runbook

# An evaluation or a save of a large model can take most of an hour; a hung one should not take
# a day (an evaluation that really hung cost one public 176B run 18 h). Override per phase.
DEFAULT_PHASE_SECONDS = {"eval": 3600.0, "checkpoint": 3600.0}
# The watchdog rewrites its `watching` record at least this often, so `status` can tell a live
# watch from a dead one (dead: pid gone, or no poll for 3 polls + this).
WATCHING_EVERY_SECONDS = 30.0
# How much of the end of stdout.log is searched for the last error: a traceback and the
# launcher's own lines fit easily, and a 100 GB log costs one seek.
ERROR_TAIL_BYTES = 64 * 1024


# --- the kinds judged on every poll, and their options ---------------------------------------------


@dataclass(frozen=True)
class StallOptions(OptionGroup):
    """The options of `stall` and `timeout` (`--stall` is also `status`'s)."""

    stall: float = option(
        360.0,
        POSITIVE,
        "stall: no new record for S seconds (outside a phase)",
        metavar="S",
        commands=("watch", "status"),
    )
    startup_grace: float = option(
        600.0,
        POSITIVE,
        "stall before the first record: none S seconds after the watch (or the session) began",
        metavar="S",
    )
    timeout: float | None = option(None, POSITIVE, "timeout: the watch has run S seconds", none=True, metavar="S")


@dataclass(frozen=True)
class PhaseOptions(OptionGroup):
    """`stall` inside a phase (`parse_phase_limits`)."""

    stall_phase: tuple[str, ...] = option(
        (),
        TEXTS,
        "stall inside phase P: no progress for S seconds from the "
        "phase's start (eval and checkpoint 3600, setup the startup grace, "
        "another phase --stall)",
        metavar="P=S",
        expect="a list of P=S strings",
    )


# `stall_finding` (and the startup grace, before the first record)
STALL = PollKind(
    "stall",
    cls=TRANSIENT,
    severity=STOP,
    runbook=Runbook(
        "no new record for `--stall` seconds (or a phase's limit, or `--startup-grace` before the first record)",
        "look at the stack (`py-spy dump --pid PID`), then stop and relaunch from the latest checkpoint; "
        "a stall inside a phase names it (a hung evaluation or save)",
    ),
)
# `--timeout`: the watch has run that long
TIMEOUT = PollKind(
    "timeout",
    cls=FATAL,
    severity=STOP,
    runbook=Runbook(
        "the watch ran `--timeout` seconds",
        "decide whether the run may go on: raise `--timeout` and watch again, or stop it",
    ),
)
# the process is gone without a normal end (`dead_rank` names the rank that died first, `last_error`
# what it printed)
PROCESS_EXIT = PollKind(
    "process_exit",
    cls=TRANSIENT,
    severity=STOP,
    runbook=Runbook(
        "the training process is gone and its log has no normal end (a crash, a lost node, a killed rank)",
        "read `last_error` (in the message, `watchdog.json`, `status`); relaunch from the latest checkpoint "
        "(`runwatch supervise` does it)",
    ),
)
# the process is gone and its output ends in an out-of-memory error
OOM = PollKind(
    "oom",
    cls=FATAL,
    severity=STOP,
    runbook=Runbook(
        "the process died and the end of `stdout.log` shows an out-of-memory error",
        "lower the batch size or sequence length first: the same recipe fails again",
    ),
)
# The kinds this module declares, in the order of the runbook's poll kinds.
LIVENESS_KINDS = (STALL, TIMEOUT, PROCESS_EXIT, OOM)


@dataclass(frozen=True)
class PhaseLimits:
    """Seconds without progress allowed inside each phase; `other` for a phase not listed."""

    limits: dict[str, float]
    other: float

    def limit(self, phase: str) -> float:
        return self.limits.get(phase, self.other)


def parse_phase_limits(items: tuple[str, ...] | list[str], stall: float, startup_grace: float) -> PhaseLimits:
    """`--stall-phase eval=7200` items over the defaults (eval, checkpoint 3600 s; setup = the
    startup grace; any other phase = `--stall`). A bad item is a ConfigError naming it."""
    limits = dict(DEFAULT_PHASE_SECONDS, setup=startup_grace)
    seen: set[str] = set()
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not PHASE_NAME.fullmatch(name):
            raise ConfigError(
                f"watch.stall_phase must be PHASE=SECONDS with PHASE like eval or checkpoint, got {item!r}"
            )
        try:
            seconds = float(value)
        except ValueError:
            seconds = float("nan")
        if not seconds > 0 or seconds == float("inf"):
            raise ConfigError(f"watch.stall_phase {name} must be a number of seconds > 0, got {value!r}")
        if name in seen:
            raise ConfigError(f"watch.stall_phase: phase {name!r} given twice")
        seen.add(name)
        limits[name] = seconds
    return PhaseLimits(limits, stall)


def watched_heartbeat(run_dir: str, session: str | None) -> Heartbeat | None:
    """The heartbeat of the process that writes the log (rank 0), if it belongs to `session`
    (when known) and its session has not ended; else None (also for an unreadable file: the
    rank rules report those)."""
    path = heartbeat_path(run_dir, 0)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO in the way cannot block a poll
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            data = os.read(fd, MAX_HEARTBEAT_BYTES + 1)
        finally:
            os.close(fd)
        beat = parse_heartbeat(data, path) if len(data) <= MAX_HEARTBEAT_BYTES else None
    except (OSError, InvalidRunError):
        return None
    if beat is None or beat.state != "running":
        return None
    if session is not None and beat.session_id != session:
        return None  # a file left by an earlier session
    return beat


def stall_finding(
    now: float, last_activity: float | None, beat: Heartbeat | None, limits: PhaseLimits, stall: float
) -> str | None:
    """The `stall` message when the process made no progress for too long, else None.

    `last_activity`: when the last record arrived (None: no record yet; the caller judges the
    startup grace). Inside a phase only the phase's own limit counts, from `phase_since`.
    """
    phase = beat.phase if beat is not None else None
    since = beat.phase_since if beat is not None else None
    if phase is not None and since is not None:
        limit = limits.limit(phase)
        quiet = now - since
        if quiet >= limit:
            return f"no progress for {quiet:.0f} s inside phase {phase} (limit {limit:g} s)"
        return None
    if last_activity is None and beat is None:
        return None
    latest = max(x for x in (last_activity, beat.progress_time if beat is not None else None) if x is not None)
    quiet = now - latest
    if quiet >= stall:
        return f"no new record for {quiet:.0f} s (--stall {stall:g})"
    return None


def dead_rank(run_dir: str) -> str | None:
    """In a multi-rank run, the rank that died first, as a message: a rank whose heartbeat still
    says `running` while its process (on this host) is gone; the earliest heartbeat first."""
    from ..procs import alive

    beats, _problems = read_heartbeats(run_dir)
    if len(beats) < 2:
        return None
    dead = [b for b in beats.values() if b.state == "running" and is_local_host(b.host) and not alive(b.pid)]
    if not dead:
        return None
    first = min(dead, key=lambda b: (b.progress_time, b.rank))
    more = f" ({len(dead) - 1} more ranks gone too)" if len(dead) > 1 else ""
    return f"{first.label} died first: its heartbeat stopped at step {first.step} and its process is gone{more}"


def is_local_host(host: str | None) -> bool:
    """Whether `host` is this machine (no host recorded counts as local)."""
    if not host:
        return True
    here = socket.gethostname()
    return host in (here, here.split(".")[0], "localhost") or host.split(".")[0] == here.split(".")[0]


def process_host(run_dir: str, beat: Heartbeat | None = None) -> str | None:
    """The host the training runs on, as `launch.json` records it (else the watched heartbeat's)."""
    info = launch_info(run_dir)
    if info is not None and isinstance(info.get("host"), str) and info["host"]:
        return str(info["host"])
    return beat.host if beat is not None else None


# What a dead training printed last that says why: checked newest line first, most telling first.
_ERROR_PATTERNS = (
    re.compile(r"CUDA error|CUBLAS_STATUS|cuDNN error|CUDA out of memory|OutOfMemoryError|std::bad_alloc"),
    re.compile(r"NCCL.*(error|Error|ERROR|timeout|Timeout|timed out)|Watchdog caught collective operation timeout"),
    re.compile(r"\bCANCELLED\b.*|DUE TO TIME LIMIT|\bTIME LIMIT\b|DUE TO PREEMPTION|DUE TO NODE FAILURE"),
    re.compile(r"^Killed\b|\bKilled$"),
)
# What any other error line looks like: `ValueError: ...`, `error: ...`, `Killed`, `Segmentation fault`.
_ERROR_LINE = re.compile(
    r"(^|\s)[A-Za-z_][\w.]*(Error|Exception|Interrupt)\b|^(error|fatal|killed|segmentation fault)\b", re.IGNORECASE
)
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit|Warning)?(: .*)?$")


def _clip(line: str, n: int = 240) -> str:
    line = line.strip()
    return line if len(line) <= n else line[: n - 3] + "..."


def last_error(stdout_log: str, *, or_last_line: bool = False) -> str | None:
    """The last error line in the end of `stdout_log`: the last line of a Python traceback, a CUDA
    or NCCL error, `Killed`, a Slurm CANCELLED / TIME LIMIT line; None when there is none.

    `or_last_line`: when there is none of those, the last line that looks like an error
    (`ValueError: ...`, `error: ...`, `Segmentation fault`), else the last line the program printed
    (never `runwatch launch`'s own header): what a person reads first of a job that ended early."""
    try:  # a regular file only, never blocking (safeio): a FIFO or /dev/zero in its place is no error line
        lines = read_tail(stdout_log, ERROR_TAIL_BYTES).decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    for i in range(len(lines) - 1, -1, -1):
        line = lines[i].rstrip()
        if not line:
            continue
        if any(p.search(line) for p in _ERROR_PATTERNS):
            return _clip(line)
        if line.startswith("Traceback (most recent call last)"):
            # the traceback's last line: the first unindented line after its frames
            for later in lines[i + 1 :]:
                if later and not later[0].isspace() and _EXCEPTION_LINE.match(later.strip()):
                    return _clip(later)
    if not or_last_line:
        return None
    printed = [ln.strip() for ln in lines if ln.strip() and not ln.startswith(LAUNCH_HEADER)]
    if not printed:
        return None
    return _clip(next((ln for ln in reversed(printed) if _ERROR_LINE.search(ln)), printed[-1]))


def watching_record(
    pid: int,
    since: float,
    polled_at: float,
    step: Any,
    poll: float,
    state: dict[str, Any] | None = None,
    warnings: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """What `watchdog.json` holds while a watch runs (replaced by the verdict when it ends)."""
    out = {
        "verdict": "watching",
        "pid": pid,
        "host": socket.gethostname(),
        "since": since,
        "polled_at": polled_at,
        "step": step,
        "poll": poll,
        "warnings": warnings or [],
    }
    if state is not None:
        out["state"] = state
    return out


def watchdog_liveness(record: dict[str, Any], now: float | None = None) -> tuple[bool, str]:
    """`(alive, line)` for a `watching` record: alive while its pid runs (checked only on its own
    host) and it polled within 3 polls + 30 s."""
    from ..procs import alive

    now = time.time() if now is None else now
    pid = record.get("pid")
    polled = record.get("polled_at")
    given = record.get("poll")
    poll = float(given) if isinstance(given, (int, float)) else 5.0
    ago = now - polled if isinstance(polled, (int, float)) else None
    local = is_local_host(record.get("host") if isinstance(record.get("host"), str) else None)
    gone = local and isinstance(pid, int) and pid > 0 and not alive(pid)
    late = ago is None or ago > 3 * poll + WATCHING_EVERY_SECONDS
    when = "never" if ago is None else f"{_ago(ago)} ago"
    if gone or late:
        why = f"pid {pid} gone" if gone else f"pid {pid}"
        return False, f"watchdog not running ({why}, last poll {when})"
    return True, f"watchdog watching (pid {pid}, polled {when})"


def _ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 86400:.0f} d"
