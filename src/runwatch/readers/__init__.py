"""Readers of logs that runwatch did not write: TensorBoard, MLflow, CSV, text.

Every format sits behind one small interface, and every one yields minimal telemetry (plain dicts
with `step`, `t`, `loss`, `lr`, `grad_norm`, `sps`, `eval_loss`, `eval_<metric>`) that goes
through the one `records.RecordParser("minimal")`, so the rules never know the format:

    reader = open_reader(target, maps)       # target: records.Target with format tensorboard, ...
    while True:
        chunk = reader.poll()                # what is new since the last poll: complete records
        for rec in to_records(parser, chunk.items):
            ...
        if not chunk.more: break
    tail = reader.finish()                   # a step still held back (values are grouped by step)

`poll()` reads only what is new (a byte offset, a row id) and returns `Chunk.items`, each
`(where, x)`: x a record dict, a str (an `invalid_log` message naming file and offset or line), or
None (a new session starts here: a new event file). `state_dict()` / `load_state_dict()` give the
position as plain JSON. The options `--format`, `--pattern` and `--run` are declared here
(`add_arguments`), in one place. Standard library only.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import ConfigError, UsageError
from ..options import TEXT, TEXTS, Check, add_flags, given_options, option, validate
from ..rundir import RunDir

if TYPE_CHECKING:  # records imports this package
    from ..records import Record, RecordParser

__all__ = [
    "FORMATS",
    "READER_FORMATS",
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
]

# What `--format` accepts; `nanogpt` and `megatron` are text logs with preset patterns.
FORMATS = ("jsonl", "tensorboard", "mlflow", "csv", "text", "nanogpt", "megatron")
# Target formats read through this package (the others: records' own JSONL / trainer_state.json).
READER_FORMATS = ("tensorboard", "mlflow", "csv", "text")

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
    exists: bool = True  # the log (file, directory, store) exists
    grew: bool = False  # it changed since the last poll
    more: bool = False  # more waits beyond this chunk: poll again at once
    reset: str | None = None  # "truncated" / "replaced": a file was read again from its start


class Reader(Protocol):
    """What every format's reader provides."""

    name: str

    def poll(self) -> Chunk: ...
    def finish(self) -> list[Item]: ...
    def torn(self) -> str | None: ...
    def mtime(self) -> float: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> None: ...
    def close(self) -> None: ...


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


def open_reader(fmt: str, path: str, read: ReadOptions, maps: dict[str, str] | None = None) -> Reader:
    """The reader of `path` in format `fmt` (one of READER_FORMATS)."""
    from .keys import KeyMap

    keys = KeyMap(maps)
    if fmt == "tensorboard":
        from .tfevents import TensorBoardReader

        return TensorBoardReader(path, keys)
    if fmt == "mlflow":
        from .mlflowstore import open_mlflow

        return open_mlflow(path, keys, read.run)
    if fmt == "csv":
        from .csvlog import CsvReader

        return CsvReader(path, keys)
    if fmt == "text":
        from .textlog import TextReader

        return TextReader(path, keys, read.patterns())
    raise UsageError(f"read.format: no reader for {fmt!r}")


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
