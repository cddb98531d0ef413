"""`runwatch supervise RUN_DIR [watch options] [--restarts N] ... -- CMD ...`: keep a long run alive.

Launches CMD as `runwatch launch` does, watches it with every watch rule, and acts on each
verdict by its class (docs/SUPERVISE.md):

    done        wait --exit-grace for the process to exit (stop it if it lingers); exit 0
    transient   stop it; back off; relaunch CMD unchanged (it resumes from its latest checkpoint)
    divergence  stop it; relaunch with RUNWATCH_RESUME_FROM / _ROLLBACK / _SKIP_STEPS pointing at
                the latest checkpoint before the trouble began
    fatal       stop it; exit 7 -- as does a spent budget (--restarts, --rollbacks)

Every action goes to `RUN_DIR/supervise.jsonl` (one JSON object a line); the last record (`done` or
`gave_up`) carries the run's goodput. One supervisor a run directory (`supervise.lock`, held with
flock for the supervisor's life); a supervisor started again after it was killed adopts the
training that still runs and continues its budgets from `supervise.jsonl`. Standard library only
(Apprise for --notify, imported when asked for).

Longer than 500 lines on purpose: one state machine (launch, watch, act on the class, adopt a
running training, finish) whose steps share the supervisor's budgets and journal; its options,
rollback choice and goodput live in their own places (`SuperviseOptions` here, `goodput.py`).
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import os
import shlex
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any, TypeAlias

from . import process as _proc
from . import proctree
from .errors import ConfigError, InvalidRunError, UsageError
from .goodput import goodput, latest_checkpoint, rollback_target
from .heartbeats import read_heartbeats
from .launch import launch, log_target
from .notify import Notifier, mask_url
from .options import (
    INT_0,
    NON_NEGATIVE,
    TEXT,
    TEXTS,
    add_command_arguments,
    add_flags,
    given_options,
    option,
    read_toml,
    split_command,
    validate,
)
from .readers import ReadOptions, read_options
from .readers import add_arguments as add_read_arguments
from .records import Session, load_sessions, resolve_target
from .resume import RESUME_ENV
from .rules import fmt_step
from .supervision import JOURNAL, append, last_output_line, last_record, stdout_tail, supervise_status
from .verdict import read_verdict, write_verdict
from .watchdog import Options, Verdict, Watcher, load_options

__all__ = [
    "SuperviseOptions",
    "Supervisor",
    "supervise_status",  # (from supervision, where status reads it)
    "add_arguments",
    "run",
    "JOURNAL",
    "LOCK",
    "MAX_BACKOFF_SECONDS",
]

LOCK = "supervise.lock"
# The back-off doubles with each consecutive transient relaunch up to this (ten minutes: long enough
# for a node to be drained or a file system to come back, short enough not to waste a night).
MAX_BACKOFF_SECONDS = 600.0
# Below this much free space the run directory cannot take a checkpoint of even a small model: refuse
# to start rather than launch a training that fails at its first save.
MIN_FREE_BYTES = 16 * 2**20
# Lines of stdout.log that go with an anomaly's notification.
NOTIFY_TAIL_LINES = 20
_NOTIFIED = ("verdict", "warning", "rollback", "relaunch", "done", "gave_up")
EXIT_USAGE = 2
ENDED_GRACE_SECONDS = 10.0  # how long a process whose session ended (error, interrupted) may take to exit by itself

_SUP = ("supervise",)
# A signal's handler as `signal.signal` takes and returns it (SIG_DFL and SIG_IGN are ints).
_Handler: TypeAlias = Callable[[int, FrameType | None], Any] | int | None


@dataclass(frozen=True)
class SuperviseOptions:
    """The supervisor's own options (the watch options are `watchdog.Options`); `runwatch.toml`
    sets them in its `[supervise]` table."""

    restarts: int = option(5, INT_0, "transient relaunches in all before giving up", metavar="N", commands=_SUP)
    rollbacks: int = option(
        2, INT_0, "divergence relaunches (rollbacks) in all before giving up", metavar="N", commands=_SUP
    )
    backoff: float = option(
        10.0,
        NON_NEGATIVE,
        "seconds to wait before a transient relaunch, doubling each consecutive time up to 600",
        metavar="S",
        commands=_SUP,
    )
    exit_grace: float = option(
        300.0,
        NON_NEGATIVE,
        "seconds a completed run's process may take to exit before it is stopped",
        metavar="S",
        commands=_SUP,
    )
    notify: tuple[str, ...] = option(
        (),
        TEXTS,
        "an Apprise URL to notify of each verdict, warning (once), relaunch, rollback and the end (runwatch[notify])",
        metavar="URL",
        commands=_SUP,
    )
    resume_args: str | None = option(
        None,
        TEXT,
        "arguments appended to the command on every relaunch and rollback, not on the first launch "
        "(nanoGPT: '--init_from=resume')",
        none=True,
        metavar="ARGS",
        commands=_SUP,
    )

    def __post_init__(self) -> None:
        validate(self, "supervise")
        if self.resume_args is not None:
            try:
                shlex.split(self.resume_args)
            except ValueError as exc:
                raise ConfigError(
                    f"supervise.resume_args must split like shell words, got {self.resume_args!r}: {exc}"
                ) from None

    @property
    def resume_argv(self) -> list[str]:
        """`--resume-args` as the words appended to the command."""
        return shlex.split(self.resume_args) if self.resume_args else []


def load_supervise_options(run_dir: str | None, given: dict[str, Any]) -> SuperviseOptions:
    """Options from `run_dir/runwatch.toml` ([supervise] table), then `given` on top."""
    merged = read_toml(run_dir, SuperviseOptions, "supervise", table="supervise")
    merged.update({k: v for k, v in given.items() if v is not None and v != ()})
    return SuperviseOptions(**merged)


# --- the supervisor -------------------------------------------------------------------------------


class Supervisor:
    """One supervision of RUN_DIR; `run()` returns the exit status (0 done, 7 gave up or fatal)."""

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
        self.read = read or ReadOptions()
        self.target = log_target(self.run_dir, self.read)  # the log the watch follows
        self.stop_grace = stop_grace
        self.out = out or (lambda line: print(line, flush=True))
        self.log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self.host = socket.gethostname()
        self.started = time.time()
        self.attempt = 0
        self.restarts = self.rollbacks = self.streak = 0
        self.pid: int | None = None
        self.env: dict[str, str] = {}  # the RUNWATCH_* of the current attempt (a rollback's)
        self.checkpoints_at_launch = 0  # checkpoint events in the log when the attempt began
        self.high = 0.0  # the highest step the run had logged when the attempt began
        self.stuck = 0  # attempts in a row (this one included once judged) that logged no new step
        self.first_launch: float | None = None  # when this supervision first launched (goodput's wall time)
        self.stale: frozenset[str] = frozenset()  # sessions of heartbeat files older than the attempt
        self.fresh = 0  # records the attempt wrote, as far as its watch has read
        self.watcher: Watcher | None = None  # the current attempt's watch
        self.state: dict[str, Any] | None = None  # where the log was read to (Watcher.state_dict)
        self.new_process = False  # the next watch is of a newly launched process
        self.adopted = False  # the current attempt was launched by an earlier supervisor
        self.interrupted: int | None = None
        self.notifier: Notifier | None = None
        self.warned = 0  # warnings of the watch journaled (and notified) so far: each once
        self._lock_fd: int | None = None

    # --- the run directory ---------------------------------------------------------------------

    def _prepare(self) -> None:
        """Check the run directory can be written, take the lock; UsageError before launching anything."""
        d = self.run_dir
        try:
            os.makedirs(d, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"supervise: cannot create {d}: {exc.strerror or exc}") from None
        if not os.path.isdir(d):
            raise UsageError(f"supervise: {d}: not a directory")
        path = os.path.join(d, LOCK)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise UsageError(f"supervise: cannot write to {d}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            os.close(fd)
            raise UsageError(f"supervise: {d}: another supervisor (pid {holder or '?'}) is running there") from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            os.fsync(fd)
            st = os.statvfs(d)
        except OSError as exc:
            os.close(fd)
            raise UsageError(f"supervise: cannot write to {d}: {exc.strerror or exc}") from None
        free = st.f_bavail * st.f_frsize
        if free < MIN_FREE_BYTES:
            os.close(fd)
            raise UsageError(
                f"supervise: {d}: only {free} bytes free on its file system "
                f"(at least {MIN_FREE_BYTES} needed for logs and checkpoints)"
            )
        self._lock_fd = fd

    def _record(self, event: str, verdict: Verdict | None = None, **fields: Any) -> dict[str, Any]:
        """Append one action to supervise.jsonl (one write of one whole line)."""
        rec: dict[str, Any] = {
            "time": round(time.time(), 3),
            "event": event,
            "attempt": self.attempt,
            "pid": self.pid,
            "kind": None,
            "class": None,
            "step": None,
            "checkpoint": None,
        }
        if verdict is not None:
            rec.update(kind=verdict.kind, step=verdict.step, message=verdict.message)
            rec["class"] = verdict.cls
            if verdict.verdict == "anomaly":
                rec["onset"] = verdict.step if verdict.onset is None else verdict.onset
        rec.update(fields)
        rec.update(
            restarts=self.restarts,
            rollbacks=self.rollbacks,
            budgets={"restarts": self.opts.restarts, "rollbacks": self.opts.rollbacks},
            streak=self.streak,
            warned=self.warned,
            env=self.env,
            checkpoints_at_launch=self.checkpoints_at_launch,
            high_step=self.high,
            stuck=self.stuck,
            first_launch=self.first_launch,
            stale_sessions=sorted(self.stale),
            supervisor=os.getpid(),
        )
        append(self.run_dir, rec)
        if event in _NOTIFIED and self.notifier is not None:
            self._notify(self.notifier, event, rec, verdict)
        return rec

    def _notify(self, notifier: Notifier, event: str, rec: dict[str, Any], verdict: Verdict | None) -> None:
        line = rec.get("line") or (verdict.line() if verdict is not None else f"{event} attempt {self.attempt}")
        body = [
            line,
            f"event: {event} (attempt {self.attempt}, restarts {self.restarts}/{self.opts.restarts}, "
            f"rollbacks {self.rollbacks}/{self.opts.rollbacks})",
            f"run: {self.run_dir}",
            f"host: {self.host}",
        ]
        if rec.get("checkpoint"):
            body.append(f"checkpoint: {rec['checkpoint']}")
        if verdict is not None and verdict.verdict == "anomaly":
            body.append("last lines of stdout.log:")
            body.extend(stdout_tail(self.run_dir, NOTIFY_TAIL_LINES))
        title = f"runwatch {event}: {os.path.basename(self.run_dir)}"
        for failure in notifier.send(title, "\n".join(body)):
            self.log(f"runwatch supervise: notification to {failure['url']} failed: {failure['error']}")
            self.notifier = None  # the failure's own record is not notified
            try:
                self._record("notify_failed", url=failure["url"], error=failure["error"], about=event)
            finally:
                self.notifier = notifier

    def _drained(self, w: Watcher | None = None) -> Watcher:
        """A watcher positioned at the end of the log as it stands (its writer is gone), with the
        checkpoint events counted: the next attempt's watch continues from its state."""
        if w is None:
            w = Watcher(self.target, self.watch, poll_checks=[], log=lambda msg: None, read=self.read)
            if self.state is not None:
                w.load_state_dict(self.state)
        w.drain()
        self.state = w.state_dict()
        return w

    def _sessions(self) -> list[Session]:
        try:
            t = resolve_target(self.target, self.read)
            return load_sessions(t, maps=self.watch.maps) if os.path.exists(t.log_path) else []
        except (InvalidRunError, UsageError):
            return []

    def _latest_checkpoint(self) -> str | None:
        cp = latest_checkpoint(self._sessions(), cwd=os.getcwd())
        return cp.path if cp is not None else None

    # --- actions -------------------------------------------------------------------------------

    def _launch(self, event: str, env: dict[str, str], **fields: Any) -> None:
        drained = self._drained(self.watcher)
        self.checkpoints_at_launch = drained.checkpoints
        self.high = max(self.high, drained.last_step)
        self.new_process = True
        full = {k: v for k, v in os.environ.items() if k not in RESUME_ENV}
        full.update(env)
        self.env = dict(env)
        self.attempt += 1
        self.fresh = 0
        self.adopted = False
        # the heartbeat files lying there now belong to earlier attempts: never judged in this one
        beats, _problems = read_heartbeats(self.run_dir)
        self.stale = frozenset(b.session_id for b in beats.values())
        cmd = self._command(resumed=event != "launch" or self._continues())
        info = launch(self.run_dir, cmd, env=full)
        self.pid = info["pid"]
        if self.first_launch is None:
            self.first_launch = float(info["time"])
        fields.setdefault("checkpoint", env.get("RUNWATCH_RESUME_FROM") or self._latest_checkpoint())
        self.log(
            f"runwatch supervise: {event}: attempt {self.attempt}, pid {self.pid}"
            + (
                f", resuming from {env['RUNWATCH_RESUME_FROM']}, skipping steps {env['RUNWATCH_SKIP_STEPS']}"
                if env
                else ""
            )
        )
        self._record(event, command=cmd if event == "launch" or cmd != self.cmd else None, **fields)

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

    def _stop(self, why: str) -> None:
        """Stop every process of the current attempt (none left when this returns), and say so."""
        if self.pid is None:
            return
        tree = proctree.ProcessTree.of_launch(self.run_dir, self.pid)
        done = proctree.stop(tree, self.stop_grace) if tree is not None else None
        if done is None or done.count == 0:
            return
        note = f"runwatch supervise: stopped {why}: {done.describe()}"
        self.log(note)
        self._record("stop", message=note, stopped=done.count, seconds=round(done.seconds, 3), left=list(done.left))

    def _sleep(self, seconds: float) -> bool:
        """Sleep, waking for a signal; False when the supervisor was asked to stop."""
        end = time.monotonic() + seconds
        while self.interrupted is None:
            left = end - time.monotonic()
            if left <= 0:
                return True
            time.sleep(min(left, 0.2))
        return False

    def _watch(self) -> Verdict | None:
        """Watch the current attempt from where the last watch left the log (no re-reading)."""
        w = Watcher(
            self.target, dataclasses.replace(self.watch, pid=self.pid), log=self.log, read=self.read, out=self.out
        )
        w.stale_sessions = self.stale
        if self.state is not None and w.load_state_dict(self.state) and self.new_process:
            w.expect_new_session()
        self.new_process = False
        w.started = self.started  # --timeout is the whole supervision's
        self.watcher = w
        while True:
            v = w.poll_once()
            self.fresh = w.applied
            for f in w.warnings[self.warned :]:  # a warning is journaled and notified once
                self.warned += 1
                self._record("warning", kind=f.kind, step=f.step, message=f.message, line=f.line())
            if v is not None:
                return v
            w.heartbeat()  # watchdog.json: the supervisor's liveness and the state to resume from
            if not self._sleep(self.watch.poll):
                return None

    def _finish(self, event: str, verdict: Verdict, line: str, **fields: Any) -> None:
        wall = (self.first_launch, time.time()) if self.first_launch is not None else None
        figures = goodput(self._sessions(), restarts=self.restarts, rollbacks=self.rollbacks, wall=wall)
        self._record(event, verdict, line=line, goodput=figures, checkpoint=self._latest_checkpoint(), **fields)
        ratio = "n/a" if figures["ratio"] is None else f"{figures['ratio']:.3f}"
        lost = "n/a" if figures["seconds_lost"] is None else f"{figures['seconds_lost']:.1f} s"
        self.log(
            f"runwatch supervise: goodput {ratio}: {fmt_step(figures['steps_kept'])} steps kept of "
            f"{fmt_step(figures['steps_run'])} run; {self.restarts} restarts, {self.rollbacks} rollbacks, "
            f"{lost} lost"
        )
        self.out(line)

    def _give_up(self, verdict: Verdict, why: str | None, *, budget: bool = False) -> int:
        self._stop("on giving up")
        fields: dict[str, Any] = {}
        if budget and self.stuck >= 2:  # the budget went on attempts that logged no new step
            why = f"{why}: {self.stuck} attempts in a row made no progress"
            fields["no_progress"] = self.stuck
        line = verdict.line() + (f" ({why})" if why else "")
        self._finish("gave_up", verdict, line, **fields)
        return verdict.exit_code_with(self.watch.exit_transient)

    def _let_exit(self, grace: float, why: str) -> None:
        """Give a process whose session has ended `grace` seconds to exit on its own, then stop
        it and whatever it left running."""
        end = time.monotonic() + grace
        while self.pid is not None and _proc.alive(self.pid) and time.monotonic() < end and self.interrupted is None:
            time.sleep(0.1)
        lingered = self.pid is not None and _proc.alive(self.pid)
        self._stop(f"when still running {grace:g} s after {why}" if lingered else f"when left running after {why}")

    def _done(self, verdict: Verdict) -> int:
        self._let_exit(self.opts.exit_grace, "the run completed")
        self._finish("done", verdict, verdict.line())
        return 0

    def _act(self, v: Verdict) -> int | None:
        """Do what the verdict's class asks; an exit status, or None once relaunched."""
        if v.verdict == "done":
            return self._done(v)
        cls = v.cls
        w = self.watcher
        if w is not None:  # (None: a verdict recorded by a supervisor that was stopped before acting)
            if w.have_record and w.last_step > self.high:
                self.stuck, self.high = 0, w.last_step
            else:
                self.stuck += 1
        if v.kind in ("session_error", "interrupted"):  # its session has ended: the process is on its way out
            self._let_exit(min(self.opts.exit_grace, ENDED_GRACE_SECONDS), f"its session ended ({v.kind})")
        self._stop(f"after a {v.kind}")
        if (
            cls == "transient"
            and self.attempt == 1
            and not self.adopted
            and self.fresh == 0
            and v.kind == "process_exit"
            and self.restarts == 0
            and self.rollbacks == 0
        ):
            # A command that dies before its first record on its first launch (a typo, an import
            # error) does the same on every relaunch: say so instead of looping.
            last = last_output_line(self.run_dir)
            self._finish("gave_up", v, v.line() + " (not relaunched: it ended before its first record)")
            raise UsageError(
                f"supervise: {' '.join(self.cmd)}: ended before writing its first record "
                f"({v.message}); not relaunched" + (f". Last output: {last}" if last else "")
            )
        if cls == "transient":
            if self.restarts >= self.opts.restarts:
                return self._give_up(v, f"gave up after {self.restarts} restarts", budget=True)
            progressed = self._drained(self.watcher).checkpoints > self.checkpoints_at_launch
            if progressed:
                self.streak = 0
            wait = min(MAX_BACKOFF_SECONDS, self.opts.backoff * 2**self.streak) if self.opts.backoff else 0.0
            self.streak += 1
            env = self.env if self.env and not progressed else {}  # a rollback not yet checkpointed past
            self.log(f"runwatch supervise: {v.kind} ({cls}); relaunching in {wait:g} s")
            if not self._sleep(wait):
                return None
            self.restarts += 1
            self._launch("relaunch", env, backoff_seconds=wait)
            return None
        if cls == "divergence":
            if self.rollbacks >= self.opts.rollbacks:
                return self._give_up(v, f"gave up after {self.rollbacks} rollbacks", budget=True)
            sessions = self._sessions()
            info = _proc.launch_info(self.run_dir)
            cwd = info.get("cwd") if info is not None and isinstance(info.get("cwd"), str) else None
            rb = rollback_target(sessions, v.kind, v.step, v.onset, cwd=cwd)
            if rb is None:
                onset = v.step if v.onset is None else v.onset
                return self._give_up(v, f"no checkpoint before step {fmt_step(onset)} to roll back to")
            self.rollbacks += 1
            env = {
                "RUNWATCH_RESUME_FROM": rb.checkpoint.path,
                "RUNWATCH_ROLLBACK": str(self.rollbacks),
                "RUNWATCH_SKIP_STEPS": rb.skip_text,
            }
            self.log(
                f"runwatch supervise: {v.kind} ({cls}) from step {fmt_step(rb.first_bad_step)}; rolling back to "
                f"{rb.checkpoint.path} (step {fmt_step(rb.checkpoint.step)})"
            )
            self._launch(
                "rollback",
                env,
                checkpoint=rb.checkpoint.path,
                checkpoint_step=rb.checkpoint.step,
                skip_steps=rb.skip_text,
            )
            return None
        return self._give_up(v, None)

    # --- the loop ------------------------------------------------------------------------------

    def _begin(self) -> Verdict | None:
        """Adopt the training that still runs, take up an action cut short, or launch afresh."""
        last = last_record(self.run_dir)
        # the last record of a supervision that has not ended; None when there is none
        ongoing = last if last is not None and last.get("event") not in ("done", "gave_up") else None
        if ongoing is not None:
            self.attempt = int(ongoing.get("attempt") or 0)
            self.restarts = int(ongoing.get("restarts") or 0)
            self.rollbacks = int(ongoing.get("rollbacks") or 0)
            self.streak = int(ongoing.get("streak") or 0)
            self.warned = int(ongoing.get("warned") or 0)
            self.env = dict(ongoing.get("env") or {})
            self.checkpoints_at_launch = int(ongoing.get("checkpoints_at_launch") or 0)
            high, first = ongoing.get("high_step"), ongoing.get("first_launch")
            self.high = float(high) if isinstance(high, (int, float)) else 0.0
            self.stuck = int(ongoing.get("stuck") or 0)
            self.first_launch = float(first) if isinstance(first, (int, float)) else None
            stale = ongoing.get("stale_sessions")
            self.stale = frozenset(x for x in stale if isinstance(x, str)) if isinstance(stale, list) else frozenset()
        pid = _proc.read_pid_file(os.path.join(self.run_dir, "pid"))
        if pid is not None and _proc.alive(pid):
            info = _proc.launch_info(self.run_dir)
            command = info.get("command") if info is not None else None
            if command not in (self.cmd, self._command(resumed=True)):
                shown = " ".join(command) if isinstance(command, list) else "unknown"
                raise UsageError(
                    f"supervise: {self.run_dir}: process {pid} launched there runs another command "
                    f"({shown}); stop it or use another run directory"
                )
            if _proc.launched_group(pid, self.run_dir) is None:
                raise UsageError(
                    f"supervise: {self.run_dir}: process {pid} in RUN_DIR/pid is not the one "
                    f"launch.json describes; remove RUN_DIR/pid if the training is gone"
                )
            self.pid = pid
            self.attempt = self.attempt or 1
            watching, _problem = read_verdict(self.run_dir, watching=True)
            if (
                watching is not None
                and watching.get("verdict") == "watching"
                and isinstance(watching.get("state"), dict)
            ):
                self.state = watching["state"]  # where the killed supervisor's watch had read to
            self.adopted = True
            self.log(f"runwatch supervise: adopting the running process {pid} (attempt {self.attempt})")
            self._record("launch", adopted=True, checkpoint=self._latest_checkpoint())
            return None
        if ongoing is not None and ongoing.get("event") in ("verdict", "stop") and ongoing.get("kind"):
            # The supervisor was stopped between a verdict and its action: take the action up.
            self.pid = ongoing.get("pid")
            self.log(f"runwatch supervise: taking up the action on the recorded verdict {ongoing['kind']}")
            return Verdict(
                "anomaly",
                ongoing["kind"],
                ongoing.get("step") or 0,
                ongoing.get("message") or "",
                time.time(),
                ongoing.get("onset"),
            )
        if ongoing is not None and pid is not None:
            self.pid = pid  # gone meanwhile: the watch judges how it ended (done, or process_exit)
            self.adopted = True
            self.log(f"runwatch supervise: process {pid} of attempt {self.attempt} has ended; judging its log")
            self._record("launch", adopted=True, checkpoint=self._latest_checkpoint())
            return None
        self.attempt = self.restarts = self.rollbacks = self.streak = 0
        self.env = {}
        self._launch("launch", {})
        return None

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.interrupted = signum

    def run(self) -> int:
        """Supervise until done (0), fatal or out of budget (7, or --exit-transient's code)."""
        self._prepare()
        handlers: dict[signal.Signals, _Handler] = {}
        try:
            self.notifier = Notifier(self.opts.notify) if self.opts.notify else None
            if self.notifier is not None:
                self.log("runwatch supervise: notifying " + ", ".join(mask_url(u) for u in self.opts.notify))
            try:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    handlers[sig] = signal.signal(sig, self._on_signal)
            except ValueError:  # not the main thread: no handlers (the caller stops us)
                pass
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
                    ended = _proc.read_exit(self.run_dir, self.pid) if self.pid is not None else None
                    how = {"status": ended.status, "signal": ended.signal} if ended is not None else None
                    self._record("verdict", verdict, line=verdict.line(), exit=how)
                code = self._act(verdict)
                if code is not None:
                    return code
                if self.interrupted is not None:
                    return self._interrupted()
                verdict = None
        finally:
            for sig, old in handlers.items():
                signal.signal(sig, old)
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None

    def _interrupted(self) -> int:
        """SIGTERM/SIGINT: stop the training (it ends its session as interrupted), end the supervision."""
        name = signal.Signals(self.interrupted or signal.SIGTERM).name
        self._stop(f"after the supervisor received {name}")
        sessions = [s for s in self._sessions() if s.records]
        step = sessions[-1].records[-1].step if sessions else 0
        v = Verdict(
            "anomaly", "interrupted", step, f"the supervisor received {name}; the training was stopped", time.time()
        )
        self._finish("gave_up", v, v.line())
        return v.exit_code_with(self.watch.exit_transient)


# --- the command line -----------------------------------------------------------------------------


def _declare(p: argparse.ArgumentParser) -> None:
    add_flags(p, Options, "watch", skip=("pid",))
    add_read_arguments(p, "supervise")  # --format, --pattern, --run, --log
    add_flags(p, SuperviseOptions, "supervise")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_command_arguments(p, _declare, "watch and supervise options")


def _split(args: argparse.Namespace) -> list[str]:
    return split_command(args, "supervise", _declare, dash_values=("--resume-args",))


def supervisor_from_args(args: argparse.Namespace) -> Supervisor:
    """The Supervisor `runwatch supervise ARGS` runs, every option validated (nothing started yet)."""
    cmd = _split(args)
    run_dir = os.path.abspath(args.run_dir)
    toml_dir = run_dir if os.path.isdir(run_dir) else None
    watch = load_options(toml_dir, given_options(args, Options), command="watch")
    opts = load_supervise_options(toml_dir, given_options(args, SuperviseOptions))
    return Supervisor(run_dir, cmd, watch, opts, read=read_options(args))


def run(args: argparse.Namespace) -> int:
    return supervisor_from_args(args).run()
