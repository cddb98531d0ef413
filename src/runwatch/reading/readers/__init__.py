"""Every log format behind one interface: runwatch's JSONL, trainer_state.json, TensorBoard, MLflow, CSV, text.

A reader follows one log and returns what is new since its last poll; `source.RecordSource` turns
that into `Record`s through the one `parsing.RecordParser`, so no caller and no rule knows the format:

    reader = open_reader("csv", "lightning_logs/version_0/metrics.csv", ReadOptions())
    while True:
        chunk = reader.poll()                # what is new since the last poll: complete records
        ...                                  # chunk.items, and chunk.lines (JSONL's raw lines)
        if not chunk.more: break
    tail = reader.finish()                   # a step still held back (values are grouped by step)

`poll()` reads only what is new (a byte offset, a row id, the entries of a rewritten file) and
returns `Chunk.items`, each `(where, x)`: x a record dict in minimal telemetry, a str (an
`invalid_log` message naming file and offset or line), or None (a new session starts here: a new
event file); the JSONL reader returns its complete lines as `Chunk.lines` instead (the parser
validates schema v1 from the bytes). `state_dict()` / `load_state_dict()` give the position as
plain JSON.

A new format is one module here with an `open_reader(path, keys, read, chunk_bytes)` function, one
opener and one entry in `READERS` below (a static table: an editor follows `open_reader` to the
format's reader; each module is imported when first opened), and, when it can be recognised by name
or content, a line in `detect`.
The options `--format`, `--pattern` and `--run` are declared here (`add_arguments`), in one place.
Standard library only.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ...errors import UsageError
from ...files import RunDir
from .base import FORMATS as FORMATS
from .base import PRESETS as PRESETS
from .base import READER_FORMATS as READER_FORMATS
from .base import TEXT_FORMATS as TEXT_FORMATS
from .base import BaseReader as BaseReader
from .base import Chunk as Chunk
from .base import Format as Format
from .base import Item as Item
from .base import Reader as Reader
from .base import ReadOptions as ReadOptions
from .base import add_arguments as add_arguments
from .base import read_options as read_options

_SQLITE_MAGIC = b"SQLite format 3\x00"


def _head(path: str, n: int) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(n)
    except OSError:
        return b""


def detect(path: str, read: ReadOptions) -> tuple[str, str, str] | None:
    """(format, log path, run dir) of a log this package reads, or None (JSONL and the rest).

    `read.format` decides when given; else by name and content: `*tfevents*` files or directories
    holding them, an SQLite file (`mlflow.db`) or a directory holding `mlflow.db`, an MLflow
    file-store run directory (`meta.yaml` and `metrics/`), `*.csv`, and `--pattern`/presets → text.
    """
    from .tfevents import event_files, is_event_file

    fmt = read.format
    is_dir = os.path.isdir(path)
    run_dir = os.path.abspath(path) if is_dir else os.path.dirname(os.path.abspath(path))
    if (fmt in TEXT_FORMATS and fmt != "text") or read.pattern:
        fmt = "text"
    if fmt == "jsonl":
        return None
    if fmt is None:
        if is_dir:
            if os.path.isfile(RunDir(path).metrics):
                return None
            if os.path.isfile(os.path.join(path, "meta.yaml")) and os.path.isdir(os.path.join(path, "metrics")):
                fmt = "mlflow"
            elif os.path.isfile(os.path.join(path, "mlflow.db")):
                return ("mlflow", os.path.join(path, "mlflow.db"), run_dir)
            elif event_files(path):
                fmt = "tensorboard"
            else:
                return None
        else:
            name = os.path.basename(path)
            if is_event_file(name):
                fmt = "tensorboard"
            elif name.endswith((".db", ".sqlite", ".sqlite3")) or (
                os.path.isfile(path) and _head(path, 16) == _SQLITE_MAGIC
            ):
                fmt = "mlflow"
            elif name.endswith(".csv"):
                fmt = "csv"
            else:
                return None
    if fmt == "mlflow" and is_dir and not os.path.isdir(os.path.join(path, "metrics")):
        return ("mlflow", os.path.join(path, "mlflow.db"), run_dir)
    if fmt == "mlflow" and is_dir and read.run is not None:
        raise UsageError(f"read.run applies to an SQLite store; {path} is a file-store run directory (one run)")
    if fmt in ("csv", "text") and is_dir:
        raise UsageError(f"read.format {fmt}: {path} is a directory, expected a file")
    return (fmt, path, run_dir)


# --- opening and feeding ----------------------------------------------------------------------------

if TYPE_CHECKING:
    from .keys import KeyMap


def _open_jsonl(path: str, keys: KeyMap, read: ReadOptions, chunk_bytes: int | None) -> Reader:
    from .jsonl import open_reader as opener

    return opener(path, keys, read, chunk_bytes)


def _open_trainer_state(path: str, keys: KeyMap, read: ReadOptions, chunk_bytes: int | None) -> Reader:
    from .trainerstate import open_reader as opener

    return opener(path, keys, read, chunk_bytes)


def _open_tensorboard(path: str, keys: KeyMap, read: ReadOptions, chunk_bytes: int | None) -> Reader:
    from .tfevents import open_reader as opener

    return opener(path, keys, read, chunk_bytes)


def _open_mlflow(path: str, keys: KeyMap, read: ReadOptions, chunk_bytes: int | None) -> Reader:
    from .mlflowstore import open_reader as opener

    return opener(path, keys, read, chunk_bytes)


def _open_csv(path: str, keys: KeyMap, read: ReadOptions, chunk_bytes: int | None) -> Reader:
    from .csvlog import open_reader as opener

    return opener(path, keys, read, chunk_bytes)


def _open_text(path: str, keys: KeyMap, read: ReadOptions, chunk_bytes: int | None) -> Reader:
    from .textlog import open_reader as opener

    return opener(path, keys, read, chunk_bytes)


# Every target format: one entry here, one module beside this file.
READERS: dict[str, Format] = {
    "jsonl": Format(_open_jsonl, maps=False),  # runwatch's schema v1, minimal telemetry, any JSONL
    "trainer_state": Format(_open_trainer_state, maps=False),  # the Hugging Face Trainer's trainer_state.json
    # a file or a run is a session; a live watch may apply a step before its last value came
    "tensorboard": Format(_open_tensorboard, same_step_continues=True),
    "mlflow": Format(_open_mlflow, same_step_continues=True),
    "csv": Format(_open_csv),
    "text": Format(_open_text),
}


def open_reader(
    fmt: str, path: str, read: ReadOptions, maps: dict[str, str] | None = None, chunk_bytes: int | None = None
) -> Reader:
    """The reader of `path` in format `fmt` (a key of READERS); `chunk_bytes`: bytes read per poll
    (a follower's default when None)."""
    from .keys import KeyMap

    spec = READERS.get(fmt)
    if spec is None:
        raise UsageError(f"read.format: no reader for {fmt!r}")
    return spec.open(path, KeyMap(maps), read, chunk_bytes)


def sniff_log(path: str) -> tuple[str, ReadOptions] | None:
    """The format of a log file recognised by its content alone, and how to read it: a CSV whose
    header names a step, epoch or loss column (of any name: Keras' `training.log`), a `*.jsonl`
    (`*.ndjson`) whose first record has a step (or epoch), a text log whose lines match a preset
    (nanoGPT, Megatron-LM, Hugging Face dict lines, PaddleNLP); None otherwise."""
    from . import csvlog, jsonl, textlog

    if path.endswith(".csv"):
        return ("csv", ReadOptions()) if csvlog.is_log(path) else None
    if path.endswith(jsonl.SUFFIXES):
        return ("jsonl", ReadOptions()) if jsonl.is_log(path) else None
    if csvlog.looks_like_csv(path):
        return ("csv", ReadOptions())
    preset = textlog.sniff(path)
    return ("text", ReadOptions(format=preset)) if preset is not None else None


def is_log(path: str, read: ReadOptions) -> bool:
    """`path` is a log read as `read` says: with patterns (`read.text`), a line of its head matches
    one; with `--format csv`, a CSV of steps; else a log `sniff_log` recognises."""
    from . import csvlog, textlog

    if read.text:
        return textlog.matches(path, read.patterns())
    if read.format == "csv":
        return csvlog.is_log(path) if path.endswith(".csv") else csvlog.looks_like_csv(path)
    return sniff_log(path) is not None
