"""`runwatch audit-data`: check every row of a corpus in parallel before training on it.

    runwatch audit-data corpus.jsonl --field code --check python --normalize ast --out audit/

A row is kept only when its check AND its normalizer succeed, so the normalized variant never holds
a row that fell back to its raw text. Outputs in `--out` (temp names, renamed at the end, so a
failed audit leaves no partial file): `kept.raw.<ext>` and `kept.normalized.<ext>` (same rows, same
order, same ids), `rejected.jsonl` (`id`, `stage`, `reason`, `message`, `where`), and `audit.json`.

Parallelism: the main process reads rows, cuts them into chunks of `chunk_rows`, sends only the
texts of a chunk to an idle worker, and writes results back in chunk order, so the output is the
same whatever `--workers`. At most `MAX_CHUNKS_PER_WORKER` chunks per worker are held in memory.
Each worker publishes the row it is on and when it started it in shared memory; a row that runs
past `--row-timeout` gets its worker killed (SIGKILL) and replaced, the row is rejected with reason
`timeout`, and the chunk's other rows are sent again. A worker that dies on a row (a crash in C
code, the OOM killer) is handled the same way, with reason `worker_died`. `--workers 0` checks in
this process, without a pool (and so without `--row-timeout`): the serial baseline.

Standard library only; pyarrow (Parquet) and black (`--normalize black`) when asked for.

Longer than 500 lines on purpose: the worker pool (chunks, row timeouts, dead workers) and the
audit it serves share their chunk and report types; apart, neither reads on its own.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import ctypes
import dataclasses
import importlib
import json
import math
import multiprocessing
import multiprocessing.connection
import multiprocessing.context
import multiprocessing.process
import os
import signal
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import TypeAlias, TypedDict, cast

from ..errors import DataError, UsageError
from ..files.journal import atomic_write_text
from ..files.jsonio import strict_json
from .corpus import Corpus, JsonlWriter, Row, Writer, open_writer

__all__ = ["AuditOptions", "AuditReport", "CheckResult", "audit", "make_checker", "CHECKS", "NORMALIZERS"]

CHECKS = ("python", "json")  # or MODULE:FUNCTION
NORMALIZERS = ("none", "ast", "black")
# ~256 snippets of a few hundred bytes take 5-30 ms to parse: long enough that the pickling and
# the round trip (~0.2 ms) stay a few percent, short enough that a killed worker redoes little.
DEFAULT_CHUNK_ROWS = 256
# Chunks read ahead per worker: keeps every worker fed while one slow chunk holds up the writing.
MAX_CHUNKS_PER_WORKER = 4
# A few-kB snippet parses in well under a millisecond; 10 s is a pathological row, not a slow one.
DEFAULT_ROW_TIMEOUT = 10.0
# Workers that die one after another without finishing a chunk: the pool, not a row, is broken.
MAX_CONSECUTIVE_DEATHS = 20
_STAGE_NAMES = ("check", "normalize")

# What checking a row gives: None (kept, normalized text = raw text), a str (kept, that normalized
# text) or (stage, reason, message) (rejected).
CheckResult: TypeAlias = "str | tuple[str, str, str] | None"
# A worker's task: (task id, texts); None asks it to exit. Its reply: (task id, a result per text).
_Task: TypeAlias = "tuple[int, list[str]] | None"
_Reply: TypeAlias = "tuple[int, list[CheckResult]]"
# (task id, chunk number, positions in the chunk) of the task a worker is on
_Busy: TypeAlias = "tuple[int, int, list[int]]"


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
    chunk_rows: int = DEFAULT_CHUNK_ROWS
    progress: bool | None = None  # None: a progress bar when stderr is a TTY

    def __post_init__(self) -> None:
        if not isinstance(self.field, str) or not self.field:
            raise UsageError(f"audit.field must be a non-empty column name, got {self.field!r}")
        if self.check not in CHECKS and (not isinstance(self.check, str) or self.check.count(":") != 1):
            raise UsageError(f"audit.check must be python, json or MODULE:FUNCTION, got {self.check!r}")
        if self.normalize not in NORMALIZERS:
            raise UsageError(f"audit.normalize must be one of none, ast, black, got {self.normalize!r}")
        if type(self.workers) is not int or self.workers < 0:
            raise UsageError(f"audit.workers must be an int >= 0, got {self.workers!r}")
        t = self.row_timeout
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
            raise UsageError(f"audit.row_timeout must be a finite number > 0, got {t!r}")
        if type(self.chunk_rows) is not int or self.chunk_rows < 1:
            raise UsageError(f"audit.chunk_rows must be an int >= 1, got {self.chunk_rows!r}")


# --- checking one row (in a worker, or in this process with --workers 0) --------------------------


def _load_function(spec: str) -> Callable[[str], object]:
    module_name, _, name = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise UsageError(f"--check {spec}: cannot import {module_name}: {type(exc).__name__}: {exc}") from None
    fn: object = getattr(module, name, None)
    if not callable(fn):
        raise UsageError(f"--check {spec}: {module_name} has no function {name!r}")
    return fn


def make_checker(check: str, normalize: str) -> Callable[[str, Callable[[int], None]], CheckResult]:
    """`fn(text, enter_stage) -> None | str | (stage, reason, message)`.

    None: kept, normalized text = raw text; a str: kept, that normalized text; a tuple: rejected.
    `enter_stage(1)` is called before normalizing, so a hang is reported in the right stage.
    """
    if check == "python":

        def run_check(text: str) -> ast.Module | None:
            return ast.parse(text)
    elif check == "json":

        def run_check(text: str) -> ast.Module | None:
            strict_json(text)
            return None
    else:
        custom = _load_function(check)

        def run_check(text: str) -> ast.Module | None:
            result = custom(text)
            if result is not None:
                raise _Rejected(str(result))
            return None

    if normalize == "black":
        try:
            import black
        except ImportError:
            raise UsageError("--normalize black needs black (pip install 'runwatch[data]')") from None
        mode = black.Mode()

    def process(text: str, enter_stage: Callable[[int], None]) -> CheckResult:
        try:
            tree = run_check(text)
        except _Rejected as exc:
            return ("check", exc.reason[:200], exc.reason)
        except Exception as exc:  # SyntaxError, ValueError (NUL bytes), RecursionError, MemoryError, ...
            return ("check", type(exc).__name__, str(exc))
        if normalize == "none":
            return None
        enter_stage(1)
        try:
            if normalize == "ast":
                return ast.unparse(tree if tree is not None else ast.parse(text))  # only check python leaves a tree
            return black.format_str(text, mode=mode)
        except Exception as exc:
            return ("normalize", type(exc).__name__, str(exc))

    return process


class _Rejected(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _worker(
    conn: multiprocessing.connection.Connection[_Reply, _Task],
    slots: ctypes.Array[ctypes.c_double],
    index: int,
    check: str,
    normalize: str,
) -> None:
    """A pool process: receive (task id, texts), send (task id, results), until None arrives."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    process = make_checker(check, normalize)
    base = 3 * index
    clock = time.monotonic

    def enter_stage(stage: int) -> None:
        slots[base + 2] = stage

    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if task is None:
            return
        task_id, texts = task
        results: list[CheckResult] = []
        append = results.append
        for pos, text in enumerate(texts):
            slots[base] = pos
            slots[base + 2] = 0
            slots[base + 1] = clock()
            append(process(text, enter_stage))
        slots[base + 1] = 0.0
        conn.send((task_id, results))


# --- the pool ---------------------------------------------------------------------------------------


class _Chunk:
    __slots__ = ("rows", "results", "pending")

    def __init__(self, rows: list[Row]) -> None:
        self.rows = rows
        self.results: list[CheckResult] = [None] * len(rows)
        self.pending = 0


class _Pool:
    """N worker processes, one task at a time each, killed and replaced when a row hangs."""

    def __init__(self, n: int, check: str, normalize: str, row_timeout: float) -> None:
        # Workers come from a fork server (a clean, single-threaded process), not from a fork of this
        # one: a fork of a process with threads (a notebook's, a test runner's, a logger's) can inherit
        # a lock another thread held and hang before its first row. Spawned where there is no server.
        self._ctx: multiprocessing.context.ForkServerContext | multiprocessing.context.SpawnContext
        if "forkserver" in multiprocessing.get_all_start_methods():
            self._ctx = multiprocessing.get_context("forkserver")
            self._ctx.set_forkserver_preload([__name__])  # each worker starts with this module imported
        else:
            self._ctx = multiprocessing.get_context("spawn")
        self._slots = self._ctx.RawArray(ctypes.c_double, 3 * n)  # per worker: row position, start time, stage
        self._check, self._normalize, self.row_timeout = check, normalize, row_timeout
        self._procs: list[multiprocessing.process.BaseProcess] = []
        self._conns: list[multiprocessing.connection.Connection[_Task, _Reply]] = []
        self.busy: list[_Busy | None] = [None] * n  # the task each worker is on
        self.deaths = 0
        for i in range(n):
            proc, conn = self._spawn(i)
            self._procs.append(proc)
            self._conns.append(conn)

    def _spawn(
        self, i: int
    ) -> tuple[multiprocessing.process.BaseProcess, multiprocessing.connection.Connection[_Task, _Reply]]:
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(
            target=_worker,
            args=(child, self._slots, i, self._check, self._normalize),
            name=f"runwatch-audit-{i}",
            daemon=True,
        )
        proc.start()
        child.close()
        return proc, parent

    def _start(self, i: int) -> None:
        self._procs[i], self._conns[i] = self._spawn(i)

    def idle(self) -> list[int]:
        return [i for i, b in enumerate(self.busy) if b is None]

    def submit(self, i: int, task_id: int, chunk_no: int, positions: list[int], texts: list[str]) -> None:
        base = 3 * i
        self._slots[base], self._slots[base + 2], self._slots[base + 1] = 0, 0, time.monotonic()
        self.busy[i] = (task_id, chunk_no, positions)
        try:
            self._conns[i].send((task_id, texts))
        except OSError:  # it died between tasks (nothing of ours was on it): start another
            self.replace(i)
            self._slots[base], self._slots[base + 2], self._slots[base + 1] = 0, 0, time.monotonic()
            self.busy[i] = (task_id, chunk_no, positions)
            self._conns[i].send((task_id, texts))

    def wait(self, timeout: float) -> list[tuple[int, _Reply | None]]:
        """Results that arrived: (worker, (task id, results)), or (worker, None) for a dead worker."""
        conns: dict[object, int] = {self._conns[i]: i for i, b in enumerate(self.busy) if b is not None}
        out: list[tuple[int, _Reply | None]] = []
        for ready in multiprocessing.connection.wait([self._conns[i] for i in conns.values()], timeout):
            i = conns[ready]
            try:
                out.append((i, self._conns[i].recv()))
            except (EOFError, OSError):
                out.append((i, None))
        return out

    def overdue(self) -> list[int]:
        now = time.monotonic()
        return [
            i
            for i, b in enumerate(self.busy)
            if b is not None and self._slots[3 * i + 1] and now - self._slots[3 * i + 1] > self.row_timeout
        ]

    def replace(self, i: int) -> tuple[int, int, int | None]:
        """Kill worker i and start another; return (row position in its task, stage, exit code)."""
        pos, stage = int(self._slots[3 * i]), int(self._slots[3 * i + 2])
        proc = self._procs[i]
        if proc.is_alive():
            proc.kill()
        proc.join()
        self._conns[i].close()
        self.busy[i] = None
        self._start(i)
        return pos, stage, proc.exitcode

    def close(self, kill: bool = False) -> None:
        """Stop the workers: ask idle ones to exit; kill busy ones, or all of them when `kill`."""
        for i, proc in enumerate(self._procs):
            if kill or self.busy[i] is not None:
                proc.kill()
                continue
            try:
                self._conns[i].send(None)
            except OSError:
                pass
        deadline = time.monotonic() + 5
        for proc in self._procs:
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
                proc.join()
        for conn in self._conns:
            conn.close()


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
    pool: _Pool | None = None
    done = False
    try:
        raw_w = open_writer(corpus, tmp["raw"])
        writers.append(raw_w)
        norm_w = open_writer(corpus, tmp["normalized"])
        writers.append(norm_w)
        rej_w = JsonlWriter(tmp["rejected"])
        writers.append(rej_w)

        def emit(chunk: _Chunk) -> None:
            for row, result in zip(chunk.rows, chunk.results):
                stats["rows"] += 1
                if row.error is not None:
                    result = ("read", row.error[0], row.error[1])
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

        chunks = _chunks(corpus.rows(), options.chunk_rows)
        if options.workers == 0:
            noop = _noop
            for chunk_rows in chunks:
                chunk = _Chunk(chunk_rows)
                for k, row in enumerate(chunk_rows):
                    if row.error is None:
                        chunk.results[k] = process(cast(str, row.text), noop)  # a readable row has its text
                emit(chunk)
        else:
            pool = _Pool(options.workers, options.check, options.normalize, options.row_timeout)
            _run_pool(pool, chunks, options, emit)
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


def _chunks(rows: Iterable[Row], size: int) -> Iterator[list[Row]]:
    chunk: list[Row] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _run_pool(pool: _Pool, chunks: Iterator[list[Row]], options: AuditOptions, emit: Callable[[_Chunk], None]) -> None:
    """Feed chunks to the pool, collect results, cut off hung rows, emit chunks in order."""
    held: dict[int, _Chunk] = {}  # chunk number -> chunk, read and not yet written
    ready: deque[tuple[int, list[int]]] = deque()  # (chunk number, positions) waiting for a worker
    state = {"read": 0, "exhausted": False}
    next_emit = 0
    task_id = 0
    max_held = MAX_CHUNKS_PER_WORKER * len(pool.busy)
    poll = min(0.05, options.row_timeout / 4)

    def read_one() -> bool:
        if state["exhausted"] or len(held) >= max_held:
            return False
        rows = next(chunks, None)
        if rows is None:
            state["exhausted"] = True
            return False
        chunk = _Chunk(rows)
        held[state["read"]] = chunk
        positions = [k for k, row in enumerate(rows) if row.error is None]
        if positions:
            chunk.pending = len(positions)
            ready.append((state["read"], positions))
        state["read"] += 1
        return True

    while True:
        while len(ready) < len(pool.idle()) and read_one():
            pass
        for i in pool.idle():
            if not ready:
                break
            chunk_no, positions = ready.popleft()
            rows = held[chunk_no].rows
            task_id += 1
            texts = cast("list[str]", [rows[k].text for k in positions])  # readable rows: each has its text
            pool.submit(i, task_id, chunk_no, positions, texts)
        while next_emit in held and held[next_emit].pending == 0:
            emit(held.pop(next_emit))
            next_emit += 1
        if state["exhausted"] and not held:
            return
        # every worker busy: read ahead one chunk while they work, then only look for results
        timeout = 0.0 if (not pool.idle() and read_one()) else poll
        for i, message in pool.wait(timeout):
            busy = pool.busy[i]
            assert busy is not None  # wait() answers for busy workers only
            _, chunk_no, positions = busy
            if message is None:  # the worker died on a row
                pos, stage, code = pool.replace(i)
                pool.deaths += 1
                if pool.deaths >= MAX_CONSECUTIVE_DEATHS:
                    raise DataError(
                        f"{MAX_CONSECUTIVE_DEATHS} audit workers died in a row (last exit code {code});"
                        f" the check {options.check!r} cannot run in a worker"
                    )
                _cut(
                    held[chunk_no],
                    positions,
                    pos,
                    ready,
                    chunk_no,
                    (_STAGE_NAMES[stage], "worker_died", f"the worker process died on this row (exit code {code})"),
                )
                continue
            pool.deaths = 0
            pool.busy[i] = None
            chunk = held[chunk_no]
            for k, result in zip(positions, message[1]):
                chunk.results[k] = result
            chunk.pending -= len(positions)
        for i in pool.overdue():
            busy = pool.busy[i]
            assert busy is not None  # overdue() names busy workers only
            _, chunk_no, positions = busy
            pos, stage, _ = pool.replace(i)
            _cut(
                held[chunk_no],
                positions,
                pos,
                ready,
                chunk_no,
                (
                    _STAGE_NAMES[stage],
                    "timeout",
                    f"no result within --row-timeout {options.row_timeout:g}s; the worker was killed and replaced",
                ),
            )


def _cut(
    chunk: _Chunk,
    positions: list[int],
    pos: int,
    ready: deque[tuple[int, list[int]]],
    chunk_no: int,
    result: tuple[str, str, str],
) -> None:
    """Reject the row at task position `pos`; send the task's other rows again, first in line."""
    k = positions[pos]
    chunk.results[k] = result
    chunk.pending -= 1
    rest = positions[:pos] + positions[pos + 1 :]
    if rest:
        ready.appendleft((chunk_no, rest))


# --- the command line -----------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `runwatch audit-data`."""
    parser.add_argument("input", metavar="INPUT", help="a .jsonl, .csv or .parquet file, or a directory of them")
    parser.add_argument("--field", required=True, metavar="NAME", help="the text column to check")
    parser.add_argument(
        "--check",
        default="python",
        metavar="python|json|MODULE:FUNCTION",
        help="python (ast.parse), json, or a function that returns None or raises (default python)",
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
    parser.add_argument("--json", action="store_true", help="print audit.json's content")


def render(report: AuditReport) -> str:
    """The text report."""
    frac = report["fraction_kept"]
    lines = [
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
    """`runwatch audit-data`: exit 0 when the audit ran (whatever it rejected), 1 when it could not."""
    kwargs = {} if args.workers is None else {"workers": args.workers}
    options = AuditOptions(
        field=args.field,
        check=args.check,
        normalize=args.normalize,
        out=args.out,
        row_timeout=args.row_timeout,
        id_field=args.id_field,
        **kwargs,
    )
    report = audit(args.input, options)
    print(json.dumps(report, indent=2, allow_nan=False) if args.json else render(report))
    return 0
