"""How a rule declares itself, beside its code: the words every declaration uses.

A rule (a record rule's class, or a `PollKind` for a kind judged on every poll) declares the kind
it reports, that kind's verdict class, its default severity and its runbook entry (what it means,
what to do), and its options as an `OptionGroup` of `options.option(...)` fields:

    @dataclass(frozen=True)
    class LossCollapseOptions(OptionGroup):
        collapse_patience: int = option(5, INT_1, "loss_collapse: K consecutive ...", metavar="K",
                                        commands=RECORD_COMMANDS)

    class LossCollapse(Streak):
        kind = name = "loss_collapse"
        cls, severity = FATAL, STOP
        runbook = Runbook("... what it means", "... what to do")

`ruleset` collects the declarations into the tables (`CLASSES`, `DEFAULT_SEVERITY`, the record
kinds), `runbook` into the runbook, and `rules.RuleOptions` / `watchoptions.Options` are the option
groups put together: nothing is written twice. Standard library only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..options import Check, validate

# What a relaunch can do about each kind of anomaly (docs/WATCHDOG.md, "Verdict classes").
TRANSIENT = "transient"  # resume from the latest checkpoint: may well succeed
DIVERGENCE = "divergence"  # resume from a checkpoint saved before the trouble began: may succeed
FATAL = "fatal"  # a relaunch repeats it: a person must change the recipe, data or code

# What a finding does (docs/WATCHDOG.md, "Severities"): `stop` ends a watch, drives `supervise` and
# makes `check` exit 7; `warn` is reported and never acted on; `off` turns the rule off.
STOP, WARN, OFF = "stop", "warn", "off"
SEVERITIES = (STOP, WARN, OFF)

# The commands that replay the record rules over a log, and so take their options.
RECORD_COMMANDS = ("watch", "check", "plot")
# A share of something, such as `--metric-min` or `--progress-after`: a number in (0, 1].
FRACTION = Check("a number in (0, 1]", lambda v: type(v) in (int, float) and 0 < v <= 1)


class Runbook(NamedTuple):
    """A kind's runbook entry (docs/WATCHDOG.md, "Verdict → what to do")."""

    meaning: str  # what the finding means
    action: str  # what a person or an agent should do about it


@dataclass(frozen=True)
class PollKind:
    """A kind judged on every poll rather than on a record (`stall`, `rank_stall`, ...), declared
    beside the code that judges it, as a record rule's class declares its own."""

    kind: str
    cls: str
    severity: str
    runbook: Runbook


@dataclass(frozen=True)
class OptionGroup:
    """The options of one rule (or of the few rules that share them), declared beside its code.
    Validated on construction; a group with options that limit each other says how in
    `check_together`. `rules.RuleOptions` inherits every record rule's group."""

    def __post_init__(self) -> None:
        validate(self)
        check_groups(self)


def check_groups(opts: OptionGroup) -> None:
    """Every `check_together` that the groups of `opts` declare, in the order of its bases."""
    cls = type(opts)
    checks = _CHECKS.get(cls)
    if checks is None:  # found once per options class, not on every construction
        checks = _CHECKS[cls] = tuple(vars(g)["check_together"] for g in cls.__mro__ if "check_together" in vars(g))
    for check in checks:
        check(opts)


_CHECKS: dict[type, tuple[Callable[[Any], None], ...]] = {}
