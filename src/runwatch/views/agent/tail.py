"""The last records of a run, in minimal-telemetry keys: what `tail_records` returns.

    recs = last_records(resolve_target("runs/a"), 20)
    rows = [row for rec in recs for row in minimal_rows(rec, seq_len=None)]

The one place the agent tools read a run's records, through `source.RecordSource.tail`, as
`runwatch status` reads them: a JSONL log (schema v1 or minimal telemetry) is read back from its
end, so the cost is bounded by the records asked for, not by the log's size; other formats by a
pass keeping the last records. Standard library only.
"""

from __future__ import annotations

import math
import os
from typing import Any

from ...reading.records import Record, RecordParser, Target
from ...reading.source import RecordSource

__all__ = ["last_records", "minimal_rows", "seq_len_of"]


def last_records(t: Target, n: int, maps: dict[str, str] | None = None) -> tuple[list[Record], RecordParser | None]:
    """The last `n` train, eval and fatal records of `t`'s log in log order, and the parser that
    read them (None when the log does not exist yet). A torn final line is left out."""
    if n <= 0 or not os.path.exists(t.log_path):
        return [], None
    source = RecordSource(t, maps=maps)
    recs, _torn = source.tail(n, _wanted)
    return recs, source.parser


def _wanted(rec: Record) -> bool:
    return rec.kind in ("train", "eval", "fatal")


def seq_len_of(parser: RecordParser | None, rec: Record) -> int | None:
    """The sequence length of a schema-v1 record's session (samples = tokens / seq_len)."""
    if parser is None or parser.mode != "v1":
        return None
    entry = parser.entry(rec.session)
    seq_len = entry["recipe"].get("seq_len") if entry else None
    return seq_len if type(seq_len) is int and seq_len > 0 else None


def _num(v: float | None) -> float | str | None:
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


def minimal_rows(rec: Record, seq_len: int | None = None) -> list[dict[str, Any]]:
    """`rec` in minimal-telemetry keys (`step`, `t`, `loss`, `lr`, `grad_norm`, `sps`, `eval_loss`,
    `eval_<metric>`, `FATAL`): one row, or two when a train record carries eval values (the eval
    values form their own row at the same step). Absent values are left out; non-finite ones are text."""
    head: dict[str, Any] = {"step": rec.step}
    if rec.time is not None:
        head["t"] = rec.time
    if rec.kind == "fatal":
        return [{**head, "FATAL": rec.error}]
    rows: list[dict[str, Any]] = []
    if rec.kind == "train":
        row = dict(head)
        row["loss"] = _num(rec.loss)
        if rec.lr is not None:
            row["lr"] = _num(rec.lr)
        if rec.grad_mean is not None:
            row["grad_norm"] = _num(rec.grad_mean)
        elif rec.nonfinite_grads:
            row["grad_norm"] = "nan"
        if rec.throughput is not None:
            # minimal telemetry and other tools' logs: samples/s; schema v1: tokens/s over the sequence length
            sps = rec.throughput if seq_len is None else rec.throughput / seq_len
            row["sps"] = _num(sps)
        rows.append(row)
    if rec.eval_loss is not None or rec.metrics:
        row = dict(head)
        if rec.eval_loss is not None:
            row["eval_loss"] = _num(rec.eval_loss)
        for name, value in (rec.metrics or {}).items():
            row[f"eval_{name}"] = _num(value)
        rows.append(row)
    return rows
