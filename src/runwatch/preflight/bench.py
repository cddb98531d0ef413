"""`runwatch bench RUN_DIR [--steps 15] [--warmup 3] -- CMD ...`: time a few real steps of the job.

CMD is started as `runwatch launch` starts it (its own session and process group, output in
`RUN_DIR/stdout.log`, `pid`, `launch.json`), with `RUNWATCH_WINDOW=1` in its environment so that
RunLogger and the callbacks write one train record per update. Its log is followed by the one
`source.RecordSource`; once `steps` updates are logged, the job is stopped (SIGTERM to its
group, SIGKILL after 30 s) and the steady throughput over the updates after the warm-up goes to
`RUN_DIR/bench.json`, which `runwatch plan` reads.

    samples/s = Σ tokens / seq_len / Σ train_seconds    over the train records after the warm-up
    per step  = train_seconds / attempted                one value per attempted update

The warm-up is the first `warmup` updates, rounded up to whole train records (with a window of 1,
exactly `warmup` updates). Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import sys
import time
from collections.abc import Callable
from typing import Any, TypedDict

from ..errors import InsufficientRunError, UsageError
from ..files import ENV_WINDOW, RunDir, atomic_write_text
from ..judging import last_error
from ..options import add_command_arguments, split_command
from .benchtail import LogTail, StepSeconds, steady_from
from .logs import Reading, add_reading_arguments, describe_log, reading_from_args

# About 15 steps are enough to see the steady rate of a real job; the first 3 hold compilation,
# autotuning, the data loader's start and allocator growth.
DEFAULT_STEPS = 15
DEFAULT_WARMUP = 3
# Without a terminal, a progress line this often (an agent reading the output sees the job move).
PROGRESS_SECONDS = 30.0
# A job that logged no update for this long is stopped: a real step takes seconds, a start minutes.
DEFAULT_TIMEOUT = 600.0
# How often the log and the process are looked at: a step of a real job takes 50 ms to seconds.
POLL_SECONDS = 0.1
# After the job's session ended (too soon), how long to wait for its process to exit, so that the
# message can give its exit status; a job still running after that is stopped.
EXIT_WAIT_SECONDS = 10.0


class SteadyRates(TypedDict):
    """What `steady_rates` returns."""

    updates: int
    steady_updates: int
    samples_per_second: float
    tokens_per_second: float
    seconds_per_step: StepSeconds


class BenchResult(TypedDict):
    """bench.json: what `bench` writes and returns."""

    steps: int
    warmup: int
    samples_per_second: float
    tokens_per_second: float | None
    seconds_per_step: StepSeconds
    seconds_to_first_step: float
    updates: int
    steady_updates: int
    seq_len: int | None  # None: a log that counts samples, not tokens
    log: str  # the log read, and its format
    format: str
    stopped: str | None  # how the job was stopped; None when it had exited by itself


@dataclasses.dataclass(frozen=True)
class BenchOptions:
    """How many updates to time, and how many of them are warm-up (validated on construction)."""

    steps: int = DEFAULT_STEPS
    warmup: int = DEFAULT_WARMUP
    timeout: float = DEFAULT_TIMEOUT  # seconds without an update before the job is stopped
    batch_size: int | None = None  # samples per update, for a log without `sps`

    def __post_init__(self) -> None:
        if type(self.steps) is not int or self.steps < 1:
            raise UsageError(f"bench.steps must be an int >= 1, got {self.steps!r}")
        if type(self.warmup) is not int or not 0 <= self.warmup < self.steps:
            raise UsageError(f"bench.warmup must be an int >= 0 and < steps ({self.steps}), got {self.warmup!r}")
        t = self.timeout
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
            raise UsageError(f"bench.timeout must be a number of seconds > 0, got {t!r}")
        if self.batch_size is not None and (type(self.batch_size) is not int or self.batch_size < 1):
            raise UsageError(f"bench.batch_size must be an int >= 1, got {self.batch_size!r}")


def quantile(sorted_values: list[float], q: float) -> float:
    """The q-quantile of sorted values, linearly interpolated between neighbours (numpy's default)."""
    if not sorted_values:
        raise ValueError("quantile of no values")
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def steady_rates(train: list[dict[str, Any]], seq_len: int, warmup: int) -> SteadyRates:
    """Steady rates over schema-v1 train records after the first `warmup` updates (whole records).

    Returns `{"updates", "steady_updates", "samples_per_second", "tokens_per_second",
    "seconds_per_step": {"median", "p10", "p90"}}`; InsufficientRunError when no record is left.
    """
    steady = steady_from(train, warmup)
    done = sum(r["updates"] for r in train)
    if not steady:
        raise InsufficientRunError(f"no train record after the warm-up of {warmup} updates")
    tokens = sum(r["tokens"] for r in steady)
    seconds = sum(r["train_seconds"] for r in steady)
    if seconds <= 0 or tokens <= 0:
        raise InsufficientRunError(f"no training time or samples in the {len(steady)} records after the warm-up")
    per_step = sorted(
        v for r in steady if r["attempted"] for v in [r["train_seconds"] / r["attempted"]] * r["attempted"]
    )
    return {
        "updates": done,
        "steady_updates": sum(r["updates"] for r in steady),
        "samples_per_second": tokens / seq_len / seconds,
        "tokens_per_second": tokens / seconds,
        "seconds_per_step": {
            "median": quantile(per_step, 0.5),
            "p10": quantile(per_step, 0.1),
            "p90": quantile(per_step, 0.9),
        },
    }


def bench(
    run_dir: str,
    cmd: list[str],
    options: BenchOptions = BenchOptions(),
    progress: Callable[[int, int], None] | None = None,
    reading: Reading | None = None,
) -> BenchResult:
    """Launch `cmd` for `run_dir`, time `options.steps` updates, stop it; return (and write) bench.json.

    `reading`: how to read the job's log (`check`'s reading options). Raises UsageError when `cmd`
    cannot start, InsufficientRunError when it ends before `steps` updates (with the last error
    line of its output) or gives no update for `options.timeout` seconds (with what its log looked
    like), InvalidRunError when its log is invalid.
    """
    from ..procs import alive, how_ended, wait_exit
    from ..procs.process import stop
    from ..supervising.launch import launch

    if not cmd:
        raise UsageError("bench: no command given (runwatch bench RUN_DIR [options] -- CMD ...)")
    reading = reading or Reading()
    os.makedirs(run_dir, exist_ok=True)
    tail = LogTail(run_dir, reading, options.batch_size)
    try:
        info = launch(run_dir, cmd, env=dict(os.environ, **{ENV_WINDOW: "1"}))
    except UsageError as exc:
        tail.close()
        raise UsageError("bench: " + str(exc).removeprefix("launch: ")) from None
    pid = info["pid"]
    with contextlib.suppress(FileNotFoundError):  # an earlier bench's result no longer describes this job
        os.unlink(os.path.join(run_dir, "bench.json"))
    stopped = None
    ended_at = None
    last_update = time.monotonic()
    seen = 0
    try:
        while True:
            running = alive(pid)  # before the poll: records written before an exit are read below
            tail.poll()
            done = tail.updates()
            if progress is not None:
                progress(done, options.steps)
            if done >= options.steps and any(r["attempted"] for r in steady_from(tail.train, options.warmup)):
                break
            now = time.monotonic()
            if len(tail.train) != seen:
                seen, last_update = len(tail.train), now
            elif now - last_update > options.timeout:
                stopped = stop(pid, run_dir, why=f"no update for {options.timeout:g}s") if alive(pid) else None
                raise InsufficientRunError(
                    f"bench: no update for {options.timeout:g}s ({done} of {options.steps} updates); job"
                    f" {stopped or 'exited'}; {describe_log(run_dir, reading, tail.target)}"
                )
            if tail.ended and ended_at is None:
                ended_at = now
            if not running or (ended_at is not None and now - ended_at > EXIT_WAIT_SECONDS):
                ended = wait_exit(run_dir, pid) if not running else None
                how = (
                    (ended.describe() if ended else how_ended(pid) or "exited") if not running else "its session ended"
                )
                line = last_error(RunDir(run_dir).stdout, or_last_line=True)
                seen_log = "" if done else f"; {describe_log(run_dir, reading, tail.target, output=False)}"
                raise InsufficientRunError(
                    f"the command ended ({how}) after {done} of {options.steps} updates;"
                    f" last error in {os.path.join(run_dir, 'stdout.log')}: {line or '(no output)'}{seen_log}"
                )
            time.sleep(POLL_SECONDS)
    finally:
        if alive(pid):
            stopped = stop(pid, run_dir, why=f"{tail.updates()} updates")
        tail.close()
    tail.check_rates()
    # Only the records up to the one that reached `steps` count (the job ran on while it was stopped).
    measured: list[dict[str, Any]] = []
    total = 0
    for rec in tail.train:
        if total >= options.steps and steady_from(measured, options.warmup):
            break
        measured.append(rec)
        total += rec["updates"]
    rates = steady_rates(measured, tail.seq_len, options.warmup)
    per_step = tail.span_seconds_per_step(measured, options.warmup)
    if per_step is not None:
        rates["seconds_per_step"] = per_step
    first = (tail.first_time or info["time"]) - info["time"]
    result: BenchResult = {
        "steps": options.steps,
        "warmup": options.warmup,
        "samples_per_second": rates["samples_per_second"],
        "tokens_per_second": rates["tokens_per_second"] if tail.tokens else None,
        "seconds_per_step": rates["seconds_per_step"],
        "seconds_to_first_step": max(0.0, first),
        "updates": rates["updates"],
        "steady_updates": rates["steady_updates"],
        "seq_len": tail.seq_len if tail.tokens else None,
        "log": tail.target.log_path,
        "format": tail.target.format,
        "stopped": stopped,
    }
    atomic_write_text(os.path.join(run_dir, "bench.json"), json.dumps(result, indent=2, allow_nan=False) + "\n")
    return result


def render(run_dir: str, result: BenchResult) -> str:
    """The text report."""
    sps = result["seconds_per_step"]
    tokens = result["tokens_per_second"]
    spread = (sps["p90"] - sps["p10"]) / sps["median"] * 100 if sps["median"] > 0 else 0.0
    lines = [
        f"bench {run_dir}: {result['updates']} updates timed, the first {result['warmup']} as warm-up;"
        f" job {result['stopped'] or 'ended'}",
        f"  steady      {_rate(result['samples_per_second'])} samples/s"
        + (
            f", {_rate(tokens)} tokens/s over {result['steady_updates']} updates (seq_len {result['seq_len']})"
            if tokens is not None
            else f" over {result['steady_updates']} updates ({result['format']} log {result['log']})"
        ),
        f"  per step    median {_secs(sps['median'])}, p10 {_secs(sps['p10'])}, p90 {_secs(sps['p90'])}"
        f" (spread p10-p90 {spread:.0f}% of the median)",
        f"  first step  logged {result['seconds_to_first_step']:.1f}s after the launch",
        f"wrote {os.path.join(run_dir, 'bench.json')}; next: runwatch plan {run_dir} --samples N --window DURATION",
    ]
    return "\n".join(lines)


def _rate(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _secs(value: float) -> str:
    return f"{value * 1000:.1f}ms" if value < 1 else f"{value:.2f}s"


def _declare(p: argparse.ArgumentParser, suppress: bool) -> None:
    def default(value: Any) -> Any:
        return argparse.SUPPRESS if suppress else value

    p.add_argument(
        "--steps",
        type=int,
        default=default(DEFAULT_STEPS),
        metavar="N",
        help=f"updates to log before the job is stopped (default {DEFAULT_STEPS})",
    )
    p.add_argument(
        "--warmup",
        type=int,
        default=default(DEFAULT_WARMUP),
        metavar="N",
        help=f"first updates left out of the rates (default {DEFAULT_WARMUP})",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=default(DEFAULT_TIMEOUT),
        metavar="S",
        help=f"stop the job when it logged no update for S seconds, saying what its log looked like"
        f" (default {DEFAULT_TIMEOUT:g})",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=default(None),
        metavar="N",
        help="samples per update, for a log that gives no samples/s (`sps`)",
    )
    p.add_argument("--json", action="store_true", default=default(False), help="print bench.json")
    add_reading_arguments(p)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of `runwatch bench` (split at `--` by `run`, as `runwatch launch` does)."""
    add_command_arguments(p, lambda q: _declare(q, suppress=True), "options")


def _parse(args: argparse.Namespace) -> tuple[str, list[str]]:
    cmd = split_command(args, "bench", lambda q: _declare(q, suppress=False))
    return args.run_dir, cmd


def run(args: argparse.Namespace) -> int:
    """`runwatch bench`: exit 0 with bench.json written; 2 when the job cannot start or ends too soon."""
    run_dir, cmd = _parse(args)
    options = BenchOptions(steps=args.steps, warmup=args.warmup, timeout=args.timeout, batch_size=args.batch_size)
    reading = reading_from_args(args)
    tty = sys.stderr.isatty()
    said = {"at": time.monotonic(), "done": 0}

    def progress(done: int, total: int) -> None:
        if tty:
            sys.stderr.write(f"\rbench: {min(done, total)}/{total} updates logged")
            sys.stderr.flush()
        elif time.monotonic() - said["at"] >= PROGRESS_SECONDS:  # a log or an agent: a line now and then
            said["at"] = time.monotonic()
            sys.stderr.write(f"bench: {min(done, total)}/{total} updates logged\n")
            sys.stderr.flush()

    try:
        result = bench(run_dir, cmd, options, progress, reading)
    finally:
        if tty:
            sys.stderr.write("\n")
    print(json.dumps(result, indent=2, allow_nan=False) if args.json else render(run_dir, result), flush=True)
    return 0
