"""`runwatch supervise RUN_DIR [watch options] [--restarts N] ... -- CMD ...`: keep a long run alive.

Launches CMD as `runwatch launch` does, watches it with every watch rule, and acts on each
verdict by its class (docs/SUPERVISE.md):

    done        wait --exit-grace for the process to exit (stop it if it lingers); exit 0
    transient   stop it; back off; relaunch CMD unchanged (it resumes from its latest checkpoint)
    divergence  stop it; relaunch with RUNWATCH_RESUME_FROM / _ROLLBACK / _SKIP_STEPS pointing at
                the latest checkpoint before the trouble began
    fatal       stop it; exit 7 -- as does a spent budget (--restarts, --rollbacks: `gave_up`'s code)

SIGTERM or SIGUSR1 (a scheduler's preemption) stops the whole tree within --preempt-grace and
exits with the `preempted` code (75), after `scontrol requeue` under --requeue; Ctrl-C stops it
and exits 130. Every action goes to `RUN_DIR/supervise.jsonl` (one JSON object a line); the last
record of an allocation (`done`, `gave_up`, `preempted`) carries the run's goodput. One supervisor
a run directory (`supervise.lock`); a supervisor started again after it was killed adopts the
training that still runs, and one started after a preemption (a requeued job) continues the
budgets, attempt numbers and goodput. --heartbeat-url pings a dead-man monitor while records
arrive. Standard library only (Apprise for --notify, imported when asked for).

The supervisor decides and acts; the watcher reads. What to do with a verdict (relaunch, roll
back, give up; the budgets, the back-off) is a pure function of the journal (`policy.py`) that
`_act` carries out; how a supervisor takes up its run directory (continue, adopt, take up an
action) is `beginning.py`'s; what it reads of the log -- one watch and one RecordSource an
attempt, the run's checkpoints kept as they are read, exit.json read once -- is `watching.py`'s;
its options, counters and journal records (`supervision.py`), the signals that stop it
(`preemption.py`), goodput (`goodput.py`), the scheduler (`scheduler.py`) and the dead-man
heartbeat (`deadman.py`) live in their own places.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

from .. import lazy
from ..errors import EXIT_INTERRUPTED, EXIT_USAGE, UsageError
from ..files import ENV_RESUME_FROM, RESUME_ENV, RunDir, read_heartbeats
from ..files import JOURNAL as JOURNAL
from ..files import LOCK as LOCK
from ..judging import Finding, Options, Verdict, last_error, write_verdict
from ..procs import process as _proc
from ..procs import proctree, reap, refusal
from ..reading import ReadOptions, Session, latest_checkpoint
from .beginning import begin
from .deadman import DeadMan
from .goodput import goodput, goodput_line
from .launch import abandon, launch, reading_record, watch_read
from .notify import Notifier, mask_url
from .policy import MAX_BACKOFF_SECONDS as MAX_BACKOFF_SECONDS
from .policy import Attempt, decide, progress, rollback_facts, stopped
from .preemption import PREEMPT_SIGNALS as PREEMPT_SIGNALS
from .preemption import StopSignals
from .scheduler import SlurmJob, requeue
from .supervision import Counters, append, journal_entry, lock_run_dir, read_journal, stdout_tail
from .supervision import SuperviseOptions as SuperviseOptions
from .supervision import supervise_status as supervise_status
from .watching import Watching

# Lines of stdout.log that go with an anomaly's notification.
NOTIFY_TAIL_LINES = 20
_NOTIFIED = ("verdict", "warning", "rollback", "relaunch", "done", "gave_up", "preempted")
ENDED_GRACE_SECONDS = 10.0  # how long a process whose session ended (error, interrupted) may take to exit by itself


# --- the supervisor -------------------------------------------------------------------------------


class Supervisor:
    """One supervision of RUN_DIR; `run()` returns the exit status (0 done, else the code of the
    outcome: `--exit-code`'s, by default 7 for gave up or fatal and 75 for preempted)."""

    def __init__(
        self,
        run_dir: str,
        cmd: list[str],
        watch: Options | None = None,
        opts: SuperviseOptions | None = None,
        *,
        read: ReadOptions | None = None,
        stop_grace: float = _proc.STOP_GRACE_SECONDS,
        out: Callable[[str], None] | None = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
        if not cmd:
            raise UsageError("supervise: no command given (runwatch supervise RUN_DIR -- CMD ...)")
        self.run_dir = os.path.abspath(os.fspath(run_dir))
        self.cmd = list(cmd)
        self.watch = watch or Options()
        self.opts = opts or SuperviseOptions()
        self.read = watch_read(read or ReadOptions())  # how the watch reads RUN_DIR's log (--log, ...)
        self.target = self.run_dir  # what the watch follows: RUN_DIR owns the run, whatever --log names
        self.stop_grace = stop_grace
        self.out = out or (lambda line: print(line, flush=True))
        self.log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self.host = socket.gethostname()
        self.started = time.time()
        self.counters = Counters()  # attempt, budgets spent, ...: carried by every journal record
        self.pid: int | None = None
        self.fresh = 0  # records the attempt wrote, as far as its watch has read
        # the log as the supervision reads it: one watch (and RecordSource) an attempt, the run's checkpoints
        self.reads = Watching(self.target, self.watch, self.read, log=self.log, out=self.out, started=self.started)
        self.adopted = False  # the current attempt was launched by an earlier supervisor
        self.signals = StopSignals(self._kill_now)  # a preemption or Ctrl-C asks the supervisor to stop
        self.killed_at_once = False  # a second Ctrl-C SIGKILLed the training
        self.slurm = SlurmJob.from_env()
        self.continued = False  # this supervisor continues an earlier allocation's budgets
        self.notifier: Notifier | None = None
        url = self.opts.heartbeat_url
        self.deadman = DeadMan(url, self.opts.heartbeat_every) if url else None
        self.waiters: set[int] = set()  # the waiters of this supervisor's attempts, to reap
        self._lock_fd: int | None = None
        self.launched: dict[str, Any] | None = None  # launch.json of the latest launch, kept in memory

    # --- the run directory ---------------------------------------------------------------------

    def _prepare(self) -> None:
        """Check the run directory can be written, take the lock; UsageError before launching anything."""
        if self.opts.requeue and self.slurm is None:
            raise UsageError("supervise: --requeue needs a Slurm job (SLURM_JOB_ID is not set)")
        self._lock_fd = lock_run_dir(self.run_dir)

    def _record(self, event: str, verdict: Verdict | None = None, **fields: Any) -> dict[str, Any]:
        """Append one action to supervise.jsonl (one write of one whole line)."""
        rec = journal_entry(event, self.counters, self.opts, self.pid, verdict, **fields)
        append(self.run_dir, rec)
        if event in _NOTIFIED and self.notifier is not None:
            self._notify(self.notifier, event, rec, verdict)
        return rec

    def _notify(self, notifier: Notifier, event: str, rec: dict[str, Any], verdict: Verdict | None) -> None:
        c = self.counters
        body = [
            rec.get("line") or (verdict.line() if verdict is not None else f"{event} attempt {c.attempt}"),
            f"event: {event} (attempt {c.attempt}, restarts {c.restarts}/{self.opts.restarts}, "
            f"rollbacks {c.rollbacks}/{self.opts.rollbacks})",
            f"run: {self.run_dir}",
            f"host: {self.host}",
        ]
        if rec.get("checkpoint"):
            body.append(f"checkpoint: {rec['checkpoint']}")
        if verdict is not None and verdict.verdict == "anomaly":
            body += ["last lines of stdout.log:", *stdout_tail(self.run_dir, NOTIFY_TAIL_LINES)]
        for failure in notifier.send(f"runwatch {event}: {os.path.basename(self.run_dir)}", "\n".join(body)):
            self.log(f"runwatch supervise: notification to {failure['url']} failed: {failure['error']}")
            self.notifier = None  # the failure's own record is not notified
            try:
                self._record("notify_failed", url=failure["url"], error=failure["error"], about=event)
            finally:
                self.notifier = notifier

    # --- actions -------------------------------------------------------------------------------

    def _launch(self, event: str, env: dict[str, str], **fields: Any) -> None:
        self.reads.prepare()  # the attempt's watch, at the end of the log as it stands
        self.counters.checkpoints_at_launch = self.reads.checkpoints
        self.counters.high_step = max(self.counters.high_step, self.reads.last_step)
        full = {k: v for k, v in os.environ.items() if k not in RESUME_ENV}
        full.update(env)
        self.counters.env = dict(env)
        self.counters.attempt += 1
        self.fresh = 0
        self.adopted = False
        # the heartbeat files lying there now belong to earlier attempts: never judged in this one
        beats, _problems = read_heartbeats(self.run_dir)
        self.counters.stale_sessions = frozenset(b.session_id for b in beats.values())
        cmd = self._command(resumed=event != "launch" or self._continues())
        reap(self.waiters)
        self.launched = info = launch(
            self.run_dir, cmd, env=full, reading=reading_record(self.read, self.watch, "supervise")
        )
        self.pid = info["pid"]
        self.reads.launched(self.pid, self.counters.stale_sessions)
        if type(info.get("waiter")) is int:
            self.waiters.add(info["waiter"])
        if self.counters.first_launch is None:
            self.counters.first_launch = float(info["time"])
        fields.setdefault("checkpoint", env.get(ENV_RESUME_FROM) or self.reads.latest_checkpoint())
        fields.update(self._facts(), launched_at=round(float(info["time"]), 3))
        if self.continued:
            fields["continued"] = True  # the first launch of a new allocation
            self.continued = False
        self.log(
            f"runwatch supervise: {event}: attempt {self.counters.attempt}, pid {self.pid}"
            + (
                f", resuming from {env['RUNWATCH_RESUME_FROM']}, skipping steps {env['RUNWATCH_SKIP_STEPS']}"
                if env
                else ""
            )
        )
        self._record(event, command=cmd if event == "launch" or cmd != self.cmd else None, **fields)

    def _facts(self) -> dict[str, Any]:
        """What a launch record holds besides the action: the Slurm job, and the log watched (for
        `runwatch goodput`)."""
        facts = self.slurm.facts() if self.slurm is not None else {}
        reading = reading_record(self.read, self.watch, "supervise")
        facts["log"] = {"target": self.read.log or ".", **reading["read"]}
        facts["rules"] = reading["rules"]
        return facts

    def _command(self, resumed: bool) -> list[str]:
        """CMD, with `--resume-args` appended on a relaunch or rollback."""
        return self.cmd + self.opts.resume_argv if resumed else list(self.cmd)

    def _continues(self) -> bool:
        """This supervision continues an earlier one on RUN_DIR (a requeued job): its first launch
        resumes too."""
        try:
            return os.path.getsize(os.path.join(self.run_dir, JOURNAL)) > 0
        except OSError:
            return False

    def _stop(self, why: str, grace: float | None = None) -> None:
        """Stop every process of the current attempt (none left when this returns), and say so."""
        if self.pid is None:
            return
        tree = proctree.ProcessTree.of_launch(self.run_dir, self.pid)
        if tree is not None and not tree.root_proven and _proc.alive(self.pid):
            self.log(f"runwatch supervise: {refusal(self.pid, RunDir(self.run_dir).pid, tree.refused or '?')}")
        done = proctree.stop(tree, self.stop_grace if grace is None else grace) if tree is not None else None
        if done is None or done.count == 0:
            return
        how = done.describe() + ("; SIGKILL at a second Ctrl-C" if self.killed_at_once else "")
        note = f"runwatch supervise: stopped {why}: {how}"
        self.log(note)
        self._record("stop", message=note, stopped=done.count, seconds=round(done.seconds, 3), left=list(done.left))

    def _watch(self) -> Verdict | None:
        """Watch the current attempt from where the last watch left the log (no re-reading)."""
        w = self.reads.current()  # (the one `_launch` or `_begin` set up for the attempt)
        while True:
            v = w.poll_once()
            new, self.fresh = w.applied > self.fresh, w.applied
            for f in w.warnings[self.counters.warned :]:  # a warning is journaled and notified once
                self.counters.warned += 1
                self._record("warning", kind=f.kind, step=f.step, message=f.message, line=f.line())
            if v is not None:
                return v
            w.heartbeat()  # watchdog.json: the supervisor's liveness and the state to resume from
            reap(self.waiters)
            if self.deadman is not None:
                self.deadman.poll(new)  # a fetch runs on its own thread: never waited for here
                for failure in self.deadman.failures():
                    url = mask_url(self.deadman.url)
                    self.log(f"runwatch supervise: heartbeat to {url} failed: {failure['error']}")
                    self._record("heartbeat_failed", url=url, error=failure["error"], began=failure["time"])
            if not self.signals.sleep(self.watch.poll):
                return None

    def _finish(
        self,
        event: str,
        verdict: Verdict,
        line: str,
        code: int,
        *,
        sessions: list[Session] | None = None,
        **fields: Any,
    ) -> int:
        """The allocation's last record (`done`, `gave_up`, `preempted`) with the goodput up to it
        and `code`, the exit status the supervisor ends with; returns `code`. `sessions`: the log's,
        when the caller read them already (read here otherwise: once, for the checkpoint and goodput)."""
        sessions = self.reads.sessions() if sessions is None else sessions
        cp = latest_checkpoint(sessions, cwd=os.getcwd())
        rec = journal_entry(
            event,
            self.counters,
            self.opts,
            self.pid,
            verdict,
            line=line,
            checkpoint=cp.path if cp is not None else None,
            exit_code=code,
            **fields,
        )
        journal = read_journal(self.run_dir) + [rec]
        figures = goodput(
            sessions,
            journal,
            restarts=self.counters.restarts,
            rollbacks=self.counters.rollbacks,
            end=rec["time"],
        )
        rec["goodput"] = figures
        append(self.run_dir, rec)
        if self.notifier is not None:
            self._notify(self.notifier, event, rec, verdict)
        self.log(f"runwatch supervise: {goodput_line(figures)}")
        self.out(line)
        return code

    def _let_exit(self, grace: float, why: str) -> None:
        """Give a process whose session has ended `grace` seconds to exit on its own, then stop
        it and whatever it left running."""
        end = time.monotonic() + grace
        while (
            self.pid is not None and _proc.alive(self.pid) and time.monotonic() < end and self.signals.received is None
        ):
            time.sleep(0.1)
        lingered = self.pid is not None and _proc.alive(self.pid)
        self._stop(f"when still running {grace:g} s after {why}" if lingered else f"when left running after {why}")

    def _act(self, v: Verdict) -> int | None:
        """Carry out what `policy.decide` makes of the verdict; an exit status, or None once relaunched."""
        w = self.reads.watcher
        if v.verdict == "done":
            self._let_exit(self.opts.exit_grace, "the run completed")
        else:
            if w is not None:  # (None: a verdict recorded by a supervisor that was stopped before acting)
                self.counters = progress(self.counters, w.last_step if w.have_record else None)
            if v.kind in ("session_error", "interrupted"):  # its session has ended: the process is on its way out
                self._let_exit(min(self.opts.exit_grace, ENDED_GRACE_SECONDS), f"its session ended ({v.kind})")
            self._stop(f"after a {v.kind}")
        # the journal as the next record carries it on: its last record's counters, the attempt judged
        d = decide([self.counters.to_json()], v, self.opts, self._attempt(v), self.codes)
        if d.action == "refuse":
            last = last_error(RunDir(self.run_dir).stdout, or_last_line=True)
            self._finish(d.event, v, d.line, EXIT_USAGE)
            raise UsageError(
                f"supervise: {' '.join(self.cmd)}: ended before writing its first record "
                f"({v.message}); not relaunched" + (f". Last output: {last}" if last else "")
            )
        if d.code is not None:
            if d.action == "give_up":
                self._stop("on giving up")
            return self._finish(d.event, v, d.line, d.code, **d.fields)
        self.log(d.line)
        if d.action == "relaunch":  # a relaunch is counted once it happens, not while it waits
            self.counters = dataclasses.replace(d.counters, restarts=self.counters.restarts)
            if not self.signals.sleep(d.delay):
                return None
        self.counters = d.counters
        self._launch(d.event, dict(d.env), **d.fields)
        return None

    def _attempt(self, v: Verdict) -> Attempt:
        """What the policy needs of the stopped attempt's log: its checkpoints and rollback target."""
        facts = Attempt(self.fresh, self.adopted)
        if v.cls == "transient" and self.counters.restarts < self.opts.restarts:
            w = self.reads.current()
            w.drain()  # its writer is gone: the checkpoints it saved to the end
            return dataclasses.replace(facts, checkpoints=w.checkpoints)
        if v.cls == "divergence" and self.counters.rollbacks < self.opts.rollbacks:
            info = _proc.launch_info(self.run_dir)
            cwd = info.get("cwd") if info is not None and isinstance(info.get("cwd"), str) else None
            return rollback_facts(facts, self.reads.sessions(), v, cwd)  # the whole log, read once
        return facts

    # --- the loop ------------------------------------------------------------------------------

    def _begin(self) -> Verdict | None:
        """Continue an earlier allocation, adopt the training that still runs, take up an action
        cut short, or launch afresh (`beginning.begin` says which)."""
        b = begin(self.run_dir, (self.cmd, self._command(resumed=True)), self.slurm)
        for note in b.notes:
            self.log(note)
        self.counters = b.counters
        if b.how == "continue":  # a new allocation (a requeued job, a rescheduled pod): all goes on
            self.continued = True
            self.reads.prepare()  # the log read to its end: its checkpoints and its highest step
            logged = self.reads.trail.high_step()
            if logged is not None:
                self.counters.high_step = max(self.counters.high_step, logged)
            progressed = self.reads.checkpoints > self.counters.checkpoints_at_launch
            self.log(
                f"runwatch supervise: continuing the supervision of {self.run_dir} (after {b.event}): "
                f"attempt {self.counters.attempt + 1}, restarts {self.counters.restarts}/{self.opts.restarts}, "
                f"rollbacks {self.counters.rollbacks}/{self.opts.rollbacks}"
            )
            self._launch("launch", self.counters.env if self.counters.env and not progressed else {})
            return None
        if b.how == "take_up" and b.verdict is not None:
            self.pid = b.pid
            self.log(f"runwatch supervise: taking up the action on the recorded verdict {b.verdict.kind}")
            return b.verdict
        if b.how in ("adopt", "ended") and b.pid is not None:
            self.pid, self.adopted = b.pid, True
            self.reads.adopt(b.pid, b.state, self.counters.stale_sessions)
            self.log(
                f"runwatch supervise: adopting the running process {b.pid} (attempt {self.counters.attempt})"
                if b.how == "adopt"
                else f"runwatch supervise: process {b.pid} of attempt {self.counters.attempt} has ended; judging its log"
            )
            self._record("launch", adopted=True, checkpoint=self.reads.latest_checkpoint(), **self._facts())
            return None
        self._launch("launch", {})
        return None

    @property
    def codes(self) -> dict[str, int]:
        """The exit status of each outcome (`--exit-code`, `--exit-transient`)."""
        return self.watch.exit_codes

    def _kill_now(self) -> None:
        """Ctrl-C again while the training stops: kill it now (the stop sees it gone)."""
        tree = proctree.ProcessTree.of_launch(self.run_dir, self.pid) if self.pid is not None else None
        if tree is not None and proctree.signal_all(tree, signal.SIGKILL):
            self.killed_at_once = True

    def run(self) -> int:
        """Supervise until done (0), fatal, out of budget or preempted (the class's exit code)."""
        self._prepare()
        try:
            self.notifier = Notifier(self.opts.notify) if self.opts.notify else None
            if self.notifier is not None:
                self.log("runwatch supervise: notifying " + ", ".join(mask_url(u) for u in self.opts.notify))
            if self.deadman is not None:
                self.log(f"runwatch supervise: heartbeat to {mask_url(self.deadman.url)} while records arrive")
            self.signals.install()
            verdict = self._begin()
            while True:
                if verdict is None:
                    verdict = self._watch()
                    if verdict is None:
                        return self._interrupted()
                    self.log(f"runwatch supervise: {verdict.line()}")
                    try:
                        write_verdict(self.run_dir, verdict)
                    except OSError as exc:
                        self.log(f"runwatch supervise: could not write watchdog.json: {exc.strerror or exc}")
                    ended = self.reads.ended(self.run_dir, self.pid) if self.pid is not None else None  # (read once)
                    how = None if ended is None else {k: getattr(ended, k) for k in ("status", "signal", "time")}
                    lrt = self.reads.watcher.last_record_time if self.reads.watcher is not None else None
                    self._record("verdict", verdict, line=verdict.line(), exit=how, last_record_time=lrt)
                code = self._act(verdict)
                if code is not None:
                    return code
                if self.signals.received is not None:
                    return self._interrupted()
                verdict = None
        except OSError as exc:  # a write failed (a full disk, the run directory deleted): no orphan left
            raise UsageError("supervise: " + abandon(self.launched, self.run_dir, exc, pid=self.pid)) from None
        finally:
            self.signals.restore()
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None

    def _interrupted(self) -> int:
        """A signal asked the supervisor to stop: stop the whole tree (SIGTERM: the logger ends the
        session interrupted; SIGKILL after --preempt-grace) and end the allocation. SIGTERM and
        SIGUSR1 are a preemption (`preempted`, requeued under --requeue, the preempted code); SIGINT
        is a person (`gave_up`, 130)."""
        sig = signal.Signals(self.signals.received or signal.SIGTERM)
        grace = self.opts.preempt_grace
        user = sig == signal.SIGINT
        self.log(
            f"runwatch supervise: {sig.name}: stopping the training (SIGTERM to each of its processes, "
            f"SIGKILL after {grace:g} s)" + ("; Ctrl-C again kills it now" if user else "")
        )
        self._stop(f"after the supervisor received {sig.name}", grace)
        sessions = self.reads.sessions()  # read once: the step reached, the checkpoint and the goodput
        logged = [s for s in sessions if s.records]
        step = logged[-1].records[-1].step if logged else 0
        fields: dict[str, Any] = {"signal": sig.name, "signal_time": round(self.signals.time or time.time(), 3)}
        why = "the supervisor received SIGINT; the training was stopped" if user else f"preempted by {sig.name}"
        v = Verdict.of(Finding("interrupted", step, why), time.time())
        d = stopped([self.counters.to_json()], v, sig.name, self.codes)
        if d.event == "preempted" and self.opts.requeue and self.slurm is not None:
            fields["requeue"] = done = requeue(self.slurm)
            self.log(
                f"runwatch supervise: {' '.join(done['command'])}: "
                + ("requeued" if done["requeued"] else f"not requeued ({done['output'] or done['status']})")
            )
        code = d.code if d.code is not None else EXIT_INTERRUPTED
        return self._finish(d.event, v, d.line, code, sessions=sessions, **fields)


# Former names of this module, kept for one release: its command line is `supervisecommand`'s now.
_MOVED = {"run": "runwatch.supervising.supervisecommand", "add_arguments": "runwatch.supervising.supervisecommand"}


def __getattr__(name: str) -> Any:
    return lazy.resolve(__name__, globals(), _MOVED, name)
