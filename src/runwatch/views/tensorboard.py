"""`runwatch tensorboard`: a run's records as TensorBoard event files, one TensorBoard run a session.

    runwatch tensorboard runs/a                  # writes runs/a/tensorboard/<session>/events.out...
    tensorboard --logdir runs/a/tensorboard

The records come from `records` (the one parser), so a schema-v1 run, a minimal-telemetry JSONL
and a Hugging Face trainer_state.json export alike. The files are written by the `tensorboard`
package's own event writer (`tensorboard.summary.writer.event_file_writer.EventFileWriter`,
`pip install 'runwatch[tensorboard]'`), one event a record with that record's wall time. An export is built beside the log directory and swapped in whole, so a
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
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TypedDict

from ..errors import InvalidRunError, RunwatchError, UsageError
from ..reading import Record, iter_records, parse_maps, parser_for, resolve_target

# Written into the log directory so that a re-export knows the directory is its own to replace.
MARKER = "runwatch-export.json"
# Events queued for the writer's thread; its default (10) hands over to the thread every few events.
WRITE_QUEUE = 1024
# ~1-3 s of work between progress lines on a busy CPU
PROGRESS_EVERY = 5000


class ExportedRun(TypedDict):
    """One TensorBoard run of an export: a session."""

    name: str  # the run's folder in the log directory
    session: str
    scalars: int
    tags: list[str]  # sorted


class Export(TypedDict):
    """What `export` wrote (`runwatch tensorboard --json`)."""

    logdir: str
    runs: list[ExportedRun]
    invalid_records: int  # left out


@dataclass
class _Run:
    name: str
    session: str
    scalars: int = 0
    tags: set[str] = field(default_factory=set)
    wall: float | None = None


def scalars(rec: Record, windows: bool) -> Iterator[tuple[str, float]]:
    """The (tag, value) pairs a record becomes; non-finite values of minimal logs pass through.
    `windows`: the parser's fact that a train record is a logger's window (its fields in `raw`)."""
    raw = rec.raw or {}
    if rec.kind == "train":
        assert rec.loss is not None  # every train record has one (NaN for a null of minimal telemetry)
        yield "train/loss", rec.loss
        if rec.lr is not None:
            yield "train/lr", rec.lr
        if windows:
            if rec.grad_mean is not None:
                assert rec.grad_max is not None  # schema v1: set with the mean
                yield "train/grad_norm_mean", rec.grad_mean
                yield "train/grad_norm_max", rec.grad_max
            assert rec.throughput is not None  # schema v1: tokens / train_seconds
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
            if type(grad) is int or type(grad) is float:
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
    if windows and rec.kind == "train":
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


def export(target: str, logdir: str | None = None, *, maps: dict[str, str] | None = None) -> Export:
    """Export every session of `target` to `logdir` (default RUN_DIR/tensorboard), replacing it whole.

    Returns {"logdir", "runs": [{"name", "session", "scalars", "tags"}], "invalid_records"}.
    """
    target = os.fspath(target)
    if not os.path.exists(target):
        raise UsageError(f"tensorboard: {target}: no such run directory or log")
    try:
        from tensorboard.compat.proto import event_pb2
        from tensorboard.summary.writer.event_file_writer import EventFileWriter
    except ImportError:
        raise RunwatchError(
            "tensorboard export needs the tensorboard package: pip install 'runwatch[tensorboard]'"
        ) from None
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
    writers: dict[str, EventFileWriter] = {}
    taken: set[str] = set()
    invalid = 0

    def emit(key: str, step: int, wall: float, pairs: list[tuple[str, float]]) -> None:
        # one Event a record, its scalars as `simple_value`s (TensorBoard's scalar format, read by
        # every version): ~12x fewer events than one a scalar, which made exports 6x slower
        event = event_pb2.Event(wall_time=wall, step=step)
        add = event.summary.value.add
        r = runs[key]
        for tag, value in pairs:
            add(tag=tag, simple_value=value)
            r.tags.add(tag)
            r.scalars += 1
        if event.summary.value:
            writers[key].add_event(event)

    progress = _Progress(t.log_path)
    try:
        os.makedirs(tmp)
        memory_steps: dict[str, int] = {}  # session -> the last step whose memory was exported
        for rec in iter_records(t, parser=parser):
            progress.tick()
            if rec.kind == "invalid":
                invalid += 1
                continue
            key = rec.session
            r = runs.get(key)
            if r is None:
                r = runs[key] = _Run(_run_name(key, taken), key)
                writers[key] = EventFileWriter(os.path.join(tmp, r.name), max_queue_size=WRITE_QUEUE)
            if rec.time is not None:
                r.wall = rec.time
            # records without a time of their own (trainer_state.json) take the session's last one
            wall = r.wall if r.wall is not None else 0.0
            step = _step(rec.step)
            pairs = [(tag, float(value)) for tag, value in scalars(rec, parser.windows)]
            memory = _memory(rec)
            if memory and memory_steps.get(key) != step:
                # one memory point a step, from its first record: train, val and checkpoint records
                # of one step would otherwise stack up to three points there (peaks are cumulative,
                # so growth during an eval shows at the next step)
                memory_steps[key] = step
                pairs.extend((f"memory/{name}", float(value)) for name, value in memory.items())
            emit(key, step, wall, pairs)
        progress.done()
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
        "runs": [
            {"name": r.name, "session": r.session, "scalars": r.scalars, "tags": sorted(r.tags)} for r in runs.values()
        ],
        "invalid_records": invalid,
    }


class _Progress:
    """`exported N records` on stderr, on a TTY only, every PROGRESS_EVERY records."""

    def __init__(self, name: str) -> None:
        self.name = os.path.basename(name)
        self.count = 0
        self.on = sys.stderr.isatty()

    def tick(self) -> None:
        self.count += 1
        if self.on and self.count % PROGRESS_EVERY == 0:
            print(f"\r{self.name}: exported {self.count} records", end="", file=sys.stderr, flush=True)

    def done(self) -> None:
        if self.on and self.count >= PROGRESS_EVERY:
            print(f"\r{self.name}: exported {self.count} records", file=sys.stderr, flush=True)


def _step(step: int | float) -> int:
    # TensorBoard steps are int64; a fractional minimal-telemetry step is cut to its whole part
    return int(step)


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
    p.add_argument(
        "--map",
        action="append",
        default=None,
        metavar="CANONICAL=SOURCE",
        help="read a minimal telemetry key from another key of the log (repeatable)",
    )
    p.add_argument("--json", action="store_true", help="print the export's runs and tags as JSON")


def run(args: argparse.Namespace) -> int:
    info = export(args.target, args.logdir, maps=parse_maps(args.map))
    if info["invalid_records"]:
        print(
            f"runwatch tensorboard: left out {info['invalid_records']} invalid records (runwatch check names them)",
            file=sys.stderr,
        )
    if args.json:
        print(json.dumps(info, indent=2, allow_nan=False))
        return 0
    total = sum(r["scalars"] for r in info["runs"])
    print(f"wrote {total} scalars in {len(info['runs'])} runs (one a session) to {info['logdir']}")
    print(f"view: tensorboard --logdir {info['logdir']}")
    return 0
