"""The worker pool of `runwatch audit-data`: rows checked in parallel, hung and dying rows cut off.

The auditing process cuts rows into chunks (`chunked`), and `run_pool` sends only the texts of a
chunk to an idle worker and hands chunks back in their order (`emit`), so the output is the same
whatever the number of workers; at most `MAX_CHUNKS_PER_WORKER` chunks per worker are held. Each
worker (`Pool`) publishes the row it is on, when it started it and its stage in shared memory; a
row that runs past the row timeout gets its worker killed (SIGKILL) and replaced and is rejected
with reason `timeout`, and a worker that dies on a row (a segfault, the OOM killer) the same way,
with reason `worker_died`. The audit itself (outputs, report) is `audit`'s. Standard library only.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import multiprocessing.connection
import multiprocessing.context
import multiprocessing.process
import signal
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import TypeAlias, cast

from ..errors import DataError
from .corpus import Row
from .rowcheck import CheckResult, make_checker

# Chunks read ahead per worker: keeps every worker fed while one slow chunk holds up the writing.
MAX_CHUNKS_PER_WORKER = 4
# Workers that die one after another without finishing a chunk: the pool, not a row, is broken.
MAX_CONSECUTIVE_DEATHS = 20
_STAGE_NAMES = ("check", "normalize")

# A worker's task: (task id, texts); None asks it to exit. Its reply: (task id, a result per text).
_Task: TypeAlias = "tuple[int, list[str]] | None"
_Reply: TypeAlias = "tuple[int, list[CheckResult]]"
# (task id, chunk number, positions in the chunk) of the task a worker is on
_Busy: TypeAlias = "tuple[int, int, list[int]]"


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


class RowBatch:
    """Rows read together: their results (in row order) and how many are still with a worker."""

    __slots__ = ("rows", "results", "pending")

    def __init__(self, rows: list[Row]) -> None:
        self.rows = rows
        self.results: list[CheckResult] = [None] * len(rows)
        self.pending = 0


class Pool:
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
        self.check, self._normalize, self.row_timeout = check, normalize, row_timeout
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
            args=(child, self._slots, i, self.check, self._normalize),
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


# --- the driver -----------------------------------------------------------------------------------


def chunked(rows: Iterable[Row], size: int) -> Iterator[list[Row]]:
    """`rows` in lists of `size` (the last one shorter)."""
    chunk: list[Row] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def run_pool(pool: Pool, chunks: Iterator[list[Row]], emit: Callable[[RowBatch], None]) -> None:
    """Feed chunks to the pool, collect results, cut off hung rows, emit chunks in order."""
    held: dict[int, RowBatch] = {}  # chunk number -> chunk, read and not yet written
    ready: deque[tuple[int, list[int]]] = deque()  # (chunk number, positions) waiting for a worker
    state = {"read": 0, "exhausted": False}
    next_emit = 0
    task_id = 0
    max_held = MAX_CHUNKS_PER_WORKER * len(pool.busy)
    poll = min(0.05, pool.row_timeout / 4)

    def read_one() -> bool:
        if state["exhausted"] or len(held) >= max_held:
            return False
        rows = next(chunks, None)
        if rows is None:
            state["exhausted"] = True
            return False
        chunk = RowBatch(rows)
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
                        f" the check {pool.check!r} cannot run in a worker"
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
                    f"no result within --row-timeout {pool.row_timeout:g}s; the worker was killed and replaced",
                ),
            )


def _cut(
    chunk: RowBatch,
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
