"""Any log, read and followed as records: runwatch's JSONL, trainer_state.json, TensorBoard, MLflow,
CSV and text logs, behind one `RecordSource`; the sessions of a run and the checkpoint a relaunch
resumes from. Standard library only (a format's library is imported when that format is read).

    from runwatch.reading import RecordSource, load_sessions

    src = RecordSource("runs/a")               # a run directory, a log file, a TensorBoard folder, ...
    for rec in src.poll(): ...                 # what is new since the last poll, as Records
    for session in load_sessions("runs/a"):    # the whole log, one Session a process's stretch
        print(session.records[-1].step)

This is the layer's face: every name below is imported on first use from the module that defines it,
so importing `runwatch.reading` imports nothing else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import lazy

if TYPE_CHECKING:
    from .follow import LogFollower as LogFollower
    from .follow import tail_lines as tail_lines
    from .history import Rollback as Rollback
    from .history import Trail as Trail
    from .history import checkpoints as checkpoints
    from .history import latest_checkpoint as latest_checkpoint
    from .history import live_sessions as live_sessions
    from .history import origin_step as origin_step
    from .history import path as path
    from .history import rollback_target as rollback_target
    from .history import valid_records as valid_records
    from .nosignal import holds_something as holds_something
    from .nosignal import no_signal_message as no_signal_message
    from .parsing import Record as Record
    from .parsing import RecordParser as RecordParser
    from .parsing import Session as Session
    from .parsing import ThroughputKind as ThroughputKind
    from .parsing import parse_maps as parse_maps
    from .readers import READERS as READERS
    from .readers import detect as detect
    from .readers import sniff_log as sniff_log
    from .readers.base import READER_FORMATS as READER_FORMATS
    from .readers.base import TEXT_FORMATS as TEXT_FORMATS
    from .readers.base import Reader as Reader
    from .readers.base import ReadOptions as ReadOptions
    from .readers.base import read_options as read_options
    from .readers.keys import TASK_METRICS as TASK_METRICS
    from .readers.keys import original_keys as original_keys
    from .readers.keys import task_metric_direction as task_metric_direction
    from .readers.tfevents import is_event_file as is_event_file
    from .records import iter_records as iter_records
    from .records import load_sessions as load_sessions
    from .resume import Resume as Resume
    from .resume import resume_checkpoint as resume_checkpoint
    from .source import Polled as Polled
    from .source import RecordSource as RecordSource
    from .source import parser_for as parser_for
    from .source import reached as reached
    from .target import NOT_LOGS as NOT_LOGS
    from .target import NOT_RECORDED as NOT_RECORDED
    from .target import Target as Target
    from .target import recorded_rule_options as recorded_rule_options
    from .target import resolve_target as resolve_target

# The public names, module -> names: this face's __all__.
_PUBLIC: dict[str, tuple[str, ...]] = {
    ".follow": ("LogFollower", "tail_lines"),
    ".history": (
        "Rollback",
        "path",
        "checkpoints",
        "latest_checkpoint",
        "rollback_target",
        "valid_records",
        "origin_step",
        "live_sessions",
        "Trail",
    ),
    ".nosignal": ("no_signal_message", "holds_something"),
    ".parsing": ("Record", "Session", "RecordParser", "parse_maps", "ThroughputKind"),
    ".readers": ("READERS", "detect", "sniff_log"),
    ".readers.base": ("READER_FORMATS", "TEXT_FORMATS", "Reader", "ReadOptions", "read_options"),
    ".readers.keys": ("TASK_METRICS", "task_metric_direction", "original_keys"),
    ".readers.tfevents": ("is_event_file",),
    ".records": ("iter_records", "load_sessions"),
    ".resume": ("Resume", "resume_checkpoint"),
    ".source": ("RecordSource", "parser_for", "Polled", "reached"),
    ".target": ("Target", "resolve_target", "recorded_rule_options", "NOT_LOGS", "NOT_RECORDED"),
}
# The other names the modules listed as exported before the faces: importable from here for one
# release, not in __all__ (import them from the face, or better, use a public name).
_KEPT: dict[str, tuple[str, ...]] = {
    ".follow": ("Batch", "ManifestFollower", "READ_CHUNK_BYTES"),
    ".history": ("Checkpoint",),
    ".nosignal": ("seen", "HEAD_BYTES"),
    ".parsing": ("MINIMAL_KEYS",),
    ".readers.base": ("FORMATS", "Format", "BaseReader", "PRESETS", "Chunk", "Item"),
    ".readers.csvlog": ("CsvReader", "number", "looks_like_csv"),
    ".readers.jsonl": ("JsonlReader", "SUFFIXES"),
    ".readers.keys": ("ALIASES", "EVAL_PREFIXES", "KeyMap", "StepGrouper", "GroupedReader", "split_train_eval"),
    ".readers.mlflowstore": ("SqliteReader", "FileStoreReader", "open_mlflow", "LOCK_WAIT_SECONDS"),
    ".readers.textlog": ("TextReader", "sniff", "matches"),
    ".readers.tfevents": ("EventFile", "TensorBoardReader", "event_files"),
    ".readers.tfrecord": ("crc32c", "masked_crc32c", "decode_event", "event_decoder", "Decoder"),
    ".readers.trainerstate": ("TrainerStateReader", "load_trainer_state", "read_trainer_state", "MAX_STATE_BYTES"),
    ".resume": ("parse_skip_steps",),
    ".source": ("TAIL_EXTRA_LINES",),
    ".target": ("FILE_SUFFIXES", "merge_read", "find_trainer_state", "single_log"),
}
_WHERE = lazy.index(_PUBLIC, _KEPT)

__all__ = lazy.public(_PUBLIC)


def __getattr__(name: str) -> Any:
    return lazy.resolve(__name__, globals(), _WHERE, name)


def __dir__() -> list[str]:
    return lazy.listing(globals(), _WHERE)
