"""What shows a run: `status` (a short check-in), `plot`, the TensorBoard export, the run page
(`serve`) and what a coding agent uses (the MCP tools and server, the skill).

    from runwatch.views import format_status, find_runs, Tools

    for path, target in find_runs("runs"): ...   # every run under a folder
    tools = Tools("runs")                         # the MCP tools as plain functions

The check-in itself is `runwatch status RUN_DIR --json` (in Python `runwatch.views.status.status`,
which stays at its module: a package attribute named like a module of the package is that module
once it is imported; `serve` likewise). This is the layer's face: every name below is imported on
first use from the module that defines it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import lazy

if TYPE_CHECKING:
    from .agent import install_skill as install_skill
    from .agent import skill_text as skill_text
    from .agent.server import build_server as build_server
    from .agent.server import serve_stdio as serve_stdio
    from .agent.shell import rule_option_names as rule_option_names
    from .agent.tools import Tools as Tools
    from .plot import snapshot as snapshot
    from .serve.runs import RunView as RunView
    from .serve.runs import find_runs as find_runs
    from .serve.runs import run_target as run_target
    from .status import Status as Status
    from .status import format_status as format_status
    from .tensorboard import export as export

# The public names, module -> names: this face's __all__.
_PUBLIC: dict[str, tuple[str, ...]] = {
    ".agent": ("skill_text", "install_skill"),
    ".agent.server": ("build_server", "serve_stdio"),
    ".agent.shell": ("rule_option_names",),
    ".agent.tools": ("Tools",),
    ".plot": ("snapshot",),
    ".serve.runs": ("RunView", "find_runs", "run_target"),
    ".status": ("format_status", "Status"),
    ".tensorboard": ("export",),
}
# The other names the modules listed as exported before the faces: importable from here for one
# release, not in __all__ (import them from the face, or better, use a public name).
_KEPT: dict[str, tuple[str, ...]] = {
    ".agent": ("add_skill_arguments", "run_skill", "INSTALL_HINT", "SKILL_NAME"),
    ".agent.act": ("launch_supervised", "stop_run", "SUPERVISE_LOG"),
    ".agent.bound": ("MAX_RESULT_BYTES", "strict", "fit", "result_bytes"),
    ".agent.events": ("KINDS", "Cursor", "Batch", "events_since", "parse_kinds", "CheckpointTail", "journal_records"),
    ".agent.evidence": (
        "read_points",
        "series",
        "bucket",
        "value_of",
        "incident",
        "provenance",
        "differences",
        "OUTPUT_LINES",
        "AROUND",
    ),
    ".agent.schemas": (
        "ListRuns",
        "RunStatus",
        "TailRecords",
        "CheckRun",
        "WaitForVerdict",
        "Explain",
        "PlanRun",
        "GetSeries",
        "Incident",
        "WaitForEvent",
        "CompareRuns",
        "LaunchSupervised",
        "StopRun",
    ),
    ".agent.server": ("INSTRUCTIONS",),
    ".agent.shell": (
        "EventTails",
        "add_wait_arguments",
        "run_wait",
        "add_tail_arguments",
        "run_tail",
        "add_explain_arguments",
        "run_explain",
        "add_runs_arguments",
        "run_runs",
        "add_rules_arguments",
        "add_series_arguments",
        "run_series",
        "add_incident_arguments",
        "run_incident",
        "add_compare_arguments",
        "run_compare",
        "run_rules",
        "rules_table",
        "WAIT_EXIT",
    ),
    ".agent.tail": ("last_records", "minimal_rows", "metrics_left_out", "seq_len_of"),
    ".agent.tools": ("MAX_LIST_RUNS", "MAX_TAIL_RECORDS", "MAX_WAIT_SECONDS", "MAX_SERIES_BYTES", "parse_command_line"),
    ".agent.verdicts": ("watch_state", "live_supervisor", "files_signature"),
    ".plot": ("Snapshot", "figure_size", "PANELS"),
    ".plotdata": ("SessionSeries", "PlotView", "load_run"),
    ".serve": ("DEFAULT_HOST", "DEFAULT_PORT", "host_warning"),
    ".serve.bests": ("Best", "BestMetric", "GoodputSteps", "best_point", "origin_facts", "task_metric"),
    ".serve.export": ("COLUMNS", "csv_chunks", "record_values", "session_cut", "system_values"),
    ".serve.facts": ("MAX_AGE_SECONDS", "SIDE_FILES", "FactsCache"),
    ".serve.markers": ("MAX_CHECKPOINT_MARKERS", "MAX_FINDING_MARKERS", "Checkpoints", "Marker", "markers"),
    ".serve.runs": (
        "MAX_METRICS",
        "MAX_DEPTH",
        "verdict_of",
        "ListVerdict",
        "RunSummary",
        "RunDetail",
        "Chart",
        "ChartSeries",
    ),
    ".serve.series": ("MAX_POINTS", "Cut", "Point", "Series", "keeps"),
    ".serve.server": ("STATIC_FILES", "Catalog", "Server", "is_loopback"),
    ".serve.supervision": (
        "MAX_ATTEMPTS",
        "Attempt",
        "AttemptEnd",
        "AttemptVerdict",
        "Move",
        "SupervisionFacts",
        "SupervisionView",
    ),
    ".status": ("describe", "watchdog_facts", "StatusHead", "GradNorm", "Ended", "LastEval", "ProcessInfo"),
    ".tensorboard": ("scalars", "MARKER", "Export", "ExportedRun"),
}
_WHERE = lazy.index(_PUBLIC, _KEPT)

__all__ = lazy.public(_PUBLIC)


def __getattr__(name: str) -> Any:
    return lazy.resolve(__name__, globals(), _WHERE, name)


def __dir__() -> list[str]:
    return lazy.listing(globals(), _WHERE)
