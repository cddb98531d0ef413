"""Reading and writing the files of a run directory that anyone may have put there.

    data = read_bounded(path, 1 << 20)           # a regular file's first bytes; never blocks
    lines, torn = tail_lines(path, 20, 1 << 20)  # its last complete lines, in linear time
    recs = read_records(path, 64 << 20)          # JSON objects a line; unreadable lines counted
    append_line(path, b'{"event": "stop"}\\n')    # no symlink followed, a torn tail closed first
    fd = open_append(path)                       # stdout.log for a child: no symlink, no device

A run directory is written by a training program, by whoever can write beside it, and by crashes
(docs/RELIABILITY.md, "What runwatch trusts"). So every read opens with O_NONBLOCK and reads only
a regular file (a FIFO, a device or a socket in a file's place is `NotRegularFileError`, never a hang,
never /dev/zero's endless bytes), within a byte bound; and every write of runwatch's own files
opens with O_NOFOLLOW (a symlink in a file's place is refused: ELOOP), writes only a regular file
with one link (a hard link to a file elsewhere is refused too), and never truncates what it did
not create. A line that is not a JSON object (deeply nested, NaN, invalid UTF-8, torn) is
skipped and counted, never raised. Standard library only.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import NotRegularFileError, UnsafeWriteError

# Reading back from a file's end goes this many bytes at a time.
TAIL_CHUNK_BYTES = 64 * 1024
# The flags of every read: a FIFO opens without waiting for a writer, and no descriptor leaks to a child.
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
# The flags of every append: no symlink followed, a FIFO without a reader fails (ENXIO) instead of waiting.
_APPEND_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# A lock file holds a pid and a newline: anything longer is not runwatch's.
_LOCK_BYTES = 32


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory, not a regular file"
    if stat.S_ISFIFO(mode):
        return "not a regular file (a FIFO)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "not a regular file (a device)"
    if stat.S_ISSOCK(mode):
        return "not a regular file (a socket)"
    return "not a regular file"


def open_regular(path: str, *, follow: bool = True) -> int:
    """A descriptor open for reading on `path`, a regular file (the caller closes it); never blocks.

    Raises what os.open raises (FileNotFoundError, ELOOP for a symlink when not `follow`), else
    NotRegularFileError."""
    fd = os.open(path, _READ_FLAGS | (0 if follow else os.O_NOFOLLOW))
    try:
        mode = os.fstat(fd).st_mode
    except BaseException:
        os.close(fd)
        raise
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise NotRegularFileError(path, _kind(mode), is_directory=stat.S_ISDIR(mode))
    return fd


def _read_upto(fd: int, limit: int) -> bytes:
    chunks, size = [], 0
    while size < limit:
        chunk = os.read(fd, min(limit - size, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def read_bounded(path: str, limit: int) -> bytes:
    """The first `limit` bytes of the regular file `path` (all of it when smaller). Raises OSError
    (NotRegularFileError among them)."""
    fd = open_regular(path)
    try:
        return _read_upto(fd, limit)
    finally:
        os.close(fd)


def read_tail(path: str, limit: int) -> bytes:
    """The last `limit` bytes of the regular file `path`. Raises OSError (NotRegularFileError among them)."""
    fd = open_regular(path)
    try:
        size = os.fstat(fd).st_size
        os.lseek(fd, max(0, size - limit), os.SEEK_SET)
        return _read_upto(fd, min(limit, size))
    finally:
        os.close(fd)


def tail_lines(path: str, n: int, limit: int) -> tuple[list[bytes], bool]:
    """The last `n` complete, non-empty lines of `path` (without newlines), read back from its end
    over at most `limit` bytes, in time linear in what is read; `torn` when the file ends in a line
    without its newline (left out). Raises OSError (NotRegularFileError among them)."""
    if n <= 0:
        return [], False
    fd = open_regular(path)
    try:
        size = os.fstat(fd).st_size
        chunks: list[bytes] = []
        newlines, pos, torn = 0, size, False
        while pos > 0 and size - pos < limit:
            step = min(TAIL_CHUNK_BYTES, pos, limit - (size - pos))
            pos -= step
            chunk = os.pread(fd, step, pos)
            if not chunk:  # the file shrank meanwhile
                break
            if not chunks:
                torn = not chunk.endswith(b"\n")
            chunks.append(chunk)
            newlines += chunk.count(b"\n")
            if newlines > n:
                break
    finally:
        os.close(fd)
    buf = b"".join(reversed(chunks))
    end = buf.rfind(b"\n")
    if end < 0:
        return [], torn
    parts = buf[:end].split(b"\n")
    if pos > 0:
        parts = parts[1:]  # the first part may be the end of a longer line
    return [p for p in parts if p][-n:], torn


def _reject_constant(token: str) -> Any:
    raise ValueError(f"{token} is not a valid JSON number")


def _finite_float(token: str) -> float:
    value = float(token)
    if value in (math.inf, -math.inf):  # 1e400: no NaN token, yet no number either
        raise ValueError(f"{token[:20]} is out of range")
    return value


_STRICT = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)


def loads_value(raw: bytes | str) -> Any:
    """`raw` as a JSON value, strictly (UTF-8, no NaN, Infinity or 1e400); None for anything else: a
    torn line, a nested bomb, invalid UTF-8, a number with more digits than Python converts."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        return _STRICT.decode(text)
    except (ValueError, RecursionError, MemoryError):
        return None


def loads_object(raw: bytes | str) -> dict[str, Any] | None:
    """`raw` as a JSON object (`loads_value`); None for anything else."""
    value = loads_value(raw)
    return value if isinstance(value, dict) else None


@dataclass
class Records:
    """What `read_records` read: the objects, and the lines it could not read (1-based numbers;
    counted from the first line read when the file was read from `skipped_bytes` on)."""

    records: list[dict[str, Any]] = field(default_factory=list)
    unreadable: list[int] = field(default_factory=list)
    torn: bool = False  # the file ends in a line without its newline (left out, not counted)
    skipped_bytes: int = 0  # the file was larger than the bound: its first bytes were not read
    problem: str | None = None  # why nothing could be read (not a regular file, ...), else None

    def notes(self, name: str) -> list[str]:
        """`supervise.jsonl:14: unreadable record skipped`, one line per unreadable line (at most 5, then a count)."""
        out = [f"{name}:{n}: unreadable record skipped" for n in self.unreadable[:5]]
        if len(self.unreadable) > 5:
            out.append(f"{name}: {len(self.unreadable) - 5} more unreadable records skipped")
        if self.problem is not None:
            out.append(self.problem)
        return out


def read_records(path: str, limit: int) -> Records:
    """Every JSON object a line of `path` (its last `limit` bytes when larger); a line that is not
    one is skipped and counted, a missing file is no record, a FIFO or a device is `problem`."""
    out = Records()
    try:
        fd = open_regular(path)
    except NotRegularFileError as exc:
        out.problem = str(exc)
        return out
    except OSError:
        return out
    try:
        size = os.fstat(fd).st_size
        start = max(0, size - limit)
        os.lseek(fd, start, os.SEEK_SET)
        data = _read_upto(fd, size - start)
    except OSError as exc:
        out.problem = f"{os.path.basename(path)}: cannot read: {exc.strerror or exc}"
        return out
    finally:
        os.close(fd)
    lines = data.split(b"\n")
    if start > 0:
        out.skipped_bytes = start
        lines = lines[1:]  # the first part may be the end of a longer line
    if lines and lines[-1]:
        out.torn = True
    lines = lines[:-1]  # the part after the last newline: empty, or the torn line
    for i, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        rec = loads_object(raw)
        if rec is None:
            out.unreadable.append(i)
        else:
            out.records.append(rec)
    return out


def _check_own(fd: int, path: str) -> os.stat_result:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise NotRegularFileError(path, _kind(st.st_mode))
    if st.st_nlink > 1:
        raise UnsafeWriteError(errno.EPERM, f"{os.path.basename(path)} has {st.st_nlink} hard links: not written")
    return st


def _refused(exc: OSError, path: str) -> OSError:
    """ELOOP (O_NOFOLLOW met a symlink) and ENXIO (a FIFO without a reader) in words."""
    name = os.path.basename(path)
    if exc.errno == errno.ELOOP:
        return UnsafeWriteError(errno.ELOOP, f"{name} is a symbolic link: runwatch does not write through one")
    if exc.errno == errno.ENXIO:
        return NotRegularFileError(path, "not a regular file (a FIFO)")
    return exc


def open_append(path: str, mode: int = 0o644, *, readable: bool = False) -> int:
    """A descriptor open for appending to `path` (created when missing; blocking writes; also for
    reading when `readable`), which must be a regular file with one link, reached without a
    symlink. Raises OSError (UnsafeWriteError, NotRegularFileError among them)."""
    try:
        fd = os.open(path, _APPEND_FLAGS & ~os.O_WRONLY | os.O_RDWR if readable else _APPEND_FLAGS, mode)
    except OSError as exc:
        raise _refused(exc, path) from None
    try:
        _check_own(fd, path)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def append_line(path: str, line: bytes, *, sync: bool = True) -> None:
    """Append `line` (ending in a newline) to `path` as `open_append` opens it; a torn last line
    (a writer killed mid-line) is closed with a newline first, so `line` stays a line of its own."""
    fd = open_append(path, readable=True)
    try:
        size = os.fstat(fd).st_size
        if size > 0 and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line
        _write_all(fd, line)
        if sync:
            os.fsync(fd)
    except OSError as exc:  # a full disk: say which file
        exc.filename = exc.filename or path
        raise
    finally:
        os.close(fd)


def open_new(path: str, mode: int = 0o644) -> int:
    """A descriptor open for writing on `path`, a new file (a temporary file before a rename): any
    entry of that name (a stale temporary file, a symlink planted there) is removed first, then
    created with O_EXCL and O_NOFOLLOW, so nothing else is ever written through it."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # a symlink is removed itself, never what it points to
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)


def open_lock(path: str) -> tuple[int, bool]:
    """(descriptor, created) of the lock file `path`, open for reading and writing: created when
    missing, else runwatch's own (a regular file, one link, no symlink, holding at most a pid), so
    that its holder may rewrite it. Raises OSError (UnsafeWriteError, NotRegularFileError among them)."""
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    created = False
    try:
        try:
            fd = os.open(path, flags)
        except FileNotFoundError:
            fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o644)
            created = True
    except OSError as exc:
        raise _refused(exc, path) from None
    try:
        st = _check_own(fd, path)
        text = os.pread(fd, _LOCK_BYTES + 1, 0)
        if st.st_size > _LOCK_BYTES or not text.strip().isdigit() and text.strip():
            raise UnsafeWriteError(
                errno.EPERM, f"{os.path.basename(path)} holds something else than a pid: not written"
            )
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, created


def inside(root: str, path: str, *, real: bool = True) -> bool:
    """Whether the real path of `path` (every symlink resolved; with `real=False` only normalized)
    is `root` or below it (`root` given in the same form)."""
    p = os.path.realpath(path) if real else os.path.normpath(os.path.abspath(path))
    return p == root or p.startswith(root.rstrip(os.sep) + os.sep)


def _entries(run_dir: str, names: tuple[str, ...]) -> Iterator[str]:
    for name in names:
        path = os.path.join(run_dir, name)
        yield path
        if os.path.isdir(path) and not os.path.islink(path):
            with contextlib.suppress(OSError), os.scandir(path) as it:
                for i, e in enumerate(it):
                    if i >= 4096:  # a folder of side files holds one file a rank
                        break
                    yield e.path


def escaping(root: str, run_dir: str, names: tuple[str, ...]) -> str | None:
    """The first of `names` in `run_dir` (a folder among them: its entries too) whose real path
    leads outside `root`, as a path relative to `run_dir`; None when all stay inside."""
    for path in _entries(run_dir, names):
        if os.path.islink(path) and not inside(root, path):
            return os.path.relpath(path, run_dir)
    return None
