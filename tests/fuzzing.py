"""Shared pieces of the fuzz tests: the example budget, a real base run, and log mutations.

RUNWATCH_FUZZ_EXAMPLES sets the examples a property (`make test`: 150, `make fuzz`: 5000).
"""

from __future__ import annotations

import json
import os
import re
import tempfile

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from runwatch import RunLogger

EXAMPLES = int(os.environ.get("RUNWATCH_FUZZ_EXAMPLES", "150"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=EXAMPLES <= 150,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
RECIPE = {"batch_size": 2, "seq_len": 4, "gradient_accumulation_steps": 1, "qk_clip_threshold": 50.0}


def _make_base() -> dict[str, bytes]:
    """A real two-session run with every event and optional field, from the logger."""
    with tempfile.TemporaryDirectory() as tmp:
        d = os.path.join(tmp, "run")
        with RunLogger(d, recipe=RECIPE, window=2, hardware={"device": "cpu"}) as log:
            for i in range(5):
                log.step(
                    loss=1.0 / (i + 1),
                    lr=0.1,
                    grad_norm=float(i),
                    clipped=i % 2 == 0,
                    qk_observed=4,
                    qk_clipped=i % 3,
                    qk_max_logit=40.0 + i,
                )
            state = log.state_dict()
            log.val(loss=0.5, metrics={"auroc": 0.8})
            log.checkpoint(os.path.join(tmp, "ckpt"), seconds=0.1, bytes=10, verified=True)
        with RunLogger(d, recipe=RECIPE, window=3, hardware={}, resume_from=state) as log:
            for i in range(7):
                log.step(loss=0.4, lr=0.05, grad_norm=2.0, skipped=i == 2)
            log.val(loss=0.45)
        with open(os.path.join(d, "metrics.jsonl"), "rb") as f, open(os.path.join(d, "run.json"), "rb") as g:
            return {"metrics.jsonl": f.read(), "run.json": g.read()}


BASE = _make_base()


# --- mutations ------------------------------------------------------------------------------------

HOSTILE_VALUES = [
    b"1e400",
    b"-1e400",
    b"1E-400",
    b"-0",
    b"0.0",
    b"18446744073709551616",
    b"-9223372036854775809",
    b"1" + b"0" * 4300,
    b"1" + b"0" * 5000,
    b"NaN",
    b"Infinity",
    b"-Infinity",
    b"true",
    b"false",
    b"null",
    b'"1"',
    b'""',
    b"[]",
    b"{}",
    b'"\\ud800"',
    b'"\\u0000"',
    b"[" * 200 + b"]" * 200,
    b"[" * 5000 + b"]" * 5000,
    b'{"a":' * 3000 + b"1" + b"}" * 3000,
]
INVALID_BYTES = [b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x00", b"\r", b"\x1b[2J"]
NUMBER = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)


def lines_of(data: bytes) -> list[bytes]:
    return data.splitlines(keepends=True)


@st.composite
def mutated(draw, data: bytes) -> bytes:
    """`data` after 1-4 mutations: byte-level and structural ones, and schema-shaped ones."""
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(
            st.sampled_from(
                [
                    "flip",
                    "truncate",
                    "duplicate",
                    "delete",
                    "swap",
                    "number",
                    "value",
                    "bytes",
                    "field",
                    "drop",
                    "crlf",
                    "blank",
                    "no_newline",
                ]
            )
        )
        lines = lines_of(data)
        if not data:
            data = draw(st.binary(max_size=64))
            continue
        i = draw(st.integers(0, len(lines) - 1))
        line = lines[i]
        if kind == "flip":
            pos = draw(st.integers(0, len(data) - 1))
            data = data[:pos] + bytes([data[pos] ^ (1 << draw(st.integers(0, 7)))]) + data[pos + 1 :]
        elif kind == "truncate":
            data = data[: draw(st.integers(0, len(data)))]
        elif kind == "duplicate":
            lines.insert(draw(st.integers(0, len(lines))), line)
            data = b"".join(lines)
        elif kind == "delete":
            del lines[i]
            data = b"".join(lines)
        elif kind == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
            data = b"".join(lines)
        elif kind == "number":
            spans = [m.span() for m in NUMBER.finditer(line)]
            if spans:
                a, b = draw(st.sampled_from(spans))
                lines[i] = line[:a] + draw(st.sampled_from(HOSTILE_VALUES)) + line[b:]
                data = b"".join(lines)
        elif kind == "bytes":
            pos = draw(st.integers(0, len(data)))
            data = data[:pos] + draw(st.sampled_from(INVALID_BYTES)) + data[pos:]
        elif kind in ("value", "field", "drop"):
            try:
                rec = json.loads(line)
            except (ValueError, RecursionError):  # an earlier mutation broke or deep-nested it
                continue
            target = rec
            while isinstance(target, dict) and target and draw(st.booleans()):
                key = draw(st.sampled_from(sorted(target)))
                if not isinstance(target[key], dict):
                    break
                target = target[key]
            if not isinstance(target, dict):
                continue
            if kind == "drop" and target:
                del target[draw(st.sampled_from(sorted(target)))]
            elif kind == "value" and target:
                target[draw(st.sampled_from(sorted(target)))] = draw(json_values)
            else:
                target[draw(st.text(max_size=6))] = draw(json_values)
            try:
                text = json.dumps(rec, allow_nan=True).encode() + (b"\n" if line.endswith(b"\n") else b"")
            except RecursionError:
                continue
            lines[i] = text
            data = b"".join(lines)
        elif kind == "crlf":
            data = data.replace(b"\n", b"\r\n")
        elif kind == "blank":
            lines.insert(draw(st.integers(0, len(lines))), draw(st.sampled_from([b"\n", b" \n", b"\t\n", b"\x00\n"])))
            data = b"".join(lines)
        elif kind == "no_newline":
            data = data.rstrip(b"\n")
    return data
