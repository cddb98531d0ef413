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

A new format is one module here with an `open_reader(path, keys, read, chunk_bytes)` function and
one entry in `READERS` (and, when it can be recognised by name or content, a line in `detect`).
The options `--format`, `--pattern` and `--run` are declared here (`add_arguments`), in one place.
Standard library only.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import ConfigError, UsageError
from ..options import TEXT, TEXTS, Check, add_flags, given_options, option, validate
from ..rundir import RunDir

if TYPE_CHECKING:  # parsing imports this package
    from ..parsing import Record, RecordParser

__all__ = [
    "FORMATS",
    "READERS",
    "READER_FORMATS",
    "Format",
    "BaseReader",
    "PRESETS",
    "Chunk",
    "Item",
    "Reader",
    "ReadOptions",
    "add_arguments",
    "read_options",
    "open_reader",
    "to_records",
    "detect",
    "sniff_log",
]

# What `--format` accepts; `nanogpt` and `megatron` are text logs with preset patterns.
FORMATS = ("jsonl", "tensorboard", "mlflow", "csv", "text", "nanogpt", "megatron")
# Other tools' formats (their reader applies the key aliases and --map; the step may be grouped).
READER_FORMATS = ("tensorboard", "mlflow", "csv", "text")


@dataclass(frozen=True, slots=True)
class Format:
    """How a target format is read: its reader's module and what the record parser does with it."""

    module: str  # the module of this package whose `open_reader(path, keys, read, chunk_bytes)` opens it
    maps: bool = True  # its reader applies the key aliases and --map (keys.KeyMap); else the parser applies --map
    same_step_continues: bool = False  # a train record at the previous one's step continues the session


# Every target format: one entry here, one module beside this file.
READERS: dict[str, Format] = {
    "jsonl": Format("jsonl", maps=False),  # runwatch's schema v1, minimal telemetry, any JSONL
    "trainer_state": Format("trainerstate", maps=False),  # the Hugging Face Trainer's trainer_state.json
    # a file or a run is a session; a live watch may apply a step before its last value came
    "tensorboard": Format("tfevents", same_step_continues=True),
    "mlflow": Format("mlflowstore", same_step_continues=True),
    "csv": Format("csvlog"),
    "text": Format("textlog"),
}

# One line a record; a named group a key. Values that parse as numbers become numbers.
FORMAT_CHECK = Check(f"one of {', '.join(FORMATS)}", lambda v: v in FORMATS, str)
READ_COMMANDS = ("watch", "check", "plot", "status", "launch", "supervise")
PRESETS: dict[str, tuple[str, ...]] = {
    # nanoGPT train.py: `iter 200: loss 2.3456, time 12.34ms, mfu 1.23%` and
    # `step 200: train loss 2.3456, val loss 2.4567` at each eval
    "nanogpt": (
        r"^iter (?P<step>\d+): loss (?P<loss>\S+?), time (?P<ms_per_iter>\S+?)ms",
        r"^step (?P<step>\d+): train loss \S+?, val loss (?P<eval_loss>[^\s,]+)",
    ),
    # Megatron-LM training_log: ` iteration 200/ 1000 | ... | elapsed time per iteration (ms): 1234.5 |
    # learning rate: 1.000E-04 | global batch size: 256 | lm loss: 2.345678E+00 | ... | grad norm: 1.234 |`
    "megatron": (
        r"\biteration\s+(?P<step>\d+)/\s*\d+\s*\|"
        r"(?:.*?elapsed time per iteration \(ms\):\s*(?P<ms_per_iter>[^\s|]+))?"
        r"(?:.*?learning rate:\s*(?P<lr>[^\s|]+))?"
        r"(?:.*?global batch size:\s*(?P<batch_size>[^\s|]+))?"
        r"(?:.*?lm loss:\s*(?P<loss>[^\s|]+))?"
        r"(?:.*?grad norm:\s*(?P<grad_norm>[^\s|]+))?",
        r"validation loss at iteration (?P<step>\d+)[^|]*\|\s*lm loss value:\s*(?P<eval_loss>[^\s|]+)",
    ),
}

# (where, x): x a record dict, an invalid_log message, or None (a new session starts)
Item = tuple[str, dict[str, Any] | str | None]


@dataclass(slots=True)
class Chunk:
    """What one poll found."""

    items: list[Item] = field(default_factory=list)
    lines: list[tuple[int, bytes]] = field(default_factory=list)  # JSONL: (line number, line), after items
    exists: bool = True  # the log (file, directory, store) exists
    grew: bool = False  # it changed since the last poll
    more: bool = False  # more waits beyond this chunk: poll again at once
    reset: str | None = None  # "truncated" / "replaced": a file was read again from its start
    # "truncated" / "replaced" / "rewritten" with `restart`: the whole log must be read again from
    # its start, by a new reader and parser (a JSONL log or trainer_state.json that lost records)
    restart: bool = False


class Reader(Protocol):
    """What every format's reader provides (`BaseReader` gives the defaults)."""

    name: str
    max_steps: int | None  # the steps the log says are planned (trainer_state.json), else None

    def poll(self) -> Chunk: ...
    def finish(self) -> list[Item]: ...
    def torn(self) -> int | str | None: ...
    def mtime(self) -> float: ...
    def pending_bytes(self) -> int: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> None: ...
    def close(self) -> None: ...


class BaseReader:
    """The defaults of the `Reader` interface: nothing held back, nothing torn, nothing to close."""

    name = ""
    max_steps: int | None = None

    def finish(self) -> list[Item]:
        """What a reader holds back until a later value arrives (the last step), at the end."""
        return []

    def torn(self) -> int | str | None:
        """Where the log ends in a record still being written (a JSONL line number, else text)."""
        return None

    def pending_bytes(self) -> int:
        """Bytes of the log not read yet as of the last poll (a JSONL tail still being caught up)."""
        return 0

    def close(self) -> None:
        """Close open files (polling again reopens them)."""


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """`--format`, `--pattern` (repeatable), `--run`: how to read a log runwatch did not write.

    Declared once (`options.option`) like every other option; they say how to read the target named
    on the command line, so they come from the command line only (not from runwatch.toml)."""

    format: str | None = option(
        None,
        FORMAT_CHECK,
        "how to read the log (default: detected by name and content)",
        none=True,
        metavar="NAME",
        commands=READ_COMMANDS,
    )
    pattern: tuple[str, ...] = option(
        (),
        TEXTS,
        "a text log's record lines: named groups are keys, one must be (?P<step>...)",
        metavar="REGEX",
        commands=READ_COMMANDS,
    )
    run: str | None = option(
        None,
        TEXT,
        "the MLflow run to read (default: the latest started)",
        none=True,
        metavar="ID",
        commands=READ_COMMANDS,
    )
    log: str | None = option(
        None,
        TEXT,
        "the log to watch, relative to RUN_DIR (default: stdout.log with --format text, nanogpt, "
        "megatron or --pattern, else RUN_DIR's metrics.jsonl, trainer_state.json or another tool's log)",
        none=True,
        metavar="PATH",
        commands=("launch", "supervise"),
    )

    def __post_init__(self) -> None:
        validate(self, "read")
        if self.pattern and self.format not in (None, "text"):
            raise ConfigError(f"read.pattern applies to text logs, not to --format {self.format}")
        for p in self.pattern:
            try:
                rx = re.compile(p)
            except re.error as exc:
                raise ConfigError(f"read.pattern: {p!r} is not a regular expression: {exc}") from None
            if "step" not in rx.groupindex:
                raise ConfigError(f"read.pattern must have a named group (?P<step>...), got {p!r}")
        if self.format == "text" and not self.pattern:
            raise ConfigError("read.format text needs --pattern REGEX (with a named group (?P<step>...))")
        if self.run is not None and self.format not in (None, "mlflow"):
            raise ConfigError(f"read.run applies to MLflow stores, got {self.run!r} with --format {self.format}")

    def patterns(self) -> tuple[str, ...]:
        """The text patterns: --pattern's, or the preset's."""
        return self.pattern or PRESETS.get(self.format or "", ())


def add_arguments(p: argparse.ArgumentParser, command: str = "check") -> None:
    """Declare --format, --pattern and --run on a command that reads logs (watch, check, status,
    plot), and --log too on one that launches the program (launch, supervise)."""
    add_flags(p, ReadOptions, command)


def read_options(args: argparse.Namespace) -> ReadOptions:
    """The ReadOptions of parsed arguments (defaults where a command did not declare them)."""
    return ReadOptions(**given_options(args, ReadOptions))


# --- detection ------------------------------------------------------------------------------------

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
    if fmt in ("nanogpt", "megatron") or read.pattern:
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


def open_reader(
    fmt: str, path: str, read: ReadOptions, maps: dict[str, str] | None = None, chunk_bytes: int | None = None
) -> Reader:
    """The reader of `path` in format `fmt` (a key of READERS); `chunk_bytes`: bytes read per poll
    (a follower's default when None)."""
    from .keys import KeyMap

    spec = READERS.get(fmt)
    if spec is None:
        raise UsageError(f"read.format: no reader for {fmt!r}")
    opener: Callable[[str, KeyMap, ReadOptions, int | None], Reader] = importlib.import_module(
        f"{__name__}.{spec.module}"
    ).open_reader
    return opener(path, KeyMap(maps), read, chunk_bytes)


def sniff_log(path: str) -> tuple[str, ReadOptions] | None:
    """The format of a log file recognised by its content alone, and how to read it: a CSV whose
    header names a step or epoch column, a text log whose lines match a preset (nanoGPT,
    Megatron-LM); None otherwise (JSONL and the rest)."""
    from . import csvlog, textlog

    if path.endswith(".csv"):
        return ("csv", ReadOptions()) if csvlog.is_log(path) else None
    preset = textlog.sniff(path)
    return ("text", ReadOptions(format=preset)) if preset is not None else None


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
