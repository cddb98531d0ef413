"""TensorBoard event files, followed by byte offset: scalars grouped by step into records.

An event file is a sequence of records, each

    uint64 length | uint32 masked CRC-32C of length | data[length] | uint32 masked CRC-32C of data

(little-endian), the data an `Event` protocol buffer. A record is applied once it is whole and
both CRCs check; a record cut short at the end of the file waits for its remaining bytes; a CRC
that does not check is an `invalid_log` naming the file and the record's byte offset (the rest of
that file cannot be framed and is not read). Scalars are `simple_value` (what
`torch.utils.tensorboard` writes) and one-value tensors whose tag's metadata names the `scalars`
plugin (TF2 `tf.summary.scalar`; the metadata comes with a tag's first value only).

A directory is read through its event files, or, when it holds none, those of the subdirectory
with the newest one (Lightning's `version_N/`, the HF Trainer's `runs/<date>_<host>/`). A run
directory's folder (`ReadOptions.sessions`: named by `--log`, or lying in a run directory) is one
run whose launches each wrote a subdirectory: all of them are read, ordered by their first event's
wall time, and the newest followed. Files are read in order of the timestamp in their name; every
file after the first starts a new session (a relaunch writes a new file).

The CRCs and the Event messages are decoded by `tfrecord` (standard library, with optional
accelerators).
"""

from __future__ import annotations

import os
import stat as _stat
import struct
from typing import Any, BinaryIO, TypeAlias

from ...errors import InvalidRunError
from .base import Chunk, Item, ReadOptions
from .keys import GroupedReader, KeyMap, StepGrouper
from .tfrecord import Decoder, decode_event, event_decoder, masked_crc32c

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


# The events with scalars that one poll of a file framed: (byte offset, wall time, step, [(tag, value)]).
Events: TypeAlias = list[tuple[int, float, int, list[tuple[str, float]]]]

# Bytes read per file per poll: a few hundred thousand scalar events, a few MB in memory.
READ_CHUNK_BYTES = 4 * 1024 * 1024
# A scalar event is ~50 bytes; images and graphs can be MBs. A longer record cannot be framed by
# a bounded buffer and is reported rather than buffered without end.
MAX_RECORD_BYTES = 256 * 1024 * 1024
_HEADER = 12  # uint64 length + uint32 crc
# A length's CRC depends on the length alone: remember those of the short records (scalars are ~50 bytes).
_HEADER_CRCS: dict[int, int] = {}
_HEADER_CACHE_LENGTHS = 1 << 14

# --- one event file ---------------------------------------------------------------------------------


class EventFile:
    """Follows one event file by byte offset; state is plain JSON (`state_dict`)."""

    def __init__(self, path: str, chunk_bytes: int = READ_CHUNK_BYTES, decoder: Decoder | None = None) -> None:
        self.path = path
        self.decode = decoder or decode_event
        self.name = os.path.basename(path)
        self.chunk_bytes = chunk_bytes
        self.offset = 0  # first byte of the first record not yet applied
        self.inode: tuple[int, int] | None = None
        self.size_seen = -1
        self.mtime = 0.0
        self.broken: str | None = None  # the invalid_log message once a record fails its CRC
        self.scalar_tags: set[str] = set()
        self.events = 0  # records framed (any event: a graph, an image, a scalar)

    def state_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "offset": self.offset,
            "inode": list(self.inode) if self.inode else None,
            "broken": self.broken,
            "scalar_tags": sorted(self.scalar_tags),
            "events": self.events,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.offset = int(state["offset"])
        self.inode = tuple(state["inode"]) if state["inode"] else None
        self.broken = state["broken"]
        self.scalar_tags = set(state["scalar_tags"])
        self.events = int(state.get("events") or 0)

    def pending_bytes(self) -> int:
        return max(0, self.size_seen - self.offset) if self.broken is None else 0

    def poll(self) -> tuple[Events, str | None, bool, bool, str | None]:
        """(events [(offset, wall, step, scalars)], error message, grew, more, reset)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return [], None, False, False, None
        except OSError as exc:
            raise InvalidRunError(f"{self.path}: cannot stat: {exc.strerror or exc}") from None
        if not _stat.S_ISREG(st.st_mode):
            raise InvalidRunError(f"{self.path}: not a regular file")
        reset = None
        inode = (st.st_dev, st.st_ino)
        if self.inode is not None and inode != self.inode:
            reset = "replaced"
        elif st.st_size < self.offset:
            reset = "truncated"
        if reset:
            self.offset, self.size_seen, self.broken = 0, -1, None
            self.scalar_tags = set()
        self.inode = inode
        self.mtime = st.st_mtime
        if st.st_size == self.size_seen or self.broken is not None:
            self.size_seen = st.st_size
            return [], None, False, False, reset
        grew = True
        events: Events = []
        start = self.offset
        want = min(st.st_size - start, self.chunk_bytes)
        if want <= 0:
            self.size_seen = st.st_size
            return events, None, grew, False, reset
        with open(self.path, "rb") as f:
            f.seek(start)
            buf = f.read(want)
            error = self._frame(buf, start, events, f, st.st_size)
        more = error is None and self.offset < st.st_size and self.offset > start
        if not more:
            self.size_seen = st.st_size
        return events, error, grew, more, reset

    def _frame(self, buf: bytes, base: int, events: Events, f: BinaryIO, size: int) -> str | None:
        pos = 0
        n = len(buf)
        mv = memoryview(buf)
        crc = masked_crc32c
        tags = self.scalar_tags
        decode = self.decode
        header_crcs = _HEADER_CRCS
        while n - pos >= _HEADER:
            length = _U64.unpack_from(buf, pos)[0]
            want = header_crcs.get(length)
            if want is None:
                want = crc(mv[pos : pos + 8])
                if length < _HEADER_CACHE_LENGTHS:
                    header_crcs[length] = want
            if want != _U32.unpack_from(buf, pos + 8)[0]:
                return self._break(base + pos, "bad CRC of a record's length")
            end = pos + _HEADER + length + 4
            if end > n:
                if length > MAX_RECORD_BYTES:
                    return self._break(base + pos, f"record of {length} bytes (longer than {MAX_RECORD_BYTES})")
                if pos == 0 and base + end <= size:
                    # one record longer than the chunk: read it whole
                    f.seek(base)
                    buf = f.read(end)
                    mv = memoryview(buf)
                    n = len(buf)
                    if end > n:
                        break
                else:
                    break  # cut short: wait for (or read on to) its remaining bytes
            data_end = pos + _HEADER + length
            if crc(mv[pos + _HEADER : data_end]) != _U32.unpack_from(buf, data_end)[0]:
                return self._break(base + pos, "bad CRC of a record's data")
            try:
                wall, step, scalars = decode(buf, pos + _HEADER, data_end, tags)
            except ValueError as exc:
                return self._break(base + pos, f"record is not a TensorBoard Event ({exc})")
            if scalars:
                events.append((base + pos, wall, step, scalars))
            self.events += 1
            pos = end
        self.offset = base + pos
        return None

    def _break(self, offset: int, what: str) -> str:
        self.offset = offset
        # a file whose very first record fails is no event file at all: say which format was expected
        kind = "not a TensorBoard event file: " if offset == 0 and self.events == 0 else ""
        self.broken = f"{self.name}: {kind}{what} at byte {offset}"
        return self.broken


# --- a file or a directory of them ----------------------------------------------------------------


def is_event_file(name: str) -> bool:
    return "tfevents" in name


def _order(path: str) -> tuple[int, str]:
    # events.out.tfevents.<unix seconds>.<host>.<pid>.<n>[.v2]: by the timestamp, then the name
    parts = os.path.basename(path).split(".")
    i = parts.index("tfevents") if "tfevents" in parts else -1
    ts = parts[i + 1] if 0 <= i < len(parts) - 1 else ""
    return (int(ts) if ts.isdigit() else 0, os.path.basename(path))


def _first_wall(path: str) -> float:
    """The wall time of a file's first event (TensorBoard writes its version event at creation),
    else the timestamp in its name."""
    try:
        with open(path, "rb") as f:
            head = f.read(_HEADER + 256)
        length = _U64.unpack_from(head, 0)[0]
        if _HEADER + length <= len(head):
            wall = decode_event(head, _HEADER, _HEADER + length, set())[0]
            if wall > 0:
                return float(wall)
    except (OSError, ValueError, struct.error):
        pass
    return float(_order(path)[0])


def event_files(target: str, sessions: bool = False) -> list[str]:
    """The event files to read for `target` (a file, or a directory: its own, or one level down's:
    the newest subdirectory's, or with `sessions` every subdirectory's, by first event wall time)."""
    if not os.path.isdir(target):
        return [target]
    try:
        names = sorted(os.listdir(target))
    except OSError:
        return []
    own = [os.path.join(target, n) for n in names if is_event_file(n) and os.path.isfile(os.path.join(target, n))]
    if own:
        return sorted(own, key=_order)
    groups: list[list[str]] = []
    for n in names:
        sub = os.path.join(target, n)
        if not os.path.isdir(sub):
            continue
        try:
            files = [os.path.join(sub, m) for m in os.listdir(sub) if is_event_file(m)]
        except OSError:
            continue
        if files:
            groups.append(sorted(files, key=_order))
    if not groups:
        return []
    if sessions:  # one run's launches: every one, the newest last
        return [p for g in sorted(groups, key=lambda g: (_first_wall(g[0]), g[0])) for p in g]
    return max(groups, key=lambda g: _order(g[-1]))


def open_reader(path: str, keys: KeyMap, read: ReadOptions, chunk_bytes: int | None = None) -> TensorBoardReader:
    return TensorBoardReader(path, keys, chunk_bytes or READ_CHUNK_BYTES, sessions=read.sessions)


class TensorBoardReader(GroupedReader):
    """Records of an event file or a directory of them (see the module docstring)."""

    def __init__(
        self,
        path: str,
        keys: KeyMap,
        chunk_bytes: int = READ_CHUNK_BYTES,
        decoder: str = "auto",
        sessions: bool = False,
    ) -> None:
        self.path = path
        self.sessions = sessions  # every launch subdirectory is a session (a run directory's folder)
        self.decode = event_decoder(decoder)
        self.name = os.path.basename(os.path.normpath(path))
        self.keys = keys
        self.chunk_bytes = chunk_bytes
        self.files: list[EventFile] = []
        self.grouper = StepGrouper(keys)
        self._source: str | None = None  # the file of the values in the grouper
        self._reported: set[str] = set()  # broken files already reported
        self._started: set[str] = set()  # files whose records were read (each new one: a new session)

    def _scan(self) -> list[Item]:
        paths = event_files(self.path, self.sessions)
        known = {f.path for f in self.files}
        if not paths:
            return []
        if not self.files or known & set(paths) or self.sessions:  # the same files, maybe a new one beside them
            self.files += [EventFile(p, self.chunk_bytes, self.decode) for p in paths if p not in known]
            return []
        # another directory holds the newest file (a relaunch): read it from its start
        items = self.grouper.flush()
        self.files = [EventFile(p, self.chunk_bytes, self.decode) for p in paths]
        self._source = None
        return items

    def poll(self) -> Chunk:
        """What the files hold beyond what was read (at most ~chunk_bytes of each file)."""
        chunk = Chunk()
        if not os.path.exists(self.path):
            chunk.exists = False
            return chunk
        chunk.items.extend(self._scan())
        for ef in self.files:
            events, error, grew, more, reset = ef.poll()
            chunk.grew |= grew
            chunk.more |= more
            if reset:
                chunk.reset = reset
            if events or error:
                if self._source != ef.path:
                    chunk.items.extend(self.grouper.flush())
                    self._source = ef.path
                if ef.path not in self._started:
                    if self._started:
                        chunk.items.append((f"{ef.name}:@{events[0][0] if events else ef.offset}", None))
                    self._started.add(ef.path)
                add = self.grouper.add
                name = ef.name
                out = chunk.items
                for off, wall, step, scalars in events:
                    where = f"{name}:@{off}"
                    for tag, value in scalars:
                        emitted = add(step, wall, tag, value, where)
                        if emitted:
                            out.extend(emitted)
                if error and ef.path not in self._reported:
                    self._reported.add(ef.path)
                    out.extend(self.grouper.flush())
                    out.append((f"{ef.name}:@{ef.offset}", error))
        if not chunk.grew and not chunk.more:
            chunk.items.extend(self.grouper.idle())
        return chunk

    def seen(self) -> str:
        """What the files held when no record came of them: `412 events, no scalar`."""
        if not self.files:
            return "no event file (in the folder or one level down)"
        n = sum(ef.events for ef in self.files)
        tags = sorted({t for ef in self.files for t in ef.scalar_tags})
        what = f"{n} event{'s' if n != 1 else ''} in {len(self.files)} file{'s' if len(self.files) != 1 else ''}"
        return f"{what}, {'scalar tags ' + ', '.join(tags[:8]) if tags else 'no scalar'}"

    def torn(self) -> str | None:
        for ef in self.files:
            if ef.pending_bytes():
                return f"{ef.name}: the record being written at byte {ef.offset}"
        return None

    def mtime(self) -> float:
        return max((ef.mtime for ef in self.files), default=0.0)

    def pending_bytes(self) -> int:
        return sum(ef.pending_bytes() for ef in self.files)

    def state_dict(self) -> dict[str, Any]:
        return {
            "files": [ef.state_dict() for ef in self.files],
            "grouper": self.grouper.state_dict(),
            "source": self._source,
            "reported": sorted(self._reported),
            "started": sorted(self._started),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.files = []
        for s in state["files"]:
            ef = EventFile(s["path"], self.chunk_bytes, self.decode)
            ef.load_state_dict(s)
            self.files.append(ef)
        self.grouper.load_state_dict(state["grouper"])
        self._source = state["source"]
        self._reported = set(state["reported"])
        self._started = set(state["started"])
