"""`runwatch tensorboard`: a run's records as TensorBoard event files, one TensorBoard run a session.

    runwatch tensorboard runs/a                  # writes runs/a/tensorboard/<session>/events.out...
    tensorboard --logdir runs/a/tensorboard

The records come from `records` (the one parser), so a schema-v1 run, a minimal-telemetry JSONL
and a Hugging Face trainer_state.json export alike. The files are written by the `tensorboard`
package's own `tensorboard.summary.Writer` (`pip install 'runwatch[tensorboard]'`), with each
record's own wall time. An export is built beside the log directory and swapped in whole, so a
re-export replaces the previous one (no duplicate points) and a failed one leaves it untouched.

Tags (schema v1; minimal telemetry has the subset its keys give, its throughput as `train/sps`):

    train/loss  train/lr  train/grad_norm_mean  train/grad_norm_max  train/tokens_per_second
    train/grad_clipped_fraction  train/skipped  train/nonfinite_grad_norms
    train/qk_clip_max_logit  train/qk_clip_clipped_fraction
    session/tokens  session/tokens_per_second  session/elapsed_seconds
    val/loss  val/<metric>  checkpoint/seconds  checkpoint/bytes  memory/<name>
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import sys
from dataclasses import dataclass, field
from typing import Any, Iterator

from .errors import InvalidRunError, RunwatchError, UsageError
from .records import Record, iter_records, parse_maps, parser_for, resolve_target

__all__ = ["export", "scalars", "add_arguments", "run", "MARKER"]

# Written into the log directory so that a re-export knows the directory is its own to replace.
MARKER = "runwatch-export.json"


@dataclass
class _Run:
    name: str
    session: str
    scalars: int = 0
    tags: set = field(default_factory=set)
    wall: float | None = None


def scalars(rec: Record) -> Iterator[tuple[str, float]]:
    """The (tag, value) pairs a record becomes; non-finite values of minimal logs pass through."""
    raw = rec.raw or {}
    v1 = "event" in raw
    if rec.kind == "train":
        yield "train/loss", rec.loss
        if rec.lr is not None:
            yield "train/lr", rec.lr
        if v1:
            if rec.grad_mean is not None:
                yield "train/grad_norm_mean", rec.grad_mean
                yield "train/grad_norm_max", rec.grad_max
            yield "train/tokens_per_second", rec.throughput
            yield "train/grad_clipped_fraction", raw["grad_clipped_fraction"]
            yield "train/skipped", raw["skipped"]
            yield "train/nonfinite_grad_norms", raw["nonfinite_grad_norms"]
            qk = raw.get("qk_clip")
            if qk:
                if qk.get("max_logit") is not None:
                    yield "train/qk_clip_max_logit", qk["max_logit"]
                if qk["observed_head_updates"]:
                    yield "train/qk_clip_clipped_fraction", qk["clipped_head_updates"] / qk["observed_head_updates"]
        else:
            grad = raw.get("grad_norm")
            if type(grad) in (int, float):
                yield "train/grad_norm", grad
            if rec.throughput is not None:
                yield "train/sps", rec.throughput
    if rec.eval_loss is not None:
        yield "val/loss", rec.eval_loss
    for name, value in (rec.metrics or {}).items():
        yield f"val/{name}", value
    if rec.kind == "checkpoint":
        yield "checkpoint/seconds", raw["seconds"]
        if raw.get("bytes") is not None:
            yield "checkpoint/bytes", raw["bytes"]
    if v1 and rec.kind == "train":
        session = raw["session"]
        yield "session/tokens", session["tokens"]
        if session["tokens_per_second"] is not None:
            yield "session/tokens_per_second", session["tokens_per_second"]
        yield "session/elapsed_seconds", session["elapsed_seconds"]


def _memory(rec: Record) -> dict[str, int]:
    memory = (rec.raw or {}).get("memory") if rec.kind != "invalid" else None
    return memory if isinstance(memory, dict) else {}


def _run_name(key: str, taken: set[str]) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]", "_", key).strip(".") or "session"
    base, i = name, 2
    while name in taken:
        name = f"{base}-{i}"
        i += 1
    taken.add(name)
    return name


def export(target: str, logdir: str | None = None, *, maps: dict[str, str] | None = None) -> dict:
    """Export every session of `target` to `logdir` (default RUN_DIR/tensorboard), replacing it whole.

    Returns {"logdir", "runs": [{"name", "session", "scalars", "tags"}], "invalid_records"}.
    """
    target = os.fspath(target)
    if not os.path.exists(target):
        raise UsageError(f"tensorboard: {target}: no such run directory or log")
    try:
        from tensorboard.summary import Writer
    except ImportError:
        raise RunwatchError("tensorboard export needs the tensorboard package: pip install 'runwatch[tensorboard]'") from None
    t = resolve_target(target)
    if not os.path.exists(t.log_path):
        raise UsageError(f"tensorboard: {target}: no metrics.jsonl or trainer_state.json")
    logdir = os.path.abspath(logdir or os.path.join(t.run_dir, "tensorboard"))
    _check_logdir(logdir)
    parser = parser_for(t, maps)
    tmp = f"{logdir}.tmp-{os.getpid()}"
    if os.path.exists(tmp):
        shutil.rmtree(tmp)
    runs: dict[str, _Run] = {}
    writers: dict[str, Any] = {}
    taken: set[str] = set()
    invalid = 0
    try:
        os.makedirs(tmp)
        memory_step: dict[str, Any] = {}  # session -> (step, {tag: (value, wall)}): one point a step, its max
        for rec in iter_records(t, parser=parser):
            if rec.kind == "invalid":
                invalid += 1
                continue
            r = runs.get(rec.session)
            if r is None:
                r = runs[rec.session] = _Run(_run_name(rec.session, taken), rec.session)
                writers[rec.session] = Writer(os.path.join(tmp, r.name))
            w = writers[rec.session]
            if rec.time is not None:
                r.wall = rec.time
            # records without a time of their own (trainer_state.json) take the session's last one
            wall = r.wall if r.wall is not None else 0.0
            step = _step(rec.step)
            for tag, value in scalars(rec):
                _add(w, r, tag, value, step, wall)
            pending = memory_step.get(rec.session)
            if pending is not None and pending[0] != step:
                _flush_memory(w, r, pending)
                pending = None
            for name, value in _memory(rec).items():
                if pending is None:
                    pending = memory_step[rec.session] = (step, {})
                tag = f"memory/{name}"
                if tag not in pending[1] or value > pending[1][tag][0]:
                    pending[1][tag] = (value, wall)
        for key, pending in memory_step.items():
            if pending is not None:
                _flush_memory(writers[key], runs[key], pending)
        for w in writers.values():
            w.close()
        writers.clear()
        if not runs:
            raise InvalidRunError(f"{t.log_path}: no records to export")
        with open(os.path.join(tmp, MARKER), "w", encoding="utf-8") as f:
            json.dump({"source": os.path.abspath(t.log_path), "runs": [r.name for r in runs.values()]}, f)
            f.write("\n")
        _swap(tmp, logdir)
    except BaseException:
        for w in writers.values():
            with contextlib.suppress(Exception):
                w.close()
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {
        "logdir": logdir,
        "runs": [{"name": r.name, "session": r.session, "scalars": r.scalars, "tags": sorted(r.tags)}
                 for r in runs.values()],
        "invalid_records": invalid,
    }


def _step(step: int | float) -> int:
    # TensorBoard steps are int64; a fractional minimal-telemetry step is cut to its whole part
    return int(step)


def _add(w: Any, r: _Run, tag: str, value: Any, step: int, wall: float) -> None:
    w.add_scalar(tag, float(value), step, wall_time=wall)
    r.scalars += 1
    r.tags.add(tag)


def _flush_memory(w: Any, r: _Run, pending: tuple) -> None:
    step, values = pending
    for tag, (value, wall) in values.items():
        _add(w, r, tag, value, step, wall)


def _check_logdir(logdir: str) -> None:
    """Refuse to replace a directory that is not an earlier export of ours."""
    if not os.path.exists(logdir):
        return
    if not os.path.isdir(logdir):
        raise UsageError(f"tensorboard: --logdir {logdir} is not a directory")
    if os.listdir(logdir) and not os.path.isfile(os.path.join(logdir, MARKER)):
        raise UsageError(
            f"tensorboard: --logdir {logdir} holds files that runwatch did not export (no {MARKER}); "
            "choose a new or empty directory"
        )


def _swap(tmp: str, logdir: str) -> None:
    """Put the new export in place of the old one (two renames; the old one is removed after)."""
    old = None
    if os.path.exists(logdir):
        old = f"{logdir}.old-{os.getpid()}"
        os.rename(logdir, old)
    try:
        os.rename(tmp, logdir)
    except BaseException:
        if old is not None:
            os.rename(old, logdir)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


# --- the command line -----------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", metavar="RUN_DIR|FILE", help="a run directory, a JSONL log or a trainer_state.json")
    p.add_argument("--logdir", default=None, metavar="DIR", help="where to write (default RUN_DIR/tensorboard)")
    p.add_argument("--map", action="append", default=None, metavar="CANONICAL=SOURCE",
                   help="read a minimal telemetry key from another key of the log (repeatable)")
    p.add_argument("--json", action="store_true", help="print the export's runs and tags as JSON")


def run(args: argparse.Namespace) -> int:
    info = export(args.target, args.logdir, maps=parse_maps(args.map))
    if info["invalid_records"]:
        print(f"runwatch tensorboard: left out {info['invalid_records']} invalid records "
              "(runwatch check names them)", file=sys.stderr)
    if args.json:
        print(json.dumps(info, indent=2, allow_nan=False))
        return 0
    total = sum(r["scalars"] for r in info["runs"])
    print(f"wrote {total} scalars in {len(info['runs'])} runs (one a session) to {info['logdir']}")
    print(f"view: tensorboard --logdir {info['logdir']}")
    return 0
