"""The command lines of `runwatch watch` (a `Watcher` until its verdict) and `runwatch check` (the
replay of a log as it stands): their options (`add_arguments`, shared with `launch`), the verdict
or the findings printed, the exit status (docs/WATCHDOG.md). Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from ..errors import UsageError
from ..options import add_flags
from ..reading import read_options, resolve_target
from ..reading.readers import add_arguments as add_read_arguments
from .replay import CheckResult, check
from .verdict import exit_status
from .watchdog import Options, Watcher
from .watchoptions import options_from_args


def add_arguments(p: argparse.ArgumentParser, command: str) -> None:
    """The options of `runwatch watch` (all), `check` (the record rules' and --map), or `launch`."""
    if command != "launch":
        p.add_argument("target", metavar="RUN_DIR|FILE", help="a run directory, a JSONL log or a trainer_state.json")
    add_flags(p, Options, "check" if command == "check" else "watch", skip=("pid",) if command == "launch" else ())
    if command != "launch":
        add_read_arguments(p)  # --format, --pattern, --run (readers.ReadOptions)


def run_watch(args: argparse.Namespace) -> int:
    read = read_options(args)
    run_dir = resolve_target(args.target, read).run_dir
    opts = options_from_args(args, run_dir, "watch")
    v = Watcher(args.target, opts, read=read).run()
    if getattr(args, "json", False):
        print(json.dumps(v.to_json(), indent=2, allow_nan=False))
    print(v.line(), flush=True)
    return exit_status(v.outcome, opts.exit_codes)


def check_from_args(args: argparse.Namespace) -> tuple[CheckResult, Options]:
    """`runwatch check`'s replay from its parsed command line: the result and the options used."""
    if not os.path.exists(args.target):
        raise UsageError(f"check: {args.target}: no such run directory or log")
    read = read_options(args)
    opts = options_from_args(args, resolve_target(args.target, read).run_dir, "check")
    return check(args.target, opts, read), opts


def run_check(args: argparse.Namespace) -> int:
    result, opts = check_from_args(args)
    for note in result.notes:
        print(f"runwatch check: {note}", file=sys.stderr)
    if isinstance(result.torn_line, str):
        print(f"runwatch check: left out {result.torn_line} (not complete yet)", file=sys.stderr)
    elif result.torn_line is not None:
        print(f"runwatch check: left out the torn last line {result.torn_line} (no newline yet)", file=sys.stderr)
    if getattr(args, "json", False):
        print(json.dumps(result.to_json(), indent=2, allow_nan=False))
    else:
        for line in result.lines():
            print(line)
    return exit_status(result.outcome, opts.exit_codes)
