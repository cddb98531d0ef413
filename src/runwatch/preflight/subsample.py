"""`runwatch subsample DATA --n N [--stratify FIELD] [--balanced] [--seed S] --out PATH`.

Draws N rows of a JSONL, CSV or Parquet data set (a file or a directory of one format, read by the
same reader as `audit-data`, `corpus.Corpus`) and writes them in the input's format, in input order.

- **Which rows.** Every row gets a priority: a keyed hash (BLAKE2b, the seed as key) of its bytes
  (the JSONL line as read; the CSV fields; the Parquet row as sorted-key JSON). A value's k rows
  are its k rows of lowest priority (bottom-k sampling; equal priorities, i.e. duplicate rows, go by
  input order). So the choice depends only on the seed and the rows themselves: no random-number
  stream, the same rows whatever the read order, chunking or file size, and a row that is picked
  from a file is picked again from any part of that file that holds it and has the same counts.
- **How many per value.** With `--stratify FIELD`: in proportion to each value's share of the
  readable rows, rounded by largest remainder so the counts sum to N (ties: more rows first, then
  first seen); with `--balanced`, equal counts, and a value with fewer rows than its equal share
  gives all of them while the rest is shared equally among the others (water-filling), so N rows
  are still written when the data set holds them. A value short of its share gets a warning.
  Without `--stratify`, N rows of the whole set. When the set holds N rows or fewer, all are written.
- **Streaming.** With `--stratify` the input is read twice: once to count the rows of each value,
  once to keep each value's k lowest priorities in a bounded heap; without it, once. Memory holds
  the N kept rows and one counter per value, whatever the input's size.
- **Rows that cannot be read** (malformed JSON, invalid UTF-8, a CSV row with the wrong number of
  fields) and rows without FIELD are never drawn; they are counted and named in a warning.
- **Outputs**, each written under a temporary name and renamed into place: PATH, then PATH.json with
  the counts per value (also on stdout): `{"input", "out", "format", "n", "seed", "stratify",
  "balanced", "rows", "written", "counts": [{"value", "rows", "written", "short"}], "unreadable",
  "missing_field", "seconds"}`.

Standard library only (Parquet: pyarrow, extra `data`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import heapq
import json
import math
import os
import sys
import time
from collections.abc import Callable, Hashable, Iterator
from typing import Any, TypeAlias, TypedDict, TypeVar

from ..errors import DataError, UsageError
from ..files import atomic_write_text
from .corpus import FORMATS, Corpus, Row, open_writer

# Progress on a TTY at most this often.
PROGRESS_SECONDS = 1.0
_MISSING = object()

_K = TypeVar("_K", bound=Hashable)
# A value's stratum: (its JSON type, the value), ("float", "nan") for every NaN, ("json", its
# sorted-key JSON text) for a list or an object; None without --stratify.
_Key: TypeAlias = "tuple[str, Any] | None"


class CountRow(TypedDict):
    """One value's line of the report's `counts`."""

    value: Any  # the value as JSON data (None without --stratify)
    rows: int
    written: int
    short: bool


class SubsampleReport(TypedDict):
    """What `subsample` returns and writes to PATH.json."""

    input: str
    out: str
    format: str
    n: int
    seed: int
    stratify: str | None
    balanced: bool
    rows: int
    written: int
    counts: list[CountRow]
    unreadable: dict[str, int]
    missing_field: int
    seconds: float


@dataclasses.dataclass(frozen=True)
class SubsampleOptions:
    """What to draw (validated on construction)."""

    n: int
    out: str
    stratify: str | None = None
    balanced: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        if type(self.n) is not int or self.n < 1:
            raise UsageError(f"subsample.n must be an int >= 1, got {self.n!r}")
        if type(self.seed) is not int or not 0 <= self.seed < 2**63:
            raise UsageError(f"subsample.seed must be an int in [0, 2**63), got {self.seed!r}")
        if self.balanced and self.stratify is None:
            raise UsageError("subsample.balanced needs --stratify FIELD (equal counts per value of FIELD)")
        if self.stratify is not None and (not isinstance(self.stratify, str) or not self.stratify):
            raise UsageError(f"subsample.stratify must be a field name, got {self.stratify!r}")
        ext = os.path.splitext(self.out)[1].lower()
        if ext not in FORMATS:
            raise UsageError(f"subsample.out must end in .jsonl, .csv or .parquet, got {self.out!r}")


def allocate(counts: dict[_K, int], n: int, balanced: bool = False) -> dict[_K, int]:
    """Rows to draw per value: proportional by largest remainder, or balanced by water-filling.

    `counts` in first-seen order (ties go to more rows, then to the value seen first). The result
    sums to min(n, Σ counts) and never exceeds a value's count.
    """
    total = sum(counts.values())
    if n >= total:
        return dict(counts)
    order = {k: i for i, k in enumerate(counts)}
    if not balanced:
        alloc = {k: n * c // total for k, c in counts.items()}  # exact integer floors
        left = n - sum(alloc.values())
        by_remainder = sorted(counts, key=lambda k: (-(n * counts[k] % total), -counts[k], order[k]))
        for k in by_remainder[:left]:
            alloc[k] += 1
        return alloc
    alloc = {}
    active = list(counts)
    left = n
    while active:
        share = left // len(active)
        small = [k for k in active if counts[k] <= share]
        if not small:
            break
        for k in small:
            alloc[k] = counts[k]
            left -= counts[k]
        active = [k for k in active if k not in alloc]
    if active:
        share, extra = divmod(left, len(active))
        for i, k in enumerate(sorted(active, key=lambda k: (-counts[k], order[k]))):
            alloc[k] = share + (1 if i < extra else 0)
    return {k: alloc[k] for k in counts}


class _Reader:
    """The rows of a corpus as (index, stratum key, item to write, bytes to hash), bad rows counted."""

    def __init__(self, corpus: Corpus, field: str | None) -> None:
        self.corpus = corpus
        self.field = field
        self.col: int | None = None
        if corpus.format == "csv" and corpus.header is not None and field is not None:
            self.col = corpus.header.index(field)
        self.unreadable: dict[str, int] = {}
        self.first_unreadable: str | None = None
        self.missing = 0
        self.first_missing: str | None = None
        self.keys_seen: dict[str, None] = {}  # the fields of rows without FIELD (named when none has it)
        self.display: dict[_Key, Any] = {}  # stratum key -> the value as JSON data

    def _value(self, row: Row) -> Any:
        fmt = self.corpus.format
        if fmt == "jsonl":
            return row.payload[1].get(self.field, _MISSING)
        if fmt == "csv":
            return row.payload[self.col]
        return row.payload.get(self.field, _MISSING)

    def _key(self, value: Any) -> _Key:
        # 1, 1.0 and true are different labels (Python's == would merge them); NaN is one value
        key: tuple[str, Any]
        if type(value) in (str, int, bool) or value is None:
            key = (type(value).__name__, value)
        elif type(value) is float:
            key = ("float", "nan") if math.isnan(value) else ("float", value)
        else:
            text = json.dumps(value, sort_keys=True, default=str)
            key = ("json", text)
        if key not in self.display:
            if key == ("float", "nan"):
                self.display[key] = "NaN"
            elif type(value) in (str, int, bool, float) or value is None:
                self.display[key] = value
            else:
                self.display[key] = json.loads(text)  # the `else` above: a list or an object
        return key

    def rows(self) -> Iterator[tuple[int, _Key, Any]]:
        index = -1
        for row in self.corpus.rows():
            index += 1
            if row.error is not None:
                self.unreadable[row.error[0]] = self.unreadable.get(row.error[0], 0) + 1
                self.first_unreadable = self.first_unreadable or row.where
                continue
            key: _Key = None
            if self.field is not None:
                value = self._value(row)
                if value is _MISSING:
                    self.missing += 1
                    self.first_missing = self.first_missing or row.where
                    if len(self.keys_seen) < MAX_KEYS_SHOWN and isinstance(row.payload, (dict, tuple)):
                        fields = row.payload[1] if self.corpus.format == "jsonl" else row.payload
                        if isinstance(fields, dict):
                            self.keys_seen.update(dict.fromkeys(list(fields)[:MAX_KEYS_SHOWN]))
                    continue
                key = self._key(value)
            yield index, key, row.payload[0] if self.corpus.format == "jsonl" else row.payload


# How many keys a "no row has the field" message names.
MAX_KEYS_SHOWN = 20


def _row_bytes(fmt: str, item: Any) -> bytes:
    """What a row's priority is the hash of: the JSONL line, the CSV fields, the Parquet row as JSON."""
    if fmt == "jsonl":
        line: str = item
        return line.encode("utf-8", "surrogatepass")
    if fmt == "csv":
        return "\x1f".join(item).encode("utf-8", "surrogateescape")
    return json.dumps(item, sort_keys=True, default=str).encode("utf-8", "surrogatepass")


def _progress(label: str) -> Callable[[int], None] | None:
    if not sys.stderr.isatty():
        return None
    start = time.monotonic()
    last = [start]

    def show(rows: int) -> None:
        now = time.monotonic()
        if now - last[0] >= PROGRESS_SECONDS:
            last[0] = now
            sys.stderr.write(f"\rsubsample: {label}: {rows:,} rows, {rows / (now - start):,.0f} rows/s   ")
            sys.stderr.flush()

    return show


def subsample(data: str, options: SubsampleOptions, warn: Callable[[str], None] | None = None) -> SubsampleReport:
    """Draw `options.n` rows of `data` into `options.out` (and its counts into `out.json`); return the counts."""
    warn = warn or (lambda message: print(f"subsample: warning: {message}", file=sys.stderr))
    t0 = time.monotonic()
    corpus = Corpus(data, None, make_ids=False)
    out_ext = os.path.splitext(options.out)[1].lower()
    if FORMATS[out_ext] != corpus.format:
        raise UsageError(
            f"subsample: --out {options.out} is {FORMATS[out_ext]}, the input is {corpus.format};"
            f" write a .{corpus.format} file"
        )
    if os.path.exists(options.out) and any(os.path.samefile(options.out, f) for f in corpus.files):
        raise UsageError(f"subsample: --out {options.out} is the input")
    parent = os.path.dirname(os.path.abspath(options.out))
    if not os.path.isdir(parent):
        raise UsageError(f"subsample: --out {options.out}: no directory {parent}")
    field = options.stratify
    if field is not None:
        columns = (
            corpus.header if corpus.format == "csv" else corpus.schema.names if corpus.format == "parquet" else None
        )
        if columns is not None and field not in columns:
            raise DataError(f"{corpus.files[0]}: no column {field!r} (columns: {', '.join(columns)})")

    # Pass 1 (stratified only): rows per value.
    counts: dict[_Key, int] = {}
    if field is not None:
        reader = _Reader(corpus, field)
        show = _progress("counting")
        for i, (_, key, _) in enumerate(reader.rows()):
            counts[key] = counts.get(key, 0) + 1
            if show is not None and not i % 65536:
                show(i)
        if not counts and reader.missing:  # a typo in the label's name must not look like success
            keys = list(reader.keys_seen)[:MAX_KEYS_SHOWN]
            raise DataError(f"{data}: no row has the field {field!r} (keys seen: {', '.join(keys) or 'none'})")
        alloc = allocate(counts, options.n, options.balanced)
    # Pass 2: the k rows of lowest priority per value, in bounded max-heaps (priorities negated).
    reader = _Reader(corpus, field)
    key_bytes = options.seed.to_bytes(8, "little")
    heaps: dict[_Key, list[tuple[int, int, Any]]] = {}  # (-priority, -index, item) per stratum
    seen: dict[_Key, int] = {}
    show = _progress("drawing")
    blake = hashlib.blake2b
    fmt = corpus.format
    for index, key, item in reader.rows():
        if show is not None and not index % 65536:
            show(index)
        seen[key] = seen.get(key, 0) + 1
        cap = alloc[key] if field is not None else options.n
        if cap <= 0:
            continue
        heap = heaps.get(key)
        if heap is None:
            heap = heaps[key] = []
        if field is not None and cap >= counts[key]:
            heap.append((0, -index, item))  # every row of this value is taken: no need to rank them
            continue
        prio = int.from_bytes(blake(_row_bytes(fmt, item), digest_size=8, key=key_bytes).digest(), "little")
        if len(heap) < cap:
            heapq.heappush(heap, (-prio, -index, item))
        elif prio < -heap[0][0]:  # equal priority: the earlier row (already kept) stays
            heapq.heapreplace(heap, (-prio, -index, item))
    if show is not None:
        sys.stderr.write("\n")
    if field is None:
        counts = seen
        alloc = {k: min(options.n, c) for k, c in counts.items()}
    kept = sorted((-neg_index, item) for heap in heaps.values() for _, neg_index, item in heap)
    if not seen:  # nothing to draw from: say why, and write nothing
        raise DataError(f"{data}: no readable row; {_why_none(reader)}")

    tmp = f"{options.out}.tmp-{os.getpid()}"
    try:
        writer = open_writer(corpus, tmp)
        try:
            for _, item in kept:
                writer.write(item)
        finally:
            writer.close()
        os.replace(tmp, options.out)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise

    total = sum(counts.values())
    equal = math.ceil(options.n / len(counts)) if counts else 0
    rows_out: list[CountRow] = []
    for key in counts:
        written = len(heaps.get(key, ()))
        share = (equal if options.balanced else options.n * counts[key] / total) if field is not None else options.n
        short = counts[key] < share
        rows_out.append(
            {
                "value": reader.display.get(key) if field is not None else None,
                "rows": counts[key],
                "written": written,
                "short": short,
            }
        )
    rows_out.sort(key=lambda r: (-r["rows"], json.dumps(r["value"], default=str)))
    seconds = time.monotonic() - t0
    report: SubsampleReport = {
        "input": data,
        "out": options.out,
        "format": corpus.format,
        "n": options.n,
        "seed": options.seed,
        "stratify": field,
        "balanced": options.balanced,
        "rows": total,
        "written": len(kept),
        "counts": rows_out,
        "unreadable": dict(sorted(reader.unreadable.items())),
        "missing_field": reader.missing,
        "seconds": seconds,
    }
    atomic_write_text(options.out + ".json", json.dumps(report, indent=2, allow_nan=False, ensure_ascii=False) + "\n")

    if total <= options.n:
        warn(f"{data} has {total:,} readable rows, not more than --n {options.n:,}: all of them written")
    elif options.balanced:
        for r in rows_out:
            if r["short"]:
                warn(
                    f"{field}={_show(r['value'])} has {r['rows']:,} rows, fewer than its equal share {equal:,}:"
                    " all of them written; the others make up the difference"
                )
    if reader.unreadable:
        what = ", ".join(f"{k} {v:,}" for k, v in sorted(reader.unreadable.items()))
        warn(
            f"{sum(reader.unreadable.values()):,} unreadable rows never drawn ({what}); first at {reader.first_unreadable}"
        )
    if reader.missing:
        warn(f"{reader.missing:,} rows without {field!r} never drawn; first at {reader.first_missing}")
    return report


def _why_none(reader: _Reader) -> str:
    """Why a corpus gave no row: its unreadable rows by reason, or rows without the field, or none."""
    if reader.unreadable:
        what = ", ".join(f"{k} {v:,}" for k, v in sorted(reader.unreadable.items(), key=lambda kv: -kv[1]))
        return f"{sum(reader.unreadable.values()):,} unreadable ({what}); first at {reader.first_unreadable}"
    if reader.missing:
        return f"{reader.missing:,} rows without {reader.field!r}; first at {reader.first_missing}"
    return "it is empty"


def _show(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def render(report: SubsampleReport) -> str:
    """The counts per value as a table, and what was written."""
    how = "of all rows"
    if report["stratify"] is not None:
        how = f"per {report['stratify']}, " + ("balanced" if report["balanced"] else "in proportion")
    lines = [
        f"subsample {report['input']} -> {report['out']}: {report['written']:,} of {report['rows']:,} rows"
        f" {how} (seed {report['seed']})"
    ]
    if report["stratify"] is not None:
        names = [_show(r["value"]) for r in report["counts"]]
        width = max([len(report["stratify"]), 5] + [len(n) for n in names])
        lines.append(f"{report['stratify']:<{width}}  {'rows':>12}  {'written':>10}")
        for name, r in zip(names, report["counts"]):
            note = "  all (short of its share)" if r["short"] else ""
            lines.append(f"{name:<{width}}  {r['rows']:>12,}  {r['written']:>10,}{note}")
        lines.append(f"{'total':<{width}}  {report['rows']:>12,}  {report['written']:>10,}")
    lines.append(f"wrote {report['out']} and {report['out']}.json in {report['seconds']:.1f}s")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `runwatch subsample`."""
    parser.add_argument("data", metavar="DATA", help="a .jsonl, .csv or .parquet file, or a directory of one format")
    parser.add_argument("--n", type=int, required=True, metavar="N", help="rows to write")
    parser.add_argument("--stratify", default=None, metavar="FIELD", help="draw per value of FIELD, in proportion")
    parser.add_argument("--balanced", action="store_true", help="with --stratify: equal counts per value")
    parser.add_argument(
        "--seed", type=int, default=0, metavar="S", help="the same seed draws the same rows (default 0)"
    )
    parser.add_argument("--out", required=True, metavar="PATH", help="the output file, in the input's format")
    parser.add_argument("--json", action="store_true", help="print the counts as JSON")


def run(args: argparse.Namespace) -> int:
    """`runwatch subsample`: exit 0 when written; 1 when the data cannot be read; 2 on bad options."""
    options = SubsampleOptions(n=args.n, out=args.out, stratify=args.stratify, balanced=args.balanced, seed=args.seed)
    report = subsample(args.data, options)
    print(json.dumps(report, indent=2, allow_nan=False, ensure_ascii=False) if args.json else render(report))
    return 0
