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

from .minimal import MINIMAL_KEYS, parse_maps
from .parsing import Record, RecordParser, Session
from .readers.trainerstate import MAX_STATE_BYTES, load_trainer_state, read_trainer_state
from .source import RecordSource, iter_records, load_sessions, parser_for
from .target import FILE_SUFFIXES, Target, resolve_target

__all__ = [
    "Record",
    "Session",
    "Target",
    "RecordParser",
    "RecordSource",
    "resolve_target",
    "parse_maps",
    "iter_records",
    "load_sessions",
    "parser_for",
    "read_trainer_state",
    "load_trainer_state",
    "MINIMAL_KEYS",
    "MAX_STATE_BYTES",
    "FILE_SUFFIXES",
]
