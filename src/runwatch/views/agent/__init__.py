"""What a coding agent supervises runs with: `runwatch mcp` (an MCP server) and `runwatch skill`.

    runwatch mcp [ROOT] [--act]     # MCP over stdio: list_runs, run_status, tail_records, check_run,
                                    # wait_for_verdict, explain, plan_run (+ launch_supervised, stop_run)
    runwatch skill                  # print the agent skill (SKILL.md)

    tools.py     the read-only tools as plain functions (each calls what its command calls)
    act.py       the tools that act, served only with --act
    tail.py      the last records of a run, in minimal-telemetry keys
    verdicts.py  final verdict, watching, or nothing watching: what wait_for_verdict decides on
    bound.py     every result as strict JSON within 8 KB
    server.py    the MCP binding (the official Python SDK, `runwatch[mcp]`, imported only here and in:)
    answers.py   a tool's result or its one-line error result
    waits.py     the tools that wait (wait_for_verdict, wait_for_event, check_run in a child)
    events.py    what happened to a run since a cursor (wait_for_event, `runwatch wait --events`)
    evidence.py  get_series, incident, compare_runs: the evidence in one call
    shell.py     every tool as a command: wait, tail, explain, runs, rules
    schemas.py   every tool's outputSchema
    supervising-training-runs/   the skill (SKILL.md, references/, evals/), shipped as package
                 data; the repository's skills/supervising-training-runs is a link to it

Everything but server.py, answers.py and waits.py is standard library only. See docs/MCP.md.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from ...errors import UsageError

INSTALL_HINT = "pip install 'runwatch[mcp]'"
# The skill's folder in the package, and its name (the Agent Skills spec: name = folder).
SKILL_NAME = "supervising-training-runs"


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


def _skill_files() -> list[tuple[str, bytes]]:
    """The skill's files as (path relative to its folder, content), SKILL.md first."""
    from importlib import resources  # here: every command builds the parser that names `skill`

    root = resources.files("runwatch.views.agent") / SKILL_NAME
    out: list[tuple[str, bytes]] = []

    def walk(node: Any, prefix: str) -> None:
        for child in sorted(node.iterdir(), key=lambda c: c.name):
            rel = f"{prefix}{child.name}"
            if child.is_dir():
                walk(child, rel + "/")
            elif child.name.endswith((".md", ".json")):
                out.append((rel, child.read_bytes()))

    walk(root, "")
    out.sort(key=lambda f: (f[0] != "SKILL.md", f[0]))
    return out


def skill_text() -> str:
    """The agent skill (SKILL.md), as shipped in the package."""
    return _skill_files()[0][1].decode("utf-8")


def install_skill(skills_dir: str) -> str:
    """Write the skill folder (SKILL.md, references, evals) into an agent's skills directory;
    return the folder written. An existing folder of that name is replaced as a whole."""
    import shutil
    import tempfile

    if os.path.exists(skills_dir) and not os.path.isdir(skills_dir):
        raise UsageError(f"skill --install: {skills_dir}: not a directory")
    os.makedirs(skills_dir, exist_ok=True)
    dest = os.path.join(skills_dir, SKILL_NAME)
    if os.path.islink(dest):
        raise UsageError(f"skill --install: {dest} is a symbolic link; remove it first")
    tmp = tempfile.mkdtemp(prefix=f".{SKILL_NAME}-", dir=skills_dir)
    try:
        for rel, data in _skill_files():
            path = os.path.join(tmp, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)
        if os.path.isdir(dest):
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


def add_skill_arguments(p: argparse.ArgumentParser) -> None:
    """`runwatch skill [--install DIR]`."""
    p.add_argument(
        "--install",
        default=None,
        metavar="DIR",
        help=f"write the skill folder ({SKILL_NAME}/: SKILL.md, references, evals) into DIR, an agent's"
        " skills directory (e.g. ~/.claude/skills)",
    )


def run_skill(args: argparse.Namespace) -> int:
    if args.install is not None:
        dest = install_skill(os.path.expanduser(args.install))
        files = len(_skill_files())
        print(f"wrote {dest} ({files} files)")
        return 0
    print(skill_text(), end="")
    return 0
