"""Steady samples per second from what a short run left behind: the sources `runwatch plan` reads.

In the order they are tried for a path:

1. `bench.json` in a directory (written by `runwatch bench`): its `samples_per_second`.
2. A schema-v1 run directory: the acceptance summary's steady tokens/s ÷ `recipe.seq_len`, over the
   train records after the warm-up (the first `warmup` updates, rounded up to whole records).
3. Any other log `runwatch.reading.records` reads (minimal telemetry JSONL, a Hugging Face
   `trainer_state.json`, and the other formats that reader knows): per record `sps` (samples/s),
   else the wall time `t` between records times `--batch-size` samples per update, else the
   Trainer's final `train_samples_per_second`, which covers the whole `train()` call (warm-up,
   evaluation and checkpoints included).

Each returns a dict with `source`, `samples_per_second` and how it was measured, or raises
InsufficientRunError (a one-line reason: too few updates after the warm-up, or no timing at all).
Standard library only.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

from ..errors import InsufficientRunError, InvalidRunError
from ..files import RunDir, read_manifest, read_regular_file
from ..reading import Target
from .logs import Reading

if TYPE_CHECKING:
    from ..reading import Record


# The first updates hold compilation, autotuning, the data loader's start and allocator growth.
DEFAULT_WARMUP = 3
# One slow update (a GC pause, a noisy neighbour) among 8 moves their time-weighted rate by at most
# an eighth of its excess; fewer is not a rate to plan a long run on.
MIN_STEADY_UPDATES = 8
# bench.json is a few hundred bytes; bound the read anyway.
MAX_BENCH_BYTES = 1 << 20
_TSPS = "train_samples_per_second"


class Throughput(TypedDict):
    """What `measure` returns: the steady rate, and how it was measured."""

    source: str  # "bench", "run", "telemetry" or "trainer_state"
    samples_per_second: float
    tokens_per_second: float | None
    seq_len: int | None
    steady_updates: int
    warmup_updates: int
    detail: str
    eval_source: str | None  # "measured" (eval_fraction), "included" (in the rate), or None
    after_step: NotRequired[int | float | None]  # not from a bench
    # from a run only:
    steady_records: NotRequired[int]
    session_id: NotRequired[str]
    last_step: NotRequired[int]
    eval_fraction: NotRequired[float | None]
    val_events: NotRequired[int]


def session_records(run_dir: str) -> tuple[dict[str, Any], dict[str, Any], Iterator[dict[str, Any]]]:
    """(manifest, latest session, its records validated one at a time), streaming the log.

    The one place the preflight commands read a schema-v1 log: through `runwatch.reading.records`, the
    shared record parser. Yields each record's fields as written; an invalid record of the latest
    session, or a torn last line, raises InvalidRunError (records of earlier sessions are the
    acceptance summary's to judge).
    """
    from ..reading import records

    if not os.path.isdir(run_dir):
        raise InvalidRunError(f"{run_dir}: not a directory")
    manifest = read_manifest(run_dir)
    session = manifest["sessions"][-1]
    target = records.resolve_target(run_dir)
    if not target.has_manifest:
        raise InvalidRunError(f"metrics.jsonl: missing ({os.path.join(run_dir, 'metrics.jsonl')})")
    sid = session["session_id"]

    def torn(lineno: int | str) -> None:
        raise InvalidRunError(f"Uncommitted metrics tail at line {lineno}")

    def latest() -> Iterator[dict[str, Any]]:
        for rec in records.iter_records(target, on_torn=torn):
            if rec.session != sid:
                continue
            if rec.kind == "invalid":
                raise InvalidRunError(rec.error)
            yield rec.raw  # type: ignore[misc]  # always set for a valid schema-v1 record

    return manifest, session, latest()


def _too_few(
    path: str, total: int, steady: int, warm: int, warm_records: int, per_record: int, warmup: int, min_steady: int
) -> InsufficientRunError:
    if warm < warmup:  # the warm-up itself is not over: assume records of the size seen so far
        warm = math.ceil(warmup / per_record) * per_record
        warm_records = warm // per_record
    needed = warm + min_steady
    records = "record" if warm_records == 1 else "records"
    return InsufficientRunError(
        f"{path}: {total} updates logged, {steady} after the warm-up (the first {warm} updates,"
        f" {warm_records} train {records}); need {min_steady} after it to project: log {needed}+ updates"
        f" ({needed - total} more), or use runwatch bench"
    )


def _from_bench(path: str, min_steady: int) -> Throughput:
    name = os.path.join(path, "bench.json")
    data = read_regular_file(name, "bench.json", MAX_BENCH_BYTES)
    try:
        bench = json.loads(data)
    except ValueError as exc:
        raise InvalidRunError(f"{name}: malformed JSON: {exc}") from None
    if not isinstance(bench, dict):
        raise InvalidRunError(f"{name}: expected a JSON object, got {type(bench).__name__}")
    value = bench.get("samples_per_second")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise InvalidRunError(f"{name}: samples_per_second must be a finite number > 0, got {value!r}")
    for key in ("steps", "warmup"):
        if type(bench.get(key)) is not int or bench[key] < 0:
            raise InvalidRunError(f"{name}: {key} must be an int >= 0, got {bench.get(key)!r}")
    steady = bench.get("steady_updates", bench["steps"] - bench["warmup"])
    if steady < min_steady:
        raise InsufficientRunError(
            f"{name}: {steady} updates after the warm-up; need {min_steady} to project: rerun runwatch bench"
            f" with --steps {bench['warmup'] + min_steady} or more"
        )
    sps = bench.get("seconds_per_step") or {}
    per_step = ""
    if all(isinstance(sps.get(k), (int, float)) for k in ("median", "p10", "p90")):
        per_step = f"; per step median {sps['median']:.3g}s, p10 {sps['p10']:.3g}s, p90 {sps['p90']:.3g}s"
    tokens = bench.get("tokens_per_second")
    return {
        "source": "bench",
        "samples_per_second": float(bench["samples_per_second"]),
        "tokens_per_second": tokens if isinstance(tokens, (int, float)) else None,
        "seq_len": bench.get("seq_len"),
        "steady_updates": steady,
        "warmup_updates": bench["warmup"],
        "detail": f"runwatch bench: {steady} updates after a {bench['warmup']}-update warm-up{per_step}",
        "eval_source": None,
    }


def _from_run(path: str, warmup: int, min_steady: int) -> Throughput:
    """A schema-v1 run: the summary's steady rate after the warm-up, and the measured eval time."""
    from ..judging import summarize

    _, session, records = session_records(path)
    warm = warm_records = steady = steady_records = per_record = 0
    after_step = session["start"]["step"]
    begin = {"elapsed": 0.0, "profiling": 0.0}
    end = dict(begin)
    checkpoint_seconds, val_events = 0.0, 0
    for rec in records:
        event = rec["event"]
        in_warmup = warm < warmup
        if event == "train":
            per_record = max(per_record, rec["attempted"])
            if in_warmup:
                warm += rec["updates"]
                warm_records += 1
                if warm >= warmup:
                    after_step = rec["step"]
                    begin = {
                        "elapsed": rec["session"]["elapsed_seconds"],
                        "profiling": rec["session"]["profiling_seconds"],
                    }
            else:
                steady += rec["updates"]
                steady_records += 1
        elif not in_warmup and event == "val":
            val_events += 1
        elif not in_warmup and event == "checkpoint":
            checkpoint_seconds += rec["seconds"]
        end = {"elapsed": rec["session"]["elapsed_seconds"], "profiling": rec["session"]["profiling_seconds"]}
    if steady < min_steady:
        raise _too_few(path, warm + steady, steady, warm, warm_records, per_record or 1, warmup, min_steady)
    summary = summarize(path, after_step=after_step)
    seq_len = summary["recipe"]["seq_len"]
    tokens_per_second = summary["steady_train_tokens_per_second"]
    steady_seconds = summary["steady_train_seconds"]
    other = (
        end["elapsed"]
        - begin["elapsed"]
        - steady_seconds
        - checkpoint_seconds
        - (end["profiling"] - begin["profiling"])
    )
    return {
        "source": "run",
        "samples_per_second": tokens_per_second / seq_len,
        "tokens_per_second": tokens_per_second,
        "seq_len": seq_len,
        "steady_updates": steady,
        "warmup_updates": warm,
        "steady_records": steady_records,
        "after_step": after_step,
        "session_id": summary["session_id"],
        "last_step": summary["last_step"],
        "detail": (
            f"{tokens_per_second:,.6g} tokens/s / seq_len {seq_len}; {steady} updates in {steady_records}"
            f" train records after step {after_step}, the first {warm} updates left out as warm-up"
        ),
        "eval_source": "measured" if val_events else None,
        "eval_fraction": max(0.0, other) / steady_seconds if val_events else None,
        "val_events": val_events,
    }


def _from_records(
    path: str, target: Target, warmup: int, min_steady: int, batch_size: int | None, maps: Any
) -> Throughput:
    """Minimal telemetry, trainer_state.json, and whatever else `runwatch.reading.records` reads."""
    from ..reading import records

    if not os.path.exists(target.log_path):
        raise InvalidRunError(
            f"{path}: no bench.json, run.json with metrics.jsonl, trainer_state.json or log to read"
            f" ({target.log_path} does not exist)"
        )
    name = os.path.basename(target.log_path)
    session = None
    train: list[Record] = []
    tsps: float | None = None
    for rec in records.iter_records(target, maps=maps):  # a torn last line of a log being written waits
        if rec.kind == "invalid":
            raise InvalidRunError(rec.error)
        if rec.session != session:  # a relaunch: only the latest session counts
            session, train = rec.session, []
        if rec.kind == "train":
            train.append(rec)
        for key, value in (rec.raw or {}).items():
            if (key == _TSPS or key.endswith("/" + _TSPS)) and isinstance(value, (int, float)) and value > 0:
                tsps = float(value)
    # Updates per record from the step counter; the first record counts from 0 in the first session.
    # The first record always closes the warm-up at the earliest: when its interval began is unknown.
    prev: int | float | None = 0 if session == "session-1" else None
    warm = warm_records = 0
    warm_end: Record | None = None  # the record that closes the warm-up (set whenever `steady` is not empty)
    steady: list[tuple[int, Record]] = []
    per_record = 1
    for rec in train:
        n = int(rec.step - prev) if prev is not None else 0
        prev = rec.step
        per_record = max(per_record, n)
        if warm < warmup or warm_end is None:
            warm += n
            warm_records += 1
            if warm >= warmup:
                warm_end = rec
        elif n > 0:
            steady.append((n, rec))
    updates = sum(n for n, _ in steady)

    def found(source: str, samples_per_second: float, detail: str, eval_source: str | None = None) -> Throughput:
        return {
            "steady_updates": updates,
            "warmup_updates": warm,
            "tokens_per_second": None,
            "seq_len": None,
            "after_step": warm_end.step if warm_end is not None else None,
            "eval_source": eval_source,
            "source": source,
            "samples_per_second": samples_per_second,
            "detail": detail,
        }

    problem = None
    timed = [(n, r.throughput) for n, r in steady if r.throughput and r.throughput > 0]  # (updates, sps)
    clocked = [r.time for _, r in steady if r.time is not None]
    if steady and len(timed) == len(steady):
        if updates >= min_steady:
            assert warm_end is not None  # set before any record went to `steady`
            rate = updates / sum(n / sps for n, sps in timed)  # Σ steps / Σ time, time ∝ steps / sps
            return found(
                "telemetry",
                rate,
                f"`sps` of {len(steady)} records of {name} after step {warm_end.step}, {updates} updates"
                f" (the first {warm} left out as warm-up)",
            )
        problem = "few"
    elif steady and warm_end is not None and warm_end.time is not None and len(clocked) == len(steady):
        if updates < min_steady:
            problem = "few"
        elif batch_size is None:
            problem = "batch"
        else:
            seconds = clocked[-1] - warm_end.time
            if seconds > 0:
                return found(
                    "telemetry",
                    batch_size * updates / seconds,
                    f"{batch_size} samples x {updates} updates in {seconds:.4g}s of wall time `t` of {name}"
                    f" after step {warm_end.step} (eval and checkpoints included)",
                )
    elif steady and updates < min_steady:
        problem = "few"
    if tsps is not None:
        return found(
            "trainer_state",
            tsps,
            f"{_TSPS} of {name}: the whole train() call, warm-up, evaluation and checkpoints included",
            eval_source="included",
        )
    if problem == "few" or (not steady and train and any(r.throughput or r.time is not None for r in train)):
        raise _too_few(path, warm + updates, updates, warm, warm_records, per_record, warmup, min_steady)
    if problem == "batch":
        raise InsufficientRunError(
            f"{path}: {name} carries wall time `t` but not samples/s: pass --batch-size"
            " (samples per update), or use runwatch bench"
        )
    raise InsufficientRunError(f"{path}: no timing in {name} (no `sps`, `t` or {_TSPS}): use runwatch bench")


def measure(
    path: str,
    warmup: int = DEFAULT_WARMUP,
    min_steady: int = MIN_STEADY_UPDATES,
    batch_size: int | None = None,
    reading: Reading | None = None,
) -> Throughput:
    """The steady samples/s of `path` (a bench or run directory, or a log file) and how it was
    measured; `reading`: how to read its log (`check`'s reading options)."""
    reading = reading or Reading()
    if os.path.isdir(path) and os.path.exists(os.path.join(path, "bench.json")):  # (read as bench was told)
        return _from_bench(path, min_steady)
    if os.path.isdir(path) and os.path.lexists(RunDir(path).manifest) and not reading.given():
        return _from_run(path, warmup, min_steady)
    if not os.path.exists(path):
        raise InvalidRunError(f"{path}: no such file or directory")
    target = reading.resolve(path)
    if target.has_manifest:
        return _from_run(target.run_dir, warmup, min_steady)
    return _from_records(path, target, warmup, min_steady, batch_size, reading.maps)
