"""The last records of a run, in minimal-telemetry keys: what `tail_records` returns.

    recs, parser = last_records(resolve_target("runs/a"), 20)
    rows = [row for rec in recs for row in minimal_rows(rec, seq_len=None)]

The one place the agent tools read a run's records, through `source.RecordSource.tail`, as
`runwatch status` reads them: a JSONL log (schema v1 or minimal telemetry) is read back from its
end, so the cost is bounded by the records asked for, not by the log's size; other formats by a
pass keeping the last records. A record of no kind (a step with neither a loss nor eval values:
`{"step", "accuracy"}`, the Hugging Face Trainer's final summary) is kept as `{"step", "t"}`
where it moves the step on, so the last row's step is the step `status` says the log reached. A
row keeps at most `MAX_METRICS` eval metrics (the page charts as many), so one huge eval row
cannot crowd out the rest of an 8 KB answer. Standard library only.
"""

from __future__ import annotations

import math
import os
from typing import Any

from ...reading import Record, RecordParser, RecordSource, Target, reached
from ..serve.runs import MAX_METRICS as MAX_METRICS


def last_records(t: Target, n: int, maps: dict[str, str] | None = None) -> tuple[list[Record], RecordParser | None]:
    """The last `n` train, eval, fatal and other records of `t`'s log in log order, and the parser
    that read them (None when the log does not exist yet). A record of no kind below the step
    reached so far is left out (it never moves the step back: `source.reached`); so is a torn
    final line."""
    if n <= 0 or not os.path.exists(t.log_path):
        return [], None
    source = RecordSource(t, maps=maps)
    recs, _torn = source.tail(2 * n, _wanted)  # (room for the records of no kind left out)
    out: list[Record] = []
    step: int | float | None = None
    for rec in recs:
        if rec.kind == "other" and step is not None and rec.step < step:
            continue
        step = rec.step if step is None else reached(step, rec)
        out.append(rec)
    return out[-n:], source.parser


def _wanted(rec: Record) -> bool:
    return rec.kind in ("train", "eval", "fatal", "other")


def metrics_left_out(rec: Record, max_metrics: int = MAX_METRICS) -> int:
    """The eval metrics of `rec` that `minimal_rows` leaves out of its row."""
    return max(0, len(rec.metrics or ()) - max_metrics)


def seq_len_of(parser: RecordParser | None, rec: Record) -> int | None:
    """The sequence length of a schema-v1 record's session (samples = tokens / seq_len)."""
    if parser is None:
        return None
    entry = parser.entry(rec.session)
    seq_len = entry["recipe"].get("seq_len") if entry else None
    return seq_len if type(seq_len) is int and seq_len > 0 else None


def _num(v: float | None) -> float | str | None:
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


def minimal_rows(rec: Record, seq_len: int | None = None, max_metrics: int = MAX_METRICS) -> list[dict[str, Any]]:
    """`rec` in minimal-telemetry keys (`step`, `t`, `loss`, `lr`, `grad_norm`, `sps`, `eval_loss`,
    `eval_<metric>`, `FATAL`): one row, or two when a train record carries eval values (the eval
    values form their own row at the same step); a record of no kind is `{"step", "t"}`. Absent
    values are left out; non-finite ones are text; eval metrics past the first `max_metrics` too
    (`metrics_left_out` counts them)."""
    head: dict[str, Any] = {"step": rec.step}
    if rec.time is not None:
        head["t"] = rec.time
    if rec.kind == "fatal":
        return [{**head, "FATAL": rec.error}]
    if rec.kind == "other":
        return [head]
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
        for i, (name, value) in enumerate((rec.metrics or {}).items()):
            if i >= max_metrics:
                break
            row[f"eval_{name}"] = _num(value)
        rows.append(row)
    return rows
