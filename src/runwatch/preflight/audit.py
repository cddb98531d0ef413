"""`runwatch audit-data`: check every row of a corpus in parallel before training on it.

    runwatch audit-data corpus.jsonl --field code --check python --normalize ast --out audit/
    runwatch audit-data train.jsonl --field text --check text --require label --out audit/

A row is rejected when it cannot be read (a truncated or invalid line, a missing `--field`), when a
`--require`d field is absent or empty (None, "", only whitespace, [] or {}), or when its check
(python, json, text: non-empty text, MODULE:FUNCTION) or normalizer fails. The command exits 1 when
any row was rejected (0 only when every row passed), its first line saying how many were kept and
rejected and the most common reason.

A row is kept only when its check AND its normalizer succeed, so the normalized variant never holds
a row that fell back to its raw text. Outputs in `--out` (temp names, renamed at the end, so a
failed audit leaves no partial file): `kept.raw.<ext>` and `kept.normalized.<ext>` (same rows, same
order, same ids), `rejected.jsonl` (`id`, `stage`, `reason`, `message`, `where`), and `audit.json`.

Parallelism: the main process reads rows, cuts them into chunks of `chunk_rows`, and has the
worker pool of `auditpool` check them; results come back in chunk order, so the output is the same
whatever `--workers`. A row that runs past `--row-timeout` gets its worker killed and replaced and
is rejected with reason `timeout`; a worker that dies on a row (a crash in C code, the OOM killer),
with reason `worker_died`. `--workers 0` checks in this process, without a pool (and so without
`--row-timeout`): the serial baseline. The check of one row is `rowcheck.make_checker`'s
(re-exported here, with `CHECKS`, `NORMALIZERS` and `CheckResult`).

Standard library only; pyarrow (Parquet) and black (`--normalize black`) when asked for.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import sys
import time
from typing import TypedDict, cast

from ..errors import UsageError
from ..files import atomic_write_text
from .auditpool import Pool, RowBatch, chunked, run_pool
from .corpus import Corpus, JsonlWriter, Row, Writer, open_writer
from .rowcheck import CHECKS as CHECKS
from .rowcheck import NORMALIZERS as NORMALIZERS
from .rowcheck import CheckResult as CheckResult
from .rowcheck import make_checker as make_checker

# ~256 snippets of a few hundred bytes take 5-30 ms to parse: long enough that the pickling and
# the round trip (~0.2 ms) stay a few percent, short enough that a killed worker redoes little.
DEFAULT_CHUNK_ROWS = 256
# A few-kB snippet parses in well under a millisecond; 10 s is a pathological row, not a slow one.
DEFAULT_ROW_TIMEOUT = 10.0


class AuditReport(TypedDict):
    """audit.json: what `audit` writes and returns."""

    input: str
    format: str
    files: int
    field: str
    check: str
    normalize: str
    workers: int
    rows: int
    kept: int
    rejected: int
    fraction_kept: float | None
    rejected_by_reason: dict[str, dict[str, int]]  # stage -> reason -> rows
    blank_lines: int
    made_ids: bool
    seconds: float
    rows_per_second: float | None
    out: str
    outputs: dict[str, str]  # raw, normalized, rejected, audit -> file name


def _default_workers() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


@dataclasses.dataclass(frozen=True)
class AuditOptions:
    """What to check and where to write (validated on construction)."""

    field: str
    check: str = "python"
    normalize: str = "none"
    out: str | None = None  # None: INPUT + ".audit" beside the input
    workers: int = dataclasses.field(default_factory=_default_workers)  # all usable cores
    row_timeout: float = DEFAULT_ROW_TIMEOUT
    id_field: str | None = None
    require: tuple[str, ...] = ()  # fields every row must have, present and non-empty
    chunk_rows: int = DEFAULT_CHUNK_ROWS
    progress: bool | None = None  # None: a progress bar when stderr is a TTY

    def __post_init__(self) -> None:
        if not isinstance(self.field, str) or not self.field:
            raise UsageError(f"audit.field must be a non-empty column name, got {self.field!r}")
        if self.check not in CHECKS and (not isinstance(self.check, str) or self.check.count(":") != 1):
            raise UsageError(f"audit.check must be python, json, text or MODULE:FUNCTION, got {self.check!r}")
        if not isinstance(self.require, tuple) or not all(isinstance(f, str) and f for f in self.require):
            raise UsageError(f"audit.require must be field names, got {self.require!r}")
        if self.normalize not in NORMALIZERS:
            raise UsageError(f"audit.normalize must be one of none, ast, black, got {self.normalize!r}")
        if type(self.workers) is not int or self.workers < 0:
            raise UsageError(f"audit.workers must be an int >= 0, got {self.workers!r}")
        t = self.row_timeout
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
            raise UsageError(f"audit.row_timeout must be a finite number > 0, got {t!r}")
        if type(self.chunk_rows) is not int or self.chunk_rows < 1:
            raise UsageError(f"audit.chunk_rows must be an int >= 1, got {self.chunk_rows!r}")


# --- the audit ----------------------------------------------------------------------------------


class _Progress:
    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._last = 0.0
        self._t0 = time.monotonic()

    def update(self, rows: int, kept: int, final: bool = False) -> None:
        now = time.monotonic()
        if not self.enabled or (not final and now - self._last < 0.2):
            return
        self._last = now
        rate = rows / max(now - self._t0, 1e-9)
        share = f"{100.0 * kept / rows:.1f}% kept" if rows else ""
        sys.stderr.write(f"\raudit-data: {rows:,} rows  {share}  {rate:,.0f} rows/s ")
        if final:
            sys.stderr.write("\n")
        sys.stderr.flush()


def _out_dir(input_path: str, options: AuditOptions) -> str:
    out = options.out or os.path.normpath(input_path) + ".audit"
    if os.path.isdir(input_path):
        inside = os.path.commonpath([os.path.abspath(out), os.path.abspath(input_path)]) == os.path.abspath(input_path)
        if inside:
            raise UsageError(f"--out {out}: inside the input directory {input_path}; a rerun would read the outputs")
    return out


def audit(input_path: str, options: AuditOptions) -> AuditReport:
    """Audit `input_path`; write the outputs into the output directory; return audit.json's content."""
    corpus = Corpus(input_path, options.field, options.id_field)
    out = _out_dir(input_path, options)
    process = make_checker(options.check, options.normalize)  # fails here, once, on a bad --check
    os.makedirs(out, exist_ok=True)
    names = {
        "raw": f"kept.raw.{corpus.ext}",
        "normalized": f"kept.normalized.{corpus.ext}",
        "rejected": "rejected.jsonl",
        "audit": "audit.json",
    }
    tmp = {k: os.path.join(out, f".{v}.tmp-{os.getpid()}") for k, v in names.items() if k != "audit"}
    progress = _Progress(sys.stderr.isatty() if options.progress is None else options.progress)
    counts: dict[str, dict[str, int]] = {}
    stats = {"rows": 0, "kept": 0}
    t0 = time.perf_counter()
    writers: list[Writer] = []
    pool: Pool | None = None
    done = False
    try:
        raw_w = open_writer(corpus, tmp["raw"])
        writers.append(raw_w)
        norm_w = open_writer(corpus, tmp["normalized"])
        writers.append(norm_w)
        rej_w = JsonlWriter(tmp["rejected"])
        writers.append(rej_w)

        def emit(chunk: RowBatch) -> None:
            for row, result in zip(chunk.rows, chunk.results):
                stats["rows"] += 1
                if row.error is not None:
                    result = ("read", row.error[0], row.error[1])
                elif options.require:
                    result = _required(corpus, row, options.require) or result
                if isinstance(result, tuple):
                    stage, reason, message = result
                    by_stage = counts.setdefault(stage, {})
                    by_stage[reason] = by_stage.get(reason, 0) + 1
                    rej_w.write(
                        json.dumps(
                            {"id": row.id, "stage": stage, "reason": reason, "message": message, "where": row.where},
                            ensure_ascii=False,
                            default=str,
                        )
                    )
                    continue
                stats["kept"] += 1
                raw = corpus.raw_item(row)
                raw_w.write(raw)
                norm_w.write(raw if result is None else corpus.normalized_item(row, result))
            progress.update(stats["rows"], stats["kept"])

        chunks = chunked(corpus.rows(), options.chunk_rows)
        if options.workers == 0:
            noop = _noop
            for chunk_rows in chunks:
                chunk = RowBatch(chunk_rows)
                for k, row in enumerate(chunk_rows):
                    if row.error is None:
                        chunk.results[k] = process(cast(str, row.text), noop)  # a readable row has its text
                emit(chunk)
        else:
            pool = Pool(options.workers, options.check, options.normalize, options.row_timeout)
            run_pool(pool, chunks, emit)
        for w in writers:
            w.close()
        writers.clear()
        seconds = time.perf_counter() - t0
        rows = stats["rows"]
        report: AuditReport = {
            "input": input_path,
            "format": corpus.format,
            "files": len(corpus.files),
            "field": options.field,
            "check": options.check,
            "normalize": options.normalize,
            "workers": options.workers,
            "rows": rows,
            "kept": stats["kept"],
            "rejected": rows - stats["kept"],
            "fraction_kept": stats["kept"] / rows if rows else None,
            "rejected_by_reason": {stage: dict(sorted(r.items())) for stage, r in sorted(counts.items())},
            "blank_lines": corpus.blank_lines,
            "made_ids": corpus.made_ids,
            "seconds": seconds,
            "rows_per_second": rows / seconds if seconds > 0 else None,
            "out": out,
            "outputs": names,
        }
        # audit.json marks a finished audit: it goes first and comes back last, so that it never
        # stands beside outputs it does not describe.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(out, names["audit"]))
        for key in ("raw", "normalized", "rejected"):
            os.replace(tmp[key], os.path.join(out, names[key]))
        atomic_write_text(os.path.join(out, names["audit"]), json.dumps(report, indent=2, allow_nan=False) + "\n")
        progress.update(rows, stats["kept"], final=True)
        done = True
        return report
    finally:
        if pool is not None:
            pool.close(kill=not done)
        for w in writers:
            try:
                w.close()
            except Exception:  # already failing; the temp files go next
                pass
        for path in tmp.values():
            if os.path.exists(path):
                os.unlink(path)


def _noop(stage: int) -> None:
    return None


_ABSENT = object()


def _value(corpus: Corpus, row: Row, name: str) -> object:
    """The value of field `name` in a readable row, `_ABSENT` when the row has no such field."""
    if corpus.format == "jsonl":
        obj = row.payload[1]
        return obj.get(name, _ABSENT) if isinstance(obj, dict) else _ABSENT
    if corpus.format == "csv":
        header = corpus.header or []
        if name not in header:
            return _ABSENT
        fields = row.payload
        return fields[header.index(name) + (len(fields) - len(header))]  # (a made id comes first)
    return row.payload.get(name, _ABSENT) if isinstance(row.payload, dict) else _ABSENT


def _required(corpus: Corpus, row: Row, require: tuple[str, ...]) -> tuple[str, str, str] | None:
    """The rejection of a row that lacks a `--require`d field or holds an empty one, else None."""
    for name in require:
        value = _value(corpus, row, name)
        if value is _ABSENT:
            return ("require", f"missing_{name}", f"no field {name!r}")
        if value is None or (
            isinstance(value, (str, list, dict)) and not (value.strip() if isinstance(value, str) else value)
        ):
            return ("require", f"empty_{name}", f"field {name!r} is empty ({json.dumps(value)})")
    return None


def most_common(report: AuditReport) -> tuple[str, str, int] | None:
    """(stage, reason, rows) of the most common reason a row was rejected; None when none was."""
    best: tuple[str, str, int] | None = None
    for stage, reasons in report["rejected_by_reason"].items():
        for reason, n in reasons.items():
            if best is None or n > best[2]:
                best = (stage, reason, n)
    return best


def summary_line(report: AuditReport) -> str:
    """The first line: kept and rejected, and the most common reason."""
    top = most_common(report)
    head = f"audit-data: {report['kept']:,} of {report['rows']:,} rows kept, {report['rejected']:,} rejected"
    if top is None:
        return head + ": every row passed"
    return head + f"; most common: {top[0]} {top[1]} ({top[2]:,} rows); see {report['out']}/rejected.jsonl"


# --- the command line -----------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `runwatch audit-data`."""
    parser.add_argument("input", metavar="INPUT", help="a .jsonl, .csv or .parquet file, or a directory of them")
    parser.add_argument("--field", required=True, metavar="NAME", help="the text column to check")
    parser.add_argument(
        "--check",
        default="python",
        metavar="python|json|MODULE:FUNCTION",
        help="python (ast.parse), json, text (non-empty text), or a function that returns None or raises"
        " (default python)",
    )
    parser.add_argument("--normalize", default="none", choices=NORMALIZERS, help="none, ast (parse+unparse), black")
    parser.add_argument("--out", default=None, metavar="DIR", help="output directory (default INPUT.audit)")
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="worker processes (default: all usable cores; 0: in this process, no --row-timeout)",
    )
    parser.add_argument(
        "--row-timeout",
        type=float,
        default=DEFAULT_ROW_TIMEOUT,
        metavar="S",
        help=f"seconds before a row is cut off (default {DEFAULT_ROW_TIMEOUT:g})",
    )
    parser.add_argument(
        "--id-field",
        default=None,
        metavar="NAME",
        help="the id column (default: 'id' where present, else the row number)",
    )
    parser.add_argument(
        "--require",
        action="append",
        default=None,
        metavar="FIELD",
        help="a field every row must have, present and non-empty (repeatable)",
    )
    parser.add_argument("--json", action="store_true", help="print audit.json's content")


def render(report: AuditReport) -> str:
    """The text report."""
    frac = report["fraction_kept"]
    lines = [
        summary_line(report),
        f"audit of {report['input']} ({report['format']}, {report['files']} file(s)), field {report['field']!r},"
        f" check {report['check']}, normalize {report['normalize']}",
        f"  rows      {report['rows']:,}"
        + (f" (+{report['blank_lines']} blank lines)" if report["blank_lines"] else ""),
        f"  kept      {report['kept']:,}" + (f" ({100.0 * frac:.2f}%)" if frac is not None else ""),
        f"  rejected  {report['rejected']:,}",
    ]
    for stage, reasons in report["rejected_by_reason"].items():
        for reason, n in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"    {stage}: {reason}  {n:,}")
    rate = report["rows_per_second"]
    lines.append(
        f"  time      {report['seconds']:.2f}s"
        + (f" ({rate:,.0f} rows/s," if rate else " (")
        + f" {report['workers']} workers)"
    )
    lines.append(f"  outputs   {report['out']}/{{{', '.join(report['outputs'].values())}}}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """`runwatch audit-data`: exit 0 when every row passed, 1 when any was rejected or the audit could not run."""
    kwargs = {} if args.workers is None else {"workers": args.workers}
    options = AuditOptions(
        field=args.field,
        check=args.check,
        normalize=args.normalize,
        out=args.out,
        row_timeout=args.row_timeout,
        id_field=args.id_field,
        require=tuple(args.require or ()),
        **kwargs,
    )
    report = audit(args.input, options)
    print(json.dumps(report, indent=2, allow_nan=False) if args.json else render(report))
    return 1 if report["rejected"] else 0
