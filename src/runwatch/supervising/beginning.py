"""How a supervisor takes up its run directory (docs/SUPERVISE.md): `begin` reads the journal's last
record, RUN_DIR/pid, launch.json and watchdog.json and says which of five beginnings it is:

    continue   an earlier allocation ended (`preempted`, or a requeued job): budgets, attempt
               numbers and goodput go on, and the first launch resumes
    adopt      the training an earlier supervisor launched still runs: watched from where that
               supervisor's watch had read to (watchdog.json), never launched again
    ended      it ran and has ended meanwhile: its log judged, its end with it
    take_up    the earlier supervisor was stopped between a verdict and its action: the action
               is taken up on the recorded verdict
    fresh      none of these: a first launch

A process in RUN_DIR/pid that runwatch did not launch there is never adopted (a note says so); one
launched there for another command, or that is not the one launch.json describes, is a usage
error. `Supervisor._begin` (`supervise.py`) carries the beginning out. Standard library only.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from ..files import RunDir
from ..judging import Finding, Verdict, read_verdict
from ..procs import not_launched, refusal
from ..procs import process as _proc
from .scheduler import SlurmJob
from .supervision import ENDS, Counters, last_record, read_journal


@dataclass(frozen=True)
class Beginning:
    """What a supervisor starting on RUN_DIR does first (the module docstring): `how`, with the
    counters it goes on with, and what that beginning needs."""

    how: str  # "continue", "adopt", "ended", "take_up" or "fresh"
    counters: Counters
    event: str | None = None  # the journal's last event (a continued allocation's: after what)
    pid: int | None = None  # the training adopted, or the one whose verdict is taken up
    state: dict[str, Any] | None = None  # where the earlier supervisor's watch had read to (adopt)
    verdict: Verdict | None = None  # the verdict whose action is taken up
    notes: tuple[str, ...] = ()  # lines to say first (a process in RUN_DIR/pid not adopted)


def begin(run_dir: str, commands: Sequence[list[str]], slurm: SlurmJob | None) -> Beginning:
    """The beginning of a supervision of `run_dir` whose command is one of `commands` (as launched
    first, and as relaunched); UsageError when RUN_DIR/pid runs something else that runwatch
    launched there."""
    last = last_record(run_dir)
    event = last.get("event") if last is not None else None
    requeued = slurm is not None and slurm.continues(read_journal(run_dir))
    if last is not None and (event == "preempted" or (event != "done" and requeued)):
        return Beginning("continue", Counters.from_json(last), event)
    # the last record of a supervision that has not ended; None when there is none
    ongoing = last if last is not None and event not in ENDS else None
    counters = Counters.from_json(ongoing) if ongoing is not None else Counters()
    notes: list[str] = []
    pid = _proc.read_pid_file(RunDir(run_dir).pid)
    if pid is not None and _proc.alive(pid) and (why := not_launched(run_dir, pid)) is not None:
        notes.append(f"runwatch supervise: {refusal(pid, RunDir(run_dir).pid, why, 'not adopted')}")
        pid = None  # never adopted, never credited, never signalled
    if pid is not None and _proc.launched_here(run_dir) is not None:
        info = _proc.launch_info(run_dir)
        command = info.get("command") if info is not None else None
        if command not in commands:
            shown = " ".join(command) if isinstance(command, list) else "unknown"
            raise UsageError(
                f"supervise: {run_dir}: process {pid} launched there runs another command "
                f"({shown}); stop it or use another run directory"
            )
        if _proc.launched_group(pid, run_dir) is None:
            raise UsageError(
                f"supervise: {run_dir}: process {pid} in RUN_DIR/pid is not the one "
                f"launch.json describes; remove RUN_DIR/pid if the training is gone"
            )
        counters.attempt = counters.attempt or 1
        watching, _problem = read_verdict(run_dir, watching=True)
        state = None
        if watching is not None and watching.get("verdict") == "watching" and isinstance(watching.get("state"), dict):
            state = watching["state"]  # where the killed supervisor's watch had read to
        return Beginning("adopt", counters, event, pid, state, notes=tuple(notes))
    if ongoing is not None and ongoing.get("event") in ("verdict", "stop") and ongoing.get("kind"):
        # The supervisor was stopped between a verdict and its action: take the action up.
        finding = Finding(
            ongoing["kind"], ongoing.get("step") or 0, ongoing.get("message") or "", onset=ongoing.get("onset")
        )
        taken = ongoing["pid"] if _proc.valid_pid(ongoing.get("pid")) else None
        return Beginning(
            "take_up", counters, event, taken, verdict=Verdict.of(finding, time.time()), notes=tuple(notes)
        )
    if ongoing is not None and pid is not None:  # gone meanwhile: the watch judges how it ended
        return Beginning("ended", counters, event, pid, notes=tuple(notes))
    return Beginning("fresh", Counters(), event, notes=tuple(notes))
