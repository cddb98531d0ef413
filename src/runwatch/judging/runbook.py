"""What each verdict means and what to do about it: the runbook, written once.

    explain("loss_spike")   # {"kind", "class", "meaning", "action"}
    markdown_table()        # the table of docs/WATCHDOG.md, "Verdict → what to do"

`runwatch mcp`'s `explain` tool and the docs table both come from `RUNBOOK` (a test keeps the
docs equal to `markdown_table()`, and another checks that every kind the watchdog can report has
an entry). Each entry is what the rule that reports the kind declares beside its code
(`ruleset.DECLARED`), as are its class and default severity; only the table's order is written
here. Standard library only.
"""

from __future__ import annotations

from typing import Any

from ..errors import UsageError
from .declaring import STOP, Runbook
from .ruleset import DECLARED, DEFAULT_SEVERITY, POLL_DECLARATIONS, verdict_class
from .verdict import DONE as DONE
from .verdict import DONE_RUNBOOK

# The kinds the watch judges on every poll rather than on a record (docs/WATCHDOG.md, "Rules on every poll").
POLL_KINDS = tuple(p.kind for p in POLL_DECLARATIONS)

# The order of the docs table: how the run ended, what stops it for a relaunch, then the rules on
# what it learned. Only the order is here; a kind missing from it is listed at the end.
TABLE_ORDER = (
    DONE,
    "process_exit",
    "oom",
    "stall",
    "rank_stall",
    "interrupted",
    "straggler",
    "timeout",
    "nonfinite_loss",
    "nonfinite_grad",
    "loss_spike",
    "grad_explosion",
    "grad_collapse",
    "loss_collapse",
    "loss_at_chance",
    "throughput_drop",
    "overfitting",
    "inverted_metric",
    "stuck_metric",
    "metric_stuck",
    "no_progress",
    "no_signal",
    "session_error",
    "invalid_log",
)


def _runbook() -> dict[str, Runbook]:
    entries = {DONE: DONE_RUNBOOK, **{kind: d.runbook for kind, d in DECLARED.items()}}
    order = [kind for kind in TABLE_ORDER if kind in entries] + [kind for kind in entries if kind not in TABLE_ORDER]
    return {kind: entries[kind] for kind in order}


# kind -> (what it means, what a person or an agent should do), in the order of the docs table:
# each kind's entry as the rule that reports it declares it.
RUNBOOK: dict[str, Runbook] = _runbook()


def kinds() -> list[str]:
    """Every anomaly kind the watchdog can report: the record rules' in their order, then the poll checks'."""
    return list(DECLARED)


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
