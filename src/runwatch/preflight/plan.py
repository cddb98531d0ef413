"""`runwatch plan`: will the long run fit its time window? A projection from a short run's log.

    runwatch plan RUN_DIR --samples N [--epochs E] --window 8h [--eval-overhead F] [--setup 20m]

Steady throughput comes from the acceptance summary (`runwatch.summary.summarize`) with the warm-up
windows left out: the first `warmup_windows` train windows of the latest session (compilation,
autotuning, data-loader start, allocator growth) are excluded by passing the step at the end of the
last of them as `after_step`. At least `min_steady_windows` windows must remain, else the run is
refused with the number of steps still needed. samples/s = steady tokens/s ÷ `recipe.seq_len`.

    training  = samples × epochs / samples_per_second
    eval      = fraction × training      (--eval-overhead, or measured from the run, see below)
    projected = training + eval + setup

The measured eval fraction is the wall time after the warm-up that is neither training
(`train_seconds`), checkpointing (`seconds` of checkpoint records) nor profiling, over the training
time, when the run has val events after the warm-up. It assumes the long run evaluates as often
(per training second) as the short one did. Standard library only.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
from typing import Any, Iterator

from ..errors import InsufficientRunError, InvalidRunError, UsageError
from ..schema import read_manifest

__all__ = [
    "PlanOptions",
    "parse_duration",
    "format_duration",
    "project",
    "plan",
    "session_records",
]

# The first window holds compilation, autotuning and data-loader start; the second often still has
# allocator growth and cache warm-up. Two windows of 10 steps is what the logger writes by default.
DEFAULT_WARMUP_WINDOWS = 2
# One slow window (a GC pause, a noisy neighbour) moves a time-weighted rate over three windows by
# at most a third; fewer than three is not a rate to plan a long run on.
DEFAULT_MIN_STEADY_WINDOWS = 3

_UNIT_SECONDS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}
_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)d)?(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?")
_PLAIN = re.compile(r"\d+(?:\.\d+)?")


def parse_duration(text: str, option: str, *, allow_zero: bool = False) -> float:
    """Seconds in `text`: `8h`, `90m`, `1h30m`, `45s`, `1d12h`, `2.5h` or plain seconds (`5400`).

    Raises UsageError naming `option` for anything else, and for 0 unless `allow_zero`.
    """
    value = str(text).strip().lower()
    seconds: float | None = None
    if _PLAIN.fullmatch(value):
        seconds = float(value)
    else:
        match = _DURATION.fullmatch(value)
        if match and value:
            seconds = sum(float(part) * _UNIT_SECONDS[unit]
                          for part, unit in zip(match.groups(), "dhms") if part is not None)
    if seconds is None or not math.isfinite(seconds):
        raise UsageError(f"{option}: expected a duration like 8h, 90m, 1h30m, 45s or seconds, got {text!r}")
    if seconds == 0 and not allow_zero:
        raise UsageError(f"{option} must be a duration > 0, got {text!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """`45s`, `3m20s`, `6h48m`, `2d03h10m`; a leading `-` for negative values."""
    if seconds < 0:
        return "-" + format_duration(-seconds)
    if seconds < 10:
        return f"{seconds:.1f}s"
    total = int(round(seconds))
    if total < 60:
        return f"{total}s"
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h{minutes:02d}m"
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s"


@dataclasses.dataclass(frozen=True)
class PlanOptions:
    """What to project: `samples` × `epochs` within `window_seconds` (validated on construction)."""

    samples: int
    window_seconds: float
    epochs: float = 1.0
    eval_overhead: float | None = None  # None: measured from the run's val events
    setup_seconds: float = 0.0  # model load, data staging, compilation of the long run
    warmup_windows: int = DEFAULT_WARMUP_WINDOWS
    min_steady_windows: int = DEFAULT_MIN_STEADY_WINDOWS

    def __post_init__(self) -> None:
        if type(self.samples) is not int or self.samples <= 0:
            raise UsageError(f"plan.samples must be an int > 0, got {self.samples!r}")
        for name in ("window_seconds", "epochs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise UsageError(f"plan.{name} must be a finite number > 0, got {value!r}")
        for name in ("setup_seconds", "eval_overhead"):
            value = getattr(self, name)
            if value is None and name == "eval_overhead":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise UsageError(f"plan.{name} must be a finite number >= 0, got {value!r}")
        if type(self.warmup_windows) is not int or self.warmup_windows < 0:
            raise UsageError(f"plan.warmup_windows must be an int >= 0, got {self.warmup_windows!r}")
        if type(self.min_steady_windows) is not int or self.min_steady_windows < 1:
            raise UsageError(f"plan.min_steady_windows must be an int >= 1, got {self.min_steady_windows!r}")


def project(samples_per_second: float, samples: int, epochs: float, eval_fraction: float,
            setup_seconds: float, window_seconds: float) -> dict:
    """The projection arithmetic alone: times, margin, whether it fits, the largest run that fits."""
    if not samples_per_second > 0:
        raise InvalidRunError(f"steady throughput must be > 0 samples/s, got {samples_per_second!r}")
    def total(n: int) -> float:
        train = n * epochs / samples_per_second
        return train + eval_fraction * train + setup_seconds

    train_seconds = samples * epochs / samples_per_second
    eval_seconds = eval_fraction * train_seconds
    projected = total(samples)
    available = window_seconds - setup_seconds
    max_samples = 0
    if available > 0:
        max_samples = math.floor(available * samples_per_second / (epochs * (1.0 + eval_fraction)))
        # the closed form can land one off by rounding; settle it with the same sum as `projected`
        while max_samples > 0 and total(max_samples) > window_seconds:
            max_samples -= 1
        while total(max_samples + 1) <= window_seconds:
            max_samples += 1
    return {
        "train_seconds": train_seconds,
        "eval_seconds": eval_seconds,
        "setup_seconds": setup_seconds,
        "projected_seconds": projected,
        "window_seconds": window_seconds,
        "margin_seconds": window_seconds - projected,
        "fits": projected <= window_seconds,
        "max_samples": max_samples,
        "max_fraction": max_samples / samples,
    }


def session_records(run_dir: str) -> tuple[dict, dict, Iterator[dict]]:
    """(manifest, latest session, its records validated one at a time), streaming the log.

    The one place the preflight commands read a log: through `runwatch.records`, the shared record
    parser, so what counts as a valid record is decided in one place. Yields each record's fields
    as written; an invalid record of the latest session, or a torn last line, raises InvalidRunError
    (records of earlier sessions are the acceptance summary's to judge).
    """
    from .. import records

    if not os.path.isdir(run_dir):
        raise InvalidRunError(f"{run_dir}: not a directory")
    manifest = read_manifest(run_dir)
    session = manifest["sessions"][-1]
    target = records.resolve_target(run_dir)
    if not target.schema_v1():
        raise InvalidRunError(f"metrics.jsonl: missing ({os.path.join(run_dir, 'metrics.jsonl')})")
    sid = session["session_id"]

    def torn(lineno: int) -> None:
        raise InvalidRunError(f"Uncommitted metrics tail at line {lineno}")

    def latest() -> Iterator[dict]:
        for rec in records.iter_records(target, on_torn=torn):
            if rec.session != sid:
                continue
            if rec.kind == "invalid":
                raise InvalidRunError(rec.error)
            yield rec.raw

    return manifest, session, latest()


def _scan(run_dir: str, warmup_windows: int) -> dict:
    """One pass over the latest session: where the warm-up ends and the wall time after it."""
    _, session, records = session_records(run_dir)
    out: dict[str, Any] = {
        "session": session, "windows": 0, "window_updates": 0, "updates": 0, "after_step": session["start"]["step"],
        "begin_elapsed": 0.0, "begin_profiling": 0.0, "end_elapsed": 0.0, "end_profiling": 0.0,
        "checkpoint_seconds": 0.0, "val_events": 0,
    }
    for rec in records:
        steady = out["windows"] >= warmup_windows
        event = rec["event"]
        if event == "train":
            out["windows"] += 1
            out["updates"] += rec["updates"]
            out["window_updates"] = max(out["window_updates"], rec["attempted"])
            if out["windows"] == warmup_windows:
                out["after_step"] = rec["step"]
                out["begin_elapsed"] = rec["session"]["elapsed_seconds"]
                out["begin_profiling"] = rec["session"]["profiling_seconds"]
        elif steady and event == "val":
            out["val_events"] += 1
        elif steady and event == "checkpoint":
            out["checkpoint_seconds"] += rec["seconds"]
        out["end_elapsed"] = rec["session"]["elapsed_seconds"]
        out["end_profiling"] = rec["session"]["profiling_seconds"]
    return out


def plan(run_dir: str, options: PlanOptions) -> dict:
    """Project `options` from the steady throughput of `run_dir`'s latest session; return the report.

    Raises InvalidRunError for an invalid log and InsufficientRunError for one too short to trust.
    """
    from ..summary import summarize

    scan = _scan(run_dir, options.warmup_windows)
    steady_windows = max(0, scan["windows"] - options.warmup_windows)
    if steady_windows < options.min_steady_windows:
        missing = options.min_steady_windows + options.warmup_windows - scan["windows"]
        per_window = scan["window_updates"] or 1
        raise InsufficientRunError(
            f"{run_dir}: {scan['windows']} train windows ({scan['updates']} steps), {steady_windows} steady after"
            f" {options.warmup_windows} warm-up; need {options.min_steady_windows} steady windows to trust the"
            f" throughput: run about {missing * per_window} more steps"
        )
    summary = summarize(run_dir, after_step=scan["after_step"])
    seq_len = summary["recipe"]["seq_len"]
    tokens_per_second = summary["steady_train_tokens_per_second"]
    steady_seconds = summary["steady_train_seconds"]
    samples_per_second = tokens_per_second / seq_len

    if options.eval_overhead is not None:
        eval_fraction, eval_source = float(options.eval_overhead), "given"
    elif scan["val_events"]:
        other = (scan["end_elapsed"] - scan["begin_elapsed"] - steady_seconds - scan["checkpoint_seconds"]
                 - (scan["end_profiling"] - scan["begin_profiling"]))
        eval_fraction, eval_source = max(0.0, other) / steady_seconds, "measured"
    else:
        eval_fraction, eval_source = 0.0, "none"

    result = {
        "run_dir": run_dir,
        "session_id": summary["session_id"],
        "seq_len": seq_len,
        "warmup_windows": options.warmup_windows,
        "steady_windows": steady_windows,
        "after_step": scan["after_step"],
        "last_step": summary["last_step"],
        "steady_train_tokens_per_second": tokens_per_second,
        "steady_samples_per_second": samples_per_second,
        "samples": options.samples,
        "epochs": options.epochs,
        "eval_overhead_fraction": eval_fraction,
        "eval_overhead_source": eval_source,
        "val_events": scan["val_events"],
    }
    result.update(project(samples_per_second, options.samples, options.epochs, eval_fraction,
                          float(options.setup_seconds), float(options.window_seconds)))
    return result


def verdict_line(result: dict) -> str:
    """`FITS: ...` or `DOES NOT FIT: ...` with the largest run that fits."""
    used, window = format_duration(result["projected_seconds"]), format_duration(result["window_seconds"])
    if result["fits"]:
        return f"FITS: {used} of {window}, margin {format_duration(result['margin_seconds'])}"
    return (f"DOES NOT FIT: {used} of {window}, over by {format_duration(-result['margin_seconds'])};"
            f" the largest that fits is {result['max_samples']:,} samples (fraction {result['max_fraction']:.3f})")


def _rate(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def render(result: dict) -> str:
    """The text report."""
    epochs = f"{result['epochs']:g} epoch" + ("" if result["epochs"] == 1 else "s")
    eval_how = {
        "given": "given by --eval-overhead",
        "measured": f"measured over {result['val_events']} val events",
        "none": "no val events after the warm-up; pass --eval-overhead to project eval",
    }[result["eval_overhead_source"]]
    margin_pct = 100.0 * result["margin_seconds"] / result["window_seconds"]
    lines = [
        f"plan for {result['run_dir']} (session {result['session_id']}, step {result['last_step']})",
        f"  throughput  {_rate(result['steady_samples_per_second'])} samples/s steady"
        f" ({_rate(result['steady_train_tokens_per_second'])} tokens/s / seq_len {result['seq_len']};"
        f" {result['steady_windows']} windows after step {result['after_step']},"
        f" {result['warmup_windows']} warm-up windows left out)",
        f"  training    {result['samples']:,} samples x {epochs} = {format_duration(result['train_seconds'])}",
        f"  eval        +{format_duration(result['eval_seconds'])}"
        f" ({100.0 * result['eval_overhead_fraction']:.1f}% of training, {eval_how})",
        f"  setup       +{format_duration(result['setup_seconds'])}",
        f"  projected   {format_duration(result['projected_seconds'])}",
        f"  window      {format_duration(result['window_seconds'])}"
        f" (margin {format_duration(result['margin_seconds'])}, {margin_pct:.1f}%)",
        verdict_line(result),
    ]
    return "\n".join(lines)


def options_from_args(args: argparse.Namespace) -> PlanOptions:
    """PlanOptions from the command line's strings (durations parsed here, naming the option)."""
    return PlanOptions(
        samples=args.samples,
        window_seconds=parse_duration(args.window, "--window"),
        epochs=args.epochs,
        eval_overhead=args.eval_overhead,
        setup_seconds=parse_duration(args.setup, "--setup", allow_zero=True),
        warmup_windows=args.warmup_windows,
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `runwatch plan`."""
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a short run's directory (15+ real steps)")
    parser.add_argument("--samples", type=int, required=True, metavar="N", help="samples per epoch of the long run")
    parser.add_argument("--epochs", type=float, default=1.0, metavar="E", help="epochs (default 1)")
    parser.add_argument("--window", required=True, metavar="DURATION", help="the time window: 8h, 90m, 1h30m, seconds")
    parser.add_argument("--eval-overhead", type=float, default=None, metavar="F",
                        help="eval time as a fraction of training time (default: measured from the run's val events)")
    parser.add_argument("--setup", default="0", metavar="DURATION", help="setup time of the long run (default 0)")
    parser.add_argument("--warmup-windows", type=int, default=DEFAULT_WARMUP_WINDOWS, metavar="K",
                        help=f"train windows left out as warm-up (default {DEFAULT_WARMUP_WINDOWS})")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    """`runwatch plan`: exit 0 when the projection fits the window, 1 when it does not."""
    result = plan(args.run_dir, options_from_args(args))
    print(json.dumps(result, indent=2, allow_nan=False) if args.json else render(result))
    return 0 if result["fits"] else 1
