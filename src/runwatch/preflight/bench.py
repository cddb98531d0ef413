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

from ..errors import InsufficientRunError, InvalidRunError, UsageError
from ..files.journal import atomic_write_text
from ..files.rundir import ENV_WINDOW, RunDir
from ..judging.liveness import last_error
from ..options import add_command_arguments, split_command
from ..reading.target import Target

__all__ = [
    "BenchOptions",
    "BenchResult",
    "SteadyRates",
    "bench",
    "steady_rates",
    "quantile",
    "render",
    "add_arguments",
    "run",
]

# About 15 steps are enough to see the steady rate of a real job; the first 3 hold compilation,
# autotuning, the data loader's start and allocator growth.
DEFAULT_STEPS = 15
DEFAULT_WARMUP = 3
# How often the log and the process are looked at: a step of a real job takes 50 ms to seconds.
POLL_SECONDS = 0.1
# After the job's session ended (too soon), how long to wait for its process to exit, so that the
# message can give its exit status; a job still running after that is stopped.
EXIT_WAIT_SECONDS = 10.0


class StepSeconds(TypedDict):
    """Seconds per attempted update: the median and the 10th and 90th percentiles."""

    median: float
    p10: float
    p90: float


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
    tokens_per_second: float
    seconds_per_step: StepSeconds
    seconds_to_first_step: float
    updates: int
    steady_updates: int
    seq_len: int
    stopped: str | None  # how the job was stopped; None when it had exited by itself


@dataclasses.dataclass(frozen=True)
class BenchOptions:
    """How many updates to time, and how many of them are warm-up (validated on construction)."""

    steps: int = DEFAULT_STEPS
    warmup: int = DEFAULT_WARMUP

    def __post_init__(self) -> None:
        if type(self.steps) is not int or self.steps < 1:
            raise UsageError(f"bench.steps must be an int >= 1, got {self.steps!r}")
        if type(self.warmup) is not int or not 0 <= self.warmup < self.steps:
            raise UsageError(f"bench.warmup must be an int >= 0 and < steps ({self.steps}), got {self.warmup!r}")


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
    steady = _steady_from(train, warmup)
    done = sum(r["updates"] for r in train)
    if not steady:
        raise InsufficientRunError(f"no train record after the warm-up of {warmup} updates")
    tokens = sum(r["tokens"] for r in steady)
    seconds = sum(r["train_seconds"] for r in steady)
    per_step = sorted(v for r in steady for v in [r["train_seconds"] / r["attempted"]] * r["attempted"])
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


class _LogTail:
    """The new session's train records in RUN_DIR/metrics.jsonl, read as they are written.

    Reading starts after what the log holds before the launch (`RecordSource(from_end=True)`), so
    an earlier session in the same directory is not counted; the first session that appears after
    it is the job's.
    """

    def __init__(self, run_dir: str) -> None:
        from ..reading.source import RecordSource

        self.path = RunDir(run_dir).metrics
        self.source = RecordSource(Target(run_dir, self.path, "jsonl"), from_end=True)
        self.session: str | None = None
        self.seq_len = 1
        self.train: list[dict[str, Any]] = []  # the train records' fields as written
        self.ended = False

    def close(self) -> None:
        self.source.close()

    def poll(self) -> None:
        """Read what was written since the last poll. Raises InvalidRunError for an invalid record."""
        while True:
            polled = self.source.poll()
            parser = self.source.parser
            if parser is not None and parser.mode != "v1" and polled.records:
                raise InvalidRunError(
                    f"{self.path}: written without run.json (bench reads logs of RunLogger or the runwatch callbacks)"
                )
            for rec in polled.records:
                if self.session is None:
                    self.session = rec.session
                    entry = parser.entry(rec.session) if parser is not None else None
                    self.seq_len = entry["recipe"]["seq_len"] if entry else 1
                if rec.session != self.session:
                    continue  # a later session (the job restarted itself): not part of the bench
                if rec.kind == "invalid":
                    raise InvalidRunError(rec.error)
                if rec.kind == "train":
                    assert rec.raw is not None  # always set for a valid schema-v1 record
                    self.train.append(rec.raw)
                elif rec.kind == "end":
                    self.ended = True
            if not polled.more:
                return

    def updates(self) -> int:
        return sum(r["updates"] for r in self.train)


def bench(
    run_dir: str,
    cmd: list[str],
    options: BenchOptions = BenchOptions(),
    progress: Callable[[int, int], None] | None = None,
) -> BenchResult:
    """Launch `cmd` for `run_dir`, time `options.steps` updates, stop it; return (and write) bench.json.

    Raises UsageError when `cmd` cannot start, InsufficientRunError when it ends before `steps`
    updates (with the last error line of its output), InvalidRunError when its log is invalid.
    """
    from ..procs.process import alive, exit_status, stop, wait_exit
    from ..supervising.launch import launch

    if not cmd:
        raise UsageError("bench: no command given (runwatch bench RUN_DIR [options] -- CMD ...)")
    tail = _LogTail(run_dir)
    try:
        info = launch(run_dir, cmd, env=dict(os.environ, **{ENV_WINDOW: "1"}))
    except UsageError as exc:
        raise UsageError("bench: " + str(exc).removeprefix("launch: ")) from None
    pid = info["pid"]
    with contextlib.suppress(FileNotFoundError):  # an earlier bench's result no longer describes this job
        os.unlink(os.path.join(run_dir, "bench.json"))
    stopped = None
    ended_at = None
    try:
        while True:
            running = alive(pid)  # before the poll: records written before an exit are read below
            tail.poll()
            done = tail.updates()
            if progress is not None:
                progress(done, options.steps)
            if done >= options.steps and any(_steady_from(tail.train, options.warmup)):
                break
            if tail.ended and ended_at is None:
                ended_at = time.monotonic()
            if not running or (ended_at is not None and time.monotonic() - ended_at > EXIT_WAIT_SECONDS):
                ended = wait_exit(run_dir, pid) if not running else None
                how = (
                    (ended.describe() if ended else exit_status(pid) or "exited")
                    if not running
                    else "its session ended"
                )
                line = last_error(RunDir(run_dir).stdout, or_last_line=True)
                raise InsufficientRunError(
                    f"the command ended ({how}) after {done} of {options.steps} updates;"
                    f" last error in {os.path.join(run_dir, 'stdout.log')}: {line or '(no output)'}"
                )
            time.sleep(POLL_SECONDS)
    finally:
        if alive(pid):
            stopped = stop(pid, run_dir, why=f"{tail.updates()} updates")
        tail.close()
    # Only the records up to the one that reached `steps` count (the job ran on while it was stopped).
    measured: list[dict[str, Any]] = []
    total = 0
    for rec in tail.train:
        if total >= options.steps and _steady_from(measured, options.warmup):
            break
        measured.append(rec)
        total += rec["updates"]
    rates = steady_rates(measured, tail.seq_len, options.warmup)
    first = tail.train[0]["time"] - info["time"]
    result: BenchResult = {
        "steps": options.steps,
        "warmup": options.warmup,
        "samples_per_second": rates["samples_per_second"],
        "tokens_per_second": rates["tokens_per_second"],
        "seconds_per_step": rates["seconds_per_step"],
        "seconds_to_first_step": max(0.0, first),
        "updates": rates["updates"],
        "steady_updates": rates["steady_updates"],
        "seq_len": tail.seq_len,
        "stopped": stopped,
    }
    atomic_write_text(os.path.join(run_dir, "bench.json"), json.dumps(result, indent=2, allow_nan=False) + "\n")
    return result


def _steady_from(train: list[dict[str, Any]], warmup: int) -> list[dict[str, Any]]:
    done = 0
    out = []
    for rec in train:
        if done >= warmup:
            out.append(rec)
        done += rec["updates"]
    return out


def render(run_dir: str, result: BenchResult) -> str:
    """The text report."""
    sps = result["seconds_per_step"]
    spread = (sps["p90"] - sps["p10"]) / sps["median"] * 100 if sps["median"] > 0 else 0.0
    lines = [
        f"bench {run_dir}: {result['updates']} updates timed, the first {result['warmup']} as warm-up;"
        f" job {result['stopped'] or 'ended'}",
        f"  steady      {_rate(result['samples_per_second'])} samples/s, {_rate(result['tokens_per_second'])} tokens/s"
        f" over {result['steady_updates']} updates (seq_len {result['seq_len']})",
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
    p.add_argument("--json", action="store_true", default=default(False), help="print bench.json")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of `runwatch bench` (split at `--` by `run`, as `runwatch launch` does)."""
    add_command_arguments(p, lambda q: _declare(q, suppress=True), "options")


def _parse(args: argparse.Namespace) -> tuple[str, list[str]]:
    cmd = split_command(args, "bench", lambda q: _declare(q, suppress=False))
    return args.run_dir, cmd


def run(args: argparse.Namespace) -> int:
    """`runwatch bench`: exit 0 with bench.json written; 2 when the job cannot start or ends too soon."""
    run_dir, cmd = _parse(args)
    options = BenchOptions(steps=args.steps, warmup=args.warmup)
    progress = None
    if sys.stderr.isatty():

        def progress(done: int, total: int) -> None:
            sys.stderr.write(f"\rbench: {min(done, total)}/{total} updates logged")
            sys.stderr.flush()

    try:
        result = bench(run_dir, cmd, options, progress)
    finally:
        if progress is not None:
            sys.stderr.write("\n")
    print(json.dumps(result, indent=2, allow_nan=False) if args.json else render(run_dir, result), flush=True)
    return 0
