"""One check-in on a run: its facts, typed, and the lines that show them.

    st = status.status("runs/a")           # gathers the facts (`status`), a `Status`
    for line in format_status(st): ...    # at most ~20 short lines

The typed dicts name exactly the keys `runwatch status --json` prints, in their order (the run
page's and the MCP tools' facts extend them); `format_status` is what `runwatch status` prints.
A fact is added in both: its key here, and its line when it has one. Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict

from ..files import GpuInfo
from ..judging import fmt_step
from ..supervising import ENDS, goodput_line

# A number as a check-in shows it: a non-finite one as its text (strict JSON has no NaN).
Shown = float | str | None


class StatusHead(TypedDict):
    """What the caller of `describe` knows: the run's identity, its planned steps, a torn tail."""

    run_dir: str
    log: str
    run_id: str | None
    session_id: str | None
    sessions: int | None  # how many run.json lists
    max_steps: int | None
    torn_tail: bool
    loss_key: NotRequired[str | None]  # the key the loss is read from when the log has no `loss`
    read_as: NotRequired[str | None]  # how the log is read when the run directory recorded it: "nanogpt, as supervised"
    stall_seconds: NotRequired[float]  # --stall: a run with no record past half of it is `stalled`
    throughput_span: NotRequired[float]  # --throughput-span: the rate is over the records of the last S seconds
    tokens_are_samples: NotRequired[bool]  # run.json's recipe counts samples, not tokens (HF without seq_len)


class GradNorm(TypedDict):
    """The last train record's gradient norms."""

    mean: Shown
    max: Shown


class Ended(TypedDict):
    """The session's end record."""

    reason: str | None
    error: str | None


class LastEval(TypedDict):
    """The session's last eval values."""

    step: int | float
    loss: Shown
    metrics: dict[str, Shown]


class ProcessInfo(TypedDict):
    """The training process (RUN_DIR/pid); `alive` None and a `host` when it runs on another host."""

    pid: int
    alive: bool | None
    host: NotRequired[str]


class Status(StatusHead):
    """The facts of one check-in: what `runwatch status --json` prints."""

    step: int | float | None
    age_seconds: float | None
    loss: Shown
    lr: Shown
    grad_norm: GradNorm | None
    tokens_per_second: Shown  # null unless the log counts tokens (schema v1, with a sequence length)
    steps_per_second: float | None  # updates a second, from the records' times (a text log: its ms an iteration)
    samples_per_second: Shown  # the log's own `sps` (minimal telemetry), when it is not an iteration rate
    eta_seconds: int | None
    stalled_seconds: float | None  # no record for this long, past half the stall limit (the ETA then says so)
    ended: Ended | None
    last_eval: LastEval | None
    process: ProcessInfo | None
    watchdog: dict[str, Any] | None  # watchdog.json's verdict (without the watch's state), with a few facts
    last_error: str | None
    gpus: list[GpuInfo] | str | None  # a str: why there is no list ("no GPU"); None: not asked
    ranks: list[str]
    supervise: Mapping[str, Any] | None  # supervision.supervise_status
    goodput: dict[str, Any] | None  # the journal's end record's goodput (the figure every surface shows)


def _dur(s: float) -> str:
    s = int(s)
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def _v(x: object) -> str:
    return f"{x:.4g}" if isinstance(x, float) else str(x)


def format_status(st: Status) -> list[str]:
    """The check-in as at most ~20 short lines."""
    lines: list[str] = []
    if st["run_id"]:
        lines.append(f"run      {st['run_id']}  session {st['session_id']} ({st['sessions']} in run.json)")
    else:
        lines.append(f"log      {st['log']}" + (f" ({st['read_as']})" if st.get("read_as") else ""))
    if st["step"] is None:
        lines.append("step     no records yet")
    else:
        total = f"/{st['max_steps']}" if st["max_steps"] else ""
        age = f", {_dur(st['age_seconds'])} ago" if st["age_seconds"] is not None else ""
        lines.append(f"step     {fmt_step(st['step'])}{total}{age}")
    if st["loss"] is not None:
        key = st.get("loss_key")
        lr = f"   lr {_v(st['lr'])}" if st["lr"] is not None else ""  # not logged: not shown
        lines.append(f"loss     {_v(st['loss'])}{f' (from {key})' if key else ''}{lr}")
    if st["grad_norm"]:
        lines.append(f"grad     mean {_v(st['grad_norm']['mean'])}  max {_v(st['grad_norm']['max'])}")
    # the rate as measured: tokens when the log counts them, else updates, else the log's samples
    if st["tokens_per_second"] is not None:
        lines.append(f"rate     {_v(st['tokens_per_second'])} tokens/s")
    elif st.get("tokens_are_samples") and st["samples_per_second"] is not None:  # (HF without seq_len)
        lines.append(f"rate     {_v(st['samples_per_second'])} samples/s")
    elif st["steps_per_second"] is not None:
        lines.append(f"rate     {_v(st['steps_per_second'])} updates/s")
    elif st["samples_per_second"] is not None:
        lines.append(f"rate     {_v(st['samples_per_second'])} samples/s")
    if st.get("stalled_seconds") is not None:
        lines.append(
            f"eta      stalled for {_dur(st['stalled_seconds'] or 0)} (no record; --stall {_v(st.get('stall_seconds'))})"
        )
    elif st["eta_seconds"] is not None:
        lines.append(f"eta      {_dur(st['eta_seconds'])} ({_v(st['steps_per_second'])} steps/s)")
    if st["ended"]:
        err = f": {st['ended']['error']}" if st["ended"]["error"] else ""
        lines.append(f"ended    {st['ended']['reason']}{err}"[:120])
    if st["last_eval"]:
        ev = st["last_eval"]
        metrics = "  ".join(f"{k} {_v(v)}" for k, v in list(ev["metrics"].items())[:4])
        loss = f" loss {_v(ev['loss'])}" if ev["loss"] is not None else ""
        lines.append(f"eval     step {fmt_step(ev['step'])}{loss}  {metrics}".rstrip())
    p = st["process"]
    if not p:
        lines.append("process  unknown (no pid file)")
    elif p["alive"] is None:
        lines.append(f"process  on host {p['host']} (not checked from here)")
    else:
        lines.append(f"process  {'alive' if p['alive'] else 'gone'} (pid {p['pid']})")
    w = st["watchdog"]
    if w and w.get("verdict") == "watching":
        lines.append(w["line"])
    elif w:
        what = "OK done" if w.get("verdict") == "done" else f"ANOMALY {w.get('kind')}"
        old = " (before the current launch)" if w.get("before_current_launch") else ""
        lines.append(f"watchdog {what} step={w.get('step')}: {w.get('message')}{old}"[:160])
    else:
        lines.append("watchdog no verdict")
    warnings = [x for x in (w.get("warnings") or []) if isinstance(x, dict)] if w else []
    if warnings:  # watchdog.json's warnings
        shown = ", ".join(f"{x.get('kind')} step={x.get('step')}" for x in warnings[:3])
        more = f" (+{len(warnings) - 3} more)" if len(warnings) > 3 else ""
        lines.append(f"warnings {len(warnings)}: {shown}{more}"[:160])
    if st.get("last_error"):
        lines.append(f"error    {st['last_error']}"[:160])
    sv = st.get("supervise")
    if sv:
        state = (
            ""
            if sv["supervisor_running"]
            else f" (supervisor {'not running' if sv['event'] not in ENDS else sv['event'].replace('_', ' ')})"
        )
        lines.append(
            f"supervise attempt {sv['attempt']}, restarts {sv['restarts']}/{sv['max_restarts']}, "
            f"rollbacks {sv['rollbacks']}/{sv['max_rollbacks']}{state}"
        )
    if st.get("goodput"):
        lines.append(goodput_line(st["goodput"] or {}))
    g = st["gpus"]
    if isinstance(g, list):
        for d in g[:8]:
            lines.append(
                f"gpu{d['index']}     {d['utilization_percent']}%  {d['memory_used_bytes'] / 2**30:.1f}/"
                f"{d['memory_total_bytes'] / 2**30:.1f} GiB  {d['name']}"
            )
        if len(g) > 8:
            lines.append(f"         ... and {len(g) - 8} more GPUs")
    elif g is not None:
        lines.append(f"gpu      {g}")
    for i, line in enumerate(st.get("ranks") or []):
        lines.append(("ranks    " if i == 0 else "         ") + line.removeprefix("ranks: "))
    if st["torn_tail"]:
        lines.append("note     the log ends in a line still being written")
    return lines
