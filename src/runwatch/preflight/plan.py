"""`runwatch plan`: will the long run fit its time window? A projection from a bench or a short run.

    runwatch plan RUN --samples N [--epochs E] --window 8h [--eval-overhead F] [--setup 20m]

RUN is a `runwatch bench` directory (its bench.json), a run directory with at least 8 updates after
its warm-up, a Hugging Face trainer_state.json, or another log with timing; the steady samples/s
comes from `throughput.measure` (see there for each source).

    training  = samples × epochs / samples_per_second
    eval      = fraction × training      (--eval-overhead, or measured from the run, see below)
    projected = training + eval + setup

The measured eval fraction (schema-v1 runs with val events after the warm-up) is the wall time after
the warm-up that is neither training (`train_seconds`), checkpointing (`seconds` of checkpoint
records) nor profiling, over the training time. It assumes the long run evaluates as often (per
training second) as the short one did. When the run does not fit, the report ends with the
`runwatch subsample` command that draws the largest number of samples that fits. Standard library only.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import shlex
from typing import TypedDict

from ..errors import InvalidRunError, UsageError
from .logs import Reading, add_reading_arguments, reading_from_args
from .throughput import DEFAULT_WARMUP, MIN_STEADY_UPDATES, measure
from .throughput import session_records as session_records

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
            seconds = sum(
                float(part) * _UNIT_SECONDS[unit] for part, unit in zip(match.groups(), "dhms") if part is not None
            )
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


class Projection(TypedDict):
    """What `project` returns."""

    train_seconds: float
    eval_seconds: float
    setup_seconds: float
    projected_seconds: float
    window_seconds: float
    margin_seconds: float
    fits: bool
    max_samples: int
    max_fraction: float


class PlanReport(Projection):
    """What `plan` returns: the measured throughput, the projection's keys, the next step."""

    run: str
    source: str
    throughput_detail: str
    session_id: str | None
    last_step: int | None
    seq_len: int | None
    warmup: int
    warmup_updates: int
    steady_updates: int
    steady_records: int | None
    after_step: int | float | None
    steady_train_tokens_per_second: float | None
    steady_samples_per_second: float
    samples: int
    epochs: float
    eval_overhead_fraction: float
    eval_overhead_source: str  # "given", "measured", "included" or "none"
    val_events: int
    next_command: str | None  # the `runwatch subsample` command line when it does not fit


@dataclasses.dataclass(frozen=True)
class PlanOptions:
    """What to project: `samples` × `epochs` within `window_seconds` (validated on construction)."""

    samples: int
    window_seconds: float
    epochs: float = 1.0
    eval_overhead: float | None = None  # None: measured from the run's val events
    setup_seconds: float = 0.0  # model load, data staging, compilation of the long run
    warmup: int = DEFAULT_WARMUP  # updates left out, rounded up to whole train records
    min_steady_updates: int = MIN_STEADY_UPDATES
    batch_size: int | None = None  # samples per update, for logs that carry wall time but not samples/s
    data: str | None = None  # the training set, named in the `runwatch subsample` next step
    stratify: str | None = None  # ... and its label field

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
        if type(self.warmup) is not int or self.warmup < 0:
            raise UsageError(f"plan.warmup must be an int >= 0, got {self.warmup!r}")
        if type(self.min_steady_updates) is not int or self.min_steady_updates < 1:
            raise UsageError(f"plan.min_steady_updates must be an int >= 1, got {self.min_steady_updates!r}")
        if self.batch_size is not None and (type(self.batch_size) is not int or self.batch_size < 1):
            raise UsageError(f"plan.batch_size must be an int >= 1, got {self.batch_size!r}")


def project(
    samples_per_second: float,
    samples: int,
    epochs: float,
    eval_fraction: float,
    setup_seconds: float,
    window_seconds: float,
) -> Projection:
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


def plan(run: str, options: PlanOptions, reading: Reading | None = None) -> PlanReport:
    """Project `options` from the steady throughput of `run` (its log read with `reading`, as
    `check` reads it); return the report.

    Raises InvalidRunError for an invalid log and InsufficientRunError when it cannot project.
    """
    source = measure(run, options.warmup, options.min_steady_updates, options.batch_size, reading)
    if options.eval_overhead is not None:
        eval_fraction, eval_source = float(options.eval_overhead), "given"
    elif source["eval_source"] in ("measured", "included"):
        eval_fraction, eval_source = source.get("eval_fraction") or 0.0, source["eval_source"]
    else:
        eval_fraction, eval_source = 0.0, "none"
    result: PlanReport = {
        "run": run,
        "source": source["source"],
        "throughput_detail": source["detail"],
        "session_id": source.get("session_id"),
        "last_step": source.get("last_step"),
        "seq_len": source["seq_len"],
        "warmup": options.warmup,
        "warmup_updates": source["warmup_updates"],
        "steady_updates": source["steady_updates"],
        "steady_records": source.get("steady_records"),
        "after_step": source.get("after_step"),
        "steady_train_tokens_per_second": source["tokens_per_second"],
        "steady_samples_per_second": source["samples_per_second"],
        "samples": options.samples,
        "epochs": options.epochs,
        "eval_overhead_fraction": eval_fraction,
        "eval_overhead_source": eval_source,
        "val_events": source.get("val_events", 0),
        **project(
            source["samples_per_second"],
            options.samples,
            options.epochs,
            eval_fraction,
            float(options.setup_seconds),
            float(options.window_seconds),
        ),
        "next_command": None,
    }
    if not result["fits"] and result["max_samples"] > 0:
        result["next_command"] = subsample_command(result["max_samples"], options.data, options.stratify)
    return result


def subsample_command(max_samples: int, data: str | None = None, stratify: str | None = None, seed: int = 0) -> str:
    """The `runwatch subsample` command line that draws `max_samples` rows of `data` (a placeholder,
    `DATA.jsonl`, when not given); the output goes beside it, `<stem>.n<N><ext>`."""
    src = "DATA.jsonl" if data is None else data
    stem, ext = os.path.splitext(src.rstrip("/"))
    out = f"{stem}.n{max_samples}{ext}"
    argv = ["runwatch", "subsample", src, "--n", str(max_samples)]
    if stratify is not None:
        argv += ["--stratify", stratify]
    argv += ["--seed", str(seed), "--out", out]
    return shlex.join(argv)


def exit_code(result: Projection) -> int:
    """`runwatch plan`'s exit status: 0 when the projection fits the window, 1 when it does not."""
    return 0 if result["fits"] else 1


def verdict_line(result: Projection) -> str:
    """`FITS: ...` or `DOES NOT FIT: ...` with the largest run that fits."""
    used, window = format_duration(result["projected_seconds"]), format_duration(result["window_seconds"])
    if result["fits"]:
        return f"FITS: {used} of {window}, margin {format_duration(result['margin_seconds'])}"
    return (
        f"DOES NOT FIT: {used} of {window}, over by {format_duration(-result['margin_seconds'])};"
        f" the largest that fits is {result['max_samples']:,} samples (fraction {result['max_fraction']:.3f})"
    )


def _rate(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def render(result: PlanReport) -> str:
    """The text report; when it does not fit, it ends with the next step."""
    epochs = f"{result['epochs']:g} epoch" + ("" if result["epochs"] == 1 else "s")
    eval_how = {
        "given": "given by --eval-overhead",
        "measured": f"measured over {result['val_events']} val events",
        "included": "already in the throughput, which counts the whole train() call",
        "none": ("no val events after the warm-up" if result["source"] == "run" else "not measured")
        + "; pass --eval-overhead to project eval",
    }[result["eval_overhead_source"]]
    margin_pct = 100.0 * result["margin_seconds"] / result["window_seconds"]
    where = (
        result["run"]
        if result["session_id"] is None
        else (f"{result['run']} (session {result['session_id']}, step {result['last_step']})")
    )
    lines = [
        f"plan for {where}",
        f"  throughput  {_rate(result['steady_samples_per_second'])} samples/s steady ({result['throughput_detail']})",
        f"  training    {result['samples']:,} samples x {epochs} = {format_duration(result['train_seconds'])}",
        f"  eval        +{format_duration(result['eval_seconds'])}"
        f" ({100.0 * result['eval_overhead_fraction']:.1f}% of training, {eval_how})",
        f"  setup       +{format_duration(result['setup_seconds'])}",
        f"  projected   {format_duration(result['projected_seconds'])}",
        f"  window      {format_duration(result['window_seconds'])}"
        f" (margin {format_duration(result['margin_seconds'])}, {margin_pct:.1f}%)",
        verdict_line(result),
    ]
    if result["next_command"] is not None:
        lines.append(f"next: {result['next_command']}")
    elif not result["fits"]:
        lines.append(
            f"next: nothing fits: the setup alone takes {format_duration(result['setup_seconds'])}"
            f" of {format_duration(result['window_seconds'])}"
        )
    return "\n".join(lines)


def options_from_args(args: argparse.Namespace) -> PlanOptions:
    """PlanOptions from the command line's strings (durations parsed here, naming the option)."""
    if args.warmup_windows is not None:
        raise UsageError(
            "--warmup-windows was replaced by --warmup N (updates, default 3, rounded up to whole train records)"
        )
    return PlanOptions(
        samples=args.samples,
        window_seconds=parse_duration(args.window, "--window"),
        epochs=args.epochs,
        eval_overhead=args.eval_overhead,
        setup_seconds=parse_duration(args.setup, "--setup", allow_zero=True),
        warmup=args.warmup,
        batch_size=args.batch_size,
        data=args.data,
        stratify=args.stratify,
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `runwatch plan`."""
    parser.add_argument(
        "run_dir",
        metavar="RUN",
        help="a runwatch bench directory, a run directory with 8+ updates after the warm-up,"
        " a trainer_state.json, or a log with timing (sps or t)",
    )
    parser.add_argument("--samples", type=int, required=True, metavar="N", help="samples per epoch of the long run")
    parser.add_argument("--epochs", type=float, default=1.0, metavar="E", help="epochs (default 1)")
    parser.add_argument("--window", required=True, metavar="DURATION", help="the time window: 8h, 90m, 1h30m, seconds")
    parser.add_argument(
        "--eval-overhead",
        type=float,
        default=None,
        metavar="F",
        help="eval time as a fraction of training time (default: measured from the run's val events)",
    )
    parser.add_argument("--setup", default="0", metavar="DURATION", help="setup time of the long run (default 0)")
    parser.add_argument(
        "--warmup",
        type=int,
        default=DEFAULT_WARMUP,
        metavar="N",
        help=f"first updates left out, rounded up to whole train records (default {DEFAULT_WARMUP})",
    )
    parser.add_argument("--warmup-windows", default=None, help=argparse.SUPPRESS)  # replaced by --warmup
    parser.add_argument(
        "--batch-size",
        type=int,
        default=None,
        metavar="N",
        help="samples per update, for a log that carries wall time but not samples/s",
    )
    parser.add_argument("--data", default=None, metavar="PATH", help="the training set, named in the subsample step")
    parser.add_argument("--stratify", default=None, metavar="FIELD", help="its label field, for the subsample step")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    add_reading_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """`runwatch plan`: exit 0 when the projection fits the window, 1 when it does not (2: cannot project)."""
    result = plan(args.run_dir, options_from_args(args), reading_from_args(args))
    print(json.dumps(result, indent=2, allow_nan=False) if args.json else render(result))
    return exit_code(result)
