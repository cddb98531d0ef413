"""Records of any run, whatever wrote it: the names every reader of runs imports.

    for session in records.load_sessions("runs/a"):          # a run dir, a JSONL file, a
        for rec in session.records:                          # trainer_state.json, TensorBoard files,
            if rec.kind == "train":                          # an MLflow store, a CSV, a text log
                print(rec.step, rec.loss, rec.throughput)

The parts live in their own modules: `parsing` (the one `Record` and the `RecordParser` that turns
every dialect into it), `target` (what a path names: `resolve_target`), `source` (`RecordSource`:
opening, following, whole and tail reads of a target, and `iter_records` / `load_sessions` on it)
and `readers` (one reader a format). Standard library only.
"""

from __future__ import annotations

from .minimal import MINIMAL_KEYS as MINIMAL_KEYS
from .minimal import parse_maps as parse_maps
from .parsing import Record as Record
from .parsing import RecordParser as RecordParser
from .parsing import Session as Session
from .readers.trainerstate import MAX_STATE_BYTES as MAX_STATE_BYTES
from .readers.trainerstate import load_trainer_state as load_trainer_state
from .readers.trainerstate import read_trainer_state as read_trainer_state
from .source import RecordSource as RecordSource
from .source import iter_records as iter_records
from .source import load_sessions as load_sessions
from .source import parser_for as parser_for
from .target import FILE_SUFFIXES as FILE_SUFFIXES
from .target import Target as Target
from .target import resolve_target as resolve_target
