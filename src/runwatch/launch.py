"""`runwatch launch RUN_DIR [--watch] [watch options] -- CMD ...`: start a training detached.

The command runs in its own session and process group, stdin from /dev/null, stdout and stderr
appended to `RUN_DIR/stdout.log`, with the environment a supervised run wants (unbuffered output,
no progress bars, `RUNWATCH_RUN_DIR`). Its pid goes to `RUN_DIR/pid`, how it was started to
`RUN_DIR/launch.json` (both atomically). With `--watch` the watchdog then follows it in the
foreground: exit 7 on an anomaly, 0 on completion. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import time
from collections.abc import Sequence
from typing import Any

from .errors import UsageError
from .journal import atomic_write_text
from .options import add_command_arguments, split_command
from .process import alive, read_pid_file

__all__ = ["launch", "LAUNCH_ENV", "add_arguments", "run"]

# Added to the command's environment: line-buffered logs, no progress bars in stdout.log,
# quiet transformers, no tokenizers fork warnings, and where the run directory is.
LAUNCH_ENV = {
    "PYTHONUNBUFFERED": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "TOKENIZERS_PARALLELISM": "false",
}


def launch(run_dir: str, cmd: Sequence[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Start `cmd` detached for `run_dir`; return what went to launch.json (with `pid`, `pgid`)."""
    if not cmd:
        raise UsageError("launch: no command given (runwatch launch RUN_DIR -- CMD ...)")
    run_dir = os.path.abspath(os.fspath(run_dir))
    try:
        os.makedirs(run_dir, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"launch: cannot create {run_dir}: {exc.strerror or exc}") from None
    old = read_pid_file(os.path.join(run_dir, "pid"))
    if old is not None and alive(old):
        raise UsageError(f"launch: {run_dir}: the process {old} launched there is still running")
    added = dict(LAUNCH_ENV, RUNWATCH_RUN_DIR=run_dir)
    full_env = dict(os.environ if env is None else env)
    full_env.update(added)
    out_path = os.path.join(run_dir, "stdout.log")
    out_fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(out_fd, f"--- runwatch launch {time.strftime('%Y-%m-%dT%H:%M:%S%z')}: {' '.join(cmd)}\n".encode())
        null_fd = os.open(os.devnull, os.O_RDONLY)
        try:
            # posix_spawn: no Python object left to warn about a still-running child; setsid puts
            # the command in its own session and process group (pgid == pid), so the watchdog can
            # stop the whole group and a terminal's Ctrl-C does not reach it.
            pid = os.posix_spawnp(
                cmd[0],
                list(cmd),
                full_env,
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, null_fd, 0),
                    (os.POSIX_SPAWN_DUP2, out_fd, 1),
                    (os.POSIX_SPAWN_DUP2, out_fd, 2),
                ],
                setsid=True,
            )
        except OSError as exc:
            raise UsageError(f"launch: cannot start {cmd[0]!r}: {exc.strerror or exc}") from None
        finally:
            os.close(null_fd)
    finally:
        os.close(out_fd)
    now = time.time()
    info: dict[str, Any] = {
        "pid": pid,
        "pgid": pid,
        "command": list(cmd),
        "cwd": os.getcwd(),
        "host": socket.gethostname(),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
        "time": now,
        "env": added,
        "stdout": "stdout.log",
    }
    atomic_write_text(os.path.join(run_dir, "pid"), f"{pid}\n")
    atomic_write_text(os.path.join(run_dir, "launch.json"), json.dumps(info, indent=2) + "\n")
    return info


def _declare(p: argparse.ArgumentParser) -> None:
    from .watchdog import add_arguments as add_watch_arguments

    p.add_argument(
        "--watch", action="store_true", help="then watch the run in the foreground (exit 7 on anomaly, 0 on completion)"
    )
    add_watch_arguments(p, "launch")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_command_arguments(p, _declare, "watch options")


def _split(args: argparse.Namespace) -> list[str]:
    return split_command(args, "launch", _declare)


def run(args: argparse.Namespace) -> int:
    cmd = _split(args)
    opts = None
    if args.watch:  # validate the watch options before starting anything
        from .watchdog import options_from_args

        opts = options_from_args(args, os.path.abspath(args.run_dir), "watch")
    info = launch(args.run_dir, cmd)
    d = args.run_dir
    print(
        f"launched pid {info['pid']} (process group {info['pgid']}); output in {os.path.join(d, 'stdout.log')}",
        flush=True,
    )
    if opts is None:
        print(f"  runwatch status {d}\n  runwatch watch {d}\n  tail -f {os.path.join(d, 'stdout.log')}", flush=True)
        return 0
    import dataclasses

    from .watchdog import Watcher

    opts = dataclasses.replace(opts, pid=info["pid"])
    verdict = Watcher(d, opts).run()
    print(verdict.line(), flush=True)
    return verdict.exit_code_with(opts.exit_transient)
