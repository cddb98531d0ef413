"""What a record puts on a run's charts and in its CSV, and the path to the final step.

    for key, value in record_values(rec, parser):      # ("loss", 2.31), ("lr", 3e-4), ...
        ...
    cut = session_cut(parser, rec)                      # the first record of a session: where it cuts
    for chunk in csv_chunks(target, maps):              # the run's CSV, streamed from its log
        ...

**Columns.** A record's values are keyed as the page's series and the CSV's columns are: `loss`,
`eval_loss`, `lr`, `grad_norm` (the mean), `grad_norm_max`, the throughput as the parser names
it (`RecordParser.throughput.column`: `tokens_per_second` where tokens are counted, schema v1;
`samples_per_second` for the log's own `sps`), and `eval_<metric>` for every eval metric; a
window's memory peaks (`RecordParser.windows`: the logger's records) as `mem_<name>`
(`mem_host_rss_peak_bytes`) and its GPU samples as `gpu<index>_memory_used_bytes` and
`gpu<index>_util_percent`.

**The path to the final step.** A session that starts below the steps already logged (a relaunch
from a checkpoint, a rollback) redoes them: its steps replace the earlier ones. Schema v1 says
where it resumed (`start.step` in run.json), so every step above that goes; other logs only show
the new session's first step, so every step from it on goes. The page's series (`Series.cut`)
and the CSV apply the same cut, so a chart never draws a line back in time and the CSV has one
row per step.

**The CSV** is read from the log itself, every record (the page's series are downsampled), in
two streaming passes through the one record reader (`records.iter_records`): the first finds
the columns present and where each session cuts the path, the second writes the rows. Memory is
bounded by the number of columns and sessions, not by the log. Standard library only.
"""

from __future__ import annotations

import contextlib
import csv
import io
import re
from collections.abc import Generator, Iterator
from typing import Any

from ...reading import Record, RecordParser, Target, iter_records, parser_for
from .series import Cut, keeps

# The leading columns, in this order; eval metrics (sorted) follow, and `time` ends the row.
COLUMNS = ("loss", "eval_loss", "lr", "grad_norm", "grad_norm_max", "tokens_per_second", "samples_per_second")
# Bytes of CSV gathered before a chunk is sent.
CHUNK_BYTES = 64 * 1024
# The memory names and GPU indexes taken from a record (anything else is not a column).
MEMORY_NAME = re.compile(r"[a-z0-9_]{1,64}")
MAX_GPU_INDEX = 63


def record_values(rec: Record, parser: RecordParser) -> Iterator[tuple[str, float]]:
    """The values `rec` (read by `parser`) carries, by column (absent values are left out; NaN is
    given as it is)."""
    if rec.kind == "train":
        if rec.loss is not None:
            yield "loss", rec.loss
        if rec.lr is not None:
            yield "lr", rec.lr
        if rec.grad_mean is not None:
            yield "grad_norm", rec.grad_mean
        if rec.grad_max is not None and rec.grad_max != rec.grad_mean:
            yield "grad_norm_max", rec.grad_max
        if rec.throughput is not None:
            yield parser.throughput.column, rec.throughput
    if rec.eval_loss is not None:
        yield "eval_loss", rec.eval_loss
    for name, value in (rec.metrics or {}).items():
        yield f"eval_{name}", value
    if parser.windows and rec.raw is not None:
        yield from system_values(rec.raw)


def system_values(raw: dict[str, Any]) -> Iterator[tuple[str, float]]:
    """A schema-v1 record's memory peaks and GPU samples (the optional `memory` and `gpus`), by
    column; values that are not counts (a bool, a negative number, a malformed sample) are left out."""
    memory = raw.get("memory")
    if type(memory) is dict:
        for name, value in memory.items():
            if type(value) is int and value >= 0 and MEMORY_NAME.fullmatch(name):
                yield f"mem_{name}", value
    gpus = raw.get("gpus")
    if type(gpus) is list:
        for g in gpus[: MAX_GPU_INDEX + 1]:
            if type(g) is not dict:
                continue
            i = g.get("index")
            if type(i) is not int or not 0 <= i <= MAX_GPU_INDEX:
                continue
            used, util = g.get("memory_used_bytes"), g.get("util_percent")
            if type(used) is int and used >= 0:
                yield f"gpu{i}_memory_used_bytes", used
            if (type(util) is int or type(util) is float) and 0 <= util <= 100:
                yield f"gpu{i}_util_percent", util


def session_cut(parser: RecordParser | None, rec: Record) -> Cut:
    """Where the session that `rec` starts cuts the path: above its run.json `start.step`
    (schema v1), else from its first step on."""
    start = parser.start_step(rec.session) if parser is not None else None
    if start is not None:
        return (start, True)
    return (rec.step, False)


def _closable(records: Iterator[Record]) -> Generator[Record, None, None]:
    """`records` as a generator whose close() closes the reader's files at once."""
    yield from records


def _cell(v: float | None) -> str:
    if v is None:
        return ""
    return repr(v) if type(v) is float else str(v)  # repr: the shortest text that reads back the same


def csv_chunks(target: Target, maps: dict[str, str] | None = None) -> Iterator[bytes]:
    """The run's CSV (UTF-8, a header, then one row per step on the path to the final step), in
    chunks of about 64 KiB. InvalidRunError or OSError when the log cannot be read; raised before
    the first chunk when the log cannot be opened at all."""
    parser = parser_for(target, maps)
    seen: dict[str, None] = {}
    cuts: list[Cut] = []
    session: str | None = None
    timed = False
    n = 0
    with contextlib.closing(_closable(iter_records(target, maps=maps, parser=parser))) as first:
        for rec in first:
            n += 1
            if rec.kind == "invalid":
                continue
            if rec.session != session:
                session = rec.session
                cuts.append(session_cut(parser, rec))
            for key, _ in record_values(rec, parser):
                seen[key] = None
            timed = timed or rec.time is not None
    # A session's steps stay up to the tightest cut of the sessions after it.
    limits: list[Cut | None] = [None] * len(cuts)
    tightest: Cut | None = None
    for i in range(len(cuts) - 1, -1, -1):
        limits[i] = tightest
        tightest = cuts[i] if tightest is None else min(tightest, cuts[i])
    columns = [c for c in COLUMNS if c in seen] + sorted(c for c in seen if c not in COLUMNS)
    if timed:
        columns.append("time")
    return _rows(target, maps, n, limits, columns)


def _rows(
    target: Target, maps: dict[str, str] | None, n: int, limits: list[Cut | None], columns: list[str]
) -> Iterator[bytes]:
    buf = io.StringIO()
    out = csv.writer(buf)
    out.writerow(["step", *columns])
    row: dict[str, float | None] = {}
    row_step: float | None = None
    index = -1
    session: str | None = None
    # The records the first pass saw, no more: a log that grew meanwhile keeps the header true.
    parser = parser_for(target, maps)
    with contextlib.closing(_closable(iter_records(target, maps=maps, parser=parser))) as second:
        for i, rec in enumerate(second):
            if i >= n:
                break
            if rec.kind == "invalid":
                continue
            if rec.session != session:
                session = rec.session
                index += 1
            limit = limits[index] if index < len(limits) else None
            if limit is not None and not keeps(limit, rec.step):
                continue
            values = list(record_values(rec, parser))
            if not values:
                continue
            if rec.step != row_step:
                if row_step is not None:
                    out.writerow([_cell(row_step), *(_cell(row.get(c)) for c in columns)])
                row_step, row = rec.step, {}
            if rec.time is not None and "time" not in row:
                row["time"] = rec.time  # the step's first record's, as its first point's on the page
            row.update(values)
            if buf.tell() >= CHUNK_BYTES:
                yield buf.getvalue().encode()
                buf.seek(0)
                buf.truncate()
    if row_step is not None:
        out.writerow([_cell(row_step), *(_cell(row.get(c)) for c in columns)])
    yield buf.getvalue().encode()
