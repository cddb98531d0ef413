"""The watch's options (`runwatch watch`, `check`, `launch --watch`, `supervise`): the record
rules' (`rules.RuleOptions`), those of the kinds judged on every poll (`liveness.StallOptions`,
`liveness.PhaseOptions`, `rankrules.RankOptions`) and the watch's own, each declared once
(`options.option`) beside the code that reads it, and how a
command builds them: `runwatch.toml`'s [watch] table, then the rule options the run directory
recorded at launch (`launch.json`, `target.recorded_rule_options`), then the command line, each
over the one before. Standard library only.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from ..options import EXIT_CODE, FLAG, INT_1, POSITIVE, TEXT, TEXTS, build, given_options, option
from ..reading import recorded_rule_options
from .declaring import OptionGroup
from .liveness import PhaseLimits, PhaseOptions, StallOptions, parse_phase_limits
from .rankrules import RankOptions
from .rules import RuleOptions
from .verdict import parse_exit_codes

_WATCH = ("watch",)


@dataclass(frozen=True)
class LoopOptions(OptionGroup):
    """How often the watch polls."""

    poll: float = option(5.0, POSITIVE, "seconds between polls", metavar="S")


@dataclass(frozen=True)
class ProcessOptions(OptionGroup):
    """The training process a watch follows: which it is, when it is done, whether to stop it."""

    pid: int | None = option(
        None, INT_1, "the training process (default: RUN_DIR/pid when present)", none=True, metavar="PID"
    )
    done: str | None = option(None, TEXT, "a completion sentinel file, relative to RUN_DIR", none=True, metavar="FILE")
    stop_on_anomaly: bool = option(
        False, FLAG, "on an anomaly, stop the training: SIGTERM to its process group, SIGKILL after 30 s"
    )


# The bases are listed last group first (a dataclass takes its bases' fields from its last base to
# its first): the options read as `runwatch watch --help` and the docs table list them.
@dataclass(frozen=True)
class Options(PhaseOptions, RankOptions, ProcessOptions, StallOptions, LoopOptions, RuleOptions):
    """Every option of `runwatch watch`: the record rules' (RuleOptions), those of the kinds judged
    on every poll (`liveness`, `rankrules`, declared beside them) and the watch's own.

    One declaration per option (`options.option`): the flags, `runwatch.toml`, the validation and
    the docs table come from it. A bad value raises ConfigError naming the option.
    """

    exit_transient: int | None = option(
        None,
        EXIT_CODE,
        "exit N instead of 7 when the verdict is transient "
        "(75, EX_TEMPFAIL, for a requeue); check: for its first finding; "
        "shorthand of --exit-code transient=N",
        none=True,
        metavar="N",
        commands=("watch", "check"),
    )
    exit_code: tuple[str, ...] = option(
        (),
        TEXTS,
        "exit N when the run ends in CLASS: transient, divergence, fatal (default 7 each); "
        "supervise also preempted (75) and gave_up (7, a spent budget)",
        metavar="CLASS=N",
        commands=("watch", "check"),
        expect="a list of CLASS=N strings",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "_phase_limits", parse_phase_limits(self.stall_phase, self.stall, self.startup_grace))
        object.__setattr__(self, "_exit_codes", parse_exit_codes(self.exit_code, self.exit_transient))

    @property
    def exit_codes(self) -> dict[str, int]:
        """`--exit-code` and `--exit-transient` over the defaults: {class: exit status}."""
        return self.__dict__["_exit_codes"]  # type: ignore[no-any-return]

    @property
    def phase_limits(self) -> PhaseLimits:
        """`--stall-phase` over the defaults: seconds allowed inside each phase."""
        return self.__dict__["_phase_limits"]  # type: ignore[no-any-return]


def load_options(run_dir: str | None, given: dict[str, Any], *, command: str = "watch") -> Options:
    """Options from `run_dir/runwatch.toml` ([watch] table), then `given` (the command line) on top."""
    return build(Options, run_dir, given, command)  # type: ignore[no-any-return]


def options_from_args(args: argparse.Namespace, run_dir: str | None, command: str) -> Options:
    """The command line's options over those `run_dir` recorded at launch, over `runwatch.toml`'s,
    for `command` (given options win one by one)."""
    recorded = recorded_rule_options(run_dir, Options, command) if run_dir else {}
    return load_options(run_dir, {**recorded, **given_options(args, Options)}, command=command)
