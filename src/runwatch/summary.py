"""The acceptance summary (SPEC §3): what the log of a run's latest session proves.

Streams `metrics.jsonl` one line at a time through the one record validator (`schema.py`), so memory
stays flat whatever the log's size. Standard library only; runs under `python -S`. When `orjson`
is importable (not under `-S`) it parses lines ~2x faster with identical results; a line it
rejects is parsed again by the standard library for the same error message.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Sequence

from .errors import InvalidRunError
from .schema import SessionValidator, iter_lines, loads, orjson_misread, read_manifest

__all__ = ["summarize", "main"]

try:  # optional fast path; absent under `python -S`
    import orjson as _orjson
except ImportError:  # pragma: no cover - depends on the environment
    _orjson = None


def _parser(fast: bool):
    if fast and _orjson is not None:
        orjson_loads = _orjson.loads

        def parse(raw: bytes, where: str) -> Any:
            try:
                value = orjson_loads(raw)
            except ValueError:
                return loads(raw, where)  # the standard library names the error the same way
            if orjson_misread(raw, value):
                return loads(raw, where)
            return value

        return parse
    return loads


def _check_int_arg(value: Any, name: str) -> int:
    if isinstance(value, str):
        try:
            value = int(value, 10)
        except ValueError:
            raise InvalidRunError(f"{name} must be an int >= 0, got {value!r}") from None
    if type(value) is not int or value < 0:
        raise InvalidRunError(f"{name} must be an int >= 0, got {value!r}")
    return value


def summarize(run_dir: str, after_step: Any = 0, expect_step: Any = None, *, fast: bool = True) -> dict:
    """Validate the latest session of `run_dir` and return the acceptance summary (SPEC §3).

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
    parse = _parser(fast)

    updates = tokens = skipped = nonfinite = windows = 0
    first_loss = last_loss = None
    grad_max = None
    clipped_weighted = 0.0
    qk = None  # [threshold, observed, clipped, max_logit]
    steady_tokens = 0
    steady_seconds = 0.0
    steady_windows = 0
    memory_peaks: dict[str, int] = {}
    last = None
    last_val = None
    end = None

    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.lexists(path):
        raise InvalidRunError(f"metrics.jsonl: missing ({path})")
    for lineno, raw in iter_lines(path):
        where = f"metrics.jsonl:{lineno}"
        rec = parse(raw, where)
        if type(rec) is not dict:
            raise InvalidRunError(f"{where}: a record must be a JSON object, got {type(rec).__name__}")
        sid = rec.get("session_id")
        if type(sid) is not str:
            raise InvalidRunError(f"{where}: session_id must be a string, got {json.dumps(sid)}")
        if sid != session_id:
            continue
        validator.check(rec, where)
        last = rec
        memory = rec.get("memory")
        if memory:
            for key, value in memory.items():
                if value > memory_peaks.get(key, -1):
                    memory_peaks[key] = value
        event = rec["event"]
        if event == "train":
            n = rec["updates"]
            updates += n
            tokens += rec["tokens"]
            skipped += rec["skipped"]
            nonfinite += rec["nonfinite_grad_norms"]
            windows += 1
            if first_loss is None:
                first_loss = rec["loss"]
            last_loss = rec["loss"]
            gmax = rec["grad_norm"]["max"]
            if grad_max is None or gmax > grad_max:
                grad_max = gmax
            clipped_weighted += rec["grad_clipped_fraction"] * n
            q = rec.get("qk_clip")
            if q is not None:
                if qk is None:
                    qk = [q["threshold"], 0, 0, None]
                qk[1] += q["observed_head_updates"]
                qk[2] += q["clipped_head_updates"]
                m = q["max_logit"]
                if m is not None and (qk[3] is None or m > qk[3]):
                    qk[3] = m
            if rec["step"] - n >= after_step:
                steady_tokens += rec["tokens"]
                steady_seconds += rec["train_seconds"]
                steady_windows += 1
        elif event == "val":
            last_val = {"step": rec["step"], "loss": rec["loss"], "metrics": rec.get("metrics") or {}}
        elif event == "session_end":
            end = rec

    if windows == 0:
        raise InvalidRunError(f"session {session_id}: no train window")
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
        if not completed:
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
        if qk is None
        else {
            "threshold": qk[0],
            "observed_head_updates": qk[1],
            "clipped_head_updates": qk[2],
            "clipped_fraction": qk[2] / qk[1] if qk[1] else None,
            "max_logit": qk[3],
        },
        "steady_train_tokens": steady_tokens,
        "steady_train_seconds": steady_seconds,
        "steady_train_tokens_per_second": steady_tokens / steady_seconds if steady_windows else None,
        "session_wall_tokens_per_second": last["session"]["tokens_per_second"],
        "memory_peaks": memory_peaks,
        "profiling": last["session"]["profiling_seconds"] > 0,
        "last_val": last_val,
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The summary's options, shared by `runwatch summarize` and the standalone script."""
    parser.add_argument("run_dir", metavar="RUN_DIR", help="the run directory (run.json + metrics.jsonl)")
    parser.add_argument("--after-step", default="0", metavar="N",
                        help="steady throughput counts windows starting at or after step N (default 0)")
    parser.add_argument("--expect-step", default=None, metavar="N",
                        help="fail unless the session completed normally at exactly step N")


def run(args: argparse.Namespace) -> int:
    """Print the summary of `args.run_dir` as JSON; exit status 0, or 1 with one line on stderr."""
    try:
        result = summarize(args.run_dir, args.after_step, args.expect_step)
        text = json.dumps(result, indent=2, allow_nan=False)
    except (InvalidRunError, ValueError, KeyError, OSError, RecursionError, MemoryError) as exc:
        message = str(exc) if not isinstance(exc, KeyError) else f"missing key {exc}"
        print(f"Invalid training run: {message}", file=sys.stderr)
        return 1
    print(text)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The standalone `scripts/summarize_training_run.py` entry point."""
    parser = argparse.ArgumentParser(
        prog="summarize_training_run.py",
        description="Validate a run's latest session and print its acceptance summary as JSON.",
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))
