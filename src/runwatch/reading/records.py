"""Records of any run, whatever wrote it: the names every reader of runs imports.

    for session in records.load_sessions("runs/a"):          # a run dir, a JSONL file, a
        for rec in session.records:                          # trainer_state.json, TensorBoard files,
            if rec.kind == "train":                          # an MLflow store, a CSV, a text log
                print(rec.step, rec.loss, rec.throughput)

The parts live in their own modules: `parsing` (the one `Record` and the `RecordParser` that turns
every dialect into it), `target` (what a path names: `resolve_target`), `source` (`RecordSource`:
opening, following, whole and tail reads of a target) and `readers` (one reader a format); here,
`iter_records` and `load_sessions`: a whole log read at once, through a `RecordSource`. Standard
library only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from .minimal import MINIMAL_KEYS as MINIMAL_KEYS
from .minimal import parse_maps as parse_maps
from .parsing import Record as Record
from .parsing import RecordParser as RecordParser
from .parsing import Session as Session
from .readers import ReadOptions
from .readers.trainerstate import MAX_STATE_BYTES as MAX_STATE_BYTES
from .readers.trainerstate import load_trainer_state as load_trainer_state
from .readers.trainerstate import read_trainer_state as read_trainer_state
from .source import RecordSource as RecordSource
from .source import parser_for as parser_for
from .target import FILE_SUFFIXES as FILE_SUFFIXES
from .target import Target as Target
from .target import resolve_target as resolve_target


def iter_records(
    target: str | Target,
    *,
    maps: dict[str, str] | None = None,
    on_torn: Callable[[int | str], None] | None = None,
    parser: RecordParser | None = None,
    read: ReadOptions | None = None,
) -> Iterator[Record]:
    """Every record of `target` in log order (invalid lines as kind `invalid`): `RecordSource.records`.

    A torn final line (no newline yet) is left out; `on_torn(lineno)` is told about it (other
    formats: `on_torn(where)`, a str). `parser` (from `parser_for`) lets the caller see the sessions'
    start steps.
    """
    yield from RecordSource(target, read=read, maps=maps, parser=parser).records(on_torn)


def load_sessions(target: str | Target | RecordSource, *, maps: dict[str, str] | None = None) -> list[Session]:
    """The records of `target` grouped by session, sessions in order of first appearance (`RecordSource.sessions`)."""
    source = target if isinstance(target, RecordSource) else RecordSource(target, maps=maps)
    return source.sessions()
