"""`runwatch smoke`: the verdict on a smoke run, as a table of checks with their evidence.

    runwatch smoke RUN_DIR [--chance-loss X] [--metric auroc] [--samples N --window 8h]
        [--format NAME] [--pattern REGEX] [--map K=V] [--run ID] [--log PATH] [--checkpoint PATH]

The log is read as `check` reads it (`logs.Reading`): a schema-v1 run directory, or any other log
(minimal telemetry, a text log with a preset or `--pattern`, TensorBoard, MLflow, CSV, ...).
Checks, in order (each PASS or FAIL):
- `log`: the log exists and is valid; a schema-v1 session passes the acceptance summary and ended
  normally; another log holds train records with a loss (and, when launched, its program exited 0).
- `loss`: the last train loss is below chance − CHANCE_TOLERANCE (chance: `--chance-loss`, else
  ln(recipe.num_classes) when the recipe names it); with no chance level, it fell by LOSS_FALL.
- `metric`: the eval metric of the last eval that has it is above 0.5 + METRIC_MARGIN; below
  0.5 − METRIC_MARGIN it is `inverted_metric` (labels or scores the wrong way round).
- `checkpoint`: a checkpoint record with `verified: true`; failing that, the newest checkpoint
  file still on disk (or `--checkpoint PATH`) is read back now with `verify_checkpoint`.
- `projection` (with `--samples` and `--window`): `runwatch plan` says the long run fits.

The last line is `SMOKE PASS` (exit 0), `SMOKE FAIL: <checks that failed>` (exit 1), or `SMOKE
CANNOT JUDGE: <why>` (exit 2) when no train loss can be read (no log, a format that reads no
record, a wrong pattern) (docs/FORMAT.md, "Exit codes").
Standard library only, but for torch/safetensors when a checkpoint must be read back.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
from typing import TYPE_CHECKING, Any, TypedDict

from ..errors import CheckpointError, InvalidRunError, RunwatchError, UsageError
from ..files import verify_checkpoint
from ..judging import fmt_step
from ..reading import Record, Target, iter_records
from .logs import Reading, add_reading_arguments, describe_log, reading_from_args
from .plan import PlanOptions, parse_duration, plan, session_records, verdict_line

if TYPE_CHECKING:
    from ..judging import Summary


# The watchdog's --chance-tolerance default: a loss within 0.02 of chance has not learned anything.
CHANCE_TOLERANCE = 0.02
# A 512-example eval set puts a chance-level AUROC within about ±0.05 (two standard errors).
METRIC_MARGIN = 0.05
# Without a chance level, a loss that learned fell by at least this fraction of its first value.
LOSS_FALL = 0.1
# Also the watchdog's default `--metric`.
DEFAULT_METRIC = "auroc"


class SmokeCheck(TypedDict):
    """One check of the table."""

    name: str
    passed: bool
    evidence: str


class SmokeResult(TypedDict):
    """What `smoke` returns."""

    run_dir: str
    checks: list[SmokeCheck]
    passed: bool
    judged: bool  # False: no train loss could be read (SMOKE CANNOT JUDGE, exit 2)
    failed: list[str]  # the names of the checks that failed
    verdict: str


class _Checkpoint(TypedDict):
    """A checkpoint record's fields that the check reads."""

    path: str
    step: int
    verified: bool | None


@dataclasses.dataclass(frozen=True)
class SmokeOptions:
    """What `smoke` judges against (validated on construction)."""

    chance_loss: float | None = None  # None: ln(recipe.num_classes) when the recipe names it
    metric: str = DEFAULT_METRIC
    plan: PlanOptions | None = None  # also project the long run's time when given
    checkpoint: str | None = None  # a checkpoint file to read back, relative to RUN_DIR

    def __post_init__(self) -> None:
        c = self.chance_loss
        if c is not None and (isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c) or c <= 0):
            raise UsageError(f"smoke.chance_loss must be a finite number > 0, got {c!r}")
        if not isinstance(self.metric, str) or not self.metric:
            raise UsageError(f"smoke.metric must be a non-empty string, got {self.metric!r}")


def _check(name: str, passed: bool, evidence: str) -> SmokeCheck:
    return {"name": name, "passed": bool(passed), "evidence": evidence}


def _chance(options: SmokeOptions, recipe: dict[str, Any]) -> tuple[float | None, str]:
    if options.chance_loss is not None:
        return float(options.chance_loss), "--chance-loss"
    k = recipe.get("num_classes")
    if type(k) is int and k >= 2:
        return math.log(k), f"ln(recipe num_classes {k})"
    return None, ""


def _loss_check(options: SmokeOptions, summary: Summary) -> SmokeCheck:
    chance, source = _chance(options, summary["recipe"])
    first, last = summary["loss"]["first"], summary["loss"]["last"]
    if chance is None:
        return _check(
            "loss",
            False,
            f"no chance level: pass --chance-loss or name num_classes in the recipe"
            f" (train loss {first:.4g} -> {last:.4g})",
        )
    bar = chance - CHANCE_TOLERANCE
    relation = "<" if last < bar else ">="
    return _check(
        "loss",
        last < bar,
        f"train loss {first:.4g} -> {last:.4g} {relation} {bar:.4g}"
        f" (chance {chance:.4g} from {source}, less {CHANCE_TOLERANCE})",
    )


def _metric_check(options: SmokeOptions, vals: list[tuple[int, float]], other_names: set[str]) -> SmokeCheck:
    name = options.metric
    if not vals:
        has = f" (val metrics seen: {', '.join(sorted(other_names))})" if other_names else " (no val event)"
        return _check("metric", False, f"no val event with metric {name!r}{has}")
    (s0, v0), (s1, v1) = vals[0], vals[-1]
    moved = f"{name} {v0:.4f} at step {s0} -> {v1:.4f} at step {s1}"
    if v1 > 0.5 + METRIC_MARGIN:
        return _check("metric", True, f"{moved} > 0.5 + {METRIC_MARGIN}")
    if v1 < 0.5 - METRIC_MARGIN:
        return _check(
            "metric",
            False,
            f"inverted_metric: {moved} < 0.5 - {METRIC_MARGIN}: labels or scores the wrong way round?"
            f" (flipped it would be {1.0 - v1:.4f})",
        )
    return _check("metric", False, f"{moved}, within 0.5 +- {METRIC_MARGIN}: at chance")


def _given_checkpoint(run_dir: str, given: str) -> SmokeCheck:
    """`--checkpoint PATH`: a torch or safetensors file is read back; any other file must be non-empty."""
    path = given if os.path.isabs(given) else os.path.join(run_dir, given)
    if not os.path.exists(path):
        return _check("checkpoint", False, f"--checkpoint {given}: no such file")
    try:
        report = verify_checkpoint(path)
    except CheckpointError as exc:
        size = os.path.getsize(path) if os.path.isfile(path) else 0
        if path.endswith((".pt", ".pth", ".bin", ".safetensors", ".ckpt")) or size == 0:
            return _check("checkpoint", False, f"--checkpoint {given}: {exc}" if size else f"{given} is empty")
        return _check("checkpoint", True, f"{given}: {size} bytes (not a torch or safetensors file: not read back)")
    return _check("checkpoint", True, f"{given} read back: {report['tensors']} tensors, {report['tensor_bytes']} bytes")


def _checkpoint_check(run_dir: str, ckpts: list[_Checkpoint], given: str | None = None) -> SmokeCheck:
    if given is not None and not any(c.get("verified") is True for c in ckpts):
        return _given_checkpoint(run_dir, given)
    if not ckpts:
        return _check("checkpoint", False, "no checkpoint record in the log (name the file with --checkpoint PATH)")
    verified = [c for c in ckpts if c.get("verified") is True]
    if verified:
        latest = verified[-1]
        return _check(
            "checkpoint",
            True,
            f"{len(ckpts)} written, {len(verified)} verified (latest {latest['path']} at step {latest['step']})",
        )
    for c in reversed(ckpts):
        path = c["path"] if os.path.isabs(c["path"]) else os.path.join(run_dir, c["path"])
        if os.path.exists(path):
            try:
                report = verify_checkpoint(path)
            except CheckpointError as exc:
                return _check(
                    "checkpoint", False, f"{len(ckpts)} written, none verified; reading back the newest: {exc}"
                )
            return _check(
                "checkpoint",
                True,
                f"{len(ckpts)} written, none verified in the log; read back now:"
                f" {c['path']} ({report['tensors']} tensors, {report['tensor_bytes']} bytes)",
            )
    return _check("checkpoint", False, f"{len(ckpts)} written, none verified, and none of the files is still on disk")


def _projection_check(run_dir: str, options: PlanOptions) -> SmokeCheck:
    try:
        result = plan(run_dir, options)
    except RunwatchError as exc:
        return _check("projection", False, str(exc))
    return _check("projection", result["fits"], verdict_line(result))


def smoke(run_dir: str, options: SmokeOptions = SmokeOptions(), reading: Reading | None = None) -> SmokeResult:
    """Judge the smoke run in `run_dir` (its log read with `reading`, as `check` reads it); return
    `{"run_dir", "checks": [...], "passed", "judged", "failed", "verdict"}`."""
    from ..judging import summarize

    reading = reading or Reading()
    try:
        target = reading.resolve(run_dir)
    except RunwatchError as exc:
        return _cannot(run_dir, f"{run_dir}: {exc}")
    if not os.path.exists(target.log_path):
        return _cannot(run_dir, f"no log to read: {describe_log(run_dir, reading, target)}")
    if not target.has_manifest:
        return _smoke_records(run_dir, options, reading, target)
    names = ["log", "loss", "metric", "checkpoint"] + (["projection"] if options.plan is not None else [])
    checks: list[SmokeCheck] = []
    try:
        summary = summarize(run_dir)
    except (InvalidRunError, OSError) as exc:
        checks.append(_check("log", False, f"invalid: {exc}"))
        checks += [_check(n, False, "not judged: the log did not pass the summary") for n in names[1:]]
        return _verdict(run_dir, checks)
    state = (
        "completed normally"
        if summary["completed"]
        else (
            f"ended {summary['end_reason']!r}"
            if summary["end_reason"]
            else "has no session_end (still running or killed)"
        )
    )
    checks.append(
        _check(
            "log",
            summary["completed"],
            f"valid; {state} at step {summary['last_step']} ({summary['train_windows']} train windows)",
        )
    )
    checks.append(_loss_check(options, summary))

    vals: list[tuple[int, float]] = []
    other_names: set[str] = set()
    ckpts: list[_Checkpoint] = []
    _, _, records = session_records(run_dir)
    for rec in records:
        if rec["event"] == "val":
            metrics = rec.get("metrics") or {}
            other_names.update(metrics)
            if options.metric in metrics:
                vals.append((rec["step"], metrics[options.metric]))
        elif rec["event"] == "checkpoint":
            ckpts.append({"path": rec["path"], "step": rec["step"], "verified": rec.get("verified")})
    checks.append(_metric_check(options, vals, other_names))
    checks.append(_checkpoint_check(run_dir, ckpts, options.checkpoint))
    if options.plan is not None:
        checks.append(_projection_check(run_dir, options.plan))
    return _verdict(run_dir, checks)


def _smoke_records(run_dir: str, options: SmokeOptions, reading: Reading, target: Target) -> SmokeResult:
    """The checks of a log that is not schema v1, from its records (the latest session's)."""
    from ..procs import launch_info, read_exit

    session: str | None = None
    recs: list[Record] = []
    try:
        for rec in iter_records(target, maps=reading.maps):
            if rec.kind == "invalid":
                return _verdict(run_dir, [_check("log", False, f"invalid: {rec.error}")] + _not_judged(options, "log"))
            if rec.session != session:
                session, recs = rec.session, []
            recs.append(rec)
    except InvalidRunError as exc:
        return _cannot(run_dir, f"{exc}")
    train = [r for r in recs if r.kind == "train" and r.loss is not None and math.isfinite(r.loss)]
    if not train:
        return _cannot(
            run_dir, f"no train record with a finite loss: {describe_log(run_dir, reading, target, output=False)}"
        )
    info = launch_info(target.run_dir)
    pid = info.get("pid") if info is not None else None
    ended = read_exit(target.run_dir, pid) if type(pid) is int else None
    how = f"; the program ended: {ended.describe()}" if ended is not None else ""
    ok = ended is None or ended.status == 0
    checks = [
        _check(
            "log",
            ok,
            f"{len(train)} train records with a loss in {target.log_path} ({target.format}), last step"
            f" {fmt_step(recs[-1].step)}{how}",
        )
    ]
    first, last = train[0].loss, train[-1].loss
    assert first is not None and last is not None  # (train records with a finite loss)
    chance, source = (float(options.chance_loss), "--chance-loss") if options.chance_loss is not None else (None, "")
    if chance is not None:
        bar = chance - CHANCE_TOLERANCE
        checks.append(
            _check(
                "loss",
                last < bar,
                f"train loss {first:.4g} -> {last:.4g} {'<' if last < bar else '>='} {bar:.4g}"
                f" (chance {chance:.4g} from {source}, less {CHANCE_TOLERANCE})",
            )
        )
    else:
        fell = last <= first * (1 - LOSS_FALL)
        checks.append(
            _check(
                "loss",
                fell,
                f"train loss {first:.4g} -> {last:.4g}: {'fell' if fell else 'did not fall'} by {LOSS_FALL:.0%}"
                " of its first value (no chance level: pass --chance-loss to judge against chance)",
            )
        )
    vals = [(r.step, r.metrics[options.metric]) for r in recs if r.metrics and options.metric in r.metrics]
    names = {k for r in recs if r.metrics for k in r.metrics}
    checks.append(_metric_check(options, [(int(s), float(v)) for s, v in vals if math.isfinite(v)], names))
    ckpts: list[_Checkpoint] = [
        {"path": str((r.raw or {}).get("path", "")), "step": int(r.step), "verified": (r.raw or {}).get("verified")}
        for r in recs
        if r.kind == "checkpoint"
    ]
    checks.append(_checkpoint_check(target.run_dir, ckpts, options.checkpoint))
    if options.plan is not None:
        checks.append(_projection_check(run_dir, options.plan))
    return _verdict(run_dir, checks)


def _not_judged(options: SmokeOptions, failed: str) -> list[SmokeCheck]:
    names = ["loss", "metric", "checkpoint"] + (["projection"] if options.plan is not None else [])
    return [_check(n, False, f"not judged: the {failed} check failed") for n in names]


def _cannot(run_dir: str, why: str) -> SmokeResult:
    """SMOKE CANNOT JUDGE: no train loss could be read."""
    return {
        "run_dir": run_dir,
        "checks": [],
        "passed": False,
        "judged": False,
        "failed": [],
        "verdict": f"SMOKE CANNOT JUDGE: {why}",
    }


def _verdict(run_dir: str, checks: list[SmokeCheck]) -> SmokeResult:
    failed = [c["name"] for c in checks if not c["passed"]]
    verdict = "SMOKE PASS" if not failed else "SMOKE FAIL: " + ", ".join(failed)
    return {
        "run_dir": run_dir,
        "checks": checks,
        "passed": not failed,
        "judged": True,
        "failed": failed,
        "verdict": verdict,
    }


def exit_code(result: SmokeResult) -> int:
    """0 SMOKE PASS, 1 SMOKE FAIL, 2 SMOKE CANNOT JUDGE."""
    return 2 if not result["judged"] else 0 if result["passed"] else 1


def render(result: SmokeResult) -> str:
    """The table of checks, ending in the verdict line."""
    if not result["judged"]:
        return "\n".join([f"smoke run {result['run_dir']}", result["verdict"]])
    width = max(len(c["name"]) for c in result["checks"])
    lines = [f"smoke run {result['run_dir']}", f"{'check':<{width}}  result  evidence"]
    for c in result["checks"]:
        lines.append(f"{c['name']:<{width}}  {'PASS' if c['passed'] else 'FAIL':<6}  {c['evidence']}")
    lines.append(result["verdict"])
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `runwatch smoke`."""
    parser.add_argument("run_dir", metavar="RUN_DIR", help="the smoke run's directory")
    parser.add_argument(
        "--chance-loss",
        type=float,
        default=None,
        metavar="X",
        help="the loss at chance (default: ln(recipe.num_classes) when the recipe names it)",
    )
    parser.add_argument(
        "--metric",
        default=DEFAULT_METRIC,
        metavar="NAME",
        help=f"eval metric whose chance level is 0.5 (default {DEFAULT_METRIC})",
    )
    parser.add_argument("--samples", type=int, default=None, metavar="N", help="with --window: project the long run")
    parser.add_argument("--epochs", type=float, default=1.0, metavar="E", help="epochs of the long run (default 1)")
    parser.add_argument("--window", default=None, metavar="DURATION", help="with --samples: the long run's time window")
    parser.add_argument("--eval-overhead", type=float, default=None, metavar="F", help="as in `runwatch plan`")
    parser.add_argument("--setup", default="0", metavar="DURATION", help="as in `runwatch plan` (default 0)")
    parser.add_argument(
        "--checkpoint",
        default=None,
        metavar="PATH",
        help="a checkpoint file the run saved (relative to RUN_DIR), read back when the log names none",
    )
    parser.add_argument("--json", action="store_true", help="print the checks as JSON")
    add_reading_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """`runwatch smoke`: exit 0 on SMOKE PASS, 1 on SMOKE FAIL, 2 on SMOKE CANNOT JUDGE."""
    if (args.samples is None) != (args.window is None):
        raise UsageError("runwatch smoke: --samples and --window go together (the projection needs both)")
    plan_options = None
    if args.samples is not None:
        plan_options = PlanOptions(
            samples=args.samples,
            window_seconds=parse_duration(args.window, "--window"),
            epochs=args.epochs,
            eval_overhead=args.eval_overhead,
            setup_seconds=parse_duration(args.setup, "--setup", allow_zero=True),
        )
    options = SmokeOptions(
        chance_loss=args.chance_loss, metric=args.metric, plan=plan_options, checkpoint=args.checkpoint
    )
    result = smoke(args.run_dir, options, reading_from_args(args))
    print(json.dumps(result, indent=2, allow_nan=False) if args.json else render(result))
    return exit_code(result)
