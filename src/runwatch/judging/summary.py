"""The acceptance summary (docs/FORMAT.md, "The acceptance summary"): what the log of a run's latest session proves.

Streams `metrics.jsonl` a block of lines at a time through the one record validator (`schema.py`),
so memory stays flat whatever the log's size. Standard library only; runs under `python -S`. When
`orjson` is importable (not under `-S`) the summary runs about twice as fast with identical
results: its reading is used only for records the validator's fast path takes
(`SessionValidator.take_window`, which also hands back the values to sum); any other line is
parsed again by the standard library, which gives the same values and the same error messages as
without orjson. benchmarks/README.md has the figures.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, TypedDict

from ..errors import EXIT_OK, InvalidRunError, RunwatchError
from ..files import RunDir, SessionValidator, iter_line_blocks, loads, read_manifest, strict_json

_orjson: ModuleType | None
try:  # optional fast path; absent under `python -S`
    import orjson as _orjson
except ImportError:  # pragma: no cover - depends on the environment
    _orjson = None


class LossSummary(TypedDict):
    """The summary's `loss`: of the first and of the last train window."""

    first: float
    last: float


class QKClipSummary(TypedDict):
    """The summary's `qk_clip`, over the windows that carry one."""

    threshold: float
    observed_head_updates: int
    clipped_head_updates: int
    clipped_fraction: float | None  # None when no head update was observed
    max_logit: float | None


class ValSummary(TypedDict):
    """The summary's `last_val`: the session's last val record."""

    step: int
    loss: float
    metrics: dict[str, float]


class Summary(TypedDict):
    """The acceptance summary (docs/FORMAT.md, "The acceptance summary": the keys of the output)."""

    run_id: str
    session_id: str
    sessions: int
    start_step: int
    last_step: int
    completed: bool
    end_reason: str | None
    updates: int
    tokens: int
    skipped_updates: int
    nonfinite_grad_norms: int
    train_windows: int
    recipe: dict[str, Any]
    hardware: dict[str, Any]
    optimizer_algorithms: list[str]
    loss: LossSummary
    gradient_norm_max: float
    gradient_clipped_fraction: float
    qk_clip: QKClipSummary | None
    steady_train_tokens: int
    steady_train_seconds: float
    steady_train_tokens_per_second: float | None
    session_wall_tokens_per_second: float | None
    memory_peaks: dict[str, int]
    profiling: bool
    last_val: ValSummary | None


def _check_int_arg(value: int | str, name: str) -> int:
    if isinstance(value, str):
        try:
            value = int(value, 10)
        except ValueError:
            raise InvalidRunError(f"{name} must be an int >= 0, got {value!r}") from None
    if type(value) is not int or value < 0:
        raise InvalidRunError(f"{name} must be an int >= 0, got {value!r}")
    return value


def summarize(
    run_dir: str, after_step: int | str = 0, expect_step: int | str | None = None, *, fast: bool = True
) -> Summary:
    """Validate the latest session of `run_dir` and return the acceptance summary (docs/FORMAT.md).

    `after_step` and `expect_step`: ints >= 0, or their decimal text (the command line's).
    Raises InvalidRunError (a ValueError) on any invalid input.
    """
    after_step = _check_int_arg(after_step, "after_step")
    if expect_step is not None:
        expect_step = _check_int_arg(expect_step, "expect_step")
    if not os.path.isdir(run_dir):
        raise InvalidRunError(f"{run_dir}: not a directory")
    manifest = read_manifest(run_dir)
    session = manifest["sessions"][-1]
    session_id = session["session_id"]
    validator = SessionValidator(manifest["run_id"], session)
    orjson_loads: Callable[[bytes], Any] | None = _orjson.loads if fast and _orjson is not None else None
    parse = orjson_loads or strict_json
    take = validator.take_window
    window_values = validator.window_values

    updates = tokens = skipped = nonfinite = windows = 0
    first_loss: float | None = None
    last_loss: float | None = None
    grad_max: float | None = None
    clipped_weighted = 0.0
    qk_threshold: float | None = None  # the first window's qk_clip.threshold; None: no window has qk_clip
    qk_observed = qk_clipped = 0
    qk_max_logit: float | None = None
    steady_tokens = 0
    steady_seconds = 0.0
    steady_windows = 0
    memory_peaks: dict[str, int] = {}
    last: dict[str, Any] | None = None  # the session's last record
    last_val: ValSummary | None = None
    end: dict[str, Any] | None = None  # its session_end

    path = RunDir(run_dir).metrics
    if not os.path.lexists(path):
        raise InvalidRunError(f"metrics.jsonl: missing ({path})")
    # One line at a time, parsed just before it is used: parsing a block of lines into records
    # first is slower (the records of a block do not fit in the CPU's caches).
    for first, lines in iter_line_blocks(path):
        for lineno, raw in enumerate(lines, first):
            try:
                rec = parse(raw)
            except (ValueError, RecursionError):  # malformed, invalid UTF-8, NaN, huge numbers: _read_line
                rec = None
            values = take(rec)
            if values is None:  # anything but the common train record: the line on its own
                rec = _read_line(validator, lineno, raw, rec, orjson_loads is not None)
                if rec is None:  # another session's record
                    continue
                if rec["event"] != "train":
                    last = rec
                    memory = rec.get("memory")
                    if memory:
                        for key, value in memory.items():
                            if value > memory_peaks.get(key, -1):
                                memory_peaks[key] = value
                    if rec["event"] == "val":
                        last_val = {"step": rec["step"], "loss": rec["loss"], "metrics": rec.get("metrics") or {}}
                    elif rec["event"] == "session_end":
                        end = rec
                    continue
                values = window_values(rec)
            last = rec
            step, n, skip, tok, nonfin, seconds, loss, gmax, fraction, qk, memory = values
            updates += n
            tokens += tok
            skipped += skip
            nonfinite += nonfin
            windows += 1
            if first_loss is None:
                first_loss = loss
            last_loss = loss
            if grad_max is None or gmax > grad_max:
                grad_max = gmax
            clipped_weighted += fraction * n
            if qk is not None:
                if qk_threshold is None:
                    qk_threshold = qk["threshold"]
                qk_observed += qk["observed_head_updates"]
                qk_clipped += qk["clipped_head_updates"]
                m = qk["max_logit"]
                if m is not None and (qk_max_logit is None or m > qk_max_logit):
                    qk_max_logit = m
            if step - n >= after_step:
                steady_tokens += tok
                steady_seconds += seconds
                steady_windows += 1
            if memory:
                for key, value in memory.items():
                    if value > memory_peaks.get(key, -1):
                        memory_peaks[key] = value

    if windows == 0:
        raise InvalidRunError(f"session {session_id}: no train window")
    # each set by a train window
    assert last is not None and first_loss is not None and last_loss is not None and grad_max is not None
    start = session["start"]
    if end is not None:
        if end["step"] - start["step"] != updates:
            raise InvalidRunError(
                f"session_end: step {end['step']} - start.step {start['step']} != sum of updates {updates}"
            )
        if end["totals"]["tokens"] - start["tokens"] != tokens:
            raise InvalidRunError(
                f"session_end: totals.tokens {end['totals']['tokens']} - start.tokens {start['tokens']}"
                f" != sum of tokens {tokens}"
            )
        if end["totals"]["skipped"] - start["skipped"] != skipped:
            raise InvalidRunError(
                f"session_end: totals.skipped {end['totals']['skipped']} - start.skipped {start['skipped']}"
                f" != sum of skipped {skipped}"
            )
    completed = end is not None and end["reason"] == "normal"
    if expect_step is not None:
        if end is None or not completed:
            state = "has no session_end" if end is None else f"ended {end['reason']!r}"
            raise InvalidRunError(f"expected a completed session at step {expect_step}; the session {state}")
        if end["step"] != expect_step:
            raise InvalidRunError(f"expected the session to end at step {expect_step}, it ended at {end['step']}")

    return {
        "run_id": manifest["run_id"],
        "session_id": session_id,
        "sessions": len(manifest["sessions"]),
        "start_step": start["step"],
        "last_step": last["step"],
        "completed": completed,
        "end_reason": end["reason"] if end is not None else None,
        "updates": updates,
        "tokens": tokens,
        "skipped_updates": skipped,
        "nonfinite_grad_norms": nonfinite,
        "train_windows": windows,
        "recipe": session["recipe"],
        "hardware": session["hardware"],
        "optimizer_algorithms": [opt["algorithm"] for opt in session["optimizers"]],
        "loss": {"first": first_loss, "last": last_loss},
        "gradient_norm_max": grad_max,
        "gradient_clipped_fraction": clipped_weighted / updates,
        "qk_clip": None
        if qk_threshold is None
        else {
            "threshold": qk_threshold,
            "observed_head_updates": qk_observed,
            "clipped_head_updates": qk_clipped,
            "clipped_fraction": qk_clipped / qk_observed if qk_observed else None,
            "max_logit": qk_max_logit,
        },
        "steady_train_tokens": steady_tokens,
        "steady_train_seconds": steady_seconds,
        "steady_train_tokens_per_second": steady_tokens / steady_seconds if steady_windows else None,
        "session_wall_tokens_per_second": last["session"]["tokens_per_second"],
        "memory_peaks": memory_peaks,
        "profiling": last["session"]["profiling_seconds"] > 0,
        "last_val": last_val,
    }


def _read_line(validator: SessionValidator, lineno: int, raw: bytes, rec: Any, fast: bool) -> dict[str, Any] | None:
    """A line that `take_window` declined: `rec` as first parsed (None: it did not parse).

    Returns the record, checked, or None for another session's record; raises on anything invalid,
    with the standard library's message. A record of this session is read by the standard library
    (again, when `fast`), so that its values are the same with orjson and without.
    """
    where = f"metrics.jsonl:{lineno}"
    if type(rec) is not dict:
        # schema.loads names the problem; the newline back in place keeps its column numbers
        rec = loads(raw + b"\n", where)
        if type(rec) is not dict:
            raise InvalidRunError(f"{where}: a record must be a JSON object, got {type(rec).__name__}")
        fast = False
    sid = rec.get("session_id")
    if sid != validator.session_id:
        if type(sid) is not str:
            sid = loads(raw + b"\n", where).get("session_id")  # as the standard library reads it
            raise InvalidRunError(f"{where}: session_id must be a string, got {json.dumps(sid)}")
        return None
    checked: dict[str, Any] = loads(raw + b"\n", where) if fast else rec
    validator.check(checked, where)
    return checked


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The summary's options, shared by `runwatch summarize` and the standalone script."""
    parser.add_argument("run_dir", metavar="RUN_DIR", help="the run directory (run.json + metrics.jsonl)")
    parser.add_argument(
        "--after-step",
        default="0",
        metavar="N",
        help="steady throughput counts windows starting at or after step N (default 0)",
    )
    parser.add_argument(
        "--expect-step", default=None, metavar="N", help="fail unless the session completed normally at exactly step N"
    )


def run(args: argparse.Namespace) -> int:
    """Print the summary of `args.run_dir` as JSON and return 0.

    Any invalid input raises InvalidRunError (a ValueError, KeyError, OSError or RecursionError of
    the reading becomes one), which the command line prints as `Invalid training run: ...`, exit 1.
    """
    try:
        result = summarize(args.run_dir, args.after_step, args.expect_step)
        text = json.dumps(result, indent=2, allow_nan=False)
    except RunwatchError:
        raise
    except (ValueError, KeyError, OSError, RecursionError, MemoryError) as exc:
        message = str(exc) if not isinstance(exc, KeyError) else f"missing key {exc}"
        raise InvalidRunError(message) from None
    print(text)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """The standalone `scripts/summarize_training_run.py` entry point; returns the exit status."""
    from ..errors import run_guarded
    from ..options import Parser

    parser = Parser(
        prog="summarize_training_run.py",
        description="Validate a run's latest session and print its acceptance summary as JSON.",
    )
    add_arguments(parser)
    return run_guarded(lambda: run(parser.parse_args(argv)))
