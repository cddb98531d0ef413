"""Proof that runwatch started a process, before anything signals it.

    why = not_launched(run_dir, pid)             # None: runwatch launched pid for this run
    why = not_supervisor(run_dir, pid)           # None: pid holds the run's supervise.lock
    refusal(pid, "runs/x/pid", why)              # "pid 4242 in runs/x/pid was not started by ..."

A pid read from a run directory (`pid`, `supervise.lock`, the journal's `supervisor`,
`launch.json`) may have been written by anyone who can write there, and may name any process the
reader can signal. So a process is signalled only when runwatch can prove it started it:
- a training (the launched command, or its waiter): `launch.json` describes the pid, its start
  time in clock ticks (`/proc/PID/stat`) is the one recorded at launch (a pid the system gave to
  another process since is not it), and its environment (`/proc/PID/environ`, fixed when it
  started) carries the launch's marker `RUNWATCH_ATTEMPT_ID` and `RUNWATCH_RUN_DIR` naming this
  run directory (`proctree.unproven`). Another user's process cannot be read, and a process of
  the same user that anything else started carries no such marker: writing a file forges neither.
- a supervisor: it holds the flock on the run's `supervise.lock` (`/proc/locks`), which only the
  one supervisor of the run directory takes.
Without `/proc` nothing can be proven, so nothing read from a run directory is signalled. Standard
library only.
"""

from __future__ import annotations

import os
import stat

from ..files import LOCK, RunDir, read_json
from .proctree import start_ticks, unproven

# What the refusal ends with: nothing was signalled.
NOT_STOPPED = "not stopped"
# /proc/locks lists every lock of the machine: a line each, a few thousand at most.
MAX_LOCKS_BYTES = 8 << 20


def refusal(pid: int, where: str, why: str, what: str = NOT_STOPPED) -> str:
    """`pid 4242 in runs/x/pid was not started by runwatch for this run: not stopped (why)`."""
    return f"pid {pid} in {where} was not started by runwatch for this run: {what} ({why})"


def not_launched(run_dir: str, pid: int) -> str | None:
    """None when runwatch launched `pid` as the training of `run_dir` (see the module docstring);
    else why it cannot say so, in a few words."""
    info = read_json(RunDir(run_dir).launch)
    if not isinstance(info, dict) or info.get("pid") != pid:
        return "launch.json does not record it"
    ticks, attempt = info.get("start_ticks"), info.get("attempt_id")
    return unproven(
        run_dir, pid, ticks if type(ticks) is int else None, attempt if isinstance(attempt, str) and attempt else None
    )


def _lock_id(run_dir: str) -> tuple[int, int] | None:
    """(device, inode) of the run's supervise.lock, a regular file reached without a symlink."""
    try:
        st = os.stat(os.path.join(run_dir, LOCK), follow_symlinks=False)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) else None


def not_supervisor(run_dir: str, pid: int) -> str | None:
    """None when `pid` holds the flock on `run_dir`'s supervise.lock; else why it cannot say so."""
    lock = _lock_id(run_dir)
    if lock is None:
        return "the run has no supervise.lock"
    if start_ticks(pid) is None:
        return "it is gone, or its start time cannot be read"
    try:
        with open("/proc/locks", "rb") as f:
            table = f.read(MAX_LOCKS_BYTES)
    except OSError:
        return "the system's locks cannot be read (/proc/locks)"
    dev, ino = lock
    want = f"{os.major(dev):02x}:{os.minor(dev):02x}:{ino}".encode()
    for line in table.splitlines():
        parts = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF"; a waiting lock has "->" after the number
        if len(parts) >= 6 and parts[1] == b"FLOCK" and parts[4] == str(pid).encode() and parts[5] == want:
            return None
    return "it does not hold the run's supervise.lock"
