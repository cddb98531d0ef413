"""What a supervisor reads of its run's log, attempt by attempt (`Watching`): each attempt has one
`Watcher`, set up before its launch at the end of the log as it stands and then handed the
launched process, and so one `RecordSource` (the watcher's); everything the supervisor asks of the
log comes through them, and the log is never read again from its start at a launch:

- the checkpoint events counted and the step reached when an attempt begins: the earlier attempt's
  watch, drained once its writer is gone, hands its state on to the next one (`prepare`);
- the latest checkpoint to resume from and the highest step logged: from a `history.Trail` that
  every record read goes into, attempt after attempt (`latest_checkpoint`);
- the whole log's sessions, for the two decisions that need every record: the checkpoint a
  divergence rolls back to (the window that holds the onset, every save of the run) and the
  goodput at the end -- read once per decision, through the attempt's own source (`sessions`); a
  supervisor that adopts a training it did not launch reads them once to begin its trail;
- how the attempt's process ended: RUN_DIR/exit.json as its watch read it to judge the end, or
  read once here when the watch had no need to (`ended`).

What to do with what is read is `policy.decide`'s; `supervise.Supervisor` carries it out.
Standard library only.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ..errors import InvalidRunError, UsageError
from ..judging import Options, Watcher
from ..procs import process as _proc
from ..reading import ReadOptions, Session, Trail


class Watching:
    """The supervision's watches of RUN_DIR's log, one an attempt, and the trail they keep."""

    def __init__(
        self,
        target: str,
        watch: Options,
        read: ReadOptions,
        *,
        log: Callable[[str], None],
        out: Callable[[str], None],
        started: float,
    ) -> None:
        self.target, self.watch, self.read = target, watch, read
        self.log, self.out, self.started = log, out, started
        self.trail = Trail()  # every record read, kept thin: the run's checkpoints and steps
        self.watcher: Watcher | None = None  # the current attempt's watch
        self.state: dict[str, Any] | None = None  # where the log was read to (Watcher.state_dict)
        self.checkpoints = 0  # checkpoint events in the log when the next attempt begins
        self.last_step: int | float = 0  # the step the drained watch had judged to
        self._next: Watcher | None = None  # the next attempt's watch, set up before its launch
        self._resumed = False  # it goes on from a drained watch's state: the launched process's records are new

    def _new(self, quiet: bool = False) -> Watcher:
        if quiet:  # an attempt's log read, nothing judged (a verdict taken up from the journal)
            return Watcher(
                self.target, self.watch, poll_checks=[], log=lambda msg: None, read=self.read, trail=self.trail
            )
        return Watcher(
            self.target,
            self.watch,
            log=self.log,
            read=self.read,
            out=self.out,
            started=self.started,  # --timeout is the whole supervision's
            trail=self.trail,
        )

    def prepare(self) -> Watcher:
        """The next attempt's watch, before its launch, at the end of the log as it stands: the
        current attempt's watch drained (its writer is gone) and its state handed on; with none,
        what the log holds read without judging (its checkpoints counted, the trail kept) and the
        watch gone on from its own state, as the next watch of a drained one would."""
        if self._next is not None:
            return self._next
        w = self._new()
        prev = self.watcher
        if prev is not None:
            prev.drain()
            self.state = prev.state_dict()
            self.checkpoints, self.last_step = prev.checkpoints, prev.last_step
            self._resumed = w.load_state_dict(self.state)
        else:
            if self.state is not None:
                w.load_state_dict(self.state)
            w.drain()
            self._resumed = w.parser is not None  # (None: no log yet, or one read again from its start)
            if w.parser is not None:
                w.parser.notes.clear()  # said of records no watch judges
                w.load_state_dict(w.state_dict())
            self.state = w.state_dict()
            self.checkpoints, self.last_step = w.checkpoints, w.last_step
        if not self._resumed:  # (no log yet, or one read again meanwhile) the watch reads it from its start
            self.trail.clear()
        self._next = w
        return w

    def launched(self, pid: int, stale_sessions: frozenset[str]) -> None:
        """The attempt was launched (`pid`): its watch, `prepare`d, is the current one."""
        w = self.prepare()
        self._next = None
        w.watch_process(pid, stale_sessions)
        if self._resumed:
            w.expect_new_session()
        self.watcher = w

    def adopt(self, pid: int, state: dict[str, Any] | None, stale_sessions: frozenset[str]) -> None:
        """Watch `pid`, a training an earlier supervisor launched, from `state` (where that one's
        watch had read to; None: the log judged from its start); the run's history, unknown to
        this supervisor, read once to begin the trail."""
        w = self._new()
        if state is not None:
            w.load_state_dict(state)
        w.watch_process(pid, stale_sessions)
        self.watcher = w
        self.trail.seed(self.sessions())

    def current(self) -> Watcher:
        """The current attempt's watch; for an attempt this supervisor did not watch (a verdict
        taken up from the journal), one set up to read its log without judging it."""
        if self.watcher is None:
            w = self._new(quiet=True)
            if self.state is not None:
                w.load_state_dict(self.state)
            self.watcher = w
        return self.watcher

    def sessions(self) -> list[Session]:
        """The whole log's sessions, read once through the current attempt's source ([] when there
        is no log, or it cannot be read)."""
        try:
            return self.current().source.sessions()
        except (InvalidRunError, UsageError):
            return []

    def latest_checkpoint(self) -> str | None:
        """The run's latest checkpoint to resume from (`history.latest_checkpoint`), from the trail."""
        cp = self.trail.latest_checkpoint(cwd=os.getcwd())
        return cp.path if cp is not None else None

    def ended(self, run_dir: str, pid: int) -> _proc.Exit | None:
        """How the attempt's process `pid` ended (exit.json; None: not recorded, or still running):
        the read its watch made to judge its end, else read once now."""
        w = self.watcher
        return w.process.ended(run_dir, pid) if w is not None else _proc.read_exit(run_dir, pid)
