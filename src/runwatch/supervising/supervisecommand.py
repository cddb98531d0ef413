"""The command line of `runwatch supervise RUN_DIR [watch options] [supervise options] -- CMD ...`:
its options (the watch's, the reading's and the supervisor's own, each defined once), the command
split from them, and the `Supervisor` they make (docs/SUPERVISE.md). Standard library only.
"""

from __future__ import annotations

import argparse
import os

from ..judging import Options, load_options
from ..options import add_command_arguments, add_flags, given_options, split_command
from ..procs import subreaper
from ..reading import read_options
from ..reading.readers import add_arguments as add_read_arguments
from .supervise import Supervisor
from .supervision import SuperviseOptions, load_supervise_options


def _declare(p: argparse.ArgumentParser) -> None:
    add_flags(p, Options, "watch", skip=("pid",))
    add_read_arguments(p, "supervise")  # --format, --pattern, --run, --log
    add_flags(p, SuperviseOptions, "supervise")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_command_arguments(p, _declare, "watch and supervise options")


def _split(args: argparse.Namespace) -> list[str]:
    return split_command(args, "supervise", _declare, dash_values=("--resume-args",))


def supervisor_from_args(args: argparse.Namespace) -> Supervisor:
    """The Supervisor `runwatch supervise ARGS` runs, every option validated (nothing started yet)."""
    cmd = _split(args)
    run_dir = os.path.abspath(args.run_dir)
    toml_dir = run_dir if os.path.isdir(run_dir) else None
    watch = load_options(toml_dir, given_options(args, Options), command="watch")
    opts = load_supervise_options(toml_dir, given_options(args, SuperviseOptions))
    return Supervisor(run_dir, cmd, watch, opts, read=read_options(args))


def run(args: argparse.Namespace) -> int:
    sup = supervisor_from_args(args)
    # The waiter of each attempt forks away from its launcher; as a subreaper this process adopts it,
    # so the training stays a descendant of the supervisor, inside a scheduler's job (Slurm's
    # proctrack/linuxproc follows the parent chain: a waiter re-parented to init would escape it).
    subreaper()
    return sup.run()
