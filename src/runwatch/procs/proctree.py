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

Zombies count as gone, and the waiter is never a member. Only what runwatch can prove it started
is a member (`launched.py`, docs/RELIABILITY.md): the launched process and the waiter are taken
only when their start time is launch.json's and their environment carries the launch's marker
for the run directory; launch.json itself is anyone's to write. A cgroup per attempt would find the same
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

from ..files import ENV_ATTEMPT_ID, ENV_RUN_DIR, RunDir, read_json

# After SIGKILL the kernel frees a process within milliseconds, unless it sleeps uninterruptibly
# (a hung NFS or GPU driver call): wait this long, then report what is left rather than hang.
KILL_WAIT_SECONDS = 30.0
# How often the tree is read again while it stops: reading a torchrun tree's few processes takes
# about a millisecond (a scan of every process, the fallback, several: benchmarks/README.md), so
# the stop sees the last process go within this.
STOP_POLL_SECONDS = 0.05
_STOPPED_STATES = ("T", "t")  # stopped by a signal, or stopped while traced
_GONE_STATES = ("Z", "X")  # a zombie is gone: it only waits to be reaped
# /proc/PID/environ of a training holds its whole environment: a few hundred KB at most.
MAX_ENVIRON_BYTES = 8 << 20


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


def environ(pid: int) -> bytes | None:
    """The environment `pid` started with (`/proc/PID/environ`, NUL-separated), or None (another
    user's process, gone, no /proc)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read(MAX_ENVIRON_BYTES)
    except OSError:
        return None


def carries_marker(pid: int, run_dir: str, attempt_id: str) -> str | None:
    """None when the environment of `pid` carries the launch's marker for `run_dir`
    (`RUNWATCH_ATTEMPT_ID=<attempt_id>` and `RUNWATCH_RUN_DIR` naming `run_dir`); else why not."""
    env = environ(pid)
    if env is None:
        return "its environment cannot be read"
    values: dict[bytes, bytes] = {}
    for item in env.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep and key in (ENV_ATTEMPT_ID.encode(), ENV_RUN_DIR.encode()):
            values[key] = value
    if values.get(ENV_ATTEMPT_ID.encode()) != attempt_id.encode():
        return f"its environment has no {ENV_ATTEMPT_ID} of the launch that launch.json records"
    marked = values.get(ENV_RUN_DIR.encode(), b"").decode("utf-8", "replace")
    if not marked or os.path.realpath(marked) != os.path.realpath(run_dir):
        return f"its {ENV_RUN_DIR} is not this run directory"
    return None


def unproven(run_dir: str, pid: int, ticks: int | None, marker: str | None) -> str | None:
    """None when `pid` is a process runwatch launched for `run_dir`: its start time is `ticks` (from
    launch.json) and its environment carries the launch's `marker` for `run_dir`; else why not."""
    if ticks is None or marker is None:
        return "launch.json records no start time or marker for it"
    now = start_ticks(pid)
    if now is None:
        return "it is gone, or its start time cannot be read"
    if now != ticks:
        return "its start time is not the one launch.json records"
    return carries_marker(pid, run_dir, marker)


@dataclass
class ProcessTree:
    """The processes of one launched attempt: `root` (the launched command), found through its
    `waiter` and its `marker` (see the module docstring). `root_start` and `waiter_start` (clock
    ticks, from launch.json) guard against a reused pid.

    Only what runwatch can prove it started is ever a member (docs/RELIABILITY.md): `of_launch`
    takes the root and the waiter only when their start time is launch.json's and their
    environment carries the launch's marker for the run directory (`carries_marker`); otherwise
    `refused` says why the root was not taken, and only processes carrying the marker are found."""

    root: int
    waiter: int | None = None
    marker: str | None = None
    root_start: int | None = None
    waiter_start: int | None = None
    group: int | None = None  # the process group to signal where there is no /proc
    run_dir: str | None = None  # the run directory the marker names (None: the marker alone)
    root_proven: bool = True  # the root is runwatch's launch (or a pid the user gave)
    refused: str | None = None  # why the root was not taken, when it was not
    _scan: Callable[[], dict[int, Proc] | None] = field(default=scan, repr=False)

    @classmethod
    def of_launch(cls, run_dir: str, pid: int | None = None) -> ProcessTree | None:
        """The tree `runwatch launch` recorded in RUN_DIR/launch.json (for `pid`, when given), with
        only what can be proven runwatch's (see the class docstring); None when launch.json
        describes no launch. For a pid it does not describe: a tree that takes nothing but the
        processes that carry the marker of the launch it does describe, `refused` saying why."""
        return cls.of_info(read_json(RunDir(run_dir).launch), run_dir, pid)

    @classmethod
    def of_info(cls, info: object, run_dir: str, pid: int | None = None) -> ProcessTree | None:
        """`of_launch` from what launch.json holds (`info`, the file's content or the launch's own
        record of it before the file was written)."""
        if not isinstance(info, dict) or type(info.get("pid")) is not int:
            if pid is None:
                return None
            return cls(pid, run_dir=run_dir, root_proven=False, refused="launch.json does not record it")

        def whole(key: str) -> int | None:
            v = info.get(key)
            return v if type(v) is int else None

        marker = info.get("attempt_id")
        marker = marker if isinstance(marker, str) and marker else None
        root = int(info["pid"])
        refused = unproven(run_dir, root, whole("start_ticks"), marker)
        if pid is not None and pid != root:
            root, refused = pid, "launch.json does not record it"
        group = whole("pgid")
        try:
            if group is not None and (refused is not None or os.getpgid(root) != group):
                group = None  # the pid was reused by an unrelated process
        except OSError:
            group = None
        waiter, waiter_start = whole("waiter"), whole("waiter_start_ticks")
        if waiter is not None and unproven(run_dir, waiter, waiter_start, marker) is not None:
            waiter = waiter_start = None  # not the launch's waiter: its children are nobody's to stop
        return cls(
            root,
            waiter=waiter,
            marker=marker,
            root_start=whole("start_ticks"),
            waiter_start=waiter_start,
            group=group,
            run_dir=run_dir,
            root_proven=refused is None,
            refused=refused,
        )

    @classmethod
    def given(cls, pid: int) -> ProcessTree:
        """The tree of a pid the user named himself (`watch --pid`): that process and its descendants."""
        return cls(pid)

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
            if not self.root_proven or self.run_dir is not None:
                return {}  # nothing read from a run directory can be proven without /proc
            return {self.root: Proc(self.root, 0, self.group or self.root, 0, "?", 0)} if _alive(self.root) else {}
        children: dict[int, list[int]] = {}
        for p in procs.values():
            children.setdefault(p.ppid, []).append(p.pid)
        waiter_here = self._same(procs, self.waiter, self.waiter_start)
        root_here = self.root_proven and self._same(procs, self.root, self.root_start)
        seeds: list[int] = []
        if waiter_here and self.waiter is not None:
            seeds.extend(children.get(self.waiter, ()))
        if root_here:
            seeds.append(self.root)
            seeds.extend(pid for pid, p in procs.items() if p.sid == self.root)
        if self.marker is not None:
            needle = f"\0{ENV_ATTEMPT_ID}={self.marker}\0".encode()
            floor = self.root_start or 0
            for pid, p in procs.items():
                if p.start < floor or needle not in b"\0" + (environ(pid) or b""):
                    continue
                if self.run_dir is None or carries_marker(pid, self.run_dir, self.marker) is None:
                    seeds.append(pid)
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
