"""Every tool result as strict JSON that fits an agent's context: at most `MAX_RESULT_BYTES`.

    text, doc = fit({"records": [...]}, cut="records", keep="tail")

A result travels twice in one MCP answer (as the text block and as the structured content), so
its size is counted as an MCP client receives it: the JSON text, that text once more as a JSON
string (quotes escaped), and the envelope around them. A result over the limit is cut and stays
valid JSON with a `truncated` note that says what was left out: first the items of its main list
(`cut`; the newest or the first kept, by `keep`), then long strings, then whole keys, largest
first. Standard library only.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

# The contract's bound on one tool result, structured content included (UTF-8 bytes).
MAX_RESULT_BYTES = 8192
# The MCP envelope around the two copies: {"content":[{"type":"text","text":...}],
# "structuredContent":...,"isError":false}, with room to spare for a client's own framing.
ENVELOPE_BYTES = 160
# A string longer than this is the first thing shortened after the main list.
LONG_STRING_CHARS = 300


def strict(obj: Any) -> Any:
    """`obj` with every non-finite float as text (`"nan"`, `"inf"`): strict JSON has no NaN."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {str(k): strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict(v) for v in obj]
    return obj


def _text(obj: Any) -> str:
    return json.dumps(obj, allow_nan=False, ensure_ascii=False, separators=(",", ":"))


def result_bytes(text: str, doc: Any = None) -> int:
    """What a result whose JSON text is `text` (of `doc`) weighs as an MCP answer: the text as a
    JSON string, the structured copy, the envelope. Measured as the SDK writes them (pydantic's
    serializer: `6e-05` becomes `0.00006`, a few bytes longer) when it is installed, so that the
    bound holds as the client measures it; else as the standard library writes them."""
    wire = _wire()
    if wire is not None and doc is not None:
        return len(wire(text)) + len(wire(doc)) + ENVELOPE_BYTES
    return len(text.encode()) + len(json.dumps(text, ensure_ascii=False).encode()) + ENVELOPE_BYTES


def _wire() -> Callable[[Any], bytes] | None:
    """pydantic's JSON serializer (what the MCP SDK writes with), or None where it is not installed."""
    try:
        from pydantic_core import to_json
    except ImportError:
        return None
    return to_json


def _fits(obj: Any, limit: int) -> bool:
    return result_bytes(_text(obj), obj) <= limit


def fit(
    doc: dict[str, Any],
    *,
    cut: str | None = None,
    keep: str = "head",
    total: int | None = None,
    limit: int = MAX_RESULT_BYTES,
) -> tuple[str, dict[str, Any]]:
    """`(text, doc)`: `doc` as strict JSON text of at most `limit` bytes as an MCP answer.

    When it is too large, or `doc[cut]` holds fewer items than `total` (a list already capped by
    count): the list `doc[cut]` keeps as many items as fit (its first ones, or its last with
    `keep="tail"`), then strings are shortened, then keys left out; `truncated` says what.
    """
    doc = strict(doc)
    items = doc.get(cut) if cut is not None else None
    total = len(items) if total is None and isinstance(items, list) else total
    if _fits(doc, limit):
        if isinstance(items, list) and total is not None and len(items) < total:
            doc["truncated"] = f"{len(items)} of {total} {cut} shown (at most {len(items)})"
        return _text(doc), doc
    notes: list[str] = []
    if cut is not None and isinstance(items, list) and items and total is not None:
        lo, hi = 0, len(items)  # the largest count that fits, by bisection (each probe serializes once)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            trial = {
                **doc,
                cut: items[-mid:] if keep == "tail" else items[:mid],
                "truncated": _note(cut, mid, total, limit),
            }
            if _fits(trial, limit):
                lo = mid
            else:
                hi = mid - 1
        doc = {**doc, cut: (items[-lo:] if lo else []) if keep == "tail" else items[:lo]}
        notes.append(_note(cut, lo, total, limit))
        if _fits({**doc, "truncated": "; ".join(notes)}, limit):
            doc["truncated"] = "; ".join(notes)
            return _text(doc), doc
    doc = _shorten(doc)
    if _fits({**doc, "truncated": "; ".join([*notes, "long strings shortened"])}, limit):
        doc["truncated"] = "; ".join([*notes, "long strings shortened"])
        return _text(doc), doc
    left_out: list[str] = []
    for key in sorted(doc, key=lambda k: len(_text(doc[k])), reverse=True):
        if key == "truncated":
            continue
        doc = {k: v for k, v in doc.items() if k != key}
        left_out.append(key)
        note = "; ".join([*notes, "long strings shortened", "left out: " + ", ".join(left_out)])
        if _fits({**doc, "truncated": note}, limit):
            doc["truncated"] = note
            return _text(doc), doc
    doc = {"truncated": f"the result is over {limit} bytes"}
    return _text(doc), doc


def _note(cut: str, shown: int, total: int, limit: int) -> str:
    return f"{shown} of {total} {cut} shown ({limit}-byte limit)"


def _shorten(obj: Any) -> Any:
    if isinstance(obj, str) and len(obj) > LONG_STRING_CHARS:
        return obj[: LONG_STRING_CHARS - 3] + "..."
    if isinstance(obj, dict):
        return {k: _shorten(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_shorten(v) for v in obj]
    return obj
