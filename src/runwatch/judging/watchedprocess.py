"""The process a watch follows: the pid it was given (`watch --pid`, or the attempt `supervise`
launched) or RUN_DIR/pid's, read again whenever that file changes; the host launch.json says it
runs on (a process on another host is not checked from here); its ranks, through their heartbeat
files (`ranks.RankMonitor`); and how it ended, as RUN_DIR/exit.json records it -- read once: the
watch judges `process_exit` from that read, and `supervise` puts the same read in its verdict
record. Standard library only.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from ..files import RunDir
from ..procs import process as _proc
from . import liveness
from .ranks import RankMonitor
from .rules import Finding
from .watchoptions import Options


class WatchedProcess:
    """Which process a watch checks, where it runs, and how it ended (`ended`)."""

    def __init__(self, given: int | None, log: Callable[[str], None]) -> None:
        self.given = given  # named to the watch (--pid, or the attempt supervise launched); None: RUN_DIR/pid
        self.log = log
        self.pid: int | None = given
        self.remote_host: str | None = None  # the host launch.json names, when it is not this one
        self._sig: tuple[int, int, int] | None = None  # RUN_DIR/pid as last read: inode, size, mtime
        self._ended: tuple[int, _proc.Exit | None] | None = None  # (pid, exit.json's record of it), once read
        self._ranks: RankMonitor | None = None  # set up by the first `ranks`

    def current(self, run_dir: str) -> int | None:
        """The pid to check now: the one given, else RUN_DIR/pid's (read again when the file changed)."""
        if self.given is not None:
            return self.given
        path = RunDir(run_dir).pid
        try:
            st = os.stat(path)
        except OSError:
            return self.pid
        sig = (st.st_ino, st.st_size, st.st_mtime_ns)
        if sig != self._sig:
            self._sig = sig
            self.pid = _proc.read_pid_file(path, self.log)
            host = liveness.process_host(run_dir)
            self.remote_host = None if liveness.is_local_host(host) else host
            if self.remote_host is not None:
                self.log(
                    f"runwatch watch: the process runs on host {self.remote_host}: not checked from here; "
                    f"liveness from records and heartbeats"
                )
        return self.pid

    def checked_here(self) -> bool:
        """Whether this host can tell that the process is gone (a given pid always is checked)."""
        return self.given is not None or self.remote_host is None

    def ended(self, run_dir: str, pid: int, wait: bool = False) -> _proc.Exit | None:
        """How `pid` ended as RUN_DIR/exit.json records it (None: not recorded); `wait`: waited for
        while its waiter still runs (it writes the file a moment after the process is gone). Read
        once: asked again about the same pid, the first read's answer."""
        if self._ended is None or self._ended[0] != pid:
            self._ended = (pid, _proc.wait_exit(run_dir, pid) if wait else _proc.read_exit(run_dir, pid))
        return self._ended[1]

    def ranks(self, opts: Options, run_dir: str, now: float, ignore: frozenset[str]) -> Finding | None:
        """`rank_stall` / `straggler` of the process's ranks, from RUN_DIR/heartbeats/ (multi-rank
        runs; silent otherwise), heartbeat sessions in `ignore` left out."""
        if self._ranks is None:
            self._ranks = RankMonitor(opts.rank_stall, opts.straggler_factor, opts.straggler_patience)
        return self._ranks.poll(run_dir, now, ignore=ignore)

    def why_gone(self, run_dir: str, pid: int, named_sessions: bool) -> tuple[str, str] | None:
        """Why `pid` is gone, as a finding's kind and message (`oom`, or `process_exit` with how it
        ended, or the rank that died first); None when exit.json says it exited with status 0.
        `named_sessions`: run.json names the log's sessions, so each should end in a session_end
        (its absence is said)."""
        status = _proc.how_ended(pid)
        ended = self.ended(run_dir, pid, wait=True)
        if ended is not None and ended.status == 0:
            return None
        if ended is not None:
            status = ended.describe()
        oom = _proc.oom_line(RunDir(run_dir).stdout)
        if oom is not None:
            return "oom", f"process {pid} ran out of memory: {oom}"
        rank = liveness.dead_rank(run_dir)
        if rank is not None:
            return "process_exit", rank
        how = f" ({status})" if status else ""
        return "process_exit", f"process {pid} is gone{how}" + (
            " and the log has no normal session_end" if named_sessions else ""
        )

    def stop(self, run_dir: str, grace: float, why: str) -> str:
        """Stop the process (`--stop-on-anomaly`): a note of what was done, or why nothing was."""
        pid = self.current(run_dir)
        if pid is None:
            return "--stop-on-anomaly: no process to stop (no --pid, no RUN_DIR/pid)"
        # a pid named by the user, not read from the run directory, is signalled as named
        return _proc.stop(pid, run_dir, grace, why=why, given=self.given is not None)
