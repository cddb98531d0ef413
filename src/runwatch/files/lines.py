"""A run's files read whole or line by line: regular files only (a FIFO put there would block,
/dev/zero never ends), bounded, with errors that name the file (`InvalidRunError`).

`read_regular_file` reads a small JSON file whole (run.json, watchdog.json, bench.json,
trainer_state.json); `iter_line_blocks` / `iter_lines` read `metrics.jsonl` for the summary, a
block of complete lines at a time. Standard library only.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from ..errors import InvalidRunError, NotRegularFileError
from . import safeio

# A train record is ~500 bytes; a val record with a few hundred metrics a few kB. 16 MiB leaves room
# for anything a producer could reasonably write and bounds what one hostile line can cost us.
MAX_LINE_BYTES = 16 * 1024 * 1024


def open_run_file(path: str, where: str, *, name_directory: bool = True, at: str = "") -> int:
    """A descriptor open for reading on `path`, which must be a regular file; the caller closes it.

    `safeio.open_regular` (O_NONBLOCK and fstat, not isfile() then open(): a FIFO put there in
    between would block, and /dev/zero never ends). Raises what os.open raises (the caller knows
    what a missing file means to it), else InvalidRunError `<where>: a directory<at>` (`not a
    regular file` without `name_directory`) or `<where>: not a regular file<at>`.
    """
    try:
        return safeio.open_regular(path)
    except NotRegularFileError as exc:
        what = "a directory" if name_directory and exc.is_directory else "not a regular file"
        raise InvalidRunError(f"{where}: {what}{at}") from None


def read_regular_file(path: str, where: str, limit: int, *, show_path: bool = False) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; InvalidRunError naming `where` otherwise.

    Opened by `open_run_file`. `show_path` adds the full path to the messages about opening.
    """
    at = f" ({path})" if show_path else ""
    try:
        fd = open_run_file(path, where, name_directory=show_path, at=at)
    except FileNotFoundError as exc:
        if show_path:
            raise InvalidRunError(f"{where}: missing{at}") from None
        raise InvalidRunError(f"{where}: cannot open: {exc.strerror or exc}") from None
    except OSError as exc:
        raise InvalidRunError(f"{where}: cannot open: {exc.strerror or exc}{at}") from None
    try:
        with os.fdopen(fd, "rb") as f:
            fd = -1
            data = f.read(limit + 1)
    except OSError as exc:
        raise InvalidRunError(f"{where}: cannot read: {exc.strerror or exc}") from None
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > limit:
        raise InvalidRunError(f"{where}: larger than {limit} bytes")
    return data


# --- line by line -----------------------------------------------------------------------------------


# Lines are read this many bytes at a time (and split in C); capped at MAX_LINE_BYTES + 1 so that a
# line that lies inside one block can never be too long.
READ_BLOCK_BYTES = 1 << 20


def iter_line_blocks(path: str, name: str = "metrics.jsonl") -> Iterator[tuple[int, list[bytes]]]:
    """Yield (number of the first line, the complete lines without their newline) a block at a time.

    Memory holds one block (READ_BLOCK_BYTES) and one line at most. A final line without a newline
    raises `Uncommitted metrics tail at line N`; a line longer than MAX_LINE_BYTES raises before it
    is read whole. Only regular files are read (a FIFO or a device would block or never end).
    """
    try:
        fd = open_run_file(path, name)
    except OSError as exc:
        raise InvalidRunError(f"{name}: cannot open: {exc.strerror or exc}") from None
    try:
        f = os.fdopen(fd, "rb", buffering=0)
    except BaseException:
        os.close(fd)
        raise
    with f:
        limit = MAX_LINE_BYTES
        block_size = min(READ_BLOCK_BYTES, limit + 1)
        done = 0  # complete lines so far
        tail = b""  # the start of a line whose newline is still to come
        while True:
            try:
                block = f.read(block_size)
            except OSError as exc:
                raise InvalidRunError(f"{name}:{done + 1}: cannot read: {exc.strerror or exc}") from None
            if not block:
                break
            lines = block.split(b"\n")
            if tail:
                lines[0] = tail + lines[0]
            tail = lines.pop()
            if lines:
                # only the first line can be too long: the others lie inside this block
                if len(lines[0]) > limit:
                    raise InvalidRunError(f"{name}:{done + 1}: line longer than {limit} bytes")
                yield done + 1, lines
                done += len(lines)
            if len(tail) > limit:
                raise InvalidRunError(f"{name}:{done + 1}: line longer than {limit} bytes")
        if tail:
            raise InvalidRunError(f"Uncommitted metrics tail at line {done + 1}")


def iter_lines(path: str, name: str = "metrics.jsonl") -> Iterator[tuple[int, bytes]]:
    """Yield (line number, raw line with its newline) from `path`, as `iter_line_blocks` reads it."""
    for first, lines in iter_line_blocks(path, name):
        for lineno, line in enumerate(lines, first):
            yield lineno, line + b"\n"
