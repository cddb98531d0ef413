"""The waiter `runwatch launch` leaves behind: it starts the training, waits for it, and writes
how it ended to `RUN_DIR/exit.json` (docs/SUPERVISE.md, "How a process ended").

    python -I -S .../runwatch/waiter.py      # the launch spec as one JSON object on stdin

`launch.launch` starts this file as a script (no package, no site-packages: ~10 MB and 30 ms),
writes the spec (command, environment, run directory) to its stdin and reads back one JSON line:
`{"pid": N, "waiter": W}`, or `{"error": "...", "errno": E}` when the command cannot start. The
script forks once, so the process that stays (W) is no child of the launcher: it outlives a
`runwatch launch` that returns at once and a supervisor that is killed, and nobody has to reap it.

W is the training's parent and, on Linux, a child subreaper (`PR_SET_CHILD_SUBREAPER`): a process
of the training whose parent dies (a torchrun worker whose agent was killed, a daemonised helper)
is re-parented to W instead of to init, so every process the training ever started stays a
descendant of W until it ends, whatever process group or session it moved to. `proctree` finds
them that way. W reaps them all, writes `exit.json` when the command itself ends (atomically:
temp file, fsync, rename), and exits once it has no child left. It ignores SIGTERM, SIGINT and
SIGHUP (a `kill` meant for the training, a closed terminal); the training is stopped through
`proctree`, never through W.

Standard library only, and nothing from runwatch: it runs as a plain script.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any

EXIT = "exit.json"  # rundir.EXIT: this script imports nothing of runwatch (tests/test_launch.py keeps them equal)

PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>
IGNORED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
RESET_SIGNALS = IGNORED + tuple(getattr(signal, n) for n in ("SIGPIPE", "SIGXFSZ") if hasattr(signal, n))


def subreaper() -> bool:
    """Adopt the orphans of our descendants (Linux 3.4+); nothing elsewhere. Whether it took."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        return int(ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):  # no libc to load: orphans go to init, the env marker still finds them
        return False


def reap(pids: set[int]) -> None:
    """Reap those of `pids` that have ended and are our children (waiters adopted by a subreaper
    supervisor); drop them, and those that are not our children, from `pids`."""
    for pid in list(pids):
        try:
            done, _status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # not our child (never adopted), or reaped already
            done = pid
        if done == pid:
            pids.discard(pid)


def describe(status: int) -> dict[str, Any]:
    """`{"status": code or None, "signal": name or None}` of a wait status."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"SIG{sig}"
        return {"status": None, "signal": name}
    return {"status": os.WEXITSTATUS(status), "signal": None}


def write_exit(run_dir: str, pid: int, status: int) -> None:
    """`RUN_DIR/exit.json` for `pid`, atomically."""
    rec = {"pid": pid, **describe(status), "time": round(time.time(), 3)}
    path = os.path.join(run_dir, EXIT)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:  # (a symlink planted at the temporary name is removed, never written through)
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(json.dumps(rec) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _spawn(spec: dict[str, Any]) -> int:
    # stdout.log is this script's own stderr, opened by the launcher (no symlink, a regular file):
    # never opened again by name, which someone could have replaced by a symlink meanwhile
    out_fd = os.dup(2)
    null_fd = os.open(os.devnull, os.O_RDONLY)
    try:
        # setsid: the command leads a session and process group of its own (pgid == pid), so a
        # terminal's Ctrl-C does not reach it; stdout and stderr appended to stdout.log.
        return os.posix_spawnp(
            spec["cmd"][0],
            spec["cmd"],
            spec["env"],
            file_actions=[
                (os.POSIX_SPAWN_DUP2, null_fd, 0),
                (os.POSIX_SPAWN_DUP2, out_fd, 1),
                (os.POSIX_SPAWN_DUP2, out_fd, 2),
            ],
            setsid=True,
            # the signals this script ignores, and those CPython ignores at start-up, at their
            # defaults for the command (as subprocess's restore_signals does)
            setsigdef=RESET_SIGNALS,
        )
    finally:
        os.close(out_fd)
        os.close(null_fd)


def _reply(obj: dict[str, Any]) -> None:
    data = (json.dumps(obj) + "\n").encode()
    while data:
        data = data[os.write(1, data) :]


def main() -> int:
    chunks = []
    while True:
        block = os.read(0, 1 << 16)
        if not block:
            break
        chunks.append(block)
    spec = json.loads(b"".join(chunks))
    if os.fork() != 0:  # the launcher reaps this one at once; the child carries on, nobody's child
        os._exit(0)
    for sig in IGNORED:
        signal.signal(sig, signal.SIG_IGN)
    subreaper()
    try:
        pid = _spawn(spec)
    except OSError as exc:
        _reply({"error": exc.strerror or str(exc), "errno": exc.errno})
        return 1
    _reply({"pid": pid, "waiter": os.getpid()})
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(null, fd)
    os.close(null)
    while True:
        try:
            done, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return 0
        if done == pid:
            try:
                write_exit(spec["run_dir"], pid, status)
            except OSError as exc:
                print(f"runwatch waiter: could not write {EXIT}: {exc}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
