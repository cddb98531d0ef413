"""TensorBoard's record format: CRC-32C, and the few `Event` protobuf fields that scalars need.

A record of an event file is `uint64 length | uint32 masked CRC-32C of length | data | uint32
masked CRC-32C of data`, the data an `Event` protocol buffer. This module computes the CRCs and
decodes an Event's wall time, step and scalar summaries with the standard library. Two optional
accelerators are used when importable, with the same results: the `crc32c` package (`pip install
'runwatch[fast]'`) and TensorBoard's own compiled `event_pb2` (`runwatch[tensorboard]`), the faster
decoder when protobuf runs compiled (measured in benchmarks/bench_readers.py).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from typing import Any, TypeAlias

# An event file's bytes as read (or a view of them).
Buffer: TypeAlias = bytes | memoryview
# A decoded Event: (wall time, step, [(tag, value)] of its scalars).
Event: TypeAlias = tuple[float, int, list[tuple[str, float]]]
# decode(buf, start, end, scalar_tags) -> Event: `decode_event`, or `event_pb2`'s (`event_decoder`).
Decoder: TypeAlias = Callable[[Buffer, int, int, set[str]], Event]

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
        _W = [
            [t[3][i & 0xFF] ^ t[2][i >> 8] for i in range(65536)],
            [t[1][i & 0xFF] ^ t[0][i >> 8] for i in range(65536)],
        ]
    return _W


def _crc32c_py(data: Buffer, crc: int = 0) -> int:
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
    from crc32c import crc32c as _crc32c_c
except ImportError:  # pragma: no cover - depends on the environment
    crc32c: Callable[[Buffer], int] = _crc32c_py
else:
    crc32c = _crc32c_c


def masked_crc32c(data: Buffer) -> int:
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


def _varint(buf: Buffer, pos: int) -> tuple[int, int]:
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


def _fields(buf: Buffer, pos: int, end: int) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value or (start, end)) of one message's fields.

    The value's type follows the wire type: the varint (0), the offset of the fixed-size value
    (1, 5), or the (start, end) offsets of the bytes (2); `Any`, since the callers test the wire
    type and index the value straight away."""
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


def _tensor_scalar(buf: Buffer, start: int, end: int) -> float | None:
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
            content = bytes(buf[v[0] : v[1]])
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


def _is_scalar_metadata(buf: Buffer, start: int, end: int) -> bool:
    for f, wt, v in _fields(buf, start, end):
        if f == 1 and wt == 2:  # plugin_data
            for ff, wwt, vv in _fields(buf, v[0], v[1]):
                if ff == 1 and wwt == 2 and bytes(buf[vv[0] : vv[1]]) == b"scalars":
                    return True
        elif f == 4 and wt == 0 and v == 1:  # data_class: DATA_CLASS_SCALAR
            return True
    return False


_NUMERIC_CONTENT = {_DT_FLOAT: "<f", _DT_DOUBLE: "<d", _DT_INT32: "<i", _DT_INT64: "<q", _DT_HALF: "<e"}


def _decode_event_pb2(event_cls: Any, buf: Buffer, start: int, end: int, scalar_tags: set[str]) -> Event:
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


def event_decoder(prefer: str = "auto") -> Decoder:
    """The decoder to use: TensorBoard's compiled `event_pb2` when importable and compiled
    ("auto"; measured ~2x faster a scalar event), else this module's `decode_event`."""
    if prefer in ("auto", "pb2"):
        try:
            from google.protobuf.internal import api_implementation
            from tensorboard.compat.proto import event_pb2
        except ImportError:
            event_pb2 = None
        if event_pb2 is not None and (prefer == "pb2" or api_implementation.Type() in ("upb", "cpp")):
            cls = event_pb2.Event
            return lambda buf, start, end, tags: _decode_event_pb2(cls, buf, start, end, tags)
        if prefer == "pb2":
            raise ImportError("tensorboard's event_pb2 is not importable: pip install 'runwatch[tensorboard]'")
    return decode_event


def decode_event(buf: Buffer, start: int, end: int, scalar_tags: set[str]) -> Event:
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
                            tag = bytes(buf[vv[0] : vv[1]]).decode("utf-8", "replace")
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
