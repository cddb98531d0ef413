"""`runwatch status RUN_DIR`: one short check-in on a run, whatever the size of its log.

Reads only the end of the log (`RecordSource.tail`: a JSONL log read back from its end, other
formats by a pass), `run.json`, `pid`, `launch.json` and `watchdog.json`; asks NVML (pynvml, if importable) or `nvidia-smi` (if on PATH) about GPUs.
At most ~20 short lines; `--json` prints the same facts as JSON. Standard library only.

Longer than 500 lines on purpose: the check-in's facts (typed dicts), how they are gathered from
each kind of log, and the lines that show them are read together; a fact changes in all three.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import time
from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict

from ..errors import UsageError
from ..files.hardware import GpuInfo, gpu_info
from ..files.rundir import RunDir
from ..judging.liveness import is_local_host, last_error, process_host, watchdog_liveness
from ..judging.ranks import rank_status_lines
from ..judging.rules import fmt_step, verdict_class
from ..judging.verdict import read_verdict
from ..judging.watchoptions import Options, load_options
from ..options import add_flags, given_options
from ..procs.process import alive, launch_info, read_pid_file
from ..reading.readers import ReadOptions, read_options
from ..reading.readers import add_arguments as add_read_arguments
from ..reading.records import Record, RecordParser, Target, parse_maps, resolve_target
from ..reading.source import RecordSource, reached
from ..reading.target import recorded_rule_options
from ..supervising.goodput import goodput_line
from ..supervising.supervision import ENDS, last_record, supervise_status

__all__ = [
    "status",
    "describe",
    "watchdog_facts",
    "format_status",
    "gpu_info",
    "add_arguments",
    "run",
    "Status",
    "StatusHead",
    "GradNorm",
    "Ended",
    "LastEval",
    "ProcessInfo",
    "GpuInfo",
]

# Records read back from the end: enough for a rate over the last windows and the last eval.
TAIL_RECORDS = 200
# At most this many records are read back to cover --throughput-span (a log of one record an update).
MAX_TAIL_RECORDS = 51200
# What a program prints when its supervisor stops it (SIGTERM): not the run's own error.
_STOPPED = re.compile(r"SIGTERM|\bTerminated\b|KeyboardInterrupt|signal 15\b|interrupted")

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


def status(
    run_dir: str,
    *,
    gpus: bool = True,
    now: float | None = None,
    read: ReadOptions | None = None,
    maps: dict[str, str] | None = None,
    stall: float | None = None,
    throughput_span: float | None = None,
) -> Status:
    """The facts of one check-in as a dict (what `runwatch status --json` prints). The reading
    options, `stall` and `throughput_span` not given are those the run directory recorded at
    launch, else `runwatch.toml`'s, else the defaults."""
    if not os.path.exists(run_dir):
        raise UsageError(f"status: {run_dir}: no such run directory or log")
    now = time.time() if now is None else now
    t = resolve_target(run_dir, read)
    given = {k: v for k, v in (("stall", stall), ("throughput_span", throughput_span)) if v is not None}
    opts = load_options(
        t.run_dir if os.path.isdir(t.run_dir) else None,
        {**recorded_rule_options(t.run_dir, Options, "status"), **given},
    )
    out: StatusHead = {
        "run_dir": t.run_dir,
        "log": t.log_path,
        "run_id": None,
        "session_id": None,
        "sessions": None,
        "max_steps": None,
        "torn_tail": False,
        "read_as": _read_as(t) if read is None or not (read.format or read.pattern) else None,
        "stall_seconds": opts.stall,
        "throughput_span": opts.throughput_span,
    }
    recs: list[Record] = []
    torn = False
    mtime = None
    parser: RecordParser | None = None
    if os.path.exists(t.log_path):
        source = RecordSource(t, maps=maps)
        recs, torn = source.tail(TAIL_RECORDS)
        n = TAIL_RECORDS
        while (
            not _windows(source) and len(recs) == n and n < MAX_TAIL_RECORDS and _covered(recs) < opts.throughput_span
        ):
            n *= 4  # a log of one record a step (not windows of updates): read back until the span is covered
            recs, torn = source.tail(n)
        parser = source.parser
        if parser is not None and parser.manifest is not None:
            manifest = parser.manifest
            out.update(
                {
                    "run_id": manifest["run_id"],
                    "session_id": manifest["sessions"][-1]["session_id"],
                    "sessions": len(manifest["sessions"]),
                }
            )
            recipe = manifest["sessions"][-1].get("recipe")
            out["tokens_are_samples"] = isinstance(recipe, dict) and recipe.get("tokens") == "samples"
        out["max_steps"] = source.max_steps()
        if parser is not None:
            out["loss_key"] = parser.loss_key or None
        latest = out["session_id"] or (recs[-1].session if recs else None)
        recs = [r for r in recs if r.session == latest]  # the latest session's
        mtime = source.mtime()
    out["torn_tail"] = torn
    return describe(t, out, recs, mtime, now, gpus=gpus, parser=parser)


def describe(
    t: Target,
    out: StatusHead,
    recs: list[Record],
    mtime: float | None,
    now: float,
    *,
    gpus: bool = True,
    parser: RecordParser | None = None,
) -> Status:
    """The check-in facts: `out`'s (the run's identity, `max_steps` and `torn_tail`), then those of
    the latest session's last records (`recs`, in log order, read by `parser`) and of the run
    directory's side files (pid, watchdog.json, launch.json, heartbeats). `mtime`: the log's, when
    it has one."""
    trains = [r for r in recs if r.kind == "train"]
    evals = [r for r in recs if r.has_eval]
    last = recs[-1] if recs else None
    lt = trains[-1] if trains else None
    step: int | float | None = None
    for r in recs:  # the step reached: a late record of no kind (a hyperparameter at step 0) never moves it back
        step = r.step if step is None else reached(step, r)
    dated = parser is not None and parser.record_times  # (else the log's mtime says when)
    when = last.time if last is not None and dated and last.time else mtime
    grad_norm: GradNorm | None = (
        {"mean": _num(lt.grad_mean), "max": _num(lt.grad_max)} if lt and lt.grad_mean is not None else None
    )
    tps: float | None = None
    sps: float | None = None
    span = out.get("throughput_span") or 30.0
    counts = parser.throughput.counts if parser is not None else None
    if counts == "tokens":  # tokens / s (the HF callback without seq_len counts samples)
        if last is not None and last.raw and isinstance(last.raw.get("session"), dict):
            tps = last.raw["session"].get("tokens_per_second")
        if tps is None and lt is not None:
            tps = lt.throughput
        if out.get("tokens_are_samples"):
            tps, sps = None, tps
    elif lt is not None:
        sps = _span_rate(trains, span)  # the log's `sps`: samples a second, or a text log's iterations a second
    steps_per_second = _rate(trains, span)
    if sps is not None and _iteration_rate(t):
        steps_per_second = steps_per_second or sps
        sps = None
    end = next((r for r in reversed(recs) if r.kind == "end"), None)
    ended: Ended | None = {"reason": end.reason, "error": end.error} if end else None
    age = round(now - when, 1) if last is not None and when is not None else None
    stall = out.get("stall_seconds") or 360.0
    stalled = age if age is not None and age > stall / 2 and ended is None else None
    eta = None
    if out["max_steps"] and steps_per_second and step is not None and stalled is None:
        eta = max(0.0, (out["max_steps"] - step) / steps_per_second)
    ev = evals[-1] if evals else None
    last_eval: LastEval | None = (
        {"step": ev.step, "loss": _num(ev.eval_loss), "metrics": {k: _num(v) for k, v in (ev.metrics or {}).items()}}
        if ev
        else None
    )
    pid = read_pid_file(RunDir(t.run_dir).pid)
    host = process_host(t.run_dir)
    process: ProcessInfo | None
    if pid is None:
        process = None
    elif host is None or is_local_host(host):  # (no host recorded: this one)
        process = {"pid": pid, "alive": alive(pid)}
    else:  # another node of the cluster: its pids mean nothing here
        process = {"pid": pid, "alive": None, "host": host}
    watchdog = watchdog_facts(t.run_dir, now)
    error: str | None = watchdog.get("last_error") if watchdog is not None else None
    supervised = supervise_status(t.run_dir)
    if error is None and process and process["alive"] is False and not (ended and ended["reason"] == "normal"):
        error = last_error(RunDir(t.run_dir).stdout)
        if error is not None and supervised and supervised["event"] in ("stop", *ENDS) and _STOPPED.search(error):
            error = None  # what the supervisor's own stop made it print: not the run's error
    finished = (ended is not None and ended["reason"] == "normal") or (watchdog or {}).get("verdict") == "done"
    ranks = [x for x in rank_status_lines(t.run_dir, now) if not (finished and x.startswith("most behind"))]
    journal_end = last_record(t.run_dir) if supervised else None
    good = journal_end.get("goodput") if journal_end is not None else None
    return {
        **{k: out.get(k) for k in StatusHead.__annotations__},  # type: ignore[typeddict-item]
        "step": step,
        "age_seconds": age,
        "loss": _num(lt.loss) if lt else None,
        "lr": _num(lt.lr) if lt else None,
        "grad_norm": grad_norm,
        "tokens_per_second": _num(tps),
        "steps_per_second": steps_per_second,
        "samples_per_second": _num(sps),
        "eta_seconds": round(eta) if eta is not None else None,
        "stalled_seconds": stalled,
        "ended": ended,
        "last_eval": last_eval,
        "process": process,
        "watchdog": watchdog,
        "last_error": error,
        "gpus": gpu_info() if gpus else None,
        "ranks": ranks,  # multi-rank runs: at most 4 lines (a finished run names no rank most behind); else []
        "supervise": supervised,  # a supervised run: attempt, restarts, rollbacks; else None
        "goodput": good if isinstance(good, dict) else None,
    }


def _windows(source: RecordSource) -> bool:
    """The log's train records are windows of updates (each covers many: a short tail spans long)."""
    return source.parser is not None and source.parser.windows


def _read_as(t: Target) -> str | None:
    """How the run directory recorded its log is read: `nanogpt, as supervised`."""
    if t.recorded_by is None:
        return None
    how = {"supervise": "as supervised", "launch": "as launched"}.get(t.recorded_by, f"as {t.recorded_by} recorded")
    return f"{t.read.format or t.format}, {how}"


def watchdog_facts(run_dir: str, now: float) -> dict[str, Any] | None:
    """watchdog.json as a check-in shows it: a `watching` record with `alive` and its `line` (is
    the watch itself still running), or a verdict with its `class` and `before_current_launch`
    (older than launch.json's `time`); None when there is none."""
    verdict, _problem = read_verdict(run_dir, watching=True)
    if not isinstance(verdict, dict):
        return None
    verdict.pop("state", None)  # the watch's resumable state: not for a check-in
    if verdict.get("verdict") == "watching":
        watching, line = watchdog_liveness(verdict, now)
        return {**verdict, "alive": watching, "line": line}
    launch = launch_info(run_dir)
    stale = (
        isinstance(launch, dict)
        and isinstance(launch.get("time"), (int, float))
        and isinstance(verdict.get("time"), (int, float))
        and verdict["time"] < launch["time"]
    )
    return {
        **verdict,
        "class": verdict.get("class", verdict_class(verdict.get("kind"))),
        "before_current_launch": bool(stale),
    }


def _num(v: float | None) -> Shown:
    if (type(v) is int or type(v) is float) and not math.isfinite(v):
        return str(v)  # strict JSON has no NaN: show it as text
    return v


def _iteration_rate(t: Target) -> bool:
    """A text log whose `sps` is 1000 / its milliseconds an iteration: updates a second (nanoGPT),
    not samples (a pattern or preset with a `batch_size` group, Megatron's)."""
    return t.format == "text" and not any("(?P<batch_size>" in p for p in t.read.patterns())


def _rate(trains: list[Record], span: float) -> float | None:
    """Steps per second over the train records of the last `span` seconds that carry a time (at
    least the last two)."""
    timed = [(r.time, r.step) for r in trains if r.time is not None]
    if len(timed) < 2:
        return None
    b_time, b_step = timed[-1]
    inside = [x for x in timed if x[0] >= b_time - span]
    a_time, a_step = inside[0] if len(inside) >= 2 else timed[-2]
    dt = b_time - a_time
    return (b_step - a_step) / dt if dt > 0 and b_step > a_step else None


def _covered(recs: list[Record]) -> float:
    """The seconds the records' times span (0 without times)."""
    times = [r.time for r in recs if r.time is not None]
    return max(times) - min(times) if len(times) >= 2 else 0.0


def _span_rate(trains: list[Record], span: float) -> float | None:
    """The log's own rate (`sps`) over its last `span` seconds: records taken back from the last
    until their seconds (1 / sps each) cover the span, the rate their count over those seconds
    (a text log's `time X ms` of one line is no rate of the run: an eval's iteration is slow)."""
    seconds, n = 0.0, 0
    for r in reversed(trains):
        if r.throughput is None or not math.isfinite(r.throughput) or r.throughput <= 0:
            continue
        seconds += 1.0 / r.throughput
        n += 1
        if seconds >= span:
            break
    return n / seconds if n else None


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


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", metavar="RUN_DIR", help="the run directory (or a JSONL log / trainer_state.json)")
    p.add_argument("--json", action="store_true", help="print the check-in as JSON")
    add_flags(p, Options, "status")  # --map, --stall, --throughput-span
    add_read_arguments(p)  # --format, --pattern, --run (readers)


def run(args: argparse.Namespace) -> int:
    given = given_options(args, Options)
    st = status(
        args.run_dir,
        read=read_options(args),
        maps=parse_maps(getattr(args, "map", None)),
        stall=given.get("stall"),
        throughput_span=given.get("throughput_span"),
    )
    if args.json:
        print(json.dumps(st, indent=2, allow_nan=False))
    else:
        print("\n".join(format_status(st)))
    return 0
