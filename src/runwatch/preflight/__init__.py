"""Before and around a run: `bench` (throughput and a projected duration), `plan` (will it fit the
budget), `smoke` (a short real run, then its checks), `subsample` and `audit-data`.

    from runwatch.preflight import PlanOptions, BenchOptions, Reading

The commands' functions (`bench`, `plan`, `smoke`, `subsample`, `audit`) stay at their modules
(`runwatch.preflight.plan.plan`, ...): a package attribute named like a module of the package is
that module once it is imported. This is the layer's face: every name below is imported on first use
from the module that defines it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import lazy

if TYPE_CHECKING:
    from .audit import AuditOptions as AuditOptions
    from .audit import AuditReport as AuditReport
    from .bench import BenchOptions as BenchOptions
    from .bench import BenchResult as BenchResult
    from .logs import Reading as Reading
    from .plan import PlanOptions as PlanOptions
    from .plan import PlanReport as PlanReport
    from .plan import exit_code as exit_code
    from .plan import parse_duration as parse_duration
    from .plan import verdict_line as verdict_line
    from .smoke import SmokeOptions as SmokeOptions
    from .smoke import SmokeResult as SmokeResult
    from .subsample import SubsampleOptions as SubsampleOptions
    from .subsample import SubsampleReport as SubsampleReport
    from .throughput import session_records as session_records

# The public names, module -> names: this face's __all__.
_PUBLIC: dict[str, tuple[str, ...]] = {
    ".audit": ("AuditOptions", "AuditReport"),
    ".bench": ("BenchOptions", "BenchResult"),
    ".logs": ("Reading",),
    ".plan": ("PlanOptions", "PlanReport", "parse_duration", "exit_code", "verdict_line"),
    ".smoke": ("SmokeOptions", "SmokeResult"),
    ".subsample": ("SubsampleOptions", "SubsampleReport"),
    ".throughput": ("session_records",),
}
# The other names the modules listed as exported before the faces: importable from here for one
# release, not in __all__ (import them from the face, or better, use a public name).
_KEPT: dict[str, tuple[str, ...]] = {
    ".auditpool": ("RowBatch", "Pool", "chunked", "run_pool", "MAX_CHUNKS_PER_WORKER", "MAX_CONSECUTIVE_DEATHS"),
    ".bench": ("SteadyRates", "steady_rates", "quantile"),
    ".benchtail": ("LogTail", "StepSeconds", "steady_from"),
    ".corpus": ("Row", "Corpus", "FORMATS", "open_writer", "JsonlWriter", "Writer"),
    ".logs": ("add_reading_arguments", "reading_from_args", "describe_log"),
    ".plan": ("Projection", "format_duration", "project", "subsample_command"),
    ".rowcheck": ("CheckResult", "make_checker", "CHECKS", "NORMALIZERS"),
    ".smoke": ("SmokeCheck",),
    ".subsample": ("CountRow", "allocate"),
    ".throughput": ("DEFAULT_WARMUP", "MIN_STEADY_UPDATES", "Throughput", "measure"),
}
_WHERE = lazy.index(_PUBLIC, _KEPT)

__all__ = lazy.public(_PUBLIC)


def __getattr__(name: str) -> Any:
    return lazy.resolve(__name__, globals(), _WHERE, name)


def __dir__() -> list[str]:
    return lazy.listing(globals(), _WHERE)
