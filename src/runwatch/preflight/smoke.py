"""`runwatch smoke`: the verdict on a smoke run, as a table of checks with their evidence.

    runwatch smoke RUN_DIR [--chance-loss X] [--metric auroc] [--samples N --window 8h]

Checks, in order (each PASS or FAIL):
- `log`: the log exists, passes the acceptance summary, and the session ended normally.
- `loss`: the last train window's loss is below chance − CHANCE_TOLERANCE (chance: `--chance-loss`,
  else ln(recipe.num_classes) when the recipe names it).
- `metric`: the eval metric of the last val event that has it is above 0.5 + METRIC_MARGIN; below
  0.5 − METRIC_MARGIN it names inverted labels.
- `checkpoint`: at least one checkpoint record with `verified: true`; failing that, the newest
  checkpoint file still on disk is read back now with `verify_checkpoint`.
- `projection` (with `--samples` and `--window`): `runwatch plan` says the long run fits.

The last line is `SMOKE PASS` (exit 0) or `SMOKE FAIL: <checks that failed>` (exit 1) (docs/FORMAT.md, "Exit codes").
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
from ..files.checkpoint import verify_checkpoint
from .plan import PlanOptions, parse_duration, plan, session_records, verdict_line

if TYPE_CHECKING:
    from ..judging.summary import Summary

__all__ = ["SmokeOptions", "SmokeCheck", "SmokeResult", "smoke", "render"]

# The watchdog's --chance-tolerance default: a loss within 0.02 of chance has not learned anything.
CHANCE_TOLERANCE = 0.02
# A 512-example eval set puts a chance-level AUROC within about ±0.05 (two standard errors).
METRIC_MARGIN = 0.05
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
            "metric", False, f"{moved} < 0.5 - {METRIC_MARGIN}: inverted labels? (flipped it would be {1.0 - v1:.4f})"
        )
    return _check("metric", False, f"{moved}, within 0.5 +- {METRIC_MARGIN}: at chance")


def _checkpoint_check(run_dir: str, ckpts: list[_Checkpoint]) -> SmokeCheck:
    if not ckpts:
        return _check("checkpoint", False, "no checkpoint record in the log")
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


def smoke(run_dir: str, options: SmokeOptions = SmokeOptions()) -> SmokeResult:
    """Judge the smoke run in `run_dir`; return `{"run_dir", "checks": [...], "passed", "failed", "verdict"}`."""
    from ..judging.summary import summarize

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
    checks.append(_checkpoint_check(run_dir, ckpts))
    if options.plan is not None:
        checks.append(_projection_check(run_dir, options.plan))
    return _verdict(run_dir, checks)


def _verdict(run_dir: str, checks: list[SmokeCheck]) -> SmokeResult:
    failed = [c["name"] for c in checks if not c["passed"]]
    verdict = "SMOKE PASS" if not failed else "SMOKE FAIL: " + ", ".join(failed)
    return {"run_dir": run_dir, "checks": checks, "passed": not failed, "failed": failed, "verdict": verdict}


def render(result: SmokeResult) -> str:
    """The table of checks, ending in the verdict line."""
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
    parser.add_argument("--json", action="store_true", help="print the checks as JSON")


def run(args: argparse.Namespace) -> int:
    """`runwatch smoke`: exit 0 on SMOKE PASS, 1 on SMOKE FAIL."""
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
    result = smoke(args.run_dir, SmokeOptions(chance_loss=args.chance_loss, metric=args.metric, plan=plan_options))
    print(json.dumps(result, indent=2, allow_nan=False) if args.json else render(result))
    return 0 if result["passed"] else 1
