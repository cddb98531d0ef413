"""The `runwatch` command line: one sub-command a module, exit codes decided here alone.

Each sub-command is registered by a small `_add_<name>` function that declares its options and
names the function that runs it; heavy modules are imported only when their command runs.

Exit codes (SPEC §4): 0 success, 1 invalid input or failure, 2 usage, 7 anomaly (watch/check).
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable, Sequence

from .errors import InvalidRunError, RunwatchError, UsageError

__all__ = ["main", "build_parser"]

EXIT_OK = 0
EXIT_FAIL = 1
EXIT_USAGE = 2
EXIT_ANOMALY = 7


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of exiting, so `main(argv)` returns codes."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def _run_summarize(args: argparse.Namespace) -> int:
    from . import summary

    return summary.run(args)


def _add_summarize(sub: argparse._SubParsersAction) -> None:
    from .summary import add_arguments

    p = sub.add_parser("summarize", help="validate a run's latest session; print the acceptance summary (JSON)")
    add_arguments(p)
    p.set_defaults(func=_run_summarize)


def _run_demo(args: argparse.Namespace) -> int:
    from . import demo

    return demo.run(args)


def _add_demo(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="a tiny real training on the CPU, supervised end to end")
    p.add_argument("--dir", default=None, metavar="DIR", help="where to put the runs (default: a new temporary folder)")
    p.add_argument("--steps", type=int, default=600, help="training steps of the run (default 600)")
    p.set_defaults(func=_run_demo)


def _add_preflight(sub: argparse._SubParsersAction) -> None:
    from . import audit, plan, smoke

    for name, module, help_text in (
        ("plan", plan, "project a long run's time from a short run's steady throughput; exit 1 if it does not fit"),
        ("audit-data", audit, "check every row of a corpus in parallel; keep raw and normalized variants aligned"),
        ("smoke", smoke, "the verdict on a smoke run: SMOKE PASS (exit 0) or SMOKE FAIL: <checks> (exit 1)"),
    ):
        p = sub.add_parser(name, help=help_text)
        module.add_arguments(p)
        p.set_defaults(func=module.run)


_COMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [
    _add_summarize,
    _add_demo,
    _add_preflight,
]


def build_parser() -> argparse.ArgumentParser:
    """The full parser (used by `main` and the docs)."""
    from . import __version__

    parser = _Parser(prog="runwatch", description="Supervise long training runs.")
    parser.add_argument("--version", action="version", version=f"runwatch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for add in _COMMANDS:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run `runwatch` with `argv` (default: sys.argv[1:]); return the exit status."""
    try:
        args = build_parser().parse_args(argv)
        return int(args.func(args))
    except SystemExit as exc:  # --help, --version
        return exc.code if isinstance(exc.code, int) else 0
    except UsageError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_USAGE
    except InvalidRunError as exc:
        print(f"Invalid training run: {exc}", file=sys.stderr)
        return EXIT_FAIL
    except RunwatchError as exc:
        print(f"runwatch: {exc}", file=sys.stderr)
        return EXIT_FAIL
    except KeyboardInterrupt:
        print("runwatch: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `runwatch ... | head`
        return EXIT_FAIL
