"""The training process as the watchdog sees it: alive or gone, how it ended, how to stop it.

A zombie (exited, not yet reaped) counts as gone. How a launched process ended is a fact that
its waiter wrote to `RUN_DIR/exit.json` (`read_exit`, `wait_exit`); a process that is our own
child is also reaped here and its exit status kept. Stopping goes through `proctree`: every
process of the attempt, not only the first. Standard library only; `/proc` is used where it
exists (Linux) to tell zombies apart.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..files import EXIT, RunDir, loads_object, read_bounded, read_json, read_tail
from .launched import refusal
from .proctree import ProcessTree, start_ticks
from .proctree import stop as _tree_stop

# --stop-on-anomaly (docs/WATCHDOG.md, "Rules on every poll"): wait at most 30 s after SIGTERM before SIGKILL.
STOP_GRACE_SECONDS = 30.0
# `oom` (docs/WATCHDOG.md, "Rules on every poll"): an out-of-memory death shows one of these in the tail of stdout.log.
OOM_PATTERNS = ("CUDA out of memory", "OutOfMemoryError", "std::bad_alloc", "MemoryError")
# The tail of stdout.log searched for them: a traceback and the allocator's message fit easily.
OOM_TAIL_BYTES = 64 * 1024
# The waiter writes exit.json within milliseconds of the process's end; on a loaded machine allow more.
EXIT_WAIT_SECONDS = 5.0

# The largest pid Linux gives (PID_MAX_LIMIT, 2**22): a larger number in a file names no process.
MAX_PID = 2**22

_reaped: dict[int, str] = {}


def _describe(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = str(sig)
        return f"killed by {name}"
    return f"exit status {os.WEXITSTATUS(status)}"


def _reap(pid: int) -> bool:
    """Reap `pid` if it is our child and has ended, keeping how it ended; whether it was."""
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except OSError:  # ChildProcessError: not our child
        return False
    if done != pid:
        return False
    _reaped[pid] = _describe(status)
    return True


def valid_pid(pid: object) -> bool:
    """Whether `pid` (read from a file anyone may have written) can name a process at all: an int
    from 1 to the kernel's largest (0 and -1 would name groups, a huge one overflows)."""
    return type(pid) is int and 0 < pid <= MAX_PID


def alive(pid: int) -> bool:
    """Whether process `pid` is running (a zombie is not)."""
    if not valid_pid(pid):
        return False
    if _reap(pid) or pid in _reaped:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, owned by someone else
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        state = data[data.rindex(b")") + 2 : data.rindex(b")") + 3]
    except (OSError, ValueError):
        return True
    if state in (b"Z", b"X"):
        _reap(pid)  # our child may have ended since the first look: keep how, for how_ended
        return False
    return True


def how_ended(pid: int) -> str | None:
    """How our child ended (`exit status 1`, `killed by SIGKILL`), reaping it if need be; else None."""
    _reap(pid)
    return _reaped.get(pid)


def read_pid_file(path: str, log: Callable[[str], None] | None = None) -> int | None:
    """The pid in `path` (an int > 0 on the first line), or None with a note when it is not one."""
    try:  # a FIFO named pid must not hang a poll
        text = read_bounded(path, 64).decode("ascii", "replace").strip()
    except OSError:
        return None
    if text.isdigit() and valid_pid(int(text)):
        return int(text)
    if log is not None:
        log(f"runwatch watch: {path}: expected a process id, got {text[:20]!r}; ignoring it")
    return None


def oom_line(stdout_log: str) -> str | None:
    """The last line in the tail of `stdout_log` that shows an out-of-memory error, else None."""
    try:
        tail = read_tail(stdout_log, OOM_TAIL_BYTES).decode("utf-8", "replace")
    except OSError:
        return None
    for line in reversed(tail.splitlines()):
        if any(p in line for p in OOM_PATTERNS):
            line = line.strip()
            return line if len(line) <= 200 else line[:197] + "..."
    return None


def launched_group(pid: int, run_dir: str) -> int | None:
    """The process group to signal when `runwatch launch` started `pid` in its own group, else None."""
    info = launch_info(run_dir)
    if info is None or info.get("pid") != pid or not isinstance(info.get("pgid"), int):
        return None
    try:
        if os.getpgid(pid) != info["pgid"]:  # the pid was reused by an unrelated process
            return None
    except OSError:
        return None
    return int(info["pgid"])


def launched_here(run_dir: str) -> int | None:
    """The pid in RUN_DIR/pid while that process runs here: alive, and when launch.json describes
    it, on this host and started when launch.json says (a requeued job on another node, or a pid
    the system gave to another process since, is not the training). None otherwise."""
    pid = read_pid_file(RunDir(run_dir).pid)
    if pid is None or not alive(pid):
        return None
    info = launch_info(run_dir)
    if info is None or info.get("pid") != pid:
        return pid
    host, ticks = info.get("host"), info.get("start_ticks")
    if isinstance(host, str) and host != socket.gethostname():
        return None
    if type(ticks) is int and start_ticks(pid) not in (None, ticks):
        return None
    return pid


def launch_info(run_dir: str) -> dict[str, Any] | None:
    """RUN_DIR/launch.json as an object, or None (absent, not JSON, not an object)."""
    info = read_json(RunDir(run_dir).launch)
    return info if isinstance(info, dict) else None


@dataclass(frozen=True, slots=True)
class Exit:
    """How a launched process ended, as `RUN_DIR/exit.json` records it."""

    pid: int
    status: int | None  # the exit status; None when a signal ended it
    signal: str | None  # the signal's name (SIGKILL), or None
    time: float

    def describe(self) -> str:
        """`exit status 1`, `killed by SIGKILL`."""
        return f"killed by {self.signal}" if self.signal else f"exit status {self.status}"


def read_exit(run_dir: str, pid: int) -> Exit | None:
    """`RUN_DIR/exit.json` when it describes `pid`, else None (absent, another pid, not one)."""
    try:
        rec = loads_object(read_bounded(os.path.join(run_dir, EXIT), 4096))
    except OSError:
        return None
    if rec is None or rec.get("pid") != pid:
        return None
    status, sig, t = rec.get("status"), rec.get("signal"), rec.get("time")
    if not ((type(status) is int and sig is None) or (status is None and isinstance(sig, str))):
        return None
    return Exit(pid, status, sig, float(t) if isinstance(t, (int, float)) else 0.0)


def wait_exit(run_dir: str, pid: int, timeout: float = EXIT_WAIT_SECONDS) -> Exit | None:
    """How `pid` ended: exit.json, waited for up to `timeout` s while its waiter still runs (it
    writes the file a moment after the process is gone); None when nothing recorded it."""
    info = launch_info(run_dir)
    waiter = info.get("waiter") if info is not None and info.get("pid") == pid else None
    end = time.monotonic() + timeout
    while True:
        ended = read_exit(run_dir, pid)
        if ended is not None or type(waiter) is not int or not alive(waiter) or time.monotonic() >= end:
            return ended
        time.sleep(0.02)


def stop(
    pid: int,
    run_dir: str,
    grace: float = STOP_GRACE_SECONDS,
    why: str = "an anomaly",
    *,
    where: str | None = None,
    given: bool = False,
) -> str:
    """Stop every process of the attempt `pid` leads (`proctree.stop`: SIGTERM, SIGCONT to the
    stopped ones, SIGKILL after `grace` s); a one-line note of what was done, for the caller to
    say in its own name. A pid read from the run directory (`where`, RUN_DIR/pid by default) is
    signalled only when runwatch can prove it launched it there (`launched`); else nothing is and
    the note is the refusal. `given`: the user named the pid himself (`watch --pid`)."""
    if not alive(pid):
        return f"process {pid} had already exited"
    tree = ProcessTree.of_launch(run_dir, pid)
    if tree is None or not tree.root_proven:
        if not given:
            reason = tree.refused if tree is not None and tree.refused else "launch.json does not record it"
            return refusal(pid, where or RunDir(run_dir).pid, reason)
        tree = ProcessTree.given(pid)  # the user's own word: that process and its descendants
    done = _tree_stop(tree, grace) if tree is not None else None
    if done is None or done.count == 0:
        return f"process {pid} had already exited"
    return f"stopped after {why}: {done.describe()}"
