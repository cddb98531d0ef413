"""The `outputSchema` of every tool: what its structured content holds.

Each is a TypedDict the MCP SDK turns into a JSON schema (`Annotated[CallToolResult, Schema]` on
the tool) and checks every structured result against. Keys are optional (`total=False`): a result
cut to its bound leaves some out and says so in `truncated`; keys not named here are allowed.
Imported by the server only (needs pydantic, with the SDK).
"""

from __future__ import annotations

from typing import Any

from typing_extensions import TypedDict


class _Bounded(TypedDict, total=False):
    truncated: str  # what was left out to stay within the bound
    clamped: str  # an argument larger than its bound, and what was used


class ListRuns(_Bounded, total=False):
    under: str
    total: int
    runs: list[dict[str, Any]]


class RunStatus(_Bounded, total=False):
    run: str
    run_dir: Any
    step: Any
    loss: Any
    watchdog: Any
    supervision: dict[str, Any]


class TailRecords(_Bounded, total=False):
    run: str
    log: str
    format: str
    n: int
    records: list[dict[str, Any]]
    metrics_left_out: str


class CheckRun(_Bounded, total=False):
    run: str
    exit: int
    findings_total: int
    findings: list[dict[str, Any]]
    verdict: str


class WaitForVerdict(_Bounded, total=False):
    run: str
    state: str  # final, watching or unwatched
    by: str | None
    message: str
    line: str
    verdict: Any
    exit: int | None
    event: str
    timed_out: bool
    step: Any
    waited_seconds: float


class Explain(_Bounded, total=False):
    kind: str
    severity: str | None
    meaning: str
    action: str


class PlanRun(_Bounded, total=False):
    run: str
    exit: int
    meaning: str
    verdict: str
    reason: str
    subsample: str | None
    report: dict[str, Any]


class GetSeries(_Bounded, total=False):
    run: str
    log: str
    format: str
    steps: list[Any]  # [first, last] step covered
    records: int
    series: dict[str, list[list[Any]]]  # key -> [[step_first, step_last, min, max, last], ...]
    nonfinite: dict[str, dict[str, Any]]  # key -> {"count", "first_steps"}


class Incident(_Bounded, total=False):
    run: str
    verdict: dict[str, Any] | None
    before: list[dict[str, Any]]
    after: list[dict[str, Any]]
    checkpoints: list[dict[str, Any]]
    output: list[str]
    recipe: dict[str, Any] | None
    argv: list[str] | None
    git: dict[str, Any] | None
    versions: dict[str, Any] | None
    data: Any
    host: str | None
    compare: dict[str, Any]
    note: str


class WaitForEvent(_Bounded, total=False):
    run: str
    events: list[dict[str, Any]]
    cursor: str
    timed_out: bool
    waited_seconds: float
    notes: list[str]


class CompareRuns(_Bounded, total=False):
    runs: list[dict[str, Any]]
    differs: dict[str, list[Any]]


class LaunchSupervised(_Bounded, total=False):
    pid: int
    run_dir: str


class StopRun(RunStatus, total=False):
    stopped: str  # what was stopped, then the run's final status (as run_status gives it)
