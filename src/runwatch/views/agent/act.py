"""The tools that act (`runwatch mcp --act` only): start a supervised run, stop a run.

    pid, run_dir = launch_supervised(tools, "runs/a", ["python", "train.py"], ["--restarts", "3"])
    doc = stop_run(tools, "runs/a")

`launch_supervised` starts `runwatch supervise RUN_DIR [OPTIONS] -- COMMAND` in its own session
(so it outlives the server and a client's Ctrl-C), its output appended to `RUN_DIR/supervise.log`,
in the server's working directory (where the agent's relative paths point). The options are parsed
by `supervise`'s own parser first, so a bad one is refused before anything starts. `stop_run`
interrupts a run's supervisor as Ctrl-C does (it stops the training's process tree, journals the
end and exits) and SIGKILLs it if it is still there after the training's stop grace; a run with no
supervisor has its process stopped as `watch --stop-on-anomaly` stops it. Standard library only.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from ...errors import UsageError
from ...files import JOURNAL, LOCK, PID, RunDir, inside, open_append
from ...procs import not_launched, not_supervisor, refusal, start_ticks
from ...procs import process as _proc
from ...reading import resolve_target, tail_lines
from ...supervising import supervise_status, supervisor_from_args
from .bound import fit
from .tools import Result, Tools, parse_command_line
from .verdicts import live_supervisor

# The supervisor's own output (its verdict line, its notes): beside the training's stdout.log.
SUPERVISE_LOG = "supervise.log"
# How long `launch_supervised` waits for the supervisor to take its run directory (its lock and
# first journal record) or to refuse it (another supervisor, a command that cannot start).
START_SECONDS = 20.0
# After the training's stop grace, how long a supervisor may take to journal its end and exit.
EXIT_MARGIN_SECONDS = 15.0


def launch_supervised(tools: Tools, run_dir: str, command: list[str], options: list[str] | None = None) -> Result:
    """Start `runwatch supervise` on `run_dir` in its own session; its pid and the run directory."""
    path = tools.path("launch_supervised", "run_dir", run_dir, must_exist=False)
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"launch_supervised: {run_dir}: not a directory")
    if not command or not all(isinstance(a, str) and a for a in command):
        raise UsageError(f"launch_supervised: command must be a non-empty list of strings, got {command!r}")
    opts = list(options or [])
    # parsed and validated as `runwatch supervise` will do it, before anything starts
    args = parse_command_line("launch_supervised", ["supervise", path, *opts, "--", *command])
    try:
        supervisor_from_args(args)
    except UsageError as exc:
        raise UsageError(f"launch_supervised: {exc}") from None
    # (after the parse, which fills `args` from the words up to `--`)
    for flag in ("log", "done"):  # the files an option names stay inside the run directory, as every path does
        value = getattr(args, flag, None)
        if isinstance(value, str) and value:
            tools.path("launch_supervised", f"--{flag}", os.path.join(path, value), must_exist=False)
            if not inside(path, os.path.join(path, value), real=False):
                raise UsageError(f"launch_supervised: --{flag} {value}: must be a path inside {tools.rel(path)}")
    live = live_supervisor(path) if os.path.isdir(path) else None
    live = live if live is not None and not_supervisor(path, live) is None else None  # (a forged pid is none)
    if live is not None:
        raise UsageError(f"launch_supervised: {tools.rel(path)}: supervisor {live} is already running there")
    os.makedirs(path, exist_ok=True)
    argv = [sys.executable, "-m", "runwatch", "supervise", path, *opts, "--", *command]
    log_path = os.path.join(path, SUPERVISE_LOG)
    try:  # supervise.log: runwatch's own file, never written through a symlink
        out_fd = open_append(log_path)
    except OSError as exc:
        raise UsageError(f"launch_supervised: cannot write {tools.rel(path)}/{SUPERVISE_LOG}: {exc}") from None
    null_fd = os.open(os.devnull, os.O_RDONLY)
    try:
        # setsid: its own session, so the client's teardown of the server's group leaves it running
        pid = os.posix_spawn(
            sys.executable,
            argv,
            dict(os.environ),
            file_actions=[
                (os.POSIX_SPAWN_DUP2, null_fd, 0),
                (os.POSIX_SPAWN_DUP2, out_fd, 1),
                (os.POSIX_SPAWN_DUP2, out_fd, 2),
            ],
            setsid=True,
        )
    finally:
        os.close(null_fd)
        os.close(out_fd)
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if not _proc.alive(pid):
            if _started(path, pid):  # it ran to its end already (a very short run)
                break
            raise UsageError(f"launch_supervised: supervise exited at once: {_last_line(log_path)}")
        if _started(path, pid):
            break
        time.sleep(0.05)
    return fit(
        {
            "pid": pid,
            "run_dir": tools.rel(path),
            "log": f"{tools.rel(path)}/{SUPERVISE_LOG}",
            "command": argv[3:],
        }
    )


def _started(run_dir: str, pid: int) -> bool:
    """The supervisor `pid` holds the run directory and has journaled its first action."""
    sup = supervise_status(run_dir)
    return sup is not None and sup["supervisor_pid"] == pid and _proc.read_pid_file(os.path.join(run_dir, LOCK)) == pid


def _last_line(path: str) -> str:
    try:
        lines, _ = tail_lines(path, 1)
    except OSError:
        return "(no output)"
    return lines[-1].decode("utf-8", "replace").strip()[:300] if lines else "(no output)"


def stop_run(tools: Tools, run: str) -> Result:
    """Stop the run's supervisor and its training's process tree (or, unsupervised, the training);
    once they have exited, the run's final status (`run_status`'s result) and what was stopped.
    Only what runwatch can prove it started is signalled (`procs.launched`): a supervisor that
    holds the run's lock, a training whose start time and environment marker are launch.json's;
    any other pid named in the run directory is refused, by name, and nothing is signalled."""
    path = tools.path("stop_run", "run", run)
    run_dir = resolve_target(path).run_dir
    done: list[str] = []
    refused: list[str] = []
    sup, where = live_supervisor(run_dir), os.path.join(tools.rel(run_dir), LOCK)
    if sup is not None:
        why = not_supervisor(run_dir, sup)
        if why is None:
            done.append(_stop_supervisor(sup, run_dir))
        else:
            recorded = supervise_status(run_dir)
            if recorded is not None and recorded["supervisor_pid"] == sup:
                where = os.path.join(tools.rel(run_dir), JOURNAL)
            refused.append(refusal(sup, where, why))
    pid = _proc.read_pid_file(RunDir(run_dir).pid)
    if pid is not None and _proc.alive(pid):  # unsupervised, or left behind by a killed supervisor
        why = not_launched(run_dir, pid)
        if why is None:
            done.append(_proc.stop(pid, run_dir, why="stop_run"))
        else:
            refused.append(refusal(pid, os.path.join(tools.rel(run_dir), PID), why))
    if refused:
        raise UsageError("stop_run: " + "; ".join([*done, *refused]))
    if not done:
        done.append("nothing was running")
    _, st = tools.run_status(run)  # the final status, as run_status gives it
    return fit({"stopped": "; ".join(done), **st})


def _stop_supervisor(pid: int, run_dir: str) -> str:
    """SIGINT the supervisor (it stops the training's tree and journals `gave_up`); wait for it to
    exit; SIGKILL it when it has not within the training's stop grace plus a margin (and is still
    the process that held the lock: same start time)."""
    ticks = start_ticks(pid)
    try:
        os.kill(pid, signal.SIGINT)
    except ProcessLookupError:
        return f"supervisor {pid} had already exited"
    deadline = time.monotonic() + _proc.STOP_GRACE_SECONDS + EXIT_MARGIN_SECONDS
    while time.monotonic() < deadline:
        if not _proc.alive(pid):
            last = supervise_status(run_dir)
            return f"supervisor {pid} stopped the training and exited" + (
                f" (journal: {last['event']})" if last else ""
            )
        time.sleep(0.1)
    if ticks is None or start_ticks(pid) != ticks:
        return f"supervisor {pid} exited"
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return f"supervisor {pid} did not exit within {_proc.STOP_GRACE_SECONDS + EXIT_MARGIN_SECONDS:g} s; sent SIGKILL"
