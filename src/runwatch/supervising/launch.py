"""`runwatch launch RUN_DIR [--watch] [watch options] -- CMD ...`: start a training detached.

The command runs in its own session and process group, stdin from /dev/null, stdout and stderr
appended to `RUN_DIR/stdout.log`, with the environment a supervised run wants (unbuffered output,
no progress bars, `RUNWATCH_RUN_DIR`, and `RUNWATCH_ATTEMPT_ID`, which marks every process of this
launch for `proctree`). A small waiter (`waiter.py`) starts it, stays its parent, and writes how it
ended to `RUN_DIR/exit.json`, so that any later watch knows exit 0 from a kill. Its pid goes to
`RUN_DIR/pid`, how it was started to `RUN_DIR/launch.json` (both atomically), with how its log is
read and judged (`read`, `rules`: every later reader of RUN_DIR reads it so, `reading.target`).
With `--watch` the watchdog then follows it in the foreground: exit 7 on an anomaly, 0 on
completion. Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import socket
import sys
import time
from collections.abc import Sequence
from typing import Any

from ..errors import UsageError
from ..files import (
    ENV_ATTEMPT_ID,
    ENV_RUN_DIR,
    EXIT,
    LAUNCH_HEADER,
    STDOUT,
    RunDir,
    atomic_write_text,
    capture,
    open_append,
)
from ..options import add_command_arguments, option_fields, split_command
from ..procs import ProcessTree, launch_info, launched_here, not_launched, start_ticks, waiter
from ..procs.proctree import stop as stop_tree
from ..reading import NOT_RECORDED as NOT_RECORDED
from ..reading import TEXT_FORMATS as TEXT_FORMATS
from ..reading import ReadOptions, read_options
from ..reading.readers import add_arguments as add_read_arguments

# Added to the command's environment: line-buffered logs, no progress bars in stdout.log,
# quiet transformers, no tokenizers fork warnings, and where the run directory is.
LAUNCH_ENV = {
    "PYTHONUNBUFFERED": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "TOKENIZERS_PARALLELISM": "false",
}
# The script that starts the command, waits for it and writes exit.json (run as a file, not imported).
WAITER = os.path.abspath(waiter.__file__)  # run as a plain script (it imports nothing of runwatch)
# A training launched moments ago whose launch cannot be recorded is stopped at once: a short grace.
ABANDON_GRACE_SECONDS = 5.0


def _start_waiter(spec: dict[str, Any], stderr_fd: int, marker: dict[str, str]) -> dict[str, Any]:
    """Start `waiter.py` with `spec` on its stdin; its one-line answer (`pid` and `waiter`, or `error`).
    The waiter's own environment carries the launch's `marker` too: that is how a later stop
    proves it runwatch's (`procs.launched`)."""
    to_w, from_l = os.pipe()  # spec: launcher -> waiter
    from_w, to_l = os.pipe()  # answer: waiter -> launcher
    try:
        pid = os.posix_spawn(
            sys.executable,
            [sys.executable, "-I", "-S", WAITER],  # a plain script: no site-packages, no runwatch import
            {**os.environ, **marker},
            file_actions=[
                (os.POSIX_SPAWN_DUP2, to_w, 0),
                (os.POSIX_SPAWN_DUP2, to_l, 1),
                (os.POSIX_SPAWN_DUP2, stderr_fd, 2),
            ],  # every other descriptor of ours is close-on-exec
            setsid=True,  # neither in our session nor in the training's
        )
    except OSError as exc:
        for fd in (to_w, from_l, from_w, to_l):
            os.close(fd)
        raise UsageError(f"launch: cannot start the waiter ({sys.executable}): {exc.strerror or exc}") from None
    os.close(to_w)
    os.close(to_l)
    try:
        data = json.dumps(spec).encode()
        while data:
            data = data[os.write(from_l, data) :]
        os.close(from_l)
        from_l = -1
        answer = b""
        while not answer.endswith(b"\n"):
            block = os.read(from_w, 4096)
            if not block:
                break
            answer += block
    finally:
        if from_l >= 0:
            os.close(from_l)
        os.close(from_w)
        os.waitpid(pid, 0)  # it forked: the waiter that stays is nobody's child
    try:
        reply = json.loads(answer)
    except ValueError:
        reply = None
    if not isinstance(reply, dict):
        raise UsageError(f"launch: the waiter did not answer (see {spec['stdout']})")
    return reply


def launch(
    run_dir: str, cmd: Sequence[str], env: dict[str, str] | None = None, reading: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Start `cmd` detached for `run_dir`; return what went to launch.json (with `pid`, `pgid`,
    and `reading`'s fields: how the log is read and judged, `reading_record`).

    The command runs under a waiter (`waiter.py`) that writes `RUN_DIR/exit.json` when it ends;
    its environment carries `RUNWATCH_ATTEMPT_ID`, which marks every process it starts."""
    if not cmd:
        raise UsageError("launch: no command given (runwatch launch RUN_DIR -- CMD ...)")
    run_dir = os.path.abspath(os.fspath(run_dir))
    try:
        os.makedirs(run_dir, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"launch: cannot create {run_dir}: {exc.strerror or exc}") from None
    old = launched_here(run_dir)
    if old is not None and not_launched(run_dir, old) is None:  # (a pid runwatch did not launch is no reason)
        raise UsageError(f"launch: {run_dir}: the process {old} launched there is still running")
    attempt_id = f"{socket.gethostname()}-{os.getpid()}-{time.time_ns():x}"
    added = dict(LAUNCH_ENV, **{ENV_RUN_DIR: run_dir, ENV_ATTEMPT_ID: attempt_id})
    full_env = dict(os.environ if env is None else env)
    full_env.update(added)
    out_path = RunDir(run_dir).stdout
    provenance = capture(argv=cmd)  # the launched command's code (git in the cwd it starts in)
    with contextlib.suppress(FileNotFoundError):  # how the previous attempt ended is in the journal
        os.unlink(os.path.join(run_dir, EXIT))
    try:  # no symlink followed, no FIFO or device: stdout.log is runwatch's own file
        out_fd = open_append(out_path)
    except OSError as exc:
        raise UsageError(f"launch: cannot write {out_path}: {exc.strerror or exc}") from None
    try:
        os.write(out_fd, f"{LAUNCH_HEADER}{time.strftime('%Y-%m-%dT%H:%M:%S%z')}: {' '.join(cmd)}\n".encode())
        spec = {"cmd": list(cmd), "env": full_env, "stdout": out_path, "run_dir": run_dir}
        reply = _start_waiter(spec, out_fd, {ENV_RUN_DIR: run_dir, ENV_ATTEMPT_ID: attempt_id})
    finally:
        os.close(out_fd)
    if "error" in reply or type(reply.get("pid")) is not int:
        raise UsageError(f"launch: cannot start {cmd[0]!r}: {reply.get('error') or 'no pid'}")
    pid = int(reply["pid"])
    waiter = reply.get("waiter") if type(reply.get("waiter")) is int else None
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
        "attempt_id": attempt_id,
        "waiter": waiter,
        "start_ticks": start_ticks(pid),
        "waiter_start_ticks": start_ticks(waiter) if waiter is not None else None,
        "provenance": provenance,
        **(reading or {}),
    }
    for path, text in ((RunDir(run_dir).launch, json.dumps(info, indent=2) + "\n"), (RunDir(run_dir).pid, f"{pid}\n")):
        try:
            atomic_write_text(path, text)
        except OSError as exc:  # a full disk, a deleted run directory: never leave the training unrecorded
            exc.filename = exc.filename or path
            raise UsageError(f"launch: {abandon(info, run_dir, exc)}") from None
    return info


def abandon(
    info: dict[str, Any] | None,
    run_dir: str,
    exc: OSError,
    grace: float = ABANDON_GRACE_SECONDS,
    pid: int | None = None,
) -> str:
    """Stop the process tree just launched (`info`: its launch record, in memory) because `exc`, a
    write about it, failed; one line saying what failed and what was done. With `pid` (a
    supervisor's current training), `info` counts only when it is of that pid; else launch.json
    (an adopted training: what can be proven runwatch's)."""
    if pid is not None and (info is None or info.get("pid") != pid):
        info = launch_info(run_dir)
    what = f"{exc.filename}: {exc.strerror}" if exc.filename and exc.strerror else str(exc) or type(exc).__name__
    if info is None or not isinstance(info.get("pid"), int) or start_ticks(info["pid"]) is None:
        return f"cannot write {what}"
    tree = ProcessTree.of_info(info, run_dir)
    done = stop_tree(tree, grace) if tree is not None else None
    pid = info.get("pid")
    if done is not None and done.left:
        return f"cannot write {what}; could not stop the process just launched: pid {pid} still runs"
    how = f": {done.describe()}" if done is not None and done.count else " (it had already exited)"
    return f"cannot write {what}; stopped the process just launched (pid {pid}){how}"


def watch_read(read: ReadOptions) -> ReadOptions:
    """How a watch of a launched program reads RUN_DIR: `--log` as given (relative to RUN_DIR, or
    absolute), stdout.log for a text log (`--format text/nanogpt/megatron`, `--pattern`), else
    RUN_DIR itself, where `metrics.jsonl` or the one log of another tool is found (as `runwatch
    watch RUN_DIR` finds it)."""
    if read.log or not read.text:
        return read
    return dataclasses.replace(read, log=STDOUT)  # a program's printed records: its own output


def reading_record(read: ReadOptions, rules: Any, by: str) -> dict[str, Any]:
    """launch.json's `read` (`log`, `format`, `pattern`, `run`, `map`), `rules` (the watch's
    options that differ from their defaults, less `NOT_RECORDED`) and `by` (docs/FORMAT.md)."""
    changed = {
        f.name: list(v) if isinstance(v, tuple) else v
        for f in option_fields(type(rules))
        if f.name not in NOT_RECORDED and (v := getattr(rules, f.name)) != f.default
    }
    return {
        "read": {
            "log": read.log,
            "format": read.format,
            "pattern": list(read.pattern),
            "run": read.run,
            "map": list(getattr(rules, "map", ())),
        },
        "rules": changed,
        "by": by,
    }


def _declare(p: argparse.ArgumentParser) -> None:
    from ..judging.watchcommands import add_arguments as add_watch_arguments

    p.add_argument(
        "--watch", action="store_true", help="then watch the run in the foreground (exit 7 on anomaly, 0 on completion)"
    )
    add_watch_arguments(p, "launch")
    add_read_arguments(p, "launch")  # --format, --pattern, --run, --log


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_command_arguments(p, _declare, "watch options")


def _split(args: argparse.Namespace) -> list[str]:
    return split_command(args, "launch", _declare)


def run(args: argparse.Namespace) -> int:
    cmd = _split(args)
    opts = None
    read = read_options(args)
    if args.watch:  # validate the watch options before starting anything
        from ..judging import options_from_args

        opts = options_from_args(args, os.path.abspath(args.run_dir), "watch")
    elif any(getattr(args, k, None) not in (None, []) for k in ("format", "pattern", "run", "log")):
        raise UsageError("launch: --format, --pattern, --run and --log say how to watch: add --watch")
    read = watch_read(read)
    info = launch(args.run_dir, cmd, reading=reading_record(read, opts, "launch") if opts is not None else None)
    d = args.run_dir
    print(
        f"launched pid {info['pid']} (process group {info['pgid']}); output in {os.path.join(d, 'stdout.log')}",
        flush=True,
    )
    if opts is None:
        print(f"  runwatch status {d}\n  runwatch watch {d}\n  tail -f {os.path.join(d, 'stdout.log')}", flush=True)
        return 0
    import dataclasses

    from ..judging import Watcher

    opts = dataclasses.replace(opts, pid=info["pid"])
    verdict = Watcher(os.path.abspath(d), opts, read=read).run()
    print(verdict.line(), flush=True)
    from ..judging import exit_status

    return exit_status(verdict.outcome, opts.exit_codes)
