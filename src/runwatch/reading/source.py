"""One way to read a run: `RecordSource` opens any target, follows it and keeps its position.

    source = RecordSource("runs/a")           # a run directory, a JSONL log, a trainer_state.json,
    polled = source.poll()                    # TensorBoard files, an MLflow store, a CSV, a text log
    for rec in polled: ...                    # the Records new since the last poll (`more`: poll again)
    recs, torn = source.tail(20)              # the last 20 (JSONL: read back from its end)
    state = source.state_dict()               # the whole reading position, as plain JSON

    for rec in RecordSource("runs/a").records(): ...   # a whole read (`check`): to the end, the step
                                                        # a reader holds back included
    sessions = RecordSource("runs/a").sessions()        # the whole log, grouped by session

The target is resolved by `target.resolve_target` (again on each `open()` until its log exists:
a folder may turn out to hold TensorBoard files); the format's reader comes from the one table
`readers.READERS`; every reader's items go through the one `parsing.RecordParser` (schema v1 when
a `run.json` lies beside `metrics.jsonl`, whose changes are followed; else minimal telemetry). A
log that was truncated, replaced or rewritten with fewer records is read again from its start by
a new reader and parser (`Polled.restarted`). Standard library only.
"""

from __future__ import annotations

import collections
import os
import stat
import time
from collections.abc import Callable, Iterator
from typing import Any

from .. import lazy
from ..errors import InvalidRunError, UsageError
from ..files import read_manifest
from .follow import ManifestFollower, tail_lines
from .history import session_of
from .minimal import parse_maps
from .parsing import Record, RecordParser, Session
from .readers import READER_FORMATS, READERS, Item, Reader, ReadOptions, open_reader
from .readers.jsonl import JsonlReader
from .target import Target, resolve_target

# Reading a JSONL tail back from its end looks past lines that are no wanted records (checkpoints,
# session ends, invalid lines): at most 4 x the records asked for, plus this many lines.
TAIL_EXTRA_LINES = 64


class Polled:
    """What one poll of a source found: its flags, and its records, parsed as they are iterated
    (`for rec in polled`, one at a time: a catch-up keeps no batch of records alive) or all at
    once (`polled.records`)."""

    __slots__ = (
        "exists",
        "grew",
        "more",
        "reset",
        "restarted",
        "manifest_changed",
        "_parser",
        "_items",
        "_lines",
        "_list",
    )

    def __init__(
        self,
        parser: RecordParser | None = None,
        items: list[Item] | None = None,
        lines: list[tuple[int, bytes]] | None = None,
        *,
        exists: bool = True,
        grew: bool = False,
        more: bool = False,
        reset: str | None = None,
        restarted: bool = False,
        manifest_changed: bool = False,
    ) -> None:
        self.exists = exists  # the log exists
        self.grew = grew  # it changed since the last poll
        self.more = more  # more waits already: poll again at once
        self.reset = reset  # "truncated", "replaced", ...: (part of) the log is read again from its start
        self.restarted = restarted  # the whole log is read again, by a new parser: what came before is void
        self.manifest_changed = manifest_changed  # run.json changed (a new session, say)
        self._parser, self._items, self._lines = parser, items, lines
        self._list: list[Record] | None = None

    def __iter__(self) -> Iterator[Record]:
        if self._list is not None:
            yield from self._list
            return
        parser = self._parser
        if parser is None:
            return
        items, lines = self._items, self._lines
        self._items = self._lines = None  # parsed once
        if items:
            yield from to_records(parser, items)
        if lines:
            parse = parser.parse_line
            for lineno, raw in lines:
                rec = parse(lineno, raw)
                if rec is not None:
                    yield rec

    @property
    def records(self) -> list[Record]:
        if self._list is None:
            self._list = list(self)
        return self._list


def parser_for(
    target: Target, maps: dict[str, str] | None = None, refresh: Callable[[], dict[str, Any] | None] | None = None
) -> RecordParser:
    """The RecordParser for `target` as it stands (reads run.json for a schema-v1 run)."""
    if target.schema_v1():
        return RecordParser("v1", manifest=read_manifest(target.run_dir), maps=maps, refresh=refresh)
    spec = READERS[target.format]
    name = os.path.basename(os.path.normpath(target.log_path))
    return RecordParser(
        "minimal",
        maps=maps,
        name=name,
        apply_maps=not spec.maps,
        same_step_continues=spec.same_step_continues,
        record_times=target.format in READER_FORMATS,  # the other tool's own times
    )


def reached(last_step: int | float, rec: Record) -> int | float:
    """The step a log has reached after `rec`: its step, except that a record with neither a loss
    nor eval values nor an event (a hyperparameter logged at step 0 at the end) never moves it back."""
    if rec.kind == "invalid":
        return last_step
    if rec.kind == "other":
        return rec.step if rec.step > last_step else last_step
    return rec.step


class RecordSource:
    """One target's records: followed (`poll`), read whole (`records`) or from the end (`tail`).

    `target`: a path (resolved again until its log exists) or a Target. `maps`: --map. `parser`:
    a parser to read with (a whole read whose caller set it up, `parser_for`). `chunk_bytes`: bytes
    a poll reads at most (a reader's default when None). `from_end`: skip what the log holds when
    the source is made (its records are an earlier session's). `settle`: seconds after which a
    quiet log's held-back step counts as complete (a page showing a finished TensorBoard run).
    """

    def __init__(
        self,
        target: str | Target,
        *,
        read: ReadOptions | None = None,
        maps: dict[str, str] | None = None,
        parser: RecordParser | None = None,
        chunk_bytes: int | None = None,
        from_end: bool = False,
        settle: float | None = None,
    ) -> None:
        self._arg = os.fspath(target) if isinstance(target, str) else None
        self._read = read
        self.target: Target = resolve_target(target, read) if isinstance(target, str) else target
        self.maps = maps if maps is not None or parser is None else parser.maps  # (the readers apply them)
        self._given_maps = self.maps
        self._recorded_maps()
        self.parser: RecordParser | None = parser
        self.reader: Reader | None = None
        self.manifest: ManifestFollower | None = None  # run.json, for a schema-v1 log
        self.chunk_bytes = chunk_bytes
        self.settle = settle
        if from_end and os.path.exists(self.target.log_path):
            self._open_reader()
            if isinstance(self.reader, JsonlReader):
                self.reader.skip_to_end()

    # --- what callers see --------------------------------------------------------------------

    @property
    def format(self) -> str:
        return self.target.format

    @property
    def log_path(self) -> str:
        return self.target.log_path

    @property
    def v1(self) -> bool:
        """The log is schema v1 (a parser in mode v1 reads it): `reading`'s own question."""
        return self.parser is not None and self.parser.mode == "v1"

    # The log's facts, whatever its dialect, are its parser's (`RecordParser`: `manifest`,
    # `start_step`, `entry`, `sessions_by`, `windows`, `throughput`, `record_times`).

    @property
    def sessions_by(self) -> str | None:
        """`RecordParser.sessions_by`: "manifest" (run.json names the sessions, their ends and
        heartbeats) or "records" (a step that goes back starts one); None before the log is open."""
        return self.parser.sessions_by if self.parser is not None else None

    @property
    def notes(self) -> list[str]:
        """What the parser said once about how it reads the log (drained by the caller)."""
        return self.parser.notes if self.parser is not None else []

    def max_steps(self) -> int | None:
        """The latest session's planned steps: run.json's recipe, trainer_state.json's; None unknown."""
        p = self.parser
        return p.max_steps(p.latest_session()) if p is not None else None

    def torn(self) -> int | str | None:
        """Where the log ends in a record still being written (a JSONL line number), as of the last poll."""
        return self.reader.torn() if self.reader is not None else None

    def holding(self) -> bool:
        """The reader holds a step back (TensorBoard, MLflow: values grouped by step) that the next
        idle poll releases: one more poll shows the log's last step."""
        return self.reader is not None and self.reader.holding()

    def pending_bytes(self) -> int:
        """Bytes of the log not read yet, as of the last poll."""
        return self.reader.pending_bytes() if self.reader is not None else 0

    def mtime(self) -> float | None:
        """The log's mtime as of the last poll (None before the log was read)."""
        if self.reader is not None and self.reader.mtime():
            return self.reader.mtime()
        try:
            return os.stat(self.target.log_path).st_mtime
        except OSError:
            return None

    def _recorded_maps(self) -> None:
        """The run directory's recorded `--map` under the maps given, key by key."""
        if not self.target.map:
            return
        try:
            recorded = parse_maps(self.target.map)
        except UsageError:  # a recorded map that is not valid: the given maps alone
            return
        self.maps = {**recorded, **(self._given_maps or {})}

    # --- opening -----------------------------------------------------------------------------

    def _open_reader(self) -> bool:
        if self.reader is None:
            if self._arg is not None:  # the target, or a trainer_state.json, may have appeared
                self.target = resolve_target(self._arg, self._read)
                self._recorded_maps()
            t = self.target
            if not os.path.exists(t.log_path):
                return False
            self.reader = open_reader(t.format, t.log_path, t.read, self.maps, self.chunk_bytes)
        return True

    def open(self, wait: bool = True) -> bool:
        """Set up the reader and the parser once the log exists; False while it does not (or, with
        `wait`, while an empty `metrics.jsonl` has no `run.json`: the logger creates the log before
        run.json and writes run.json before any record, so its dialect is not decided yet)."""
        if self.parser is not None and self.reader is not None:
            return True
        if not self._open_reader():
            return False
        t = self.target
        if self.parser is None:
            undecided = os.path.basename(t.log_path) == "metrics.jsonl" and not os.path.lexists(t.manifest_path)
            if wait and t.format == "jsonl" and undecided and _empty(t.log_path):
                return False
            self.parser = self._new_parser()
        return True

    def _new_parser(self) -> RecordParser:
        t = self.target
        if not t.schema_v1():
            return parser_for(t, self.maps)
        self.manifest = ManifestFollower(t.run_dir)
        self.manifest.poll()
        manifest = self.manifest.manifest
        if manifest is None:  # run.json is a dangling link or went away: read_manifest says why
            manifest = read_manifest(t.run_dir)
        return RecordParser("v1", manifest=manifest, maps=self.maps, refresh=self._manifest_now)

    def _manifest_now(self) -> dict[str, Any] | None:
        if self.manifest is None:
            return None
        self.manifest.poll()
        return self.manifest.manifest

    def restart(self) -> None:
        """Read the log again from its start, with a new reader and parser."""
        self.close()
        self.reader = self.parser = self.manifest = None

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()

    # --- following ---------------------------------------------------------------------------

    def poll(self, final: bool = False) -> Polled:
        """The records new since the last poll (at most about `chunk_bytes` of log). `final`: the
        writer is gone, so a step a reader holds back is complete."""
        return self._poll(final, False)

    def _poll(self, final: bool, replay: bool) -> Polled:
        if not self.open(wait=not replay):
            return Polled(exists=False)
        reader, parser = self.reader, self.parser
        assert reader is not None and parser is not None  # set up by open()
        changed = False
        if self.manifest is not None and self.manifest.poll():
            assert self.manifest.manifest is not None  # poll() just read a changed one
            parser.set_manifest(self.manifest.manifest)
            changed = True
        chunk = reader.poll()
        if replay:
            from .readers.mlflowstore import wait_unlocked

            chunk = wait_unlocked(reader, chunk)
        if chunk.restart:
            self.restart()
            return Polled(grew=True, more=True, reset=chunk.reset, restarted=True, manifest_changed=changed)
        if reader.max_steps != parser.max_steps_hint:
            parser.max_steps_hint = reader.max_steps
        items = chunk.items
        if not chunk.more and final:
            items = items + reader.finish()  # (after the lines: a reader with lines holds nothing back)
        elif not chunk.more and self.settle is not None and reader.mtime() < time.time() - self.settle:
            items = items + reader.release()  # as an idle poll releases it: a later value is not applied twice
        return Polled(
            parser,
            items,
            chunk.lines,
            exists=chunk.exists,
            grew=chunk.grew,
            more=chunk.more,
            reset=chunk.reset,
            manifest_changed=changed,
        )

    # --- whole reads -------------------------------------------------------------------------

    def records(self, on_torn: Callable[[int | str], None] | None = None) -> Iterator[Record]:
        """Every record from here to the log's end (invalid lines as kind `invalid`), then the step
        a reader holds back; closes the reader at the end. A torn final record is left out and
        `on_torn(where)` told (a JSONL line number, else a str). InvalidRunError: no log."""
        if not self.open(wait=False):
            name = os.path.basename(self.target.log_path)
            raise InvalidRunError(f"{name}: missing ({self.target.log_path})")
        try:
            while True:
                polled = self._poll(True, True)
                if not polled.exists:
                    name = os.path.basename(self.target.log_path)
                    raise InvalidRunError(f"{name}: missing ({self.target.log_path})")
                yield from polled
                if not polled.more:
                    break
            torn = self.torn()
            if torn is not None and on_torn is not None:
                on_torn(torn)
        finally:
            self.close()

    def tail(self, n: int, keep: Callable[[Record], bool] | None = None) -> tuple[list[Record], bool]:
        """The last `n` records that `keep` keeps (default: all but invalid ones), in log order, and
        whether the log ends in a torn record (left out). A JSONL log is read back from its end
        (schema v1 without the continuity checks: the records before are unknown); other formats
        by a pass of their own from their start."""
        want = keep or _valid
        if n <= 0 or not os.path.exists(self.target.log_path):
            return [], False
        if self.target.format != "jsonl":  # a pass of its own, whatever this source has read
            whole = RecordSource(self.target, maps=self.maps)
            last: collections.deque[Record] = collections.deque(maxlen=n)
            torn: list[int | str] = []
            last.extend(r for r in whole.records(on_torn=torn.append) if want(r))
            if self.parser is None:
                self.parser = whole.parser
            return list(last), bool(torn)
        if not self.open(wait=False):
            return [], False
        lines_wanted = n
        while True:
            lines, torn_line = tail_lines(self.target.log_path, lines_wanted)
            parser = self.parser if self.v1 else parser_for(self.target, self.maps)  # anew: its sessions start here
            assert parser is not None  # set up by open()
            if parser.mode == "v1":
                parsed = [parser.parse_unchecked(raw) for raw in lines]
            else:
                parsed = [parser.parse_line(0, raw) for raw in lines]
                self.parser = parser
            recs = [r for r in parsed if r is not None and want(r)]
            if len(recs) >= n or len(lines) < lines_wanted or lines_wanted >= 4 * n + TAIL_EXTRA_LINES:
                return recs[-n:], torn_line
            lines_wanted = min(4 * n + TAIL_EXTRA_LINES, lines_wanted * 2)

    def last_step(self, n: int = 200) -> int | float | None:
        """The step the log's latest session reached, from its last `n` records (None: no record)."""
        recs, _torn = self.tail(n)
        step: int | float | None = None
        latest = self.parser.latest_session() if self.v1 and self.parser is not None else None
        for r in recs:
            if latest is None or r.session == latest:
                step = r.step if step is None else reached(step, r)
        return step

    def sessions(self) -> list[Session]:
        """The whole log's records grouped by session, in order of first appearance, read from its start by a
        reader and parser of this source's own for the read: where it follows from is untouched (a
        supervisor reads its run's history through the source its watch follows with).
        InvalidRunError: no log."""
        kept = self.target, self.reader, self.parser, self.manifest
        self.reader = self.parser = self.manifest = None
        try:
            sessions: dict[str, Session] = {}
            for rec in self.records():
                s = sessions.get(rec.session)
                if s is None:
                    s = sessions[rec.session] = session_of(rec, self.parser)
                s.records.append(rec)
            return list(sessions.values())
        finally:
            self.target, self.reader, self.parser, self.manifest = kept

    # --- state -------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The whole reading position as plain JSON: the log, the reader's position and the
        parser's state. (The keys are those the watch has written to watchdog.json from the start:
        a JSONL reader's position under `follower`, trainer_state.json's entries under
        `trainer_state_entries`, another reader's under `reader`.)"""
        fmt = self.target.format
        r = self.reader.state_dict() if self.reader is not None else None
        return {
            "log": self.target.log_path,
            "follower": r if fmt == "jsonl" else None,
            "reader": r if fmt not in ("jsonl", "trainer_state") else None,
            "parser": self.parser.state_dict() if self.parser is not None else None,
            "trainer_state_entries": int(r["entries"]) if fmt == "trainer_state" and r else 0,
        }

    def load_state_dict(self, state: dict[str, Any]) -> bool:
        """Continue from `state_dict()` instead of reading the log from its start; False (and
        nothing changed) when the state does not fit this log as it is now."""
        if not self.open() or state.get("log") != self.target.log_path or self.parser is None:
            return False
        saved = state.get("parser")
        if saved is None or saved.get("mode") != self.parser.mode:
            return False
        assert self.reader is not None  # set up by open()
        self.parser.load_state_dict(saved)
        fmt = self.target.format
        if fmt == "jsonl" and state.get("follower") is not None:
            self.reader.load_state_dict(state["follower"])
        elif fmt == "trainer_state":
            self.reader.load_state_dict({"entries": state.get("trainer_state_entries") or 0})
        elif state.get("reader") is not None:
            self.reader.load_state_dict(state["reader"])
        return True


def _valid(rec: Record) -> bool:
    return rec.kind != "invalid"


def _empty(path: str) -> bool:
    """An empty regular file (anything else is opened, and its reader says what it is)."""
    try:
        st = os.stat(path)
    except OSError:
        return True
    return stat.S_ISREG(st.st_mode) and st.st_size == 0


def to_records(parser: RecordParser, items: list[Item]) -> Iterator[Record]:
    """Records of a chunk's items through `parser` (a records.RecordParser in mode minimal)."""
    for where, x in items:
        if x is None:
            parser.new_session()
        elif type(x) is str:
            yield parser.invalid(where, x)
        else:
            rec = parser.parse_object(x, where)
            if rec is not None:
                yield rec


# Former names of this module, kept for one release: a whole log read at once is `records`' now.
_MOVED = {"iter_records": "runwatch.reading.records", "load_sessions": "runwatch.reading.records"}


def __getattr__(name: str) -> Any:
    return lazy.resolve(__name__, globals(), _MOVED, name)
