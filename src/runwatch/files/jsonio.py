"""Strict JSON for every file runwatch reads and writes: the parser, its messages, the writer.

`strict_json` parses one document (UTF-8, no NaN/Infinity tokens), `json_problem` words what went
wrong, `loads` raises it as InvalidRunError naming where, `dumps` writes one compact line, and
`orjson_misread` says when the optional fast parser may have read a number differently. The
manifest and records checks (`schema`) build on these. Standard library only.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import InvalidRunError


def _reject_constant(token: str) -> Any:
    raise ValueError(f"{token} is not a valid JSON number")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def strict_json(text: str | bytes) -> Any:
    """One JSON document, strictly: UTF-8, no NaN/Infinity tokens; the parser of every log.

    Raises ValueError (UnicodeDecodeError and json.JSONDecodeError among them) or RecursionError
    unworded, for hot loops that handle a failure themselves; `loads` words them.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    return _DECODER.decode(text)


def json_problem(exc: BaseException) -> str:
    """What went wrong, in words, when parsing a JSON document raised `exc` (without the where).

    A ValueError (UnicodeDecodeError and json.JSONDecodeError included) or a RecursionError. The
    position is a column for one-line documents (log records) and a line and column otherwise.
    """
    if isinstance(exc, UnicodeDecodeError):
        return f"invalid UTF-8 at byte {exc.start}"
    if isinstance(exc, RecursionError):
        return "JSON nested too deeply"
    if isinstance(exc, json.JSONDecodeError):
        at = f"line {exc.lineno} column {exc.colno}" if exc.lineno > 1 else f"column {exc.colno}"
        return f"malformed JSON: {exc.msg} at {at}"
    return f"malformed JSON: {exc}"  # NaN/Infinity tokens, integers with more than 4300 digits


def loads(text: str | bytes, where: str, *, strict: bool = True) -> Any:
    """Parse one JSON document; InvalidRunError `<where>: <json_problem>` when it is not one.

    `strict` (schema v1, runwatch's own files): `strict_json`. Otherwise Python's `json.loads`,
    which takes the NaN/Infinity tokens that minimal telemetry and trainer_state.json may hold.
    """
    try:
        return strict_json(text) if strict else json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise InvalidRunError(f"{where}: {json_problem(exc)}") from None


# orjson (the optional fast parser of logs and corpora) reads an integer token outside
# [-2**63, 2**64) as a float (-9223372036854775809 -> -9.223372036854776e+18): a memory value that
# is a valid int would fail as a float, a loss would print differently. Such a token has 19 digits
# or more in a row; finding a run that long costs a C-level translate and search, a fraction of the
# parse, and only lines that have one are walked.
_WIDE = float(2**63)
_DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_RUN = b"0" * 19


def orjson_misread(raw: bytes | str, value: Any) -> bool:
    """True when orjson's `value` of `raw` may differ from the standard library's: parse it again.

    The one guard of every orjson reader. On text, encoding and translating bytes is ~10x faster
    than a regular expression search for 19 digits.
    """
    if type(raw) is str:
        raw = raw.encode("utf-8", "surrogatepass")
    if _LONG_RUN not in raw.translate(_DIGITS_TO_ZERO):
        return False
    stack = [value]
    while stack:
        v = stack.pop()
        t = type(v)
        if t is float:
            if not -_WIDE < v < _WIDE:
                return True
        elif t is dict:
            stack.extend(v.values())
        elif t is list:
            stack.extend(v)
    return False


# Built once: json.dumps with non-default options builds a new encoder per call (~7 us a record).
_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"), ensure_ascii=False)


def dumps(obj: Any) -> str:
    """One compact JSON line (without the newline); NaN/Infinity raise ValueError."""
    return _ENCODER.encode(obj)
