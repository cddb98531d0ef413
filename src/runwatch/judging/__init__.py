"""Judging a run: the rules over its records, its ranks and its liveness, the watch that follows a run
until a finding stops it, the verdict and its exit code, the replay of a whole log (`check`), the
runbook and the acceptance summary. Standard library only.

    from runwatch.judging import Options, Watcher, watch, check, exit_status

    verdict = watch("runs/a", Options(poll=0.2, stall=60))  # .line(), .cls, .onset, .to_json()
    result = check("runs/a")                                # .findings, .lines(), .exit_code
    w = Watcher("runs/a", Options())
    v = w.poll_once()                                       # one poll; w.state_dict() to resume

This is the layer's face: every name below is imported on first use from the module that defines it,
so importing `runwatch.judging` imports nothing else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import lazy

if TYPE_CHECKING:
    from .declaring import STOP as STOP
    from .liveness import is_local_host as is_local_host
    from .liveness import last_error as last_error
    from .liveness import process_host as process_host
    from .liveness import watchdog_liveness as watchdog_liveness
    from .ranks import RankMonitor as RankMonitor
    from .ranks import rank_status_lines as rank_status_lines
    from .replay import RECOVERED as RECOVERED
    from .replay import CheckResult as CheckResult
    from .replay import RunReplay as RunReplay
    from .replay import check as check
    from .replay import finding_line as finding_line
    from .replay import recoverable as recoverable
    from .rulebase import fmt_step as fmt_step
    from .rules import Finding as Finding
    from .rules import RuleOptions as RuleOptions
    from .rules import Rules as Rules
    from .ruleset import RECORD_KINDS as RECORD_KINDS
    from .ruleset import verdict_class as verdict_class
    from .runbook import RUNBOOK as RUNBOOK
    from .runbook import explain as explain
    from .runbook import kinds as kinds
    from .summary import Summary as Summary
    from .summary import summarize as summarize
    from .throughput import ThroughputDrop as ThroughputDrop
    from .verdict import DEFAULT_EXIT_CODES as DEFAULT_EXIT_CODES
    from .verdict import Verdict as Verdict
    from .verdict import exit_status as exit_status
    from .verdict import parse_exit_codes as parse_exit_codes
    from .verdict import read_verdict as read_verdict
    from .verdict import write_verdict as write_verdict
    from .watchcommands import check_from_args as check_from_args
    from .watchdog import Watcher as Watcher
    from .watchdog import watch as watch
    from .watchoptions import Options as Options
    from .watchoptions import load_options as load_options
    from .watchoptions import options_from_args as options_from_args

# The public names, module -> names: this face's __all__.
_PUBLIC: dict[str, tuple[str, ...]] = {
    ".declaring": ("STOP",),
    ".liveness": ("process_host", "is_local_host", "last_error", "watchdog_liveness"),
    ".ranks": ("RankMonitor", "rank_status_lines"),
    ".replay": ("CheckResult", "RunReplay", "check", "recoverable", "finding_line", "RECOVERED"),
    ".rulebase": ("fmt_step",),
    ".rules": ("Finding", "RuleOptions", "Rules"),
    ".ruleset": ("RECORD_KINDS", "verdict_class"),
    ".runbook": ("RUNBOOK", "kinds", "explain"),
    ".summary": ("summarize", "Summary"),
    ".throughput": ("ThroughputDrop",),
    ".verdict": ("Verdict", "write_verdict", "read_verdict", "exit_status", "parse_exit_codes", "DEFAULT_EXIT_CODES"),
    ".watchcommands": ("check_from_args",),
    ".watchdog": ("Watcher", "watch"),
    ".watchoptions": ("Options", "load_options", "options_from_args"),
}
# The other names the modules listed as exported before the faces: importable from here for one
# release, not in __all__ (import them from the face, or better, use a public name).
_KEPT: dict[str, tuple[str, ...]] = {
    ".declaring": ("SEVERITIES",),
    ".evalrules": (
        "EvalNonfiniteLoss",
        "InvertedMetric",
        "MAX_EVAL_SERIES",
        "MetricStuck",
        "Overfitting",
        "StuckMetric",
        "eval_losses",
        "task_metric",
    ),
    ".gradrules": ("GRAD_MIN_HISTORY",),
    ".liveness": (
        "PHASE_NAME",
        "PhaseLimits",
        "parse_phase_limits",
        "watched_heartbeat",
        "stall_finding",
        "dead_rank",
        "watching_record",
        "WATCHING_EVERY_SECONDS",
        "ERROR_TAIL_BYTES",
    ),
    ".lossrules": ("SPIKE_MIN_HISTORY",),
    ".progress": (
        "NoProgress",
        "NoSignal",
        "NO_SIGNAL_RECORDS",
        "PROGRESS_HEAD_SHARE",
        "PROGRESS_MIN_HALF",
        "head_length",
    ),
    ".rankrules": ("rank_stall_finding", "StragglerRule"),
    ".replay": ("name_loss_key",),
    ".rulebase": (
        "Rule",
        "SKIP",
        "Skip",
        "Look",
        "SessionFacts",
        "REFERENCE_RECORDS",
        "median",
        "slide",
        "spread",
        "extend_streak",
        "show_nonfinite",
    ),
    ".rules": ("Replay",),
    ".ruleset": ("RULE_ORDER", "CLASSES", "DEFAULT_SEVERITY"),
    ".runbook": ("POLL_KINDS", "markdown_table"),
    ".summary": ("LossSummary", "QKClipSummary", "ValSummary"),
    ".verdict": ("EXIT_CLASSES", "DONE"),
    ".watchdog": ("POLL_CHECKS",),
}
_WHERE = lazy.index(_PUBLIC, _KEPT)

__all__ = lazy.public(_PUBLIC)


def __getattr__(name: str) -> Any:
    return lazy.resolve(__name__, globals(), _WHERE, name)


def __dir__() -> list[str]:
    return lazy.listing(globals(), _WHERE)
