"""The `runwatch` command line: one sub-command a module, exit codes decided here alone.

Each sub-command is registered by a small `_add_<name>` function that declares its options and
names the function that runs it; heavy modules are imported only when their command runs.

Exit codes (runwatch.errors; docs/FORMAT.md, "Exit codes"): 0 success, 1 invalid input or failure,
2 usage, 7 anomaly (watch/check) or gave up (supervise), 75 preempted (supervise), 130 Ctrl-C;
`--exit-code CLASS=N` sets the codes of outcomes (runwatch.judging.verdict.exit_status). `run_guarded` maps exceptions to them, for `runwatch` and for
the standalone summary script alike.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import TypeAlias

from .errors import run_guarded as run_guarded
from .options import Parser

# What `build_parser` hands each `_add_<name>`: its sub-command parsers (a string: argparse's class is
# generic for type checkers only).
_Subcommands: TypeAlias = "argparse._SubParsersAction[Parser]"


def _run_summarize(args: argparse.Namespace) -> int:
    from .judging import summary

    return summary.run(args)


def _add_summarize(sub: _Subcommands) -> None:
    from .judging.summary import add_arguments

    p = sub.add_parser("summarize", help="validate a run's latest session; print the acceptance summary (JSON)")
    add_arguments(p)
    p.set_defaults(func=_run_summarize)


def _add_watch(sub: _Subcommands) -> None:
    from .judging import watchcommands

    p = sub.add_parser("watch", help="follow a run; exit 7 on the first anomaly, 0 on completion")
    watchcommands.add_arguments(p, "watch")
    p.add_argument(
        "--json", action="store_true", help="print the verdict as JSON (watchdog.json's keys) before its line"
    )
    p.set_defaults(func=lambda args: watchcommands.run_watch(args))


def _add_check(sub: _Subcommands) -> None:
    from .judging import watchcommands

    p = sub.add_parser("check", help="replay the watchdog's record rules over a log as it stands")
    watchcommands.add_arguments(p, "check")
    p.add_argument("--json", action="store_true", help="print the findings as JSON")
    p.set_defaults(func=lambda args: watchcommands.run_check(args))


def _add_status(sub: _Subcommands) -> None:
    from .views import status

    p = sub.add_parser("status", help="one short check-in on a run: step, loss, rate, ETA, process, GPUs")
    status.add_arguments(p)
    p.set_defaults(func=lambda args: status.run(args))


def _add_launch(sub: _Subcommands) -> None:
    from .supervising import launch

    p = sub.add_parser("launch", help="start a training command detached, logging to RUN_DIR; optionally watch it")
    launch.add_arguments(p)
    p.set_defaults(func=lambda args: launch.run(args))


def _add_supervise(sub: _Subcommands) -> None:
    from .supervising import supervisecommand

    p = sub.add_parser(
        "supervise", help="launch a training and keep it alive: relaunch, roll back, or give up (exit 7)"
    )
    supervisecommand.add_arguments(p)
    p.set_defaults(func=lambda args: supervisecommand.run(args))


def _add_goodput(sub: _Subcommands) -> None:
    from .supervising import goodput

    p = sub.add_parser(
        "goodput", help="where a supervised run's wall time went: productive training and each loss; checkpoint advice"
    )
    goodput.add_arguments(p)
    p.set_defaults(func=lambda args: goodput.run(args))


def _run_demo(args: argparse.Namespace) -> int:
    from . import demo

    return demo.run(args)


def _add_demo(sub: _Subcommands) -> None:
    p = sub.add_parser("demo", help="a tiny real training on the CPU, supervised end to end")
    p.add_argument("--dir", default=None, metavar="DIR", help="where to put the run (default: a new temporary folder)")
    p.add_argument("--steps", type=int, default=None, help="training steps (default 600; 300 with --framework hf)")
    p.add_argument(
        "--inject",
        choices=("nan", "stall", "crash", "slowdown", "explode"),
        default=None,
        help="run with this fault and show the watchdog catching it",
    )
    p.add_argument(
        "--framework",
        choices=("torch", "hf"),
        default="torch",
        help="a plain PyTorch loop (default) or a Hugging Face Trainer",
    )
    p.set_defaults(func=_run_demo)


def _add_plot(sub: _Subcommands) -> None:
    from .views import plot

    p = sub.add_parser("plot", help="draw a PNG snapshot of a run (needs runwatch[plot])")
    plot.add_arguments(p)
    p.set_defaults(func=lambda args: plot.run(args))


def _add_tensorboard(sub: _Subcommands) -> None:
    from .views import tensorboard

    p = sub.add_parser("tensorboard", help="export a run as TensorBoard event files (needs runwatch[tensorboard])")
    tensorboard.add_arguments(p)
    p.set_defaults(func=lambda args: tensorboard.run(args))


def _add_serve(sub: _Subcommands) -> None:
    from .views import serve

    p = sub.add_parser("serve", help="a read-only web page of every run under a folder, updating live")
    serve.add_arguments(p)
    p.set_defaults(func=lambda args: serve.run(args))


def _add_mcp(sub: _Subcommands) -> None:
    from .views import agent

    p = sub.add_parser(
        "mcp", help="an MCP server over stdio: runwatch's facts, verdicts and actions as tools (runwatch[mcp])"
    )
    agent.add_arguments(p)
    p.set_defaults(func=agent.run)
    p = sub.add_parser("skill", help="print the agent skill: how to supervise training runs with runwatch")
    agent.add_skill_arguments(p)
    p.set_defaults(func=agent.run_skill)


def _add_agent_shell(sub: _Subcommands) -> None:
    """The MCP tools as commands: wait, tail, explain, runs, series, incident, compare; and `rules`."""
    from .views.agent import shell

    for name, add, run, help_text in (
        (
            "wait",
            shell.add_wait_arguments,
            shell.run_wait,
            "wait for a run's final verdict (exit 0 done, 7 stop/gave up, 75 preempted, 3 timed out) or, with"
            " --events, for its next events",
        ),
        ("tail", shell.add_tail_arguments, shell.run_tail, "the last records of a run in minimal-telemetry keys"),
        ("explain", shell.add_explain_arguments, shell.run_explain, "what a verdict kind means and what to do"),
        ("runs", shell.add_runs_arguments, shell.run_runs, "every run under a folder: verdict, step, loss, warnings"),
        (
            "series",
            shell.add_series_arguments,
            shell.run_series,
            "a run's series in buckets that keep min, max and last, non-finite values counted",
        ),
        (
            "incident",
            shell.add_incident_arguments,
            shell.run_incident,
            "why a run stopped: the verdict, the records around its onset, the output's end, checkpoints, argv",
        ),
        (
            "compare",
            shell.add_compare_arguments,
            shell.run_compare,
            "what differs between runs: recipe, argv, git, data",
        ),
        ("rules", shell.add_rules_arguments, shell.run_rules, "every rule: its options, defaults, severity and class"),
    ):
        p = sub.add_parser(name, help=help_text)
        add(p)
        p.set_defaults(func=run)


def _brief_rule_help(p: argparse.ArgumentParser, command: str) -> None:
    """`--help` of a command that judges: the rules' options named in one line that points to
    `runwatch rules`, instead of one paragraph each (they still parse as before)."""
    from .views import rule_option_names

    names = set(rule_option_names("check" if command == "check" else "watch"))
    shown = []
    for action in p._actions:
        flag = next((o for o in action.option_strings if o.startswith("--")), None)
        if flag in names:
            action.help = argparse.SUPPRESS
            shown.append(flag)
    if shown:
        p.formatter_class = argparse.RawDescriptionHelpFormatter  # the epilog stays one line
        p.epilog = (
            f"rule options (each rule's options, defaults, severity and class: runwatch rules): {', '.join(shown)}"
        )


def _add_preflight(sub: _Subcommands) -> None:
    from .preflight import audit, bench, plan, smoke, subsample

    for name, module, help_text in (
        ("bench", bench, "launch a job, time its first updates, stop it; steady samples/s to RUN_DIR/bench.json"),
        (
            "plan",
            plan,
            "project a long run's time from a bench or a short run; exit 1 if it does not fit, 2 if it cannot",
        ),
        ("subsample", subsample, "draw N rows of a data set, per value of a field in proportion or balanced"),
        (
            "audit-data",
            audit,
            "check every row of a corpus in parallel; exit 1 when any row was rejected",
        ),
        (
            "smoke",
            smoke,
            "the verdict on a smoke run: SMOKE PASS (exit 0), SMOKE FAIL: <checks> (exit 1), SMOKE CANNOT JUDGE (exit 2)",
        ),
    ):
        p = sub.add_parser(name, help=help_text)
        module.add_arguments(p)
        p.set_defaults(func=module.run)


_COMMANDS: list[Callable[[_Subcommands], None]] = [
    _add_summarize,
    _add_demo,
    _add_watch,
    _add_check,
    _add_status,
    _add_launch,
    _add_supervise,
    _add_goodput,
    _add_plot,
    _add_tensorboard,
    _add_preflight,
    _add_serve,
    _add_mcp,
    _add_agent_shell,
]


def build_parser() -> argparse.ArgumentParser:
    """The full parser (used by `main` and the docs)."""
    from .version import __version__

    parser = Parser(prog="runwatch", description="Supervise long training runs.")
    parser.add_argument("--version", action="version", version=f"runwatch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    for add in _COMMANDS:
        add(sub)
    for name in ("watch", "check", "launch", "supervise"):
        _brief_rule_help(sub.choices[name], name)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run `runwatch` with `argv` (default: sys.argv[1:]); return the exit status."""

    def command() -> int:
        args = build_parser().parse_args(argv)
        return int(args.func(args))

    return run_guarded(command)
