"""A rule is one place: every kind the watchdog can report has its class, default severity,
runbook entry and options declared in the module that holds its code, and the tables drawn from
those declarations (`CLASSES`, `DEFAULT_SEVERITY`, `RECORD_KINDS`, the runbook, the options) read
as they always have."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pathlib
import re
import sys
import types

import pytest

from runwatch.judging import liveness, runbook
from runwatch.judging.declaring import DIVERGENCE, FATAL, STOP, TRANSIENT, WARN, OptionGroup, PollKind, Runbook
from runwatch.judging.rules import CLASSES, DEFAULT_SEVERITY, RECORD_KINDS, RULE_ORDER, RuleOptions
from runwatch.judging.ruleset import DECLARED, POLL_DECLARATIONS
from runwatch.judging.watchoptions import Options
from runwatch.options import markdown_table

JUDGING = pathlib.Path(liveness.__file__).parent

# Where the code of each poll kind is: the module that declares it, and a function of that module
# that judges it. `timeout` and `oom` are decided in the watch's loop (`--timeout` elapsed, the
# process's last lines) from what liveness provides; their declarations stay with liveness.
POLL_CODE = {
    "stall": ("runwatch.judging.liveness", "stall_finding"),
    "process_exit": ("runwatch.judging.liveness", "dead_rank"),
    "oom": ("runwatch.judging.liveness", "last_error"),
    "timeout": ("runwatch.judging.liveness", None),
    "rank_stall": ("runwatch.judging.rankrules", "rank_stall_finding"),
    "straggler": ("runwatch.judging.rankrules", "StragglerRule"),
}
# The options of the engines rather than of a rule: how to read the log, which kinds stop, and the
# watch's own loop, process and exit codes.
ENGINE_OPTIONS = {
    "runwatch.judging.rules": {"max_steps", "severity", "map"},
    "runwatch.judging.watchoptions": {"poll", "pid", "done", "stop_on_anomaly", "exit_transient", "exit_code"},
}


def _defining(cls: type, attr: str) -> type:
    """The class of `cls`'s MRO whose body defines `attr`."""
    return next(c for c in cls.__mro__ if attr in vars(c))


def test_every_kind_the_watchdog_reports_is_declared_once():
    assert sorted(DECLARED) == sorted(runbook.kinds())
    assert list(runbook.RUNBOOK) == [runbook.DONE, *runbook.TABLE_ORDER[1:]]
    assert sorted(runbook.TABLE_ORDER) == sorted([runbook.DONE, *DECLARED])
    for kind, d in DECLARED.items():
        assert d.kind == kind
        assert d.cls in (TRANSIENT, DIVERGENCE, FATAL), kind
        assert d.severity in (STOP, WARN), kind
        assert isinstance(d.runbook, Runbook) and d.runbook.meaning and d.runbook.action, kind


@pytest.mark.parametrize("rule", RULE_ORDER, ids=lambda r: r.name)
def test_a_record_rule_declares_its_kind_beside_its_code(rule):
    first = DECLARED[rule.kind]
    assert isinstance(first, type)
    # the kind's first rule declares everything in its own body, in the module of its `look`
    for attr in ("kind", "cls", "severity", "runbook"):
        assert attr in vars(_defining(first, attr)) and _defining(first, attr).__module__ == first.__module__
    assert _defining(first, "cls") is first and _defining(first, "runbook") is first
    assert _defining(first, "look").__module__ == first.__module__
    if rule is not first:  # a second rule of the kind (eval `nonfinite_loss`) inherits it, never restates it
        assert issubclass(rule, first)
        assert not {"kind", "cls", "severity", "runbook"} & set(vars(rule))
        assert "look" in vars(rule)


@pytest.mark.parametrize("kind", sorted(POLL_CODE))
def test_a_poll_kind_is_declared_beside_the_code_that_judges_it(kind):
    module, judge = POLL_CODE[kind]
    d = DECLARED[kind]
    assert isinstance(d, PollKind)
    homes = [  # the modules whose code constructs the declaration
        name
        for name in _judging_modules()
        if re.search(rf'= PollKind\(\s*"{kind}"', inspect.getsource(importlib.import_module(name)))
    ]
    assert homes == [module]
    assert any(v is d for v in vars(sys.modules[module]).values())
    if judge is not None:
        assert getattr(importlib.import_module(module), judge).__module__ == module
    assert [p.kind for p in POLL_DECLARATIONS] == list(runbook.POLL_KINDS)


def test_the_rank_monitor_reports_the_kinds_rankrules_declares():
    src = inspect.getsource(importlib.import_module("runwatch.judging.ranks"))
    assert "Finding(RANK_STALL.kind" in src and "Finding(STRAGGLER.kind" in src
    assert not re.search(r'Finding\("(rank_stall|straggler)"', src)


def _owner(field: str) -> type:
    owners = [c for c in Options.__mro__ if field in vars(c).get("__annotations__", {})]
    assert len(owners) == 1, (field, owners)
    return owners[0]


@pytest.mark.parametrize("field", [f.name for f in dataclasses.fields(Options)])
def test_an_option_is_declared_beside_the_rule_that_reads_it(field):
    owner = _owner(field)
    module = sys.modules[owner.__module__]
    if field in ENGINE_OPTIONS.get(module.__name__, set()):
        return
    assert issubclass(owner, OptionGroup) and owner is not RuleOptions and owner is not Options
    src = inspect.getsource(module)
    declared = {v.kind for v in vars(module).values() if isinstance(v, PollKind)}
    declared |= {v.kind for v in vars(module).values() if isinstance(v, type) and v in RULE_ORDER}
    helps = owner.__dataclass_fields__[field].metadata["help"]
    read_by_a_rule = re.search(rf"\bopts\.{field}\b", src) is not None
    named_by_help = any(re.search(rf"\b{k}\b", helps) for k in declared if isinstance(DECLARED[k], PollKind))
    assert read_by_a_rule or named_by_help, f"{field} in {module.__name__}"


def test_rule_options_are_the_rules_groups_in_the_order_of_before():
    names = [f.name for f in dataclasses.fields(RuleOptions)]
    assert names == [
        *("metric", "metric_chance", "metric_min", "metric_after_step"),
        *("chance_loss", "chance_after_step", "chance_patience", "chance_tolerance"),
        *("grad_factor", "grad_window", "grad_max", "grad_min", "grad_patience"),
        *("throughput_drop", "throughput_baseline_steps", "throughput_patience", "throughput_span"),
        *("spike_factor", "spike_window", "spike_patience", "spike_min_excess"),
        "collapse_patience",
        *("overfit_tolerance", "overfit_patience", "overfit_min_rise"),
        *("progress_after", "progress_after_records", "progress_window", "progress_min_drop"),
        "metric_min_gain",
        *("max_steps", "severity", "map"),
    ]
    watch = [f.name for f in dataclasses.fields(Options)][len(names) :]
    assert watch == [
        *("poll", "stall", "startup_grace", "timeout", "pid", "done", "stop_on_anomaly"),
        *("rank_stall", "straggler_factor", "straggler_patience", "stall_phase", "exit_transient", "exit_code"),
    ]
    opts = RuleOptions()
    assert (opts.spike_factor, opts.grad_window, opts.metric, opts.progress_after) == (3.0, 20, "auroc", 0.25)


def test_a_group_validates_on_its_own_and_in_the_whole():
    from runwatch.errors import ConfigError, UsageError
    from runwatch.judging.gradrules import GradOptions
    from runwatch.judging.lossrules import LossSpikeOptions

    with pytest.raises(ConfigError, match=r"^watch\.spike_factor must be a number > 1, got 0\.5$"):
        LossSpikeOptions(spike_factor=0.5)
    with pytest.raises(ConfigError, match=r"^watch\.grad_min must be < watch\.grad_max 1, got 2$"):
        GradOptions(grad_max=1.0, grad_min=2.0)
    with pytest.raises(ConfigError, match=r"^watch\.grad_min must be < watch\.grad_max 1, got 2$"):
        Options(grad_max=1.0, grad_min=2.0, metric_min=0.4)  # the groups' limits in the order of before
    with pytest.raises(UsageError, match=r"^watch\.map must be CANONICAL=SOURCE, got 'bad'$"):
        RuleOptions(map=("bad",), grad_max=1.0, grad_min=2.0)  # --map first


def test_the_derived_tables_read_as_before():
    assert CLASSES == {
        "process_exit": TRANSIENT,
        "stall": TRANSIENT,
        "rank_stall": TRANSIENT,
        "interrupted": TRANSIENT,
        "straggler": TRANSIENT,
        "nonfinite_loss": DIVERGENCE,
        "nonfinite_grad": DIVERGENCE,
        "loss_spike": DIVERGENCE,
        "grad_explosion": DIVERGENCE,
    }
    assert DEFAULT_SEVERITY == {"overfitting": WARN, "no_signal": WARN, "metric_stuck": WARN}
    record_kinds = ["invalid_log", "nonfinite_loss", "nonfinite_grad", "grad_explosion", "grad_collapse"]
    record_kinds += ["loss_spike", "loss_collapse", "loss_at_chance", "no_progress", "throughput_drop"]
    record_kinds += ["session_error", "interrupted", "overfitting", "inverted_metric", "stuck_metric"]
    assert list(RECORD_KINDS) == [*record_kinds, "metric_stuck", "no_signal"]
    assert runbook.POLL_KINDS == ("stall", "timeout", "process_exit", "oom", "rank_stall", "straggler")
    assert runbook.kinds() == [*RECORD_KINDS, *runbook.POLL_KINDS]
    rows = runbook.markdown_table().split("\n")
    assert len(rows) == 2 + 1 + len(DECLARED)
    assert rows[2].startswith("| `OK done` |  |  | the latest session ended normally, the `--done` sentinel")
    assert rows[4] == (
        "| `oom` | `fatal` | `stop` | the process died and the end of `stdout.log` shows an out-of-memory error "
        "| lower the batch size or sequence length first: the same recipe fails again |"
    )
    assert rows[-1] == (
        "| `invalid_log` | `fatal` | `stop` | a line of the log is not a valid record (not JSON, or failing the "
        "schema) | read the message (file and line); fix the log writer |"
    )
    assert runbook.explain("overfitting")["severity"] == WARN
    assert runbook.explain("straggler")["class"] == TRANSIENT
    table = markdown_table(RuleOptions, "check").split("\n")
    assert table[2] == (
        "| `--metric NAME` | auroc | the eval metric judged: metrics.NAME of a val record, eval_NAME in "
        "minimal telemetry |"
    )
    assert table[-1] == "| `--map CANONICAL=SOURCE` | none | read a minimal telemetry key from another key of the log |"
    watch = markdown_table(Options, "watch", without=RuleOptions).split("\n")
    assert watch[2] == "| `--poll S` | 5 | seconds between polls |"
    assert watch[3] == "| `--stall S` | 360 | stall: no new record for S seconds (outside a phase) |"


def _judging_modules() -> list[str]:
    return sorted(f"runwatch.judging.{p.stem}" for p in JUDGING.glob("*.py") if p.stem not in ("__init__", "watchdog"))


@pytest.mark.parametrize("name", _judging_modules())
def test_a_judging_module_holds_one_job_in_at_most_500_lines(name):
    module = importlib.import_module(name)
    assert isinstance(module, types.ModuleType) and module.__file__ is not None
    lines = pathlib.Path(module.__file__).read_text(encoding="utf-8").count("\n")
    assert lines <= 500, f"{name}: {lines} lines"
