"""The watch (`Watcher`, `runwatch watch`) and its replay (`check`, `runwatch check`) (docs/WATCHDOG.md).

    verdict = watch("runs/a", Options(stall=120))   # blocks; Verdict("done"|"anomaly", ...)
    result = check("runs/a")                        # every finding of the log as it stands

Data flows one way: the log → `source.RecordSource` (through the one `parsing.RecordParser`) →
`rules.Rules` → a Verdict. Every poll also checks time (stall, startup grace, timeout), the process
(`watchedprocess`: `--pid` or RUN_DIR/pid; exit.json read once), `--done` and `POLL_CHECKS`. Only
`watch()`'s caller decides the exit code (0 done, 7 anomaly). A supervisor sets one Watcher up an
attempt before its launch, hands it the process (`watch_process`) and asks its `source`, `trail`
and `process`. Command lines: `watchcommands`; options: `watchoptions`. Standard library only.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

from ..errors import InvalidRunError
from ..files import RunDir
from ..procs import process as _proc
from ..reading import (
    Polled,
    ReadOptions,
    Record,
    RecordParser,
    RecordSource,
    Target,
    Trail,
    holds_something,
    no_signal_message,
)
from . import liveness
from .replay import CheckResult as CheckResult
from .replay import check as check
from .replay import name_loss_key
from .rules import Finding, Rules, fmt_step
from .verdict import Verdict as Verdict
from .verdict import write_verdict
from .watchedprocess import WatchedProcess
from .watchoptions import Options as Options
from .watchoptions import load_options as load_options

# watchdog.json keeps the first this many warnings of a watch (more are printed, not kept).
MAX_WARNINGS = 20


def _rank_check(w: Watcher) -> Finding | None:
    """`rank_stall` / `straggler` from RUN_DIR/heartbeats/ (multi-rank runs; silent otherwise)."""
    return w.process.ranks(w.opts, w.run_dir, w.clock(), w.stale_sessions)


# Poll-time checks beyond the log: each is called once per poll with the Watcher and returns a
# Finding or None. Plug one in by appending it here.
POLL_CHECKS: list[Callable[[Watcher], Finding | None]] = [_rank_check]


class Watcher:
    """Follows one run and judges its latest session; `run()` blocks until a Verdict."""

    def __init__(
        self,
        target: str,
        opts: Options | None = None,
        *,
        stop_grace: float = _proc.STOP_GRACE_SECONDS,
        poll_checks: list[Callable[[Watcher], Finding | None]] | None = None,
        clock: Callable[[], float] = time.time,
        log: Callable[[str], None] | None = None,
        read: ReadOptions | None = None,
        out: Callable[[str], None] | None = None,
        started: float | None = None,
        stale_sessions: frozenset[str] = frozenset(),
        trail: Trail | None = None,
    ) -> None:
        """`started`: when `--timeout` counts from (default: now; supervise passes its own start,
        so the timeout is the whole supervision's). `stale_sessions`: sessions of earlier attempts
        whose heartbeat files may still lie in the run directory, never judged. `trail`: given
        every record read (supervise keeps the run's checkpoints in it, attempt after attempt)."""
        self.opts = opts or Options()
        self.target_arg = os.fspath(target)
        self.read = read  # --format, --pattern, --run (readers.ReadOptions)
        self.source = RecordSource(self.target_arg, read=read, maps=self.opts.maps)
        self.run_dir = self.source.target.run_dir
        self.stop_grace = stop_grace
        self.poll_checks = list(POLL_CHECKS if poll_checks is None else poll_checks)
        self.clock = clock
        self.log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self.out = out or (lambda line: print(line, flush=True))  # WARNING lines, on stdout
        now = clock()
        self.started = now if started is None else started
        self.waited = not os.path.exists(self.target_arg)  # the target was not there when the watch began
        self.grace_anchor = now
        self.grace_what: str | None = None  # what the startup grace counts from, when not the watch's start
        self.rules = Rules(self.opts, live=True)
        self.current: str | None = None  # the session being judged
        self.have_record = False  # a record of the current session was applied
        self.last_step: int | float = 0
        self.last_growth = -math.inf
        self.catching_up = True
        self.pending: Finding | None = None  # minimal telemetry catch-up: the current session's first finding
        self._max_steps_hint: int | None = None  # the log's own max_steps (trainer_state.json) applied
        self.process = WatchedProcess(self.opts.pid, self.log)  # the pid checked, its host, how it ended
        self.applied = 0  # records applied so far (the watching record is rewritten when it grows)
        self.signal = False  # a record of the log was read, in this watch or one it continues
        self.checkpoints = 0  # checkpoint events read so far (carried in the state)
        self._watching_at, self._watching_count = -math.inf, -1
        # Warnings reported so far (the first MAX_WARNINGS; watchdog.json keeps them), and those
        # of the session being caught up with (minimal telemetry: dropped if a relaunch follows).
        self.warnings: list[Finding] = []
        self.pending_warnings: list[Finding] = []
        self.named_loss_key = False  # the first finding said which key the loss is read from
        self.stale_sessions = stale_sessions
        self.trail = trail
        self._announced = False  # the log's path was named on stderr

    # --- reading -----------------------------------------------------------------------------

    @property
    def target(self) -> Target:
        return self.source.target

    @property
    def parser(self) -> RecordParser | None:
        return self.source.parser

    def _open(self) -> bool:
        """Set up the reading once the log exists; False while it does not."""
        opened = self.source.parser is not None
        ok = self.source.open()
        self.run_dir = self.source.target.run_dir  # the target, or a trainer_state.json, may have appeared
        if not ok:
            return False
        if not opened and self.source.sessions_by == "manifest":
            self._switch(self.source.parser.latest_session() if self.source.parser else None)
        return True

    def _switch(self, session: str | None) -> None:
        if self.current is not None and session != self.current and self.source.sessions_by == "manifest":
            self.log(f"runwatch watch: new session {session} in run.json; rules restart")
        self.current = session
        parser = self.parser
        start = parser.start_step(session) if parser else None  # (None for no session)
        self.rules.reset(start, parser.max_steps(session) if parser and session else None)
        self.have_record = False
        self.pending = None
        self.pending_warnings = []
        self.grace_anchor = self.clock()
        self.grace_what = None
        self.last_step = start if start is not None else 0

    def _polled(self, polled: Polled) -> None:
        """What a poll says beyond its records: a log read again, growth, a new session in
        run.json, the log's own max_steps."""
        if polled.restarted:
            self.log(f"runwatch watch: {self.target.log_path} was {polled.reset}; reading it again from the start")
            self.current = None
            self.rules.reset()
            if self.trail is not None:  # what it kept of the log before is void
                self.trail.clear()
        elif polled.reset:
            self.log(f"runwatch watch: {self.target.log_path}: a file was {polled.reset}; reading it again")
        if polled.grew and not self.catching_up:
            self.last_growth = self.clock()
        parser = self.parser
        if parser is None:
            return
        if parser.sessions_by == "manifest" and parser.latest_session() != self.current:
            self._switch(parser.latest_session())
        hint = parser.max_steps_hint
        if hint != self._max_steps_hint:
            self._max_steps_hint = hint
            if self.opts.max_steps is None:
                self.rules.facts.max_steps = hint

    def _mtime(self) -> float:
        mtime = self.source.mtime()
        return -math.inf if mtime is None else mtime

    # --- judging -----------------------------------------------------------------------------

    def _apply(self, rec: Record) -> Verdict | None:
        parser = self.parser
        assert parser is not None  # the record came from it
        if rec.session != self.current:  # (v1: `current` is always run.json's latest session)
            if parser.sessions_by == "manifest":
                if rec.session != parser.latest_session():  # a session a later one replaced: its findings
                    self.rules.learn(rec, parser.start_step(rec.session), parser.max_steps(rec.session))
                    return None  # dropped, what the rules learn of the run's history kept
            elif self.current is not None:
                self.log(f"runwatch watch: relaunch at step {fmt_step(rec.step)} ({rec.session}); rules restart")
            self._switch(rec.session)
        self.have_record = True
        # the step reached (replay.reached, inline: this runs for every record)
        if rec.kind != "other" or rec.step > self.last_step:
            self.last_step = rec.step
        self.applied += 1
        self.signal = True
        if rec.kind == "checkpoint":
            self.checkpoints += 1
        if parser.notes:
            for note in parser.notes:
                self.log(f"runwatch watch: {note}")
            parser.notes.clear()
        for finding in self.rules.observe(rec):
            finding = self._name_loss_key(finding)
            if not finding.stops:
                if self.catching_up and parser.sessions_by == "records":
                    self.pending_warnings.append(finding)
                else:
                    self._warn(finding)
            elif self.catching_up and parser.sessions_by == "records":
                if self.pending is None:
                    self.pending = finding
            else:
                return self._found(finding)
        if rec.kind == "end" and rec.reason == "normal":
            return self._done(rec.step, f"session {rec.session} ended normally at step {fmt_step(rec.step)}")
        return None

    def _name_loss_key(self, f: Finding) -> Finding:
        """The watch's first finding says which key the train loss is read from (a log without `loss`)."""
        key = self.parser.loss_key if self.parser is not None else None
        if self.named_loss_key or not key:
            return f
        self.named_loss_key = True
        return name_loss_key([f], key)[0]

    def _warn(self, f: Finding) -> None:
        """Report a warning: its `WARNING` line on stdout; watchdog.json keeps the first MAX_WARNINGS."""
        self.out(f.line())
        if len(self.warnings) < MAX_WARNINGS:
            self.warnings.append(f)

    def warning_dicts(self) -> list[dict[str, Any]]:
        """The warnings as watchdog.json holds them: kind, step, message."""
        return [{"kind": f.kind, "step": f.step, "message": f.message} for f in self.warnings]

    def _done(self, step: int | float, message: str) -> Verdict:
        return Verdict.done(step, message, self.clock(), self.warning_dicts())

    def _anomaly(self, kind: str, step: int | float, message: str, onset: int | float | None = None) -> Verdict:
        """The verdict of a finding of the watch's own (a stall, the process gone, a rank's)."""
        return Verdict.of(Finding(kind, step, message, onset=onset), self.clock(), warnings=self.warning_dicts())

    def _found(self, f: Finding) -> Verdict:
        if f.kind in ("session_error", "interrupted"):
            rank = liveness.dead_rank(self.run_dir)
            if rank is not None:  # a rank was killed and the others were stopped after it
                return self._dead("process_exit", f.step, rank)
        if f.kind == "session_error":
            return self._dead(f.kind, f.step, f.message, f.onset)
        return Verdict.of(f, self.clock(), warnings=self.warning_dicts())

    def _dead(self, kind: str, step: int | float, message: str, onset: int | float | None = None) -> Verdict:
        """A verdict about a dead process, with the last error line it printed to stdout.log."""
        last = liveness.last_error(RunDir(self.run_dir).stdout)
        if last is not None and last not in message:
            message = f"{message}; last error: {last}"
        return Verdict.of(Finding(kind, step, message, onset=onset), self.clock(), last, self.warning_dicts())

    def _read(self, final: bool = False) -> Verdict | None:
        """Read and judge new records; a Verdict when one decides the watch (`final`: the
        process is gone, so a step a reader holds back is complete)."""
        if not self._open():
            return None
        if not self._announced and self.waited:
            self._announced = True
            self.log(f"runwatch watch: {self.target_arg} appeared; reading {self.target.log_path}")
        apply, trail = self._apply, self.trail
        while True:
            polled = self.source.poll(final)
            self._polled(polled)
            records = iter(polled)  # parsed one at a time: the first verdict ends the judging
            for rec in records:
                if trail is not None:  # (a supervisor's: the run's checkpoints, attempt after attempt)
                    trail.add(rec, self.source.parser)
                v = apply(rec)
                if v is not None:
                    self._take_unjudged(records)  # the rest of what was read: kept, as a drain keeps it
                    return v
            if not polled.more:
                return None

    def poll_once(self) -> Verdict | None:
        """One poll: records, the done file, the process, poll checks, time."""
        try:
            v = self._read()
        except InvalidRunError as exc:  # run.json broken, log not a regular file, ...
            return self._anomaly("invalid_log", self.last_step, str(exc))
        if v is not None:
            if v.verdict == "done":
                # What the poll checks see (per-rank heartbeats) was written before the session's
                # end record: judge it before the run is called done.
                for check_fn in self.poll_checks:
                    f = check_fn(self)
                    if f is not None:
                        return self._found(f)
            return v
        if self.catching_up and self.parser is not None:
            self.catching_up = False
            for w in self.pending_warnings:
                self._warn(w)
            self.pending_warnings = []
            if self.pending is not None:
                p = self.pending
                return self._found(p)
        opts = self.opts
        if opts.done and os.path.exists(os.path.join(self.run_dir, opts.done)):
            return self._done(self.last_step, f"completion sentinel {opts.done} appeared")
        v = self._check_process()
        if v is not None:
            return v
        for check_fn in self.poll_checks:
            f = check_fn(self)
            if f is not None:
                return self._found(f)
        now = self.clock()
        if opts.timeout is not None and now - self.started >= opts.timeout:
            return self._anomaly(
                "timeout", self.last_step, f"the watch ran {now - self.started:.0f} s (--timeout {opts.timeout:g})"
            )
        beat = liveness.watched_heartbeat(self.run_dir, self.current if self._named_sessions() else None)
        if beat is not None and beat.session_id in self.stale_sessions:
            beat = None  # an earlier attempt's
        in_phase = beat is not None and beat.phase is not None
        if not self.have_record and not in_phase:
            if now - self.grace_anchor >= opts.startup_grace:
                what = (
                    self.grace_what
                    if self.grace_what is not None
                    else "after the watch began"
                    if self.current is None or self.grace_anchor == self.started
                    else f"after session {self.current} began"
                )
                return self._anomaly(
                    "stall",
                    self.last_step,
                    f"no record {now - self.grace_anchor:.0f} s {what} (--startup-grace {opts.startup_grace:g})"
                    + (f"; the log grew but gave no record ({self._no_signal()})" if self._silent() else ""),
                )
            return None
        last = max(self.last_growth, self._mtime()) if self.have_record else None
        message = liveness.stall_finding(now, last, beat, opts.phase_limits, opts.stall)
        if message is not None:
            return self._anomaly("stall", self.last_step, message)
        return None

    @property
    def last_record_time(self) -> float | None:
        """When the log last grew with a record (its mtime; a text log's lines carry no time of their own)."""
        t = max(self.last_growth, self._mtime()) if self.have_record else -math.inf
        return round(t, 3) if math.isfinite(t) else None

    def _silent(self) -> bool:
        """The log exists and holds something, yet no record of it was ever read."""
        return not self.signal and self.parser is not None and holds_something(self.target.log_path)

    def _no_signal(self) -> str:
        return no_signal_message(self.target, self.source.reader)

    def _named_sessions(self) -> bool:
        return self.parser is not None and self.parser.sessions_by == "manifest"

    def _check_process(self) -> Verdict | None:
        pid = self.process.current(self.run_dir)
        if pid is None or not self.process.checked_here() or _proc.alive(pid):
            return None
        # The process is gone: read the log to its end first; a normal session_end means done.
        v = self._read(final=True)
        if v is not None:
            return v
        if self.pending is not None:
            return self._found(self.pending)
        gone = self.process.why_gone(self.run_dir, pid, self._named_sessions())
        if gone is not None:
            return self._dead(gone[0], self.last_step, gone[1])
        # Nothing in the log's latest session stopped the watch (an error or a non-finite loss
        # would have): the process says it finished -- unless the format read nothing at all.
        if self._silent():
            return self._anomaly("no_signal", self.last_step, self._no_signal())
        return self._done(self.last_step, "process exited with status 0")

    def run(self) -> Verdict:
        """Poll until a verdict; write watchdog.json; stop the process on an anomaly if asked."""
        opts = self.opts
        timing = f"poll {opts.poll:g} s, stall {opts.stall:g} s, startup grace {opts.startup_grace:g} s"
        if self.waited:  # not there yet: its log's name would be a guess (TensorBoard files may appear)
            self.log(f"runwatch watch: waiting for {self.target_arg} to appear ({timing})")
        else:
            self._announced = True
            self.log(f"runwatch watch: {self.target.log_path} ({timing})")
        while True:
            v = self.poll_once()
            if v is not None:
                break
            self.heartbeat()
            time.sleep(opts.poll)
        try:
            write_verdict(self.run_dir, v)
        except OSError as exc:
            self.log(f"runwatch watch: could not write watchdog.json: {exc.strerror or exc}")
        if v.verdict == "anomaly" and opts.stop_on_anomaly:
            self.log("runwatch watch: " + self.process.stop(self.run_dir, self.stop_grace, f"a {v.kind}"))
        return v

    def heartbeat(self) -> None:
        """Rewrite watchdog.json's `watching` record (the watch's heartbeat and the state a restarted
        watch resumes from) when a poll applied records, or 30 s after the last one."""
        now = self.clock()
        if self.applied == self._watching_count and now - self._watching_at < liveness.WATCHING_EVERY_SECONDS:
            return
        self._watching_at, self._watching_count = now, self.applied
        if not os.path.isdir(self.run_dir):
            return  # the run directory does not exist yet: nothing to say there, and no folder to make
        record = liveness.watching_record(
            os.getpid(), self.started, now, self.last_step, self.opts.poll, self.state_dict(), self.warning_dicts()
        )
        try:
            write_verdict(self.run_dir, record)
        except (OSError, ValueError) as exc:
            self.log(f"runwatch watch: could not write watchdog.json: {exc}")

    def drain(self) -> None:
        """Read the rest of the log unjudged (its writer is gone): a relaunch's watch starts after it."""
        if not self._open():
            return
        while True:
            polled = self.source.poll(final=True)
            if polled.restarted:
                return
            self._take_unjudged(polled)
            if not polled.more:
                return

    def _take_unjudged(self, records: Iterable[Record]) -> None:
        """Count the checkpoints of `records` and keep them in the trail, without judging them."""
        for rec in records:
            if rec.kind == "checkpoint":
                self.checkpoints += 1
            if self.trail is not None:
                self.trail.add(rec, self.source.parser)

    def watch_process(self, pid: int, stale_sessions: frozenset[str]) -> None:
        """Check `pid`, launched after this watch was set up, from now on (its startup grace too)."""
        self.process = WatchedProcess(pid, self.log)
        self.stale_sessions = stale_sessions
        self.grace_anchor = self.clock()

    def expect_new_session(self) -> None:
        """A new process was launched on this log: judge its start under the startup grace."""
        self.have_record = False
        self.pending = None
        self.grace_anchor = self.clock()
        self.grace_what = "after the process was launched"

    # --- state --------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Where the watch is, as plain JSON: the source's reading position (the log offset and the
        parser's state), the rules' state and the watch's own."""
        return {
            **self.source.state_dict(),
            "current": self.current,
            "have_record": self.have_record,
            "last_step": self.last_step,
            "rules": self.rules.state_dict(),
            "checkpoints": self.checkpoints,
            "warnings": [f.to_json() for f in self.warnings],
            "named_loss_key": self.named_loss_key,
            "signal": self.signal,
        }

    def load_state_dict(self, state: dict[str, Any]) -> bool:
        """Continue from `state_dict()` instead of reading the log from its start; False (and
        nothing changed) when the state does not fit this log as it is now."""
        if not self._open() or not self.source.load_state_dict(state):
            return False
        self.checkpoints = int(state.get("checkpoints") or 0)
        self.current = state["current"]
        self.rules.load_state_dict(state["rules"])
        self.have_record = bool(state["have_record"])
        self.last_step = state["last_step"]
        self.warnings = [  # (each Finding.to_json())
            Finding(d["kind"], d["step"], d["message"], d.get("session"), d.get("onset"), d.get("severity", "warn"))
            for d in state.get("warnings") or ()
        ]
        self.named_loss_key = bool(state.get("named_loss_key"))
        self.signal = bool(state.get("signal", True))  # (a state written before this key: records were read)
        self.catching_up = False
        return True


def watch(target: str, options: Options | None = None, **kwargs: Any) -> Verdict:
    """Watch `target` (run dir, JSONL log or trainer_state.json) until done or an anomaly."""
    return Watcher(target, options, **kwargs).run()
