"""The goodput of a supervised run, and `runwatch goodput` (where its wall time went is `walltime.breakdown`'s;
the path to the final step and the checkpoints are `history`'s).

    sessions = records.load_sessions(run_dir)
    figures = goodput(sessions, journal)               # {"steps_kept", "steps_run", "seconds_lost", ...}
    split = breakdown(sessions, journal)               # {"wall_seconds", "productive_seconds", "buckets", "advice"}


Goodput (docs/SUPERVISE.md, "Goodput"): one figure for every surface (the line `supervise`
prints, its journal's end record, `status`, the page, `mcp run_status`, `runwatch goodput`):
- `ratio`: productive seconds / wall seconds of `breakdown` (never above 1);
- `steps_ratio`: `steps_kept / steps_run`, beside it;
- `steps_run`: every successful optimizer update the log shows, over all sessions (schema v1:
  the windows' `updates`; minimal telemetry: step differences within a session);
- `steps_kept`: the updates on the path to the final step (the final step minus the run's first
  step): a step redone after a crash or a rollback counts once; steps past the onset of a
  divergence that was not recovered (the supervision's last verdict) are not kept;
- `breakdown`: the supervision's wall time (from its first launch to its journal's last record)
  cut into productive training and the lost buckets `startup`, `checkpoint`, `eval`, `redone`,
  `detection`, `stopping`, `backoff`, `preempted`, attempt by attempt, from the journal's
  launches, verdicts and signals and the log's record times; with the checkpoint interval
  Young and Daly's rule advises for the run's own save time and interruption rate; productive
  time ends at the onset of the trouble an attempt was stopped for, an attempt that logged
  nothing is lost whole (`startup`), and in a log without record times (a text log) an
  attempt's training ends when its log last grew (the verdict's `last_record_time`);
- `seconds_lost`: the wall time less the breakdown's productive time.

Standard library only.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from typing import Any, TypedDict

from ..judging import fmt_step
from ..reading import Session, live_sessions
from .walltime import BUCKETS as BUCKETS
from .walltime import LAUNCHES, journal_attempts, steps_kept, steps_run
from .walltime import Advice as Advice
from .walltime import Breakdown as Breakdown
from .walltime import breakdown as breakdown
from .walltime import supervision as supervision
from .walltime import unrecovered_onset as unrecovered_onset


class Goodput(TypedDict):
    """The goodput figures of a run (the module docstring says what each one counts)."""

    steps_kept: int | float
    steps_run: int | float
    ratio: float | None  # productive_seconds / wall_seconds; None when the times cannot tell
    steps_ratio: float | None  # steps_kept / steps_run; None when no step ran
    restarts: int
    rollbacks: int
    seconds_lost: float | None  # None when the sessions' times cannot tell
    wall_seconds: float | None
    productive_seconds: float | None


def goodput(
    sessions: list[Session],
    journal: list[dict[str, Any]] | None = None,
    *,
    restarts: int = 0,
    rollbacks: int = 0,
    end: float | None = None,
    exited: float | None = None,
) -> Goodput:
    """The run's goodput (see the module docstring): `ratio` the time ratio of `breakdown` over
    the supervision in `journal` up to `end` (or over the log alone), `steps_ratio` beside it;
    `ratio`, `steps_ratio` and `seconds_lost` are None when they cannot be known."""
    run, kept = steps_run(sessions), steps_kept(sessions, journal)
    kept = min(kept, run) if run else kept
    split = breakdown(sessions, journal, end=end, exited=exited)
    wall, productive = split["wall_seconds"], split["productive_seconds"]
    lost = None
    if wall is not None and productive is not None:
        lost = round(wall - productive, 3)
    return {
        "steps_kept": kept,
        "steps_run": run,
        "ratio": split["ratio"],
        "steps_ratio": round(min(1.0, kept / run), 4) if run else None,
        "restarts": restarts,
        "rollbacks": rollbacks,
        "seconds_lost": lost,
        "wall_seconds": wall,
        "productive_seconds": productive,
    }


def goodput_line(g: Mapping[str, Any]) -> str:
    """The goodput in one line, as `supervise` prints it and `status` shows it."""
    ratio = "n/a" if g.get("ratio") is None else f"{g['ratio']:.3f}"
    steps = "n/a" if g.get("steps_ratio") is None else f"{g['steps_ratio']:.3f}"
    wall = g.get("wall_seconds")
    time_part = (
        f"{_seconds(g.get('productive_seconds'))} productive of {_seconds(wall)} wall"
        if wall is not None
        else "no times to split"
    )
    return (
        f"goodput {ratio}: {time_part}; steps {steps} ({fmt_step(g.get('steps_kept') or 0)} kept of "
        f"{fmt_step(g.get('steps_run') or 0)} run); {g.get('restarts', 0)} restarts, {g.get('rollbacks', 0)} rollbacks"
    )


# --- runwatch goodput RUN_DIR ---------------------------------------------------------------------


def _seconds(x: float | None) -> str:
    if x is None:
        return "n/a"
    if x < 1:
        return f"{x:.3f} s"
    if x < 120:
        return f"{x:.1f} s"
    s = round(x)
    return f"{s // 60}m{s % 60:02d}s" if s < 7200 else f"{s // 3600}h{s % 3600 // 60:02d}m"


def report_lines(split: Breakdown, attempts: int) -> list[str]:
    """`runwatch goodput`'s text: the ratio, each bucket with its share, the advice."""
    wall, productive = split["wall_seconds"], split["productive_seconds"]
    if wall is None or productive is None:
        return ["goodput n/a: the journal and the log hold no times to split"]
    adv = split["advice"]
    n = adv["interruptions"]
    ratio = "n/a" if split["ratio"] is None else f"{split['ratio']:.3f}"
    lines = [
        f"goodput {ratio}: {_seconds(productive)} productive of {_seconds(wall)} wall "
        f"({attempts} attempt{'s' if attempts != 1 else ''}, {n} interruption{'s' if n != 1 else ''})"
    ]
    for name, value in split["buckets"].items():
        share = f"{100 * value / wall:5.1f}%" if value is not None and wall else "  n/a"
        lines.append(f"  {name:<11} {_seconds(value):>9}  {share}")
    if adv["interval_seconds"] is None:
        why = "no checkpoint with its save time" if adv["checkpoint_seconds"] is None else "no interruption"
        lines.append(f"checkpoint interval: no advice ({why})")
    else:
        lines.append(
            f"checkpoint interval: every {_seconds(adv['interval_seconds'])} (Young/Daly from a "
            f"{_seconds(adv['checkpoint_seconds'])} save and {_seconds(adv['mtbi_seconds'])} between "
            f"interruptions); used every {_seconds(adv['used_interval_seconds'])}; would have saved "
            f"{_seconds(adv['saved_seconds'])}"
        )
    return lines


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", metavar="RUN_DIR", help="a supervised run directory (supervise.jsonl and its log)")
    p.add_argument("--json", action="store_true", help="print the breakdown as JSON")


def run_goodput(run_dir: str) -> tuple[Goodput, Breakdown, int]:
    """The goodput of the run in `run_dir`, its breakdown and its number of attempts, from its
    journal (the latest supervision), its log (read as the run directory recorded, or as the
    journal's launch records say) and the last attempt's `exit.json`. UsageError when there is
    neither a journal nor a log."""
    from ..errors import InvalidRunError, UsageError
    from ..files import recorded_reading
    from ..procs import read_exit
    from ..reading import ReadOptions, load_sessions, resolve_target
    from .supervision import read_journal

    journal = supervision(read_journal(run_dir))
    read = ReadOptions()
    if recorded_reading(run_dir)[2] is None:  # nothing in launch.json: the journal's launch records
        spec: dict[str, Any] = next((r["log"] for r in reversed(journal) if isinstance(r.get("log"), dict)), {})
        log = spec.get("target")
        try:
            read = ReadOptions(
                format=spec.get("format"),
                pattern=tuple(spec.get("pattern") or ()),
                run=spec.get("run"),
                log=log if type(log) is str and log != "." else None,
            )
        except (UsageError, TypeError, ValueError):
            read = ReadOptions()
    try:  # the log the supervisor watched, read as it read it
        target = resolve_target(run_dir, read)
        sessions = load_sessions(target) if os.path.exists(target.log_path) else []
    except (InvalidRunError, UsageError) as exc:
        raise UsageError(f"goodput: {run_dir}: cannot read the log: {exc}") from None
    if not journal and not sessions:
        raise UsageError(f"goodput: {run_dir}: no supervise.jsonl and no log")
    launches = [r for r in journal if r.get("event") in LAUNCHES and type(r.get("pid")) is int]
    ended = read_exit(run_dir, launches[-1]["pid"]) if launches else None
    exited = ended.time if ended is not None and ended.time > 0 else None
    c: dict[str, Any] = next((r for r in reversed(journal) if type(r.get("restarts")) is int), {})
    g = goodput(sessions, journal, restarts=c.get("restarts", 0), rollbacks=c.get("rollbacks", 0), exited=exited)
    split = breakdown(sessions, journal, exited=exited)
    return g, split, len(journal_attempts(journal)) if journal else len(live_sessions(sessions))


def run(args: argparse.Namespace) -> int:
    """`runwatch goodput RUN_DIR [--json]`: the wall time of the supervision broken down."""
    import json

    from ..errors import UsageError

    run_dir = os.path.abspath(args.run_dir)
    if not os.path.isdir(run_dir):
        raise UsageError(f"goodput: {args.run_dir}: no such run directory")
    g, split, attempts = run_goodput(run_dir)
    if args.json:
        steps = {"steps_kept": g["steps_kept"], "steps_run": g["steps_run"], "steps_ratio": g["steps_ratio"]}
        print(json.dumps({**split, **steps}, indent=2, allow_nan=False))
    else:
        lines = report_lines(split, attempts)
        if split["wall_seconds"] is not None:
            lines[0] += f"; steps {'n/a' if g['steps_ratio'] is None else format(g['steps_ratio'], '.3f')} "
            lines[0] += f"({fmt_step(g['steps_kept'])} kept of {fmt_step(g['steps_run'])} run)"
        print("\n".join(lines))
    return 0
