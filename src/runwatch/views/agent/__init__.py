"""What a coding agent supervises runs with: `runwatch mcp` (an MCP server) and `runwatch skill`.

    runwatch mcp [ROOT] [--act]     # MCP over stdio: list_runs, run_status, tail_records, check_run,
                                    # wait_for_verdict, explain, plan_run (+ launch_supervised, stop_run)
    runwatch skill                  # print the agent skill (SKILL.md)

    tools.py     the read-only tools as plain functions (each calls what its command calls)
    act.py       the tools that act, served only with --act
    tail.py      the last records of a run, in minimal-telemetry keys
    verdicts.py  final verdict, watching, or nothing watching: what wait_for_verdict decides on
    bound.py     every result as strict JSON within 8 KB
    server.py    the MCP binding (the official Python SDK, `runwatch[mcp]`, imported only here)
    SKILL.md     the skill, shipped as package data (a copy of skills/supervising-training-runs/SKILL.md)

Everything but server.py is standard library only. See docs/MCP.md.
"""

from __future__ import annotations

import argparse
import os

from ...errors import UsageError

__all__ = ["add_arguments", "run", "add_skill_arguments", "run_skill", "skill_text", "INSTALL_HINT"]

INSTALL_HINT = "pip install 'runwatch[mcp]'"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "root",
        metavar="ROOT",
        nargs="?",
        default=None,
        help="the folder every run path is confined to (default: the working directory)",
    )
    p.add_argument(
        "--act",
        action="store_true",
        help="also serve launch_supervised and stop_run (without it nothing is started, stopped or written)",
    )


def run(args: argparse.Namespace) -> int:
    root = args.root if args.root is not None else os.getcwd()
    if not os.path.isdir(root):
        raise UsageError(f"mcp: {root}: no such folder")
    try:
        import mcp  # noqa: F401 - the optional extra, only to say how to install it
    except ImportError:
        raise UsageError(f"runwatch mcp needs the MCP Python SDK: {INSTALL_HINT}") from None
    from .server import serve_stdio

    serve_stdio(root, act_tools=args.act)
    return 0


def skill_text() -> str:
    """The agent skill, as shipped in the package."""
    from importlib import resources  # here: every command builds the parser that names `skill`

    return (resources.files("runwatch.views.agent") / "SKILL.md").read_text(encoding="utf-8")


def add_skill_arguments(p: argparse.ArgumentParser) -> None:
    """`runwatch skill` takes no options."""


def run_skill(args: argparse.Namespace) -> int:
    print(skill_text(), end="")
    return 0
