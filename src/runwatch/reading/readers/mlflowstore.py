"""MLflow stores: an `mlflow.db` SQLite store, or a file-store run directory; values grouped by step.

SQLite (MLflow's default store): the `metrics` table holds one row a value (`key, value,
timestamp` in ms, `run_uuid, step, is_nan`), `runs` one row a run (`run_uuid, start_time,
lifecycle_stage`). The store is opened read-only (`file:...?mode=ro`) and asked only for rows
after the last row id seen, through the `run_uuid` index (whose entries end in the row id), so a
poll costs what is new. `--run ID` picks the run; else the latest started active run, and a run
started later (a relaunch) is followed as a new session. MLflow stores a NaN as `is_nan` and
±infinity as ±1.797e308 (the largest double); both are read back as such.

File store (`mlruns/<experiment>/<run>/`): `meta.yaml` beside `metrics/<key>` files (keys with
`/` are subdirectories), each a line `timestamp value step` a value, each followed by byte offset.
The new lines of all files are ordered by (timestamp, step) before grouping.

A store that a writer keeps locked is waited for (`LOCK_WAIT_SECONDS`), then reported in one line.
"""

from __future__ import annotations

import math
import os
import sqlite3
import sys
import time
import urllib.parse
from typing import Any

from ...errors import InvalidRunError
from ...errors import StoreLockedError as StoreLockedError
from ..follow import LogFollower
from .base import Chunk, ReadOptions
from .keys import GroupedReader, KeyMap, StepGrouper

# Rows fetched per poll: ~100 bytes each in Python, so ~20 MB at most held at once.
FETCH_ROWS = 200_000
# How long a replay waits for a writer's lock before giving up (a watch waits on every poll).
LOCK_WAIT_SECONDS = 10.0
# sqlite3's busy handler: how long one query waits for a lock before it reports "locked".
BUSY_TIMEOUT_SECONDS = 0.5
_FLOAT_MAX = sys.float_info.max  # MLflow's stand-in for infinity


def _value(value: float, is_nan: Any) -> float:
    if is_nan:
        return math.nan
    if value == _FLOAT_MAX:
        return math.inf
    if value == -_FLOAT_MAX:
        return -math.inf
    return value


def _step(step: Any) -> Any:
    return int(step) if type(step) is float and step.is_integer() else step


class SqliteReader(GroupedReader):
    """Follows one run of an MLflow SQLite store by row id."""

    def __init__(self, path: str, keys: KeyMap, run: str | None = None, fetch_rows: int = FETCH_ROWS) -> None:
        self.path = path
        self.name = os.path.basename(path)
        self.keys = keys
        self.fixed_run = run
        self.fetch_rows = fetch_rows
        self.run: str | None = None
        self.run_start: int | None = None
        self.rowid = 0  # the last row id applied
        self.grouper = StepGrouper(keys)
        self.locked: str | None = None  # the last poll found the store locked
        self._db: sqlite3.Connection | None = None
        self._sig: tuple[int, int, int, int] | None = None  # the store's (inode, size, mtime, WAL size) when last read
        self._mtime = 0.0

    def _connect(self) -> sqlite3.Connection:
        if self._db is None:
            uri = "file:" + urllib.parse.quote(os.path.abspath(self.path)) + "?mode=ro"
            try:
                self._db = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_SECONDS, check_same_thread=False)
            except sqlite3.Error as exc:
                raise InvalidRunError(f"{self.name}: cannot open the SQLite store: {exc}") from None
        return self._db

    def _latest_run(self, db: sqlite3.Connection) -> tuple[str, int] | None:
        if self.fixed_run is not None:
            row = db.execute("SELECT run_uuid, start_time FROM runs WHERE run_uuid = ?", (self.fixed_run,)).fetchone()
            if row is None:
                raise InvalidRunError(f"{self.name}: no run {self.fixed_run!r} in the store")
            return row[0], row[1] or 0
        row = db.execute(
            "SELECT run_uuid, start_time FROM runs WHERE lifecycle_stage = 'active' "
            "ORDER BY start_time DESC, rowid DESC LIMIT 1"
        ).fetchone()
        return (row[0], row[1] or 0) if row else None

    def poll(self) -> Chunk:
        chunk = Chunk()
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            chunk.exists = False
            return chunk
        if not os.path.isfile(self.path):
            raise InvalidRunError(f"{self.path}: not a regular file")
        self._mtime = st.st_mtime
        wal = self.path + "-wal"
        sig = (st.st_ino, st.st_size, st.st_mtime_ns, os.path.getsize(wal) if os.path.exists(wal) else -1)
        if sig == self._sig and self.locked is None:
            chunk.items.extend(self.grouper.idle())
            return chunk  # the idle poll: one stat, no query
        try:
            self._query(chunk)
            self.locked = None
        except sqlite3.OperationalError as exc:
            text = str(exc)
            if "locked" in text or "busy" in text:
                self.locked = text
                return chunk
            raise InvalidRunError(f"{self.name}: not an MLflow store ({text})") from None
        except sqlite3.DatabaseError as exc:
            raise InvalidRunError(f"{self.name}: not an SQLite database ({exc})") from None
        chunk.grew = bool(chunk.items) or self._sig is None
        if not chunk.more:
            self._sig = sig
        return chunk

    def _query(self, chunk: Chunk) -> None:
        db = self._connect()
        latest = self._latest_run(db)
        if latest is None:
            return
        if self.run is None:
            self.run, self.run_start = latest
        elif latest[0] != self.run and latest[1] >= (self.run_start or 0):
            # a run started after the one followed (a relaunch): a new session, from its first row
            chunk.items.extend(self.grouper.flush())
            chunk.items.append((f"{self.name}:run {latest[0]}", None))
            self.run, self.run_start, self.rowid = latest[0], latest[1], 0
        # The (run_uuid, rowid) entries of index_metrics_run_uuid make this a range seek: O(new rows).
        rows = db.execute(
            "SELECT rowid, key, value, timestamp, step, is_nan FROM metrics "
            "WHERE run_uuid = ? AND rowid > ? ORDER BY rowid LIMIT ?",
            (self.run, self.rowid, self.fetch_rows),
        ).fetchall()
        if not rows:
            return
        add = self.grouper.add
        out = chunk.items
        name = self.name
        for rowid, key, value, ts, step, is_nan in rows:
            emitted = add(
                _step(step),
                ts / 1000.0 if ts is not None else None,
                key,
                _value(value, is_nan),
                f"{name}:metrics row {rowid}",
            )
            if emitted:
                out.extend(emitted)
        self.rowid = rows[-1][0]
        chunk.more = len(rows) == self.fetch_rows

    def mtime(self) -> float:
        return self._mtime

    def state_dict(self) -> dict[str, Any]:
        return {"run": self.run, "run_start": self.run_start, "rowid": self.rowid, "grouper": self.grouper.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.run, self.run_start, self.rowid = state["run"], state["run_start"], int(state["rowid"])
        self.grouper.load_state_dict(state["grouper"])

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


class FileStoreReader(GroupedReader):
    """Follows an MLflow file-store run directory's `metrics/<key>` files by byte offset."""

    def __init__(self, run_dir: str, keys: KeyMap) -> None:
        self.path = run_dir
        self.name = os.path.basename(os.path.normpath(run_dir))
        self.metrics_dir = os.path.join(run_dir, "metrics")
        self.keys = keys
        self.files: dict[str, LogFollower] = {}  # key -> follower
        self.grouper = StepGrouper(keys)

    def _scan(self) -> None:
        for root, dirs, names in os.walk(self.metrics_dir):
            dirs.sort()  # a stable order of keys whatever the file system lists first
            for n in sorted(names):
                path = os.path.join(root, n)
                key = os.path.relpath(path, self.metrics_dir).replace(os.sep, "/")
                if key not in self.files:
                    self.files[key] = LogFollower(path)

    def poll(self) -> Chunk:
        chunk = Chunk()
        if not os.path.isdir(self.metrics_dir):
            chunk.exists = os.path.isdir(self.path)
            return chunk
        self._scan()
        rows: list[tuple[float, int, str, float, str]] = []  # (timestamp, step, key, value, where)
        for key, f in self.files.items():
            batch = f.poll()
            chunk.grew |= batch.grew
            chunk.more |= batch.more
            if batch.reset:
                chunk.reset = batch.reset
            where_name = f"metrics/{key}"
            if batch.too_long is not None:
                chunk.items.append((f"{where_name}:{batch.too_long}", f"{where_name}:{batch.too_long}: line too long"))
            for lineno, raw in batch.lines:
                where = f"{where_name}:{lineno}"
                parts = raw.split()
                try:
                    if len(parts) != 3:
                        raise ValueError
                    ts, value, step = float(parts[0]), float(parts[1]), int(parts[2])
                except ValueError:
                    text = raw[:60].decode("utf-8", "replace")
                    chunk.items.append((where, f"{where}: expected 'timestamp value step', got {text!r}"))
                    continue
                rows.append((ts, step, key, value, where))
        rows.sort(key=lambda r: (r[0], r[1]))
        add = self.grouper.add
        for ts, step, key, value, where in rows:
            emitted = add(step, ts / 1000.0, key, value, where)
            if emitted:
                chunk.items.extend(emitted)
        if not chunk.grew and not chunk.more:
            chunk.items.extend(self.grouper.idle())
        return chunk

    def torn(self) -> str | None:
        for key, f in self.files.items():
            if f.pending_bytes():
                return f"metrics/{key}: the line being written (line {f.lineno + 1})"
        return None

    def mtime(self) -> float:
        return max((f.mtime for f in self.files.values()), default=0.0)

    def state_dict(self) -> dict[str, Any]:
        return {"files": {k: f.state_dict() for k, f in self.files.items()}, "grouper": self.grouper.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.files = {k: LogFollower.from_state(s) for k, s in state["files"].items()}
        self.grouper.load_state_dict(state["grouper"])

    def close(self) -> None:
        for f in self.files.values():
            f.close()


def open_reader(
    path: str, keys: KeyMap, read: ReadOptions, chunk_bytes: int | None = None
) -> SqliteReader | FileStoreReader:
    """The reader of an SQLite store (the run `--run` names, else the latest started) or a
    file-store run directory. (SQLite commits whole transactions: nothing is ever torn.)"""
    return open_mlflow(path, keys, read.run)


def open_mlflow(path: str, keys: KeyMap, run: str | None) -> SqliteReader | FileStoreReader:
    """The reader of an SQLite store file or a file-store run directory."""
    if os.path.isdir(path):
        return FileStoreReader(path, keys)  # one run (`readers.detect` refuses --run for it)
    return SqliteReader(path, keys, run)


def wait_unlocked(reader: Any, chunk: Chunk) -> Chunk:
    """A replay's poll: while the store is locked, wait up to LOCK_WAIT_SECONDS, then raise."""
    deadline = time.monotonic() + LOCK_WAIT_SECONDS
    while getattr(reader, "locked", None):
        if time.monotonic() >= deadline:
            raise StoreLockedError(
                f"{reader.name}: the store is locked by a writer ({reader.locked}; "
                f"waited {LOCK_WAIT_SECONDS:g} s); try again"
            )
        time.sleep(0.2)
        chunk = reader.poll()
    return chunk
