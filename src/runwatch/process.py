"""The training process as the watchdog sees it: alive or gone, how it ended, how to stop it.

A zombie (exited, not yet reaped) counts as gone. When the process is our own child (`runwatch
launch --watch`), it is reaped here and its exit status kept for the verdict's message.
Standard library only; `/proc` is used where it exists (Linux) to tell zombies apart.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import time
from collections.abc import Callable

__all__ = ["alive", "exit_status", "read_pid_file", "oom_line", "stop", "STOP_GRACE_SECONDS", "OOM_PATTERNS"]

# --stop-on-anomaly (docs/WATCHDOG.md, "Rules on every poll"): wait at most 30 s after SIGTERM before SIGKILL.
STOP_GRACE_SECONDS = 30.0
# `oom` (docs/WATCHDOG.md, "Rules on every poll"): an out-of-memory death shows one of these in the tail of stdout.log.
OOM_PATTERNS = ("CUDA out of memory", "OutOfMemoryError", "std::bad_alloc", "MemoryError")
# The tail of stdout.log searched for them: a traceback and the allocator's message fit easily.
OOM_TAIL_BYTES = 64 * 1024

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


def alive(pid: int) -> bool:
    """Whether process `pid` is running (a zombie is not)."""
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
        _reap(pid)  # our child may have ended since the first look: keep how, for exit_status
        return False
    return True


def exit_status(pid: int) -> str | None:
    """How our reaped child ended (`exit status 1`, `killed by SIGKILL`), else None."""
    return _reaped.get(pid)


def read_pid_file(path: str, log: Callable[[str], None] | None = None) -> int | None:
    """The pid in `path` (an int > 0 on the first line), or None with a note when it is not one."""
    try:  # O_NONBLOCK and fstat: a FIFO named pid must not hang a poll
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            text = os.read(fd, 64).decode("ascii", "replace").strip()
        finally:
            os.close(fd)
    except OSError:
        return None
    if text.isdigit() and int(text) > 0:
        return int(text)
    if log is not None:
        log(f"runwatch watch: {path}: expected a process id, got {text[:20]!r}; ignoring it")
    return None


def oom_line(stdout_log: str) -> str | None:
    """The last line in the tail of `stdout_log` that shows an out-of-memory error, else None."""
    try:
        with open(stdout_log, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - OOM_TAIL_BYTES))
            tail = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    for line in reversed(tail.splitlines()):
        if any(p in line for p in OOM_PATTERNS):
            line = line.strip()
            return line if len(line) <= 200 else line[:197] + "..."
    return None


def launched_group(pid: int, run_dir: str) -> int | None:
    """The process group to signal when `runwatch launch` started `pid` in its own group, else None."""
    try:
        with open(os.path.join(run_dir, "launch.json"), "rb") as f:
            info = json.loads(f.read(1 << 20))
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or info.get("pid") != pid or not isinstance(info.get("pgid"), int):
        return None
    try:
        if os.getpgid(pid) != info["pgid"]:  # the pid was reused by an unrelated process
            return None
    except OSError:
        return None
    return int(info["pgid"])


def _signal(pid: int, group: int | None, sig: int) -> None:
    try:
        if group is not None:
            os.killpg(group, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        pass


def stop(pid: int, run_dir: str, grace: float = STOP_GRACE_SECONDS) -> str:
    """SIGTERM `pid` (its group when launched by runwatch), wait up to `grace` s, then SIGKILL.

    Returns a one-line note of what was done.
    """
    if not alive(pid):
        return f"runwatch watch: process {pid} had already exited"
    group = launched_group(pid, run_dir)
    what = f"process group {group}" if group is not None else f"process {pid}"
    _signal(pid, group, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not alive(pid):
            return f"runwatch watch: stopped {what} with SIGTERM"
        time.sleep(0.05)
    _signal(pid, group, signal.SIGKILL)
    for _ in range(100):
        if not alive(pid):
            break
        time.sleep(0.05)
    return f"runwatch watch: {what} ignored SIGTERM for {grace:g} s; sent SIGKILL"
