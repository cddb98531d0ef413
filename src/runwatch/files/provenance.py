"""What a run was started from: its command, code, versions, host and data files (`provenance`).

    capture(data=["data/train.bin"])     # {"argv": [...], "cwd": ..., "git": {...} or None,
                                         #  "python": "3.11.9", "runwatch": ..., "torch": ... or None,
                                         #  "host": ..., "data": [{"path", "size", "mtime", "sha256"}]}

Taken once, when a session starts (`RunLogger`, the callbacks through it) or a command is launched
(`launch`, `supervise`), never on the step path. It costs two `git` calls in the working
directory (`rev-parse HEAD`, then `diff HEAD`, each bounded by `GIT_TIMEOUT_SECONDS`) and two
MiB read per data file. Nothing here fails a run: no `git`, no repository, a `git` that hangs or
a data file that cannot be read give `null` or an `error` in place of the value.

`git.diff_bytes` and `git.diff_sha256` are the size and SHA-256 of `git diff HEAD --binary`
(tracked files only: untracked ones are not in it), streamed and hashed, never stored; `dirty` is
`diff_bytes > 0`. A data file's `sha256` hashes its first and last MiB read one after the other
(the whole file when it is at most 2 MiB), so a fingerprint costs the same for 1 GB as for 1 TB.
Standard library only.
"""

from __future__ import annotations

import hashlib
import os
import platform
import select
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterable
from typing import Any

from ..errors import ConfigError
from ..version import __version__

# Each git call gives up after this long (a repository on a slow network file system, a lock).
GIT_TIMEOUT_SECONDS = 3.0
# A data file's fingerprint hashes this many bytes from its start and as many from its end.
HASH_EDGE_BYTES = 1 << 20
# git reads no config that could make it slow or interactive, and takes no lock.
_GIT_ENV = {"GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}


def data_paths(data: Iterable[str | os.PathLike[str]] | None, where: str) -> list[str]:
    """`data` as a list of paths; ConfigError naming `where` when it is not a list of paths."""
    if data is None:
        return []
    if isinstance(data, (str, bytes, os.PathLike)):
        raise ConfigError(f"{where} must be a list of paths (e.g. [{os.fspath(data)!r}]), got {data!r}")
    try:
        items = list(data)
    except TypeError:
        raise ConfigError(f"{where} must be a list of paths, got {data!r}") from None
    out = []
    for item in items:
        if not isinstance(item, (str, os.PathLike)) or isinstance(os.fspath(item), bytes):
            raise ConfigError(f"{where} must be a list of paths, got an item {item!r}")
        out.append(os.fspath(item))
    return out


def _git(cwd: str, *args: str) -> subprocess.CompletedProcess[bytes] | None:
    try:
        return subprocess.run(
            ["git", *args],
            cwd=cwd,
            env={**os.environ, **_GIT_ENV},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=GIT_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.SubprocessError, ValueError):  # no git, a timeout, a cwd gone
        return None


def _diff(cwd: str) -> tuple[int, str] | None:
    """(bytes, sha256) of `git diff HEAD --binary`, streamed; None if it fails or takes too long."""
    try:
        proc = subprocess.Popen(
            ["git", "diff", "HEAD", "--binary", "--no-color", "--no-ext-diff", "--no-textconv"],
            cwd=cwd,
            env={**os.environ, **_GIT_ENV},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
    except (OSError, ValueError):
        return None
    if proc.stdout is None:  # (never: stdout=PIPE)
        proc.kill()
        proc.wait()
        return None
    deadline = time.monotonic() + GIT_TIMEOUT_SECONDS
    digest = hashlib.sha256()
    size = 0
    ok = False
    try:
        fd = proc.stdout.fileno()
        poller = select.poll()  # (not select.select: a process with 1024 files open may call this)
        poller.register(fd, select.POLLIN)
        while (left := deadline - time.monotonic()) > 0:
            if not poller.poll(left * 1000):
                break  # git wrote nothing for the rest of the time: give up
            block = os.read(fd, 1 << 16)
            if not block:
                ok = True
                break
            size += len(block)
            digest.update(block)
    finally:
        if not ok:
            proc.kill()
        proc.stdout.close()
        try:
            code = proc.wait(timeout=GIT_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = -1
    if not ok or code != 0:
        return None
    return size, digest.hexdigest()


def git_state(cwd: str) -> dict[str, Any] | None:
    """The commit checked out in `cwd` and whether the tracked files differ from it; None outside a
    repository (or without git, or when git does not answer in time)."""
    head = _git(cwd, "rev-parse", "--verify", "-q", "HEAD")
    if head is None or head.returncode != 0:
        return None
    commit = head.stdout.decode("ascii", "replace").strip()
    if not commit:
        return None
    diff = _diff(cwd)
    if diff is None:  # the commit is known; how the tree differs is not
        return {"commit": commit, "dirty": None, "diff_bytes": None, "diff_sha256": None}
    size, sha = diff
    return {"commit": commit, "dirty": size > 0, "diff_bytes": size, "diff_sha256": sha}


def data_fingerprint(path: str) -> dict[str, Any]:
    """`path`'s size, mtime (Unix seconds) and the SHA-256 of its first and last MiB (the whole
    file when smaller); `error` instead when it cannot be read."""
    out: dict[str, Any] = {"path": os.path.abspath(path), "size": None, "mtime": None, "sha256": None}
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        out["error"] = exc.strerror or str(exc)
        return out
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            out["error"] = "not a regular file (name the files of a folder one by one)"
            return out
        out["size"], out["mtime"] = st.st_size, st.st_mtime
        digest = hashlib.sha256()
        if st.st_size <= 2 * HASH_EDGE_BYTES:
            parts = [(0, st.st_size)]
        else:
            parts = [(0, HASH_EDGE_BYTES), (st.st_size - HASH_EDGE_BYTES, HASH_EDGE_BYTES)]
        for offset, length in parts:
            while length > 0:
                block = os.pread(fd, min(length, 1 << 20), offset)
                if not block:
                    break
                digest.update(block)
                offset += len(block)
                length -= len(block)
        out["sha256"] = digest.hexdigest()
    except OSError as exc:
        out["error"] = exc.strerror or str(exc)
    finally:
        os.close(fd)
    return out


def capture(argv: Iterable[str] | None = None, cwd: str | None = None, data: Iterable[str] = ()) -> dict[str, Any]:
    """The provenance of a program started with `argv` (this process's `sys.argv` by default) in
    `cwd` (this process's working directory by default), naming the files `data`."""
    if cwd is None:
        try:
            cwd = os.getcwd()
        except OSError:  # the working directory was deleted
            cwd = None
    torch = sys.modules.get("torch")
    version = getattr(torch, "__version__", None) if torch is not None else None
    return {
        "argv": [str(a) for a in (sys.argv if argv is None else argv)],
        "cwd": cwd,
        "git": git_state(cwd) if cwd is not None else None,
        "python": platform.python_version(),
        "runwatch": __version__,
        "torch": str(version) if version is not None else None,
        "host": socket.gethostname(),
        "data": [data_fingerprint(p) for p in data],
    }
