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
with the newest one (Lightning's `version_N/`, the HF Trainer's `runs/<date>_<host>/`). Files are
read in order of the timestamp in their name; every file after the first starts a new session
(a relaunch writes a new file).

CRC-32C and the few protobuf fields needed are decoded here with the standard library. Two
optional accelerators are used when importable, with the same results: the `crc32c` package
(`pip install 'runwatch[fast]'`, ~7x faster a record) and TensorBoard's own `event_pb2` with a
compiled protobuf runtime (`runwatch[tensorboard]`, ~2x faster to decode; benchmarks/README.md).
"""

from __future__ import annotations

import os
import stat as _stat
import struct
from typing import Any

from ..errors import InvalidRunError
from . import Chunk, Item
from .keys import KeyMap, StepGrouper

__all__ = ["crc32c", "masked_crc32c", "decode_event", "event_decoder", "EventFile", "TensorBoardReader", "event_files", "is_event_file"]

# Bytes read per file per poll: a few hundred thousand scalar events, a few MB in memory.
READ_CHUNK_BYTES = 4 * 1024 * 1024
# A scalar event is ~50 bytes; images and graphs can be MBs. A longer record cannot be framed by
# a bounded buffer and is reported rather than buffered without end.
MAX_RECORD_BYTES = 256 * 1024 * 1024
_HEADER = 12  # uint64 length + uint32 crc
# A length's CRC depends on the length alone: remember those of the short records (scalars are ~50 bytes).
_HEADER_CRCS: dict[int, int] = {}
_HEADER_CACHE_LENGTHS = 1 << 14
_MASK_DELTA = 0xA282EAD8

# --- CRC-32C (Castagnoli), reflected polynomial 0x82F63B78 ------------------------------------------

_T8: list[int] = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _T8.append(_c)
_W: list[list[int]] | None = None  # 16-bit tables for 4 bytes a step, built on first use


def _wide_tables() -> list[list[int]]:
    # t[k][b]: the register after byte b followed by k zero bytes; a 32-bit word's low and high
    # halves then index one 65536-entry table each (about 10% faster than a byte at a time).
    global _W
    if _W is None:
        t = [_T8]
        for _ in range(3):
            t.append([(c >> 8) ^ _T8[c & 0xFF] for c in t[-1]])
        _W = [[t[3][i & 0xFF] ^ t[2][i >> 8] for i in range(65536)],
              [t[1][i & 0xFF] ^ t[0][i >> 8] for i in range(65536)]]
    return _W


def _crc32c_py(data: bytes | memoryview, crc: int = 0) -> int:
    crc ^= 0xFFFFFFFF
    mv = memoryview(data)
    n = len(mv) & ~3
    if n >= 64 and struct.pack("=I", 1) == b"\x01\x00\x00\x00":  # little-endian words
        lo, hi = _wide_tables()
        for w in mv[:n].cast("I"):
            c = crc ^ w
            crc = lo[c & 0xFFFF] ^ hi[c >> 16]
        mv = mv[n:]
    t = _T8
    for b in mv:
        crc = t[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


try:  # optional: a C implementation of the same function (runwatch[fast])
    from crc32c import crc32c as _crc32c_c  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - depends on the environment
    _crc32c_c = None

crc32c = _crc32c_c if _crc32c_c is not None else _crc32c_py


def masked_crc32c(data: bytes | memoryview) -> int:
    """TensorFlow's masked CRC-32C of a record's length or data."""
    x = crc32c(data)
    return (((x >> 15) | (x << 17)) + _MASK_DELTA) & 0xFFFFFFFF


# --- protobuf: the few fields of Event / Summary / TensorProto that scalars need ------------------

_DOUBLE = struct.Struct("<d")
_FLOAT = struct.Struct("<f")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


class _Malformed(Exception):
    pass


def _varint(buf: Any, pos: int) -> tuple[int, int]:
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    result = b & 0x7F
    shift = 7
    pos += 1
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise _Malformed("varint longer than 10 bytes")


def _fields(buf: Any, pos: int, end: int):
    """(field number, wire type, value or (start, end)) of one message's fields."""
    while pos < end:
        key, pos = _varint(buf, pos)
        field, wt = key >> 3, key & 7
        if wt == 0:
            v, pos = _varint(buf, pos)
            yield field, 0, v
        elif wt == 2:
            n, pos = _varint(buf, pos)
            if pos + n > end:
                raise _Malformed(f"field {field} runs past its message")
            yield field, 2, (pos, pos + n)
            pos += n
        elif wt == 1:
            yield field, 1, pos
            pos += 8
        elif wt == 5:
            yield field, 5, pos
            pos += 4
        else:
            raise _Malformed(f"field {field} has wire type {wt}")
    if pos != end:
        raise _Malformed("a field runs past the record")


# TensorProto dtypes whose one value is a number
_DT_FLOAT, _DT_DOUBLE, _DT_INT32, _DT_INT64, _DT_HALF = 1, 2, 3, 9, 19


def _tensor_scalar(buf: Any, start: int, end: int) -> float | None:
    dtype = 0
    content = None
    dims = False
    value: float | None = None
    for f, wt, v in _fields(buf, start, end):
        if f == 1 and wt == 0:
            dtype = v
        elif f == 2 and wt == 2:
            dims = any(ff == 2 for ff, _, _ in _fields(buf, v[0], v[1]))
        elif f == 4 and wt == 2:
            content = bytes(buf[v[0]:v[1]])
        elif f == 5:  # float_val: packed or not
            value = _FLOAT.unpack_from(buf, v if wt == 5 else v[0])[0] if (wt == 5 or v[1] - v[0] >= 4) else value
        elif f == 6:
            value = _DOUBLE.unpack_from(buf, v if wt == 1 else v[0])[0] if (wt == 1 or v[1] - v[0] >= 8) else value
        elif f in (7, 10) and wt in (0, 2):
            raw = v if wt == 0 else (_varint(buf, v[0])[0] if v[1] > v[0] else None)
            if raw is not None:
                bits = 32 if f == 7 else 64
                value = float(raw - (1 << 64) if raw >= 1 << 63 else raw) if bits == 64 else float(_s32(raw))
    if dims:
        return None  # not a one-value tensor
    if content is not None:
        fmt = _NUMERIC_CONTENT.get(dtype)
        if fmt is None or len(content) != struct.calcsize(fmt):
            return None
        return float(struct.unpack(fmt, content)[0])
    if dtype not in (_DT_FLOAT, _DT_DOUBLE, _DT_INT32, _DT_INT64):
        return None
    return value


def _s32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


def _is_scalar_metadata(buf: Any, start: int, end: int) -> bool:
    for f, wt, v in _fields(buf, start, end):
        if f == 1 and wt == 2:  # plugin_data
            for ff, wwt, vv in _fields(buf, v[0], v[1]):
                if ff == 1 and wwt == 2 and bytes(buf[vv[0]:vv[1]]) == b"scalars":
                    return True
        elif f == 4 and wt == 0 and v == 1:  # data_class: DATA_CLASS_SCALAR
            return True
    return False


_NUMERIC_CONTENT = {_DT_FLOAT: "<f", _DT_DOUBLE: "<d", _DT_INT32: "<i", _DT_INT64: "<q", _DT_HALF: "<e"}


def _decode_event_pb2(event_cls: Any, buf: Any, start: int, end: int,
                      scalar_tags: set[str]) -> tuple[float, int, list[tuple[str, float]]]:
    """`decode_event` through TensorBoard's compiled `Event` message."""
    try:
        e = event_cls.FromString(bytes(buf[start:end]))
    except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError and friends
        raise ValueError(str(exc) or "not an Event") from None
    out: list[tuple[str, float]] = []
    for v in e.summary.value:
        kind = v.WhichOneof("value")
        if kind == "simple_value":
            out.append((v.tag, v.simple_value))
        elif kind == "tensor":
            md = v.metadata
            if md.plugin_data.plugin_name == "scalars" or md.data_class == 1:
                scalar_tags.add(v.tag)
            if v.tag in scalar_tags:
                t = v.tensor
                if t.tensor_shape.dim:
                    continue
                if t.tensor_content:
                    fmt = _NUMERIC_CONTENT.get(t.dtype)
                    if fmt is not None and len(t.tensor_content) == struct.calcsize(fmt):
                        out.append((v.tag, float(struct.unpack(fmt, t.tensor_content)[0])))
                elif t.dtype == _DT_FLOAT and t.float_val:
                    out.append((v.tag, t.float_val[0]))
                elif t.dtype == _DT_DOUBLE and t.double_val:
                    out.append((v.tag, t.double_val[0]))
                elif t.dtype == _DT_INT32 and t.int_val:
                    out.append((v.tag, float(t.int_val[0])))
                elif t.dtype == _DT_INT64 and t.int64_val:
                    out.append((v.tag, float(t.int64_val[0])))
    return e.wall_time, e.step, out


def event_decoder(prefer: str = "auto") -> Any:
    """The decoder to use: TensorBoard's compiled `event_pb2` when importable and compiled
    ("auto"; measured ~2x faster a scalar event), else this module's `decode_event`."""
    if prefer in ("auto", "pb2"):
        try:
            from google.protobuf.internal import api_implementation  # type: ignore[import-not-found]
            from tensorboard.compat.proto import event_pb2  # type: ignore[import-not-found]
        except ImportError:
            event_pb2 = None
        if event_pb2 is not None and (prefer == "pb2" or api_implementation.Type() in ("upb", "cpp")):
            cls = event_pb2.Event
            return lambda buf, start, end, tags: _decode_event_pb2(cls, buf, start, end, tags)
        if prefer == "pb2":
            raise ImportError("tensorboard's event_pb2 is not importable: pip install 'runwatch[tensorboard]'")
    return decode_event


def decode_event(buf: Any, start: int, end: int, scalar_tags: set[str]) -> tuple[float, int, list[tuple[str, float]]]:
    """An Event's (wall time, step, scalars). `scalar_tags` remembers tensor tags whose metadata
    said `scalars`. Raises ValueError on a malformed message."""
    wall = 0.0
    step = 0
    out: list[tuple[str, float]] = []
    try:
        for f, wt, v in _fields(buf, start, end):
            if f == 1 and wt == 1:
                wall = _DOUBLE.unpack_from(buf, v)[0]
            elif f == 2 and wt == 0:
                step = v - (1 << 64) if v >= 1 << 63 else v
            elif f == 5 and wt == 2:  # summary
                for sf, swt, sv in _fields(buf, v[0], v[1]):
                    if sf != 1 or swt != 2:
                        continue
                    tag = None
                    simple = None
                    tensor = None
                    scalar_meta = False
                    for vf, vwt, vv in _fields(buf, sv[0], sv[1]):
                        if vf == 1 and vwt == 2:
                            tag = bytes(buf[vv[0]:vv[1]]).decode("utf-8", "replace")
                        elif vf == 2 and vwt == 5:
                            simple = _FLOAT.unpack_from(buf, vv)[0]
                        elif vf == 8 and vwt == 2:
                            tensor = vv
                        elif vf == 9 and vwt == 2:
                            scalar_meta = _is_scalar_metadata(buf, vv[0], vv[1])
                    if tag is None:
                        continue
                    if simple is not None:
                        out.append((tag, simple))
                    elif tensor is not None:
                        if scalar_meta:
                            scalar_tags.add(tag)
                        if tag in scalar_tags:
                            x = _tensor_scalar(buf, tensor[0], tensor[1])
                            if x is not None:
                                out.append((tag, x))
    except (_Malformed, IndexError, struct.error) as exc:
        raise ValueError(str(exc) or "truncated field") from None
    return wall, step, out


# --- one event file ---------------------------------------------------------------------------------


class EventFile:
    """Follows one event file by byte offset; state is plain JSON (`state_dict`)."""

    def __init__(self, path: str, chunk_bytes: int = READ_CHUNK_BYTES, decoder: Any = None) -> None:
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

    def state_dict(self) -> dict:
        return {"path": self.path, "offset": self.offset, "inode": list(self.inode) if self.inode else None,
                "broken": self.broken, "scalar_tags": sorted(self.scalar_tags)}

    def load_state_dict(self, state: dict) -> None:
        self.offset = int(state["offset"])
        self.inode = tuple(state["inode"]) if state["inode"] else None  # type: ignore[assignment]
        self.broken = state["broken"]
        self.scalar_tags = set(state["scalar_tags"])

    def pending_bytes(self) -> int:
        return max(0, self.size_seen - self.offset) if self.broken is None else 0

    def poll(self) -> tuple[list[tuple[int, float, int, list]], str | None, bool, bool, str | None]:
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
        events: list[tuple[int, float, int, list]] = []
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

    def _frame(self, buf: bytes, base: int, events: list, f: Any, size: int) -> str | None:
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
                want = crc(mv[pos:pos + 8])
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
            if crc(mv[pos + _HEADER:data_end]) != _U32.unpack_from(buf, data_end)[0]:
                return self._break(base + pos, "bad CRC of a record's data")
            try:
                wall, step, scalars = decode(buf, pos + _HEADER, data_end, tags)
            except ValueError as exc:
                return self._break(base + pos, f"record is not a TensorBoard Event ({exc})")
            if scalars:
                events.append((base + pos, wall, step, scalars))
            pos = end
        self.offset = base + pos
        return None

    def _break(self, offset: int, what: str) -> str:
        self.offset = offset
        self.broken = f"{self.name}: {what} at byte {offset}"
        return self.broken


# --- a file or a directory of them ----------------------------------------------------------------


def is_event_file(name: str) -> bool:
    return "tfevents" in name


def _order(path: str) -> tuple:
    # events.out.tfevents.<unix seconds>.<host>.<pid>.<n>[.v2]: by the timestamp, then the name
    parts = os.path.basename(path).split(".")
    i = parts.index("tfevents") if "tfevents" in parts else -1
    ts = parts[i + 1] if 0 <= i < len(parts) - 1 else ""
    return (int(ts) if ts.isdigit() else 0, os.path.basename(path))


def event_files(target: str) -> list[str]:
    """The event files to read for `target` (a file, or a directory: its own or one level down's)."""
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
    return max(groups, key=lambda g: _order(g[-1]))


class TensorBoardReader:
    """Records of an event file or a directory of them (see the module docstring)."""

    def __init__(self, path: str, keys: KeyMap, chunk_bytes: int = READ_CHUNK_BYTES, decoder: str = "auto") -> None:
        self.path = path
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
        paths = event_files(self.path)
        known = {f.path for f in self.files}
        if not paths:
            return []
        if not self.files or known & set(paths):  # the same files, maybe a new one beside them
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
            chunk.items.extend(self.grouper.settled())
        return chunk

    def finish(self) -> list[Item]:
        """The step still held back (the end of a replay, or the process has ended)."""
        return self.grouper.flush()

    def torn(self) -> str | None:
        for ef in self.files:
            if ef.pending_bytes():
                return f"{ef.name}: the record being written at byte {ef.offset}"
        return None

    def mtime(self) -> float:
        return max((ef.mtime for ef in self.files), default=0.0)

    def state_dict(self) -> dict:
        return {"files": [ef.state_dict() for ef in self.files], "grouper": self.grouper.state_dict(),
                "source": self._source, "reported": sorted(self._reported), "started": sorted(self._started)}

    def load_state_dict(self, state: dict) -> None:
        self.files = []
        for s in state["files"]:
            ef = EventFile(s["path"], self.chunk_bytes, self.decode)
            ef.load_state_dict(s)
            self.files.append(ef)
        self.grouper.load_state_dict(state["grouper"])
        self._source = state["source"]
        self._reported = set(state["reported"])
        self._started = set(state["started"])

    def close(self) -> None:
        pass
