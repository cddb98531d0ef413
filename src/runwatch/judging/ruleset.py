"""The watchdog's rules as a set: every record rule in its order, every kind judged on a poll, and
the tables drawn from what each declares beside its code (docs/WATCHDOG.md, "Rules on records",
"Verdict classes", "Severities").

A rule declares its kind, the kind's verdict class, its default severity and its runbook entry
where its code is (`declaring` says how): the record rules in `sessionrules`, `lossrules`,
`gradrules`, `throughput`, `evalrules` and `progress`, the poll kinds in `liveness` and
`rankrules`. Nothing here is written twice: `CLASSES`, `DEFAULT_SEVERITY`, `RECORD_KINDS` and
`DECLARED` are views of those declarations, and `runbook` draws its table from `DECLARED`.

The building blocks of a rule (`Rule`, `SKIP`, `SessionFacts`, the shared helpers) are
`rulebase`'s and importable from here too. Standard library only.
"""

from __future__ import annotations

from .declaring import DIVERGENCE as DIVERGENCE
from .declaring import FATAL as FATAL
from .declaring import OFF as OFF
from .declaring import SEVERITIES as SEVERITIES
from .declaring import STOP as STOP
from .declaring import TRANSIENT as TRANSIENT
from .declaring import WARN as WARN
from .declaring import PollKind
from .evalrules import EvalNonfiniteLoss, InvertedMetric, MetricStuck, Overfitting, StuckMetric
from .gradrules import GRAD_MIN_HISTORY as GRAD_MIN_HISTORY
from .gradrules import GradCollapse, GradExplosion, NonfiniteGrad
from .liveness import LIVENESS_KINDS
from .lossrules import SPIKE_MIN_HISTORY as SPIKE_MIN_HISTORY
from .lossrules import LossAtChance, LossCollapse, LossSpike, NonfiniteLoss
from .progress import NoProgress, NoSignal
from .rankrules import RANK_KINDS
from .rulebase import REFERENCE_RECORDS as REFERENCE_RECORDS
from .rulebase import SKIP as SKIP
from .rulebase import Look as Look
from .rulebase import Rule as Rule
from .rulebase import SessionFacts as SessionFacts
from .rulebase import Skip as Skip
from .rulebase import extend_streak as extend_streak
from .rulebase import fmt_step as fmt_step
from .rulebase import median as median
from .rulebase import show_nonfinite as show_nonfinite
from .rulebase import slide as slide
from .rulebase import spread as spread
from .sessionrules import Interrupted, InvalidLog, SessionError
from .throughput import ThroughputDrop as ThroughputDrop

# The reporting order on one record (docs/WATCHDOG.md, "Rules on records"): train rules, then
# eval-value rules, then what is judged of the log as a whole.
RULE_ORDER: tuple[type[Rule], ...] = (
    InvalidLog,
    NonfiniteLoss,
    NonfiniteGrad,
    GradExplosion,
    GradCollapse,
    LossSpike,
    LossCollapse,
    LossAtChance,
    NoProgress,
    ThroughputDrop,
    SessionError,
    Interrupted,
    EvalNonfiniteLoss,
    Overfitting,
    InvertedMetric,
    StuckMetric,
    MetricStuck,
    NoSignal,
)
# The kinds the record rules report (what `--severity` accepts).
RECORD_KINDS: tuple[str, ...] = tuple(dict.fromkeys(cls.kind for cls in RULE_ORDER))
# The kinds the watch judges on every poll rather than on a record (docs/WATCHDOG.md, "Rules on every poll").
POLL_DECLARATIONS: tuple[PollKind, ...] = (*LIVENESS_KINDS, *RANK_KINDS)


def _declared() -> dict[str, type[Rule] | PollKind]:
    out: dict[str, type[Rule] | PollKind] = {}
    everything: tuple[type[Rule] | PollKind, ...] = (*RULE_ORDER, *POLL_DECLARATIONS)
    for declared in everything:
        out.setdefault(declared.kind, declared)  # a kind's first rule declares it (the others inherit)
    return out


# Every kind the watchdog can report -> what declares it: a record rule's class or a `PollKind`,
# each with `kind`, `cls`, `severity` and `runbook`.
DECLARED: dict[str, type[Rule] | PollKind] = _declared()
# The kinds whose class is not `fatal`: what a relaunch can do about them.
CLASSES: dict[str, str] = {kind: d.cls for kind, d in DECLARED.items() if d.cls != FATAL}
# Kinds that warn by default (every other kind stops): a rising eval loss while the task metric
# still improves is a fine-tune's usual course; a log without a loss says nothing about the run.
DEFAULT_SEVERITY: dict[str, str] = {kind: d.severity for kind, d in DECLARED.items() if d.severity != STOP}


def verdict_class(kind: str | None) -> str | None:
    """The class of an anomaly kind (`fatal` for every kind not listed); None for no anomaly."""
    return None if kind is None else CLASSES.get(kind, FATAL)
