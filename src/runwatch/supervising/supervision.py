"""What a supervision is made of: the supervisor's options (`SuperviseOptions`, the `[supervise]`
table), the counters it carries from attempt to attempt (`Counters`), its journal
`RUN_DIR/supervise.jsonl` (docs/SUPERVISE.md, "supervise.jsonl"), its lock on the run directory,
and the run directory's output as it quotes it. `supervise.py` runs the supervision.

`runwatch supervise` appends one JSON object a line for each action (`journal_entry` makes it,
`append` writes it: one write of one whole line, fsynced); `status` reads the last one (`supervise_status`), a supervisor started
again reads it to continue (`last_record`), `goodput` reads them all (`read_journal`). Standard
library only.
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, UsageError
from ..files import JOURNAL, LOCK, RunDir, safeio
from ..options import FLAG, INT_0, NON_NEGATIVE, POSITIVE, TEXT, TEXTS, option, read_toml, validate
from ..procs import alive
from .notify import mask_url

if TYPE_CHECKING:
    from ..judging import Verdict


EVENTS = (
    "launch",
    "verdict",
    "warning",
    "stop",
    "relaunch",
    "rollback",
    "done",
    "gave_up",
    "preempted",
    "notify_failed",
    "heartbeat_failed",
)
# The events that end a supervisor's run: `preempted` ends an allocation, which a requeued job continues.
ENDS = ("done", "gave_up", "preempted")
# Below this much free space the run directory cannot take a checkpoint of even a small model: refuse
# to start rather than launch a training that fails at its first save.
MIN_FREE_BYTES = 16 * 2**20
# The journal is read from its end, whatever anyone wrote into it: its last records (a record is
# ~600 bytes, a week's supervision a few thousand of them) ...
JOURNAL_READ_BYTES = 64 * 2**20
# ... and, for its last record, its last few lines within 1 MiB.
LAST_LINES = 8
JOURNAL_TAIL_BYTES = 2**20
# stdout.log's tail, for a notification: a traceback fits easily.
STDOUT_TAIL_BYTES = 2**20
# The lines of stdout.log searched for the last thing a program printed.
OUTPUT_TAIL_LINES = 20


_SUP = ("supervise",)


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
    # 25 s: inside the 30 s that Slurm (KillWait) and Kubernetes (terminationGracePeriodSeconds)
    # leave between SIGTERM and SIGKILL, with time to journal and requeue.
    preempt_grace: float = option(
        25.0,
        NON_NEGATIVE,
        "on SIGTERM or SIGUSR1 (a preemption), seconds the training has after SIGTERM before SIGKILL",
        metavar="S",
        commands=_SUP,
    )
    requeue: bool = option(
        False, FLAG, "on a preemption inside a Slurm job, also run scontrol requeue for it", commands=_SUP
    )
    heartbeat_url: str | None = option(
        None,
        TEXT,
        "a URL fetched (HTTP GET) while new records arrive: a dead-man switch for the supervisor",
        none=True,
        metavar="URL",
        commands=_SUP,
    )
    heartbeat_every: float = option(
        60.0, POSITIVE, "at most one --heartbeat-url fetch every S seconds", metavar="S", commands=_SUP
    )

    def __post_init__(self) -> None:
        validate(self, "supervise")
        if self.heartbeat_url is not None and not self.heartbeat_url.startswith(("http://", "https://")):
            raise ConfigError(
                f"supervise.heartbeat_url must be an http:// or https:// URL, got {mask_url(self.heartbeat_url)!r}"
            )
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


@dataclass
class Counters:
    """What a supervision carries from attempt to attempt, through a restart of the supervisor and
    into a new allocation: every journal record holds them (`to_json`); a supervisor that continues
    one reads them back from its last record (`from_json`)."""

    attempt: int = 0  # 1 for the first launch, +1 at each relaunch, rollback or new allocation
    restarts: int = 0  # transient relaunches so far
    rollbacks: int = 0  # divergence relaunches so far
    streak: int = 0  # the back-off's exponent: transient relaunches in a row without a new checkpoint
    env: dict[str, str] = field(default_factory=dict)  # the RUNWATCH_* of the current attempt (a rollback's)
    checkpoints_at_launch: int = 0  # checkpoint events in the log when the attempt began
    high_step: float = 0.0  # the highest step the run had logged when the attempt began
    stuck: int = 0  # attempts in a row (this one included once judged) that logged no new step
    first_launch: float | None = None  # when the supervision first launched (goodput's wall time)
    stale_sessions: frozenset[str] = frozenset()  # sessions of heartbeat files older than the attempt
    warned: int = 0  # warnings of the watch journaled (and notified) so far: each once

    def to_json(self) -> dict[str, Any]:
        return {
            "attempt": self.attempt,
            "restarts": self.restarts,
            "rollbacks": self.rollbacks,
            "streak": self.streak,
            "env": dict(self.env),
            "checkpoints_at_launch": self.checkpoints_at_launch,
            "high_step": self.high_step,
            "stuck": self.stuck,
            "first_launch": self.first_launch,
            "stale_sessions": sorted(self.stale_sessions),
            "warned": self.warned,
        }

    @classmethod
    def from_json(cls, rec: dict[str, Any]) -> Counters:
        """The counters of a journal record (what is missing or malformed: its default)."""

        def whole(key: str) -> int:
            v = rec.get(key)
            return v if type(v) is int and v >= 0 else 0

        def number(key: str) -> float | None:  # as written (a step stays an int): to_json's record reads back equal
            v = rec.get(key)
            return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None

        env, stale = rec.get("env"), rec.get("stale_sessions")
        return cls(
            whole("attempt"),
            whole("restarts"),
            whole("rollbacks"),
            whole("streak"),
            {str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else {},
            whole("checkpoints_at_launch"),
            number("high_step") or 0.0,
            whole("stuck"),
            number("first_launch"),
            frozenset(x for x in stale if isinstance(x, str)) if isinstance(stale, list) else frozenset(),
            whole("warned"),
        )


def journal_entry(
    event: str,
    counters: Counters,
    opts: SuperviseOptions,
    pid: int | None,
    verdict: Verdict | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """One journal record: the action, the verdict, `fields`, and the supervisor's counters."""
    rec: dict[str, Any] = {
        "time": round(time.time(), 3),
        "event": event,
        "attempt": counters.attempt,
        "pid": pid,
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
        counters.to_json(),
        budgets={"restarts": opts.restarts, "rollbacks": opts.rollbacks},
        supervisor=os.getpid(),
    )
    return rec


def append(run_dir: str, rec: dict[str, Any]) -> None:
    """Append `rec` to the journal as one line (strict JSON), in one write, and fsync it; never
    through a symlink, and after closing a torn last line (`safeio.append_line`). Raises OSError."""
    safeio.append_line(os.path.join(run_dir, JOURNAL), (json.dumps(rec, allow_nan=False) + "\n").encode())


def last_record(run_dir: str) -> dict[str, Any] | None:
    """The last readable record of `supervise.jsonl` (of its last few lines), read from the end;
    None when there is none."""
    try:
        lines, _ = safeio.tail_lines(os.path.join(run_dir, JOURNAL), LAST_LINES, JOURNAL_TAIL_BYTES)
    except OSError:
        return None
    for raw in reversed(lines):
        rec = safeio.loads_object(raw)
        if rec is not None:
            return rec
    return None


def read_journal(run_dir: str) -> list[dict[str, Any]]:
    """Every complete record of `supervise.jsonl` in order (of its last `JOURNAL_READ_BYTES`; []
    when there is none); a line that is not a JSON object (a torn last line, garbage) is left out."""
    return safeio.read_records(os.path.join(run_dir, JOURNAL), JOURNAL_READ_BYTES).records


def lock_run_dir(d: str) -> int:
    """Check that the run directory can be written and has room, and take its lock (`supervise.lock`,
    an flock held for the supervisor's life, its pid inside); the descriptor. UsageError otherwise,
    before anything is launched."""
    try:
        os.makedirs(d, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"supervise: cannot create {d}: {exc.strerror or exc}") from None
    if not os.path.isdir(d):
        raise UsageError(f"supervise: {d}: not a directory")
    path = os.path.join(d, LOCK)
    try:  # runwatch's own lock file, never a symlink or a file it did not create (safeio.open_lock)
        fd, _created = safeio.open_lock(path)
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
    return fd


def supervise_status(run_dir: str) -> dict[str, Any] | None:
    """The supervision's state for `runwatch status`: attempt, restarts and rollbacks with their
    budgets, the last event, and whether the supervisor still runs; None when never supervised."""
    last = last_record(run_dir)
    if last is None:
        return None
    budgets = last.get("budgets")
    if not isinstance(budgets, dict):
        budgets = {}
    sup = last.get("supervisor")
    running = last.get("event") not in ENDS and type(sup) is int and alive(sup)
    return {
        "attempt": last.get("attempt"),
        "restarts": last.get("restarts"),
        "rollbacks": last.get("rollbacks"),
        "max_restarts": budgets.get("restarts"),
        "max_rollbacks": budgets.get("rollbacks"),
        "event": last.get("event"),
        "supervisor_pid": sup,
        "supervisor_running": running,
    }


def stdout_tail(run_dir: str, n: int) -> list[str]:
    """The last `n` lines of RUN_DIR/stdout.log (each cut at 300 characters)."""
    try:
        lines, _ = safeio.tail_lines(RunDir(run_dir).stdout, n, STDOUT_TAIL_BYTES)
    except OSError:
        return ["(no stdout.log)"]
    return [raw.decode("utf-8", "replace")[:300] for raw in lines]
