"""What each verdict means and what to do about it: the runbook, written once.

    explain("loss_spike")   # {"kind", "class", "meaning", "action"}
    markdown_table()        # the table of docs/WATCHDOG.md, "Verdict → what to do"

`runwatch mcp`'s `explain` tool and the docs table both come from `RUNBOOK` (a test keeps the
docs equal to `markdown_table()`, and another checks that every kind the watchdog can report has
an entry). The class of a kind is `rules.verdict_class`'s, never written here. Standard library only.
"""

from __future__ import annotations

from typing import Any

from ..errors import UsageError
from .rules import RULE_ORDER
from .ruleset import CLASSES, DEFAULT_SEVERITY, STOP, verdict_class

__all__ = ["RUNBOOK", "POLL_KINDS", "DONE", "kinds", "explain", "markdown_table"]

# The kinds the watch judges on every poll rather than on a record (docs/WATCHDOG.md, "Rules on every poll").
POLL_KINDS = ("stall", "timeout", "process_exit", "oom", "rank_stall", "straggler")
# The verdict of a completed run: not an anomaly kind, but an agent asks about it too.
DONE = "done"

# kind -> (what it means, what a person or an agent should do), in the order of the docs table.
RUNBOOK: dict[str, tuple[str, str]] = {
    DONE: (
        "the latest session ended normally, the `--done` sentinel appeared, or the process exited with status 0",
        "evaluate, summarize (`runwatch summarize RUN_DIR`), move on",
    ),
    "process_exit": (
        "the training process is gone and its log has no normal end (a crash, a lost node, a killed rank)",
        "read `last_error` (in the message, `watchdog.json`, `status`); relaunch from the latest checkpoint "
        "(`runwatch supervise` does it)",
    ),
    "oom": (
        "the process died and the end of `stdout.log` shows an out-of-memory error",
        "lower the batch size or sequence length first: the same recipe fails again",
    ),
    "stall": (
        "no new record for `--stall` seconds (or a phase's limit, or `--startup-grace` before the first record)",
        "look at the stack (`py-spy dump --pid PID`), then stop and relaunch from the latest checkpoint; "
        "a stall inside a phase names it (a hung evaluation or save)",
    ),
    "rank_stall": (
        "one rank's heartbeat fell behind the others' or stopped at an earlier step",
        "look at that rank's stack (the message names rank, host and pid), then stop and relaunch",
    ),
    "interrupted": (
        "the session ended on a signal: a scheduler's preemption or Ctrl-C",
        "relaunch (`--exit-code transient=75` lets a requeue script do it); `supervise` itself exits 75 "
        "(`preempted`) on a scheduler's SIGTERM or SIGUSR1 and 130 on Ctrl-C (docs/SUPERVISE.md)",
    ),
    "straggler": (
        "one rank's window time stayed above `--straggler-factor` x the median over ranks",
        "find the slow node (the message names rank and host); exclude it and relaunch",
    ),
    "timeout": (
        "the watch ran `--timeout` seconds",
        "decide whether the run may go on: raise `--timeout` and watch again, or stop it",
    ),
    "nonfinite_loss": (
        "a train or eval loss was NaN, infinite or null, a `FATAL` record, or a session that ended `nonfinite_loss`",
        "roll back to a checkpoint before the onset, skip the batches from there to the anomaly, perhaps lower "
        "the learning rate (`runwatch supervise` does the roll-back)",
    ),
    "nonfinite_grad": (
        "`--grad-patience` train records in a row had a non-finite gradient norm",
        "roll back before the onset and skip those batches; check the loss scaling and the learning rate",
    ),
    "loss_spike": (
        "`--spike-patience` train records in a row had a loss far above the median of those before",
        "roll back before the onset and skip those batches (`runwatch supervise` does it); look at the data "
        "of those steps",
    ),
    "grad_explosion": (
        "`--grad-patience` train records in a row had a gradient norm above the limit",
        "roll back before the onset; lower the learning rate or clip the gradients",
    ),
    "grad_collapse": (
        "`--grad-patience` train records in a row had a gradient norm below `--grad-min`",
        "stop and look at the learning rate, the initialization and frozen parameters: a relaunch repeats it",
    ),
    "loss_collapse": (
        "`--collapse-patience` train records in a row had a loss of exactly 0",
        "stop and look for a label or masking bug or a memorised data set: a relaunch repeats it",
    ),
    "loss_at_chance": (
        "the last train losses stay at or above `--chance-loss`: the model learns nothing",
        "stop and look at the labels, the data pipeline and the learning rate: a relaunch repeats it",
    ),
    "throughput_drop": (
        "throughput stayed below (1 - `--throughput-drop`) x the session's baseline",
        "look at the input pipeline, the disk, other jobs on the node, thermal throttling",
    ),
    "overfitting": (
        "eval loss stayed above (1 + `--overfit-tolerance`) x its best for `--overfit-patience` evaluations",
        "keep the best checkpoint; stop early, add regularization or data",
    ),
    "inverted_metric": (
        "the eval metric is below 1 - `--metric-min`: the labels look inverted",
        "stop and check the label mapping and the sign of the score: a relaunch repeats it",
    ),
    "stuck_metric": (
        "the eval metric stays near chance (below `--metric-min`) after `--metric-after-step`",
        "stop and look at the data, the labels and the learning rate: a relaunch repeats it",
    ),
    "metric_stuck": (
        "a task metric (accuracy, F1, mAP, ... by name; WER, perplexity lower is better) never moved over at least "
        "4 evals: identical evals, a best no better than the first by `--metric-min-gain`, or at most 0.05",
        "a warning: look at the metric's curve; a classifier at its majority class or a detector at mAP 0 learned "
        "nothing of the task (check the labels, the head, the learning rate); raise `--metric-min-gain` or set "
        "`--severity metric_stuck=off` for a metric that starts where it should stay",
    ),
    "no_progress": (
        "past a quarter of the run, the median of the last train losses is not 5% below the median of the run's "
        "first losses (before it could have learned): the run never learned",
        "check the learning rate (too low, or a scheduler stuck at 0), that the optimizer steps the model's "
        "parameters (frozen layers, a detached loss), that labels match inputs, and that the loss is the one you "
        "mean; for a run that starts slowly by nature, raise `--progress-after` or set `--max-steps`",
    ),
    "no_signal": (
        "the log gives no train loss (the finding names the keys it saw), or the format in use reads no record "
        "of a log that holds something (it names the format, the file and what it saw): nothing can be judged",
        "point one key at the loss with `--map loss=KEY` (a text log: a `(?P<loss>...)` group in `--pattern`), "
        "or log a key named `loss`; for no record at all, give the log's real format (`--format`, `--log`)",
    ),
    "session_error": (
        "the session ended with an error (an exception in the training code)",
        "read the error; fix the code, then relaunch",
    ),
    "invalid_log": (
        "a line of the log is not a valid record (not JSON, or failing the schema)",
        "read the message (file and line); fix the log writer",
    ),
}


def kinds() -> list[str]:
    """Every anomaly kind the watchdog can report: the record rules', the poll checks', the classed ones."""
    out: list[str] = []
    for kind in [r.kind for r in RULE_ORDER] + list(POLL_KINDS) + list(CLASSES):
        if kind and kind not in out:
            out.append(kind)
    return out


def explain(kind: str) -> dict[str, Any]:
    """The runbook entry of `kind` (or of `done`): its class, its default severity (`stop`, or
    `warn`: reported, never acted on), what it means, what to do."""
    entry = RUNBOOK.get(kind)
    if entry is None:
        known = ", ".join(sorted(set(kinds()) | {DONE}))
        raise UsageError(f"explain: unknown kind {kind!r}; known: {known}")
    meaning, action = entry
    return {
        "kind": kind,
        "class": None if kind == DONE else verdict_class(kind),
        "severity": None if kind == DONE else DEFAULT_SEVERITY.get(kind, STOP),
        "meaning": meaning,
        "action": action,
    }


def markdown_table() -> str:
    """The runbook as docs/WATCHDOG.md shows it."""
    rows = [
        "| verdict | class | severity | what it means | a person or an agent should |",
        "| --- | --- | --- | --- | --- |",
    ]
    for kind, (meaning, action) in RUNBOOK.items():
        name = "`OK done`" if kind == DONE else f"`{kind}`"
        cls = verdict_class(None if kind == DONE else kind)
        sev = "" if kind == DONE else f"`{DEFAULT_SEVERITY.get(kind, STOP)}`"
        rows.append(f"| {name} | {f'`{cls}`' if cls else ''} | {sev} | {meaning} | {action} |")
    return "\n".join(rows)
