"""What `runwatch supervise` does with a verdict, decided as data: `decide(journal, verdict,
options, attempt) -> Decision` relaunches, rolls back (to which checkpoint, skipping which steps),
gives up or ends, with the back-off to wait, the counters the journal carries on, the fields of
its record and the line to print. `stopped` decides the end a signal asks for (`preempted`, or
`gave_up` at a Ctrl-C).

Pure: the journal's records and the verdict in, a `Decision` out; no process, file or clock.
`Supervisor._act` (`supervise.py`) gathers the facts of the attempt (`Attempt`: what its log
holds after it was stopped) and carries the decision out: stop, sleep, launch, notify, exit.
Standard library only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from ..files import ENV_RESUME_FROM, ENV_ROLLBACK, ENV_SKIP_STEPS
from ..judging import Verdict, exit_status, fmt_step
from ..reading import Rollback, Session, checkpoints, rollback_target
from .supervision import Counters, SuperviseOptions

# The back-off doubles with each consecutive transient relaunch up to this (ten minutes: long enough
# for a node to be drained or a file system to come back, short enough not to waste a night).
MAX_BACKOFF_SECONDS = 600.0


@dataclass(frozen=True)
class Attempt:
    """What the supervisor knows of the attempt a verdict ended, beyond its journal: read from the
    log once the attempt was stopped."""

    records: int = 0  # records the attempt wrote, as far as its watch read
    adopted: bool = False  # launched by an earlier supervisor
    checkpoints: int = 0  # checkpoint events in the whole log now (against the journal's `checkpoints_at_launch`)
    named: bool = False  # the log names at least one checkpoint (a divergence's rollback)
    rollback: Rollback | None = None  # the latest checkpoint before the divergence's onset (reading.history)


@dataclass(frozen=True)
class Decision:
    """What to do with a verdict. `action`: `done`, `relaunch`, `rollback`, `give_up`, or
    `refuse` (a command that died before its first record on its first launch: gave_up, exit 2,
    and a usage error). `event` is the journal record the action ends with, `fields` that
    record's own fields, `counters` what the journal carries on; `line` is printed (stdout at the
    end, stderr before a relaunch or rollback); `code` is the exit status (None: the supervision goes on)."""

    action: str
    event: str
    counters: Counters
    line: str
    code: int | None = None
    delay: float = 0.0  # seconds to wait before the relaunch (the back-off)
    env: Mapping[str, str] = field(default_factory=dict)  # the RUNWATCH_* of the next attempt
    fields: Mapping[str, Any] = field(default_factory=dict)


def rollback_facts(attempt: Attempt, sessions: list[Session], verdict: Verdict, cwd: str | None) -> Attempt:
    """`attempt` with what a divergence needs of the log's sessions: the checkpoint to roll back to
    (`reading.history.rollback_target`; a local path is looked for relative to `cwd`) and whether
    the log names any checkpoint at all."""
    rb = rollback_target(sessions, verdict.kind, verdict.step, verdict.onset, cwd=cwd)
    named = rb is not None or bool(checkpoints(sessions, on_path=False))
    return dataclasses.replace(attempt, rollback=rb, named=named)


def progress(counters: Counters, last_step: int | float | None) -> Counters:
    """The counters once an attempt was judged: `stuck` counts attempts in a row that logged no
    step past `high_step` (`last_step` None: the attempt logged no record)."""
    if last_step is not None and last_step > counters.high_step:
        return dataclasses.replace(counters, stuck=0, high_step=last_step)
    return dataclasses.replace(counters, stuck=counters.stuck + 1)


def _counters(journal: Sequence[Mapping[str, Any]]) -> Counters:
    return Counters.from_json(dict(journal[-1])) if journal else Counters()


def decide(
    journal: Sequence[Mapping[str, Any]],
    verdict: Verdict,
    options: SuperviseOptions,
    attempt: Attempt,
    codes: Mapping[str, int] | None = None,
) -> Decision:
    """The action on `verdict` (docs/SUPERVISE.md): the supervision's state is the counters of the
    journal's last record (what the supervisor has journaled, as plain data); `codes` are the exit
    codes of each outcome (`--exit-code`)."""
    c = _counters(journal)
    if verdict.verdict == "done":
        return Decision("done", "done", c, verdict.line(), EXIT_OK)
    cls = verdict.cls
    if (
        cls == "transient"
        and c.attempt == 1
        and not attempt.adopted
        and attempt.records == 0
        and verdict.kind == "process_exit"
        and c.restarts == 0
        and c.rollbacks == 0
    ):
        # A command that dies before its first record on its first launch (a typo, an import
        # error) does the same on every relaunch: say so instead of looping.
        line = verdict.line() + " (not relaunched: it ended before its first record)"
        return Decision("refuse", "gave_up", c, line, EXIT_USAGE)
    if cls == "transient":
        if c.restarts >= options.restarts:
            return _give_up(c, verdict, f"gave up after {c.restarts} restarts", codes, budget=True)
        progressed = attempt.checkpoints > c.checkpoints_at_launch
        streak = 0 if progressed else c.streak
        wait = min(MAX_BACKOFF_SECONDS, options.backoff * 2**streak) if options.backoff else 0.0
        env = c.env if c.env and not progressed else {}  # a rollback not yet checkpointed past
        after = dataclasses.replace(c, streak=streak + 1, restarts=c.restarts + 1)
        line = f"runwatch supervise: {verdict.kind} ({cls}); relaunching in {wait:g} s"
        return Decision("relaunch", "relaunch", after, line, None, wait, dict(env), {"backoff_seconds": wait})
    if cls == "divergence":
        if c.rollbacks >= options.rollbacks:
            return _give_up(c, verdict, f"gave up after {c.rollbacks} rollbacks", codes, budget=True)
        rb = attempt.rollback
        if rb is None:
            onset = verdict.step if verdict.onset is None else verdict.onset
            why = "the log names no checkpoints to roll back to" if not attempt.named else None
            return _give_up(c, verdict, why or f"no checkpoint before step {fmt_step(onset)} to roll back to", codes)
        after = dataclasses.replace(c, rollbacks=c.rollbacks + 1)
        env = {ENV_RESUME_FROM: rb.checkpoint.path, ENV_ROLLBACK: str(after.rollbacks), ENV_SKIP_STEPS: rb.skip_text}
        line = (
            f"runwatch supervise: {verdict.kind} ({cls}) from step {fmt_step(rb.first_bad_step)}; rolling back to "
            f"{rb.checkpoint.path} (step {fmt_step(rb.checkpoint.step)})"
        )
        fields = {"checkpoint": rb.checkpoint.path, "checkpoint_step": rb.checkpoint.step, "skip_steps": rb.skip_text}
        return Decision("rollback", "rollback", after, line, None, 0.0, env, fields)
    return _give_up(c, verdict, None, codes)


def _give_up(
    c: Counters, verdict: Verdict, why: str | None, codes: Mapping[str, int] | None, *, budget: bool = False
) -> Decision:
    fields: dict[str, Any] = {}
    if budget and c.stuck >= 2:  # the budget went on attempts that logged no new step
        why = f"{why}: {c.stuck} attempts in a row made no progress"
        fields["no_progress"] = c.stuck
    line = verdict.line() + (f" ({why})" if why else "")
    # a spent budget has gave_up's code whatever the verdict; a divergence with nothing to roll back to is fatal
    code = exit_status("gave_up" if budget else "fatal" if verdict.cls == "divergence" else verdict.outcome, codes)
    return Decision("give_up", "gave_up", c, line, code, fields=fields)


def stopped(
    journal: Sequence[Mapping[str, Any]], verdict: Verdict, signal_name: str, codes: Mapping[str, int] | None = None
) -> Decision:
    """The end a signal to the supervisor asks for: SIGINT is a person (`gave_up`, 130); SIGTERM
    or SIGUSR1 a preemption (`preempted`, its code: 75 by default)."""
    c = _counters(journal)
    if signal_name == "SIGINT":
        return Decision("give_up", "gave_up", c, verdict.line(), EXIT_INTERRUPTED)
    return Decision("preempted", "preempted", c, verdict.line(), exit_status("preempted", codes))
