"""The watchdog's record rules as an engine (docs/WATCHDOG.md, "Rules on records"): records in,
findings out.

The rules themselves are small classes beside their declarations and options (`ruleset` lists
them in order). `Rules` runs them in that order, reports a rule once when its condition starts to
hold and again only after it has cleared, and gives each finding its severity: `stop` (it ends a
watch and drives `supervise`) or `warn` (reported, never acted on). On one record it reports at
most the first stop and the first warning, in that order. Everything a rule remembers is plain JSON
(`state_dict()` / `load_state_dict()`), so a watch can be saved and resumed. `Replay` runs them
over every session of a log as it stands.

`RuleOptions` is every record rule's option group put together, with the engine's own reading
options (`--max-steps`, `--severity`, `--map`). Rules never print or exit: the watchdog decides
what a finding means. Standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..options import INT_1, TEXTS, option, validate
from ..reading import Record, parse_maps
from .declaring import FATAL, OFF, RECORD_COMMANDS, STOP, WARN, check_groups
from .declaring import SEVERITIES as SEVERITIES
from .evalrules import MetricOptions, MetricStuck, MetricStuckOptions, OverfittingOptions
from .gradrules import GradOptions
from .lossrules import LossAtChanceOptions, LossCollapseOptions, LossSpikeOptions
from .progress import NoProgress, NoProgressOptions, NoSignal
from .rulebase import REFERENCE_RECORDS, SessionFacts, Skip
from .rulebase import SKIP as SKIP
from .rulebase import Rule as Rule
from .rulebase import fmt_step as fmt_step
from .ruleset import CLASSES as CLASSES
from .ruleset import DEFAULT_SEVERITY as DEFAULT_SEVERITY
from .ruleset import RECORD_KINDS as RECORD_KINDS
from .ruleset import RULE_ORDER as RULE_ORDER
from .ruleset import verdict_class as verdict_class
from .throughput import ThroughputDrop as ThroughputDrop
from .throughput import ThroughputOptions


# The bases are listed last group first: a dataclass takes its bases' fields from its last base to
# its first, so the options read (in `--help`, runwatch.toml and the docs table) in the order
# metric, loss_at_chance, gradient, throughput, loss_spike, loss_collapse, overfitting, no_progress,
# metric_stuck, then the engine's own.
@dataclass(frozen=True)
class RuleOptions(
    MetricStuckOptions,
    NoProgressOptions,
    OverfittingOptions,
    LossCollapseOptions,
    LossSpikeOptions,
    ThroughputOptions,
    GradOptions,
    LossAtChanceOptions,
    MetricOptions,
):
    """What a replay of a log takes (`check`, `plot`, and `watch` on top): every record rule's
    option group (declared beside the rule) and how to read the log's keys. A bad value raises
    ConfigError naming the option."""

    max_steps: int | None = option(
        None,
        INT_1,
        "the run's max_steps, for no_progress (default: run.json's recipe, trainer_state.json's)",
        none=True,
        metavar="N",
        commands=RECORD_COMMANDS,
    )
    severity: tuple[str, ...] = option(
        (),
        TEXTS,
        "set a record rule's severity: stop (ends a watch, drives supervise), warn (reported only) "
        "or off (overfitting and no_signal warn, every other kind stops)",
        metavar="KIND=SEVERITY",
        commands=RECORD_COMMANDS,
        expect="a list of KIND=stop|warn|off strings",
    )

    map: tuple[str, ...] = option(
        (),
        TEXTS,
        "read a minimal telemetry key from another key of the log",
        metavar="CANONICAL=SOURCE",
        commands=(*RECORD_COMMANDS, "status"),
        expect="a list of CANONICAL=SOURCE strings",
    )

    def __post_init__(self) -> None:
        validate(self)
        check_groups(self)  # --map first, then the groups' limits on each other
        object.__setattr__(self, "_severities", parse_severities(self.severity))

    def check_together(self) -> None:
        """`--map` entries are CANONICAL=SOURCE."""
        parse_maps(self.map)

    @property
    def maps(self) -> dict[str, str]:
        """`--map` as {canonical: source}."""
        return parse_maps(self.map)

    @property
    def severities(self) -> dict[str, str]:
        """Every record kind's severity: the defaults, with `--severity` on top."""
        return self.__dict__["_severities"]  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class Finding:
    """One finding: its kind (docs/WATCHDOG.md), the step of the triggering record, a message, and
    its severity (`stop` or `warn`)."""

    kind: str
    step: int | float
    message: str
    session: str | None = None
    onset: int | float | None = None  # the step of the streak's first record (None: `step`)
    severity: str = STOP

    def line(self, prefix: str | None = None) -> str:
        """`ANOMALY <kind> step=N: <message>` (`WARNING` for a warning; or with `prefix`)."""
        if prefix is None:
            prefix = "WARNING" if self.severity == WARN else "ANOMALY"
        return f"{prefix} {self.kind} step={fmt_step(self.step)}: {self.message}"

    @property
    def cls(self) -> str:
        """The verdict class of the kind: `transient`, `divergence` or `fatal`."""
        return verdict_class(self.kind) or FATAL

    @property
    def stops(self) -> bool:
        return self.severity == STOP

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "severity": self.severity,
            "class": self.cls,
            "step": self.step,
            "onset": self.step if self.onset is None else self.onset,
            "message": self.message,
            "session": self.session,
        }


def parse_severities(items: Iterable[str]) -> dict[str, str]:
    """`["overfitting=stop"]` over the defaults → every record kind's severity; ConfigError if bad."""
    out = {kind: DEFAULT_SEVERITY.get(kind, STOP) for kind in RECORD_KINDS}
    for item in items:
        kind, eq, value = item.partition("=")
        if not eq or value not in SEVERITIES:
            raise ConfigError(f"watch.severity must be KIND=stop|warn|off, got {item!r}")
        if kind not in out:
            raise ConfigError(
                f"watch.severity: {kind!r} is not a record rule's kind (expected one of {', '.join(RECORD_KINDS)})"
            )
        out[kind] = value
    return out


_NONE: tuple[Finding, ...] = ()
_RECORD_KINDS = ("train", "eval", "checkpoint", "end", "fatal", "invalid", "other", "eval values")


class Rules:
    """All record rules of one session, run in order; `observe` returns its findings (at most the
    first stop and the first warning). `live`: a watch (`no_signal` after 50 records); else a
    replay, whose `Replay.finish` judges the log as a whole at its end."""

    def __init__(
        self, opts: Any, start_step: int | float | None = None, *, max_steps: int | None = None, live: bool = False
    ) -> None:
        self.opts = opts
        self.live = live
        self._learner: Rules | None = None  # the rules of the sessions a watch skips (`learn`)
        self.session: str | None = None  # the session a learner is in
        severities = getattr(opts, "severities", None) or parse_severities(())
        self.severity = severities
        self.reset(start_step, max_steps)

    def reset(self, start_step: int | float | None = None, max_steps: int | None = None) -> None:
        """A new session: every window, counter and best-so-far value starts over, unless it resumes
        the run (its first step past the previous session's first, not past its last): `inherit`."""
        last = getattr(self, "last_step", None)
        self._previous: dict[str, Any] | None = None
        if last is not None:
            self._previous = {"state": self.state_dict(), "first": self.first_step, "last": last}
        self._reset(start_step, max_steps)

    def _reset(self, start_step: int | float | None, max_steps: int | None) -> None:
        self.start_step = start_step
        given = getattr(self.opts, "max_steps", None)
        self.facts = facts = SessionFacts(start_step, given if given is not None else max_steps)
        self.rules: list[Rule] = [cls(self.opts, facts) for cls in RULE_ORDER]
        self.active: list[bool] = [False] * len(self.rules)
        sev = self.severity
        off = {r.name for r in self.rules if sev[r.kind] == OFF}
        if getattr(self.opts, "chance_loss", None) is None:
            off.add("loss_at_chance")
        if not self.live:
            off.add("no_signal")  # a replay judges the whole log at its end (Replay.finish)
        self._stops = [sev[r.kind] == STOP for r in self.rules]
        # (index, bound `look`, rule) of the rules that look at each record kind
        by_kind: dict[str, list[tuple[int, Callable[[Record], Any], Rule]]] = {}
        for kind in _RECORD_KINDS:
            by_kind[kind] = [
                (i, r.look, r) for i, r in enumerate(self.rules) if kind in r.looks_at and r.name not in off
            ]
        self._by_kind = by_kind
        signal = next(r for r in self.rules if isinstance(r, NoSignal))
        self._signal = None if signal.name in off else signal
        self._final: list[tuple[int, NoProgress | MetricStuck]] = [
            (i, r) for i, r in enumerate(self.rules) if r.name not in off and isinstance(r, (NoProgress, MetricStuck))
        ]
        self.last_step: int | float | None = None  # of the session's last train record
        self.first_step: int | float | None = None  # of the run's first train record on this path

    def inherit(self, previous: dict[str, Any]) -> None:
        """Take what the rules learned of the run before this session (`state_dict()` of the session
        it resumes): reference loss, first and latest losses, throughput baseline, windows. Streaks
        and what was reported start over; the session's own start and max_steps stay."""
        start, max_steps = self.start_step, self.facts.max_steps
        self.load_state_dict(previous)
        self._previous = None
        self.start_step = self.facts.start_step = start if start is not None else previous.get("start_step")
        if max_steps is not None:
            self.facts.max_steps = max_steps
        self.active = [False] * len(self.rules)
        self.last_step = None
        for rule in self.rules:
            rule.resumed()

    def learn(self, rec: Record, start_step: int | float | None, max_steps: int | None) -> None:
        """A record of a session that a later one replaced (a watch catching up on a run): the rules
        learn the run's history from it, its findings dropped; the session judged inherits it."""
        eng = self._learner
        if eng is None or eng.session != rec.session:
            eng = self._learner = eng or Rules(self.opts)
            eng.reset(start_step, max_steps)
            eng.session = rec.session
        eng.observe(rec)

    def observe(self, rec: Record) -> tuple[Finding, ...]:
        """Apply the rules to `rec`: the first stop and the first warning whose condition started here."""
        if self._learner is not None:  # the history learned before this session: what it resumes
            eng, self._learner = self._learner, None
            if eng.last_step is not None:
                self._previous = {"state": eng.state_dict(), "first": eng.first_step, "last": eng.last_step}
        if self._previous is not None:
            prev, self._previous = self._previous, None
            start = self.start_step if self.start_step is not None else rec.step
            if prev["first"] is not None and prev["first"] < start <= prev["last"]:
                self.inherit(prev["state"])
        stop: Finding | None = None
        warn: Finding | None = None
        active = self.active
        rules = self._by_kind[rec.kind]
        if rec.eval_loss is not None or rec.metrics or rec.kind == "eval":
            rules = rules + self._by_kind["eval values"]
        for i, look, rule in rules:
            msg = look(rec)
            if isinstance(msg, Skip):
                continue
            if msg is None:
                active[i] = False
            elif not active[i]:
                active[i] = True
                if self._stops[i] and not rule.mild:
                    if stop is None:
                        stop = Finding(rule.kind, rec.step, msg, rec.session, rule.onset(rec))
                elif warn is None:
                    warn = Finding(rule.kind, rec.step, msg, rec.session, rule.onset(rec), WARN)
        if rec.kind == "train":
            self.last_step = rec.step
            if self.first_step is None:
                self.first_step = rec.step
            loss = rec.loss
            if self._signal is not None and loss is not None:
                self._signal.loss_seen = True
                self._signal = None
            facts = self.facts
            if len(facts.first) < REFERENCE_RECORDS and loss is not None and math.isfinite(loss):
                facts.add_loss(loss)
        if stop is None and warn is None:
            return _NONE
        if warn is None:
            return (stop,)  # type: ignore[return-value]
        return (warn,) if stop is None else (warn, stop)

    def finish(
        self, session: str | None = None, step: int | float | None = None, *, commit: bool = True
    ) -> list[Finding]:
        """The findings of the session judged once more on its whole length (a replay's end).
        `commit=False`: a preview (the log may go on), which leaves the rules as they were."""
        out: list[Finding] = []
        at = self.last_step if self.last_step is not None else step
        for i, rule in self._final:
            if self.active[i] or at is None:
                continue
            msg = rule.final()
            if msg is not None:
                if commit:
                    self.active[i] = True
                severity = STOP if self._stops[i] else WARN
                out.append(Finding(rule.kind, at, msg, session, rule.onset_step, severity))
        return out

    def state_dict(self) -> dict[str, Any]:
        """Every rule's memory as plain JSON."""
        return {
            "start_step": self.start_step,
            "max_steps": self.facts.max_steps,
            "facts": self.facts.state_dict(),
            "last_step": self.last_step,
            "first_step": self.first_step,
            "previous": self._previous,
            "rules": {r.name: {"active": a, **r.state_dict()} for r, a in zip(self.rules, self.active)},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore `state_dict()` (same options)."""
        self._reset(state["start_step"], state.get("max_steps"))
        self._previous = state.get("previous")
        self.facts.load_state_dict(state.get("facts") or {})
        self.last_step = state.get("last_step")
        self.first_step = state.get("first_step")
        for i, rule in enumerate(self.rules):
            s = state["rules"].get(rule.name)
            if s is None:  # a rule added since the state was saved starts fresh
                continue
            self.active[i] = bool(s["active"])
            rule.load_state_dict(s)


class Replay:
    """The rules of every session of a log as it stands (`check`, `plot`, `smoke`): each session is
    judged on its own, from its first record, by its own `Rules`; `finish` judges what is judged at
    the end (each session's whole length, and the log's signal)."""

    def __init__(
        self,
        opts: Any,
        start_step: Callable[[str], int | None] | None = None,
        max_steps: Callable[[str], int | None] | None = None,
    ) -> None:
        self.opts = opts
        self.start_step = start_step or (lambda session: None)
        self.max_steps = max_steps or (lambda session: None)
        self.engines: dict[str, Rules] = {}
        self.signal = NoSignal(opts, limit=None)
        self.last: Record | None = None

    def engine(self, session: str) -> Rules:
        """The rules of `session` (created at its first record; one that resumes the run inherits)."""
        eng = self.engines.get(session)
        if eng is None:
            before = self.engines.get(self.last.session) if self.last is not None else None
            eng = self.engines[session] = Rules(self.opts, self.start_step(session), max_steps=self.max_steps(session))
            eng._learner = before  # what the rules learned of the session before it
        return eng

    def observe(self, rec: Record) -> tuple[Finding, ...]:
        eng = self.engine(rec.session)
        self.last = rec
        signal = self.signal
        if not signal.loss_seen and rec.kind != "invalid":
            signal.look(rec)
        return eng.observe(rec)

    def finish(self, step: int | float | None = None, *, commit: bool = True) -> list[Finding]:
        """What the end of the log decides: `no_progress` of each session on its whole length, and
        `no_signal` when no record gave a train loss. `step`: the step the log reached.
        `commit=False`: what the end would decide now, the replay left as it was (it goes on)."""
        out: list[Finding] = []
        for session, eng in self.engines.items():
            out.extend(eng.finish(session, step, commit=commit))
        severities: dict[str, str] = getattr(self.opts, "severities", DEFAULT_SEVERITY)
        severity = severities.get("no_signal", WARN)
        msg = self.signal.final()
        if msg is not None and severity != OFF:
            last = self.last.session if self.last is not None else None
            out.append(Finding("no_signal", step if step is not None else 0, msg, last, None, severity))
        return out


def replay(records: Iterable[Record], opts: Any, start_steps: dict[str, int | None] | None = None) -> list[Finding]:
    """Every finding of `records` (all sessions; a new session restarts the rules), then those of the end."""
    r = Replay(opts, (start_steps or {}).get)
    out: list[Finding] = []
    step: int | float | None = None
    for rec in records:
        out.extend(r.observe(rec))
        if rec.kind != "invalid":
            step = rec.step
    return out + r.finish(step)
