"""What every reader shares: the table of formats, the reader interface (`Reader`, `BaseReader`,
`Chunk`, `Item`) and the reading options (`ReadOptions`: `--format`, `--pattern`, `--run`).
The package (`readers`) re-exports all of it. Standard library only.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ...errors import ConfigError
from ...options import TEXT, TEXTS, Check, add_flags, given_options, option, validate

# What `--format` accepts; `nanogpt` and `megatron` are text logs with preset patterns.
FORMATS = ("jsonl", "tensorboard", "mlflow", "csv", "text", "nanogpt", "megatron", "paddlenlp", "hf")
# Other tools' formats (their reader applies the key aliases and --map; the step may be grouped).
READER_FORMATS = ("tensorboard", "mlflow", "csv", "text")
# Formats whose records a program prints: text logs, read with patterns.
TEXT_FORMATS = ("text", "nanogpt", "megatron", "paddlenlp", "hf")


@dataclass(frozen=True, slots=True)
class Format:
    """How a target format is read: its reader's opener and what the record parser does with it."""

    open: Callable[..., Reader]  # its module's `open_reader(path, keys, read, chunk_bytes)`, imported when called
    maps: bool = True  # its reader applies the key aliases and --map (keys.KeyMap); else the parser applies --map
    same_step_continues: bool = False  # a train record at the previous one's step continues the session


# One line a record; a named group a key. Values that parse as numbers become numbers. A pattern
# without a `step` group reads values attached to the latest step seen; a `ckpt` group names a
# saved checkpoint (a checkpoint record at the latest step); a `dict` group holds a Python or JSON
# dict literal whose numeric items are the keys (the Hugging Face Trainer's printed logs).
FORMAT_CHECK = Check(f"one of {', '.join(FORMATS)}", lambda v: v in FORMATS, str)
READ_COMMANDS = ("watch", "check", "plot", "status", "launch", "supervise")
PRESETS: dict[str, tuple[str, ...]] = {
    # nanoGPT train.py: `iter 200: loss 2.3456, time 12.34ms, mfu 1.23%` and
    # `step 200: train loss 2.3456, val loss 2.4567` at each eval
    "nanogpt": (
        r"^iter (?P<step>\d+): loss (?P<loss>\S+?), time (?P<ms_per_iter>\S+?)ms",
        r"^step (?P<step>\d+): train loss \S+?, val loss (?P<eval_loss>[^\s,]+)",
        r"^saving checkpoint to (?P<ckpt>\S+)",
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
    # The Hugging Face Trainer's printed logs: `{'loss': 0.6931, 'grad_norm': 1.2, 'learning_rate':
    # 5e-05, 'epoch': 0.01}` and `{'eval_loss': 0.52, 'eval_accuracy': 0.81, ..., 'epoch': 1.0}` (no step:
    # by epoch)
    "hf": (r"(?P<dict>\{'(?:loss|eval_loss|grad_norm|learning_rate|train_loss)': [^{}]*\})",),
    # PaddleNLP's Trainer: `loss: 0.6259, learning_rate: 3e-06, global_step: 10, ...` and eval lines
    # without a step, `eval_loss: 0.598, eval_accuracy: 0.1287, eval_runtime: ...` (at the latest step)
    "paddlenlp": (
        r"\bloss: (?P<loss>[^,\s]+), learning_rate: (?P<lr>[^,\s]+), global_step: (?P<step>\d+)",
        r"\beval_loss: (?P<eval_loss>[^,\s]+)(?:, eval_(?:accuracy|acc): (?P<eval_accuracy>[^,\s]+))?"
        r"(?:.*?, eval_f1: (?P<eval_f1>[^,\s]+))?",
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
    def holding(self) -> bool: ...
    def release(self) -> list[Item]: ...
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

    def holding(self) -> bool:
        """A step is held back (values grouped by step: TensorBoard, MLflow) until a later value,
        an idle poll, `release()` or `finish()`."""
        return False

    def release(self) -> list[Item]:
        """The held step, released as an idle poll releases it: a live reader's view of a quiet log
        (values of that step that come later form a record of their own, without the keys applied)."""
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
        "a text log's record lines (repeatable): named groups are keys; a pattern without (?P<step>...) "
        "reads values at the latest step, a (?P<ckpt>...) group names a saved checkpoint, a (?P<dict>...) "
        "group holds a dict literal of keys",
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
        "megatron, paddlenlp, hf or --pattern, else RUN_DIR's metrics.jsonl, trainer_state.json or another tool's log)",
        none=True,
        metavar="PATH",
        commands=("launch", "supervise"),
    )
    # Not an option: the log is a run directory's (named by --log, or found in it), so a TensorBoard
    # folder's launch subfolders are the sessions of one run rather than its newest subfolder alone.
    sessions: bool = False

    def __post_init__(self) -> None:
        validate(self, "read")
        if self.pattern and self.format not in (None, "text"):
            raise ConfigError(f"read.pattern applies to text logs, not to --format {self.format}")
        for p in self.pattern:
            try:
                rx = re.compile(p)
            except re.error as exc:
                raise ConfigError(f"read.pattern: {p!r} is not a regular expression: {exc}") from None
            if not rx.groupindex:
                raise ConfigError(f"read.pattern must have a named group (?P<NAME>...), got {p!r}")
        if self.format == "text" and not self.pattern:
            raise ConfigError("read.format text needs --pattern REGEX (named groups are keys, (?P<step>...) the step)")
        if self.run is not None and self.format not in (None, "mlflow"):
            raise ConfigError(f"read.run applies to MLflow stores, got {self.run!r} with --format {self.format}")

    @property
    def text(self) -> bool:
        """The log is a text log read with patterns (`--format text/nanogpt/megatron`, `--pattern`)."""
        return bool(self.pattern) or self.format in TEXT_FORMATS

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
