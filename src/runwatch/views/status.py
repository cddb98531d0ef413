"""`runwatch status RUN_DIR`: one short check-in on a run, whatever the size of its log.

Reads only the end of the log (`RecordSource.tail`: a JSONL log read back from its end, other
formats by a pass), `run.json`, `pid`, `launch.json` and `watchdog.json`; asks NVML (pynvml, if importable) or `nvidia-smi` (if on PATH) about GPUs.
At most ~20 short lines; `--json` prints the same facts as JSON. Standard library only.

This module gathers the facts from each kind of log and the run directory's side files; their
shape (the typed dicts of `status --json`) and the lines that show them are `checkin`'s, and
re-exported here.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import time
from typing import Any

from ..errors import UsageError
from ..files import GpuInfo as GpuInfo
from ..files import RunDir
from ..files import gpu_info as gpu_info
from ..judging import (
    Options,
    is_local_host,
    last_error,
    load_options,
    process_host,
    rank_status_lines,
    read_verdict,
    verdict_class,
    watchdog_liveness,
)
from ..options import add_flags, given_options
from ..procs import alive, launch_info, read_pid_file
from ..reading import (
    ReadOptions,
    Record,
    RecordParser,
    RecordSource,
    Target,
    parse_maps,
    reached,
    read_options,
    recorded_rule_options,
    resolve_target,
)
from ..reading.readers import add_arguments as add_read_arguments
from ..supervising import ENDS, last_record, supervise_status
from .checkin import Ended as Ended
from .checkin import GradNorm as GradNorm
from .checkin import LastEval as LastEval
from .checkin import ProcessInfo as ProcessInfo
from .checkin import Shown
from .checkin import Status as Status
from .checkin import StatusHead as StatusHead
from .checkin import format_status as format_status

# Records read back from the end: enough for a rate over the last windows and the last eval.
TAIL_RECORDS = 200
# At most this many records are read back to cover --throughput-span (a log of one record an update).
MAX_TAIL_RECORDS = 51200
# What a program prints when its supervisor stops it (SIGTERM): not the run's own error.
_STOPPED = re.compile(r"SIGTERM|\bTerminated\b|KeyboardInterrupt|signal 15\b|interrupted")


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
