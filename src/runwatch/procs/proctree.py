"""Every process a launched training started, and how to stop them all (docs/SUPERVISE.md,
"Stopping the whole tree").

    tree = ProcessTree.of_launch(run_dir)          # from launch.json: the command, its waiter, its marker
    tree.members()                                 # {pid: Proc} of every live process of the attempt
    result = stop(tree, grace=30.0)                # SIGTERM (SIGCONT to stopped ones), SIGKILL after the grace
    result.count, result.describe()                # 3, "SIGTERM, then SIGKILL after 30 s (3 processes)"

A training is more than its first process: torchrun's agent starts each worker in a session of
its own, a data loader forks workers, a helper daemonises. On Linux the members of an attempt
are found from `/proc`. While the attempt's waiter (`waiter.py`) lives, they are its descendants:
it is a child subreaper, so every process the training started stays below it until it ends, even
after its own parent died; they are read from the tree's own `/proc/PID/task/*/children` files,
at a cost that grows with the tree, not with the machine. Otherwise (the waiter was killed, or
the kernel has no children files) one scan of every process (its parent, group, session, state
and start time) finds
- the descendants of the launched process, and (while it lives) the members of its session;
- every process whose environment carries the attempt's marker `RUNWATCH_ATTEMPT_ID=<id>`, set by
  `launch` and inherited by every process started from the training (the orphans of a killed
  waiter).

Zombies count as gone, and the waiter is never a member. A cgroup per attempt would find the same
processes where one can be created (root, or a delegated systemd slice); a Slurm job, a pod or an
unprivileged user has none, and the subreaper needs no privilege, so this is the one way (the
measurements are in benchmarks/README.md, "Stopping a process tree"). Without `/proc` (macOS) the
launched process group is signalled, as before.

Stopping sends SIGTERM to every member, then SIGCONT to those stopped by a signal (SIGSTOP,
SIGTSTP: a stopped process keeps a SIGTERM pending until it continues, so the order costs it no
work and it dies as it wakes), keeps doing so for members that appear meanwhile, and after the
grace SIGKILLs whatever is left. `stop` returns once none is left (or after `KILL_WAIT_SECONDS`
more, naming what still stands). A supervisor forwarding a signal to the training uses the same
`signal_all`. Standard library only.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..files.rundir import ENV_ATTEMPT_ID, RunDir, read_json

__all__ = [
    "Proc",
    "ProcessTree",
    "Stopped",
    "scan",
    "signal_all",
    "stop",
    "start_ticks",
    "KILL_WAIT_SECONDS",
]

# After SIGKILL the kernel frees a process within milliseconds, unless it sleeps uninterruptibly
# (a hung NFS or GPU driver call): wait this long, then report what is left rather than hang.
KILL_WAIT_SECONDS = 30.0
# How often the tree is read again while it stops: reading a torchrun tree's few processes takes
# about a millisecond (a scan of every process, the fallback, several: benchmarks/README.md), so
# the stop sees the last process go within this.
STOP_POLL_SECONDS = 0.05
_STOPPED_STATES = ("T", "t")  # stopped by a signal, or stopped while traced
_GONE_STATES = ("Z", "X")  # a zombie is gone: it only waits to be reaped


@dataclass(frozen=True, slots=True)
class Proc:
    """One process as `/proc/PID/stat` shows it."""

    pid: int
    ppid: int
    pgid: int
    sid: int
    state: str  # R, S, D, T (stopped), t (traced), Z (zombie), ...
    start: int  # start time in clock ticks after boot: (pid, start) names one process for good


def _read_stat(pid: int) -> Proc | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # the command name (field 2) is in parentheses and may hold spaces or parentheses itself
    rest = data[data.rfind(b")") + 2 :].split()
    try:
        return Proc(pid, int(rest[1]), int(rest[2]), int(rest[3]), rest[0].decode("ascii", "replace"), int(rest[19]))
    except (IndexError, ValueError):
        return None


def scan() -> dict[int, Proc] | None:
    """Every process of the machine (of this pid namespace), or None where there is no `/proc`."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    if "self" not in names:
        return None
    out = {}
    for name in names:
        if name.isdigit():
            p = _read_stat(int(name))
            if p is not None:
                out[p.pid] = p
    return out


def _children(pid: int) -> list[int] | None:
    """The children of `pid` from `/proc/PID/task/*/children` (every thread's), [] when it is gone;
    None where the kernel has no such file (CONFIG_PROC_CHILDREN, present since Linux 3.5 on the
    usual distributions' kernels)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    out: list[int] = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                out.extend(int(x) for x in f.read().split())
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # the thread ended meanwhile
            return None
        except OSError:
            continue
    return out


def _below(root: int) -> dict[int, Proc] | None:
    """Every live descendant of `root`, reading only the tree's own `/proc` entries; None where
    the children files are missing."""
    found: dict[int, Proc] = {}
    todo = [root]
    while todo:
        kids = _children(todo.pop())
        if kids is None:
            return None
        for pid in kids:
            if pid in found:
                continue
            p = _read_stat(pid)
            if p is None:
                continue
            found[pid] = p
            todo.append(pid)
    return {pid: p for pid, p in found.items() if p.state not in _GONE_STATES}


def _has_marker(pid: int, needle: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            data = f.read()
    except OSError:  # another user's process, or gone
        return False
    return needle in b"\0" + data


@dataclass
class ProcessTree:
    """The processes of one launched attempt: `root` (the launched command), found through its
    `waiter` and its `marker` (see the module docstring). `root_start` and `waiter_start` (clock
    ticks, from launch.json) guard against a reused pid."""

    root: int
    waiter: int | None = None
    marker: str | None = None
    root_start: int | None = None
    waiter_start: int | None = None
    group: int | None = None  # the process group to signal where there is no /proc
    _scan: Callable[[], dict[int, Proc] | None] = field(default=scan, repr=False)

    @classmethod
    def of_launch(cls, run_dir: str, pid: int | None = None) -> ProcessTree | None:
        """The tree `runwatch launch` recorded in RUN_DIR/launch.json (for `pid`, when given);
        for a pid that launch.json does not describe, the tree of that process alone."""
        info = read_json(RunDir(run_dir).launch)
        if not isinstance(info, dict) or type(info.get("pid")) is not int or (pid is not None and info["pid"] != pid):
            return None if pid is None else cls(pid, group=None)

        def whole(key: str) -> int | None:
            v = info.get(key)
            return v if type(v) is int else None

        marker = info.get("attempt_id")
        root = int(info["pid"])
        group = whole("pgid")
        try:
            if group is not None and os.getpgid(root) != group:
                group = None  # the pid was reused by an unrelated process
        except OSError:
            group = None
        return cls(
            root,
            waiter=whole("waiter"),
            marker=marker if isinstance(marker, str) and marker else None,
            root_start=whole("start_ticks"),
            waiter_start=whole("waiter_start_ticks"),
            group=group,
        )

    def _same(self, procs: dict[int, Proc], pid: int | None, start: int | None) -> bool:
        p = procs.get(pid) if pid is not None else None
        return p is not None and p.state not in _GONE_STATES and (start is None or p.start == start)

    def members(self) -> dict[int, Proc]:
        """Every live process of the attempt, by pid (the waiter and this process left out).

        While the waiter lives, its descendants are all of them (it adopts every orphan), read
        from the tree's own `/proc/PID/task/*/children` files: the cost grows with the tree, not
        with the machine. Else one scan of every process (see the module docstring)."""
        if self.waiter is not None and self._scan is scan:
            w = _read_stat(self.waiter)
            if w is not None and w.state not in _GONE_STATES and w.start == (self.waiter_start or w.start):
                below = _below(self.waiter)
                if below is not None:
                    below.pop(os.getpid(), None)
                    return below
        procs = self._scan()
        if procs is None:  # no /proc: the launched process alone stands for its group
            return {self.root: Proc(self.root, 0, self.group or self.root, 0, "?", 0)} if _alive(self.root) else {}
        children: dict[int, list[int]] = {}
        for p in procs.values():
            children.setdefault(p.ppid, []).append(p.pid)
        waiter_here = self._same(procs, self.waiter, self.waiter_start)
        root_here = self._same(procs, self.root, self.root_start)
        seeds: list[int] = []
        if waiter_here and self.waiter is not None:
            seeds.extend(children.get(self.waiter, ()))
        if root_here:
            seeds.append(self.root)
            seeds.extend(pid for pid, p in procs.items() if p.sid == self.root)
        if self.marker is not None:
            needle = f"\0{ENV_ATTEMPT_ID}={self.marker}\0".encode()
            floor = self.root_start or 0
            seeds.extend(pid for pid, p in procs.items() if p.start >= floor and _has_marker(pid, needle))
        found: set[int] = set()
        while seeds:
            pid = seeds.pop()
            if pid in found:
                continue
            found.add(pid)
            seeds.extend(children.get(pid, ()))
        found.discard(os.getpid())
        if self.waiter is not None:
            found.discard(self.waiter)
        return {pid: procs[pid] for pid in found if procs[pid].state not in _GONE_STATES}


@dataclass(frozen=True)
class Stopped:
    """What `stop` did."""

    count: int  # processes of the attempt that were signalled
    continued: int  # of them, stopped by a signal: sent SIGCONT
    killed: int  # of them, still there after the grace: sent SIGKILL
    left: tuple[int, ...]  # pids still there KILL_WAIT_SECONDS after SIGKILL
    grace: float
    seconds: float  # from the first signal until none was left

    def describe(self) -> str:
        """`SIGTERM, then SIGKILL after 30 s (3 processes; 1 was stopped: SIGCONT)`."""
        how = "SIGTERM" if not self.killed else f"SIGTERM, then SIGKILL after {self.grace:g} s"
        what = f"{self.count} process" + ("es" if self.count != 1 else "")
        if self.continued:
            what += f"; {self.continued} {'was' if self.continued == 1 else 'were'} stopped by a signal: SIGCONT"
        if self.left:
            shown = ", ".join(str(p) for p in self.left[:5])
            what += f"; still there after SIGKILL: {shown}"
        return f"{how} ({what})"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _send(tree: ProcessTree, p: Proc, sig: int) -> None:
    try:
        if p.state == "?" and tree.group is not None:  # no /proc: the launched group
            os.killpg(tree.group, sig)
        else:
            os.kill(p.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def signal_all(tree: ProcessTree, sig: int) -> dict[int, Proc]:
    """Send `sig` to every member now (SIGCONT after it to those stopped by a signal); the members."""
    members = tree.members()
    for p in members.values():
        _send(tree, p, sig)
    for p in members.values():
        if p.state in _STOPPED_STATES:
            _send(tree, p, signal.SIGCONT)
    return members


def stop(
    tree: ProcessTree,
    grace: float,
    *,
    poll: float = STOP_POLL_SECONDS,
    kill_wait: float = KILL_WAIT_SECONDS,
) -> Stopped:
    """SIGTERM every member (SIGCONT to the stopped ones), again for any that appear, SIGKILL after
    `grace` seconds whatever is left; return once none is left (see the module docstring)."""
    t0 = time.monotonic()
    seen: set[int] = set()
    continued: set[int] = set()

    def term(members: dict[int, Proc]) -> None:
        new = {pid: p for pid, p in members.items() if pid not in seen}
        for p in new.values():
            _send(tree, p, signal.SIGTERM)
        seen.update(new)
        for p in members.values():  # a process stopped again after our SIGCONT gets another
            if p.state in _STOPPED_STATES:
                _send(tree, p, signal.SIGCONT)
                continued.add(p.pid)

    members = tree.members()
    if not members:
        return Stopped(0, 0, 0, (), grace, 0.0)
    term(members)
    deadline = t0 + grace
    while True:
        time.sleep(poll)
        members = tree.members()
        if not members:
            return Stopped(len(seen), len(continued), 0, (), grace, time.monotonic() - t0)
        if time.monotonic() >= deadline:
            break
        term(members)
    killed = set(members)
    seen.update(members)
    end = time.monotonic() + kill_wait
    while members and time.monotonic() < end:
        for p in members.values():
            _send(tree, p, signal.SIGKILL)
        killed.update(members)
        seen.update(members)
        time.sleep(poll)
        members = tree.members()
    return Stopped(len(seen), len(continued), len(killed), tuple(sorted(members)), grace, time.monotonic() - t0)


def start_ticks(pid: int) -> int | None:
    """The start time of `pid` in clock ticks after boot (Linux; None elsewhere or when gone),
    which launch.json keeps so that a reused pid is never taken for the training."""
    p = _read_stat(pid)
    return p.start if p is not None else None
