"""Incremental reading of a growing log: only new bytes, complete lines, bounded memory.

    follower = LogFollower("runs/a/metrics.jsonl")
    while True:
        batch = follower.poll()          # complete lines written since the last poll
        for lineno, raw in batch.lines:  # raw has no trailing newline
            ...

A poll costs one `stat` when nothing changed, and otherwise a read of the new bytes only: the
follower remembers the byte offset of the first uncommitted byte and holds back a final line
until its newline arrives. It notices a log that does not exist yet, a log truncated below what
was read or replaced by another file (a new inode), and says so in `Batch.reset`.
`ManifestFollower` re-reads `run.json` only when its inode, size or mtime changed.
`tail_lines` reads the last N complete lines by seeking back from the end.

Standard library only.
"""

from __future__ import annotations

import os
import stat as _stat
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError, InvalidRunError
from ..files import MAX_LINE_BYTES, RunDir, open_run_file, read_manifest, safeio

# One read per poll of at most this many bytes: big enough that catching up on a 1 GB log takes a
# few hundred reads, small enough that a batch of lines stays a few MB in memory.
READ_CHUNK_BYTES = 4 * 1024 * 1024


@dataclass(slots=True)
class Batch:
    """What one poll found: complete lines, and what happened to the file."""

    lines: list[tuple[int, bytes]] = field(default_factory=list)  # (line number, line without "\n")
    exists: bool = True  # the log exists (a regular file)
    reset: str | None = None  # "truncated" / "replaced": reading restarted at byte 0
    grew: bool = False  # the file's size changed since the last poll
    more: bool = False  # more complete bytes wait beyond this batch (poll again at once)
    too_long: int | None = None  # line number of a line longer than max_line_bytes (skipped)


class LogFollower:
    """Follows one append-only log file by byte offset.

    The state (`offset`, `lineno`, `inode`) is plain data: `state_dict()` / `load_state_dict()` (or `LogFollower.from_state`)
    round-trip it, so a restarted reader can continue where the last one stopped.
    """

    def __init__(self, path: str, max_line_bytes: int = MAX_LINE_BYTES, chunk_bytes: int = READ_CHUNK_BYTES) -> None:
        for name, value in (("max_line_bytes", max_line_bytes), ("chunk_bytes", chunk_bytes)):
            if type(value) is not int or value < 1:
                raise ConfigError(f"LogFollower.{name} must be an int >= 1, got {value!r}")
        self.path = path
        self.max_line_bytes = max_line_bytes
        self.chunk_bytes = chunk_bytes
        self.offset = 0  # first byte not yet returned as part of a complete line
        self.lineno = 0  # complete lines returned so far
        self.inode: tuple[int, int] | None = None
        self.size_seen = -1  # file size at the last poll; equal size and inode: nothing new
        self.mtime = 0.0  # the file's mtime at the last poll (Unix seconds)
        self._fd: int | None = None
        self._skipping = False  # inside an over-long line: drop bytes until its newline

    # --- state ------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The resumable position as plain JSON."""
        return {
            "path": self.path,
            "offset": self.offset,
            "lineno": self.lineno,
            "inode": list(self.inode) if self.inode else None,
            "skipping": self._skipping,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from `state_dict()` (the next poll reads from that offset)."""
        self.close()
        self.path = state["path"]
        self.offset = int(state["offset"])
        self.lineno = int(state["lineno"])
        self.inode = tuple(state["inode"]) if state["inode"] else None
        self._skipping = bool(state["skipping"])
        self.size_seen = -1

    @classmethod
    def from_state(cls, state: dict[str, Any], max_line_bytes: int = MAX_LINE_BYTES) -> LogFollower:
        """A follower that continues from `state_dict()`."""
        f = cls(state["path"], max_line_bytes)
        f.load_state_dict(state)
        return f

    def close(self) -> None:
        """Close the open file descriptor (polling again reopens it)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> LogFollower:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def skip_to_end(self) -> None:
        """Start after the log's complete lines as it is now (they belong to someone else)."""
        self.close()
        self.offset = self.lineno = 0
        self.size_seen = -1
        try:
            with open(self.path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    self.lineno += block.count(b"\n")
                    end = block.rfind(b"\n")
                    if end >= 0:
                        self.offset = f.tell() - len(block) + end + 1
        except FileNotFoundError:
            return

    # --- polling ----------------------------------------------------------------------------

    def pending_bytes(self) -> int:
        """Bytes after the last complete line (an uncommitted tail), as of the last poll."""
        return max(0, self.size_seen - self.offset)

    def poll(self) -> Batch:
        """Return the complete lines written since the last poll (at most ~chunk_bytes of them)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self.close()
            return Batch(exists=False)
        except OSError as exc:
            raise InvalidRunError(f"{self.path}: cannot stat: {exc.strerror or exc}") from None
        if not _stat.S_ISREG(st.st_mode):
            what = "a directory" if _stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise InvalidRunError(f"{self.path}: {what}")
        batch = Batch()
        inode = (st.st_dev, st.st_ino)
        if self.inode is not None and inode != self.inode:
            batch.reset = "replaced"
        elif st.st_size < self.offset:
            batch.reset = "truncated"
        if batch.reset:
            self.close()
            self.offset = self.lineno = 0
            self.size_seen = -1
            self._skipping = False
        self.inode = inode
        self.mtime = st.st_mtime
        if st.st_size == self.size_seen:
            return batch  # the common idle poll: one stat, nothing read
        batch.grew = True
        if st.st_size <= self.offset:
            self.size_seen = st.st_size
            return batch
        if self._fd is None:
            self._fd = open_run_file(self.path, self.path)
        start = self.offset
        data = os.pread(self._fd, min(st.st_size - start, self.chunk_bytes), start)
        if b"\n" not in data and start + len(data) < st.st_size and not self._skipping:
            # a line longer than a chunk: read on to its end (at most the longest line allowed); a
            # poll otherwise reads about `chunk_bytes`, which the page's per-pass bound counts on
            data = os.pread(self._fd, min(st.st_size - start, self.max_line_bytes + 1), start)
        self._split(data, batch)
        # More complete lines may wait beyond this read: say so, and do not mark the size as seen,
        # so the next poll reads on at once. A lone uncommitted tail waits for the file to grow.
        batch.more = start + len(data) < st.st_size and self.offset > start
        if not batch.more:
            self.size_seen = st.st_size
        return batch

    def _split(self, data: bytes, batch: Batch) -> None:
        start = 0
        if self._skipping:
            nl = data.find(b"\n")
            if nl < 0:
                self.offset += len(data)
                return
            start = nl + 1
            self._skipping = False
            self.lineno += 1
        end = data.rfind(b"\n")
        if end < start:
            # no complete line: hold the tail back, unless it is already too long to be a record
            if len(data) - start > self.max_line_bytes:
                batch.too_long = self.lineno + 1
                self._skipping = True
                self.offset += len(data)
            else:
                self.offset += start
            return
        lines = data[start:end].split(b"\n")
        n = self.lineno
        out = batch.lines
        limit = self.max_line_bytes
        for line in lines:
            n += 1
            if len(line) > limit:
                if batch.too_long is None:
                    batch.too_long = n
                continue
            out.append((n, line))
        self.lineno = n
        self.offset += end + 1


class ManifestFollower:
    """Re-reads and validates `run.json` when it changed (new inode, size or mtime)."""

    def __init__(self, run_dir: str) -> None:
        self.run_dir = run_dir
        self.path = RunDir(run_dir).manifest
        self._sig: tuple[int, ...] | None = None
        self.manifest: dict[str, Any] | None = None

    def exists(self) -> bool:
        return os.path.exists(self.path)

    def poll(self, force: bool = False) -> bool:
        """Reload when changed; return True when the manifest changed. Raises InvalidRunError."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return False
        sig = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        if sig == self._sig and not force:
            return False
        manifest = read_manifest(self.run_dir)
        self._sig = sig
        changed = manifest != self.manifest
        self.manifest = manifest
        return changed


def tail_lines(path: str, n: int, max_line_bytes: int = MAX_LINE_BYTES) -> tuple[list[bytes], bool]:
    """The last `n` complete lines of `path` (without newlines), read back from the end.

    Returns (lines, torn): `torn` is True when the file ends in a line without its newline (left
    out). Reads about n lines' worth of bytes, whatever the file's size, and at most
    `max_line_bytes * (n + 1)`, in linear time (`safeio.tail_lines`: a regular file only, never blocking).
    """
    return safeio.tail_lines(path, n, max_line_bytes * (n + 1))
