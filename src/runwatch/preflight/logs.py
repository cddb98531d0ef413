"""How `bench`, `smoke` and `plan` read a run's log: with `check`'s reading options, resolved as
`check` resolves them.

    add_reading_arguments(p)                   # --format, --pattern, --run, --map (and --log)
    reading = reading_from_args(args)           # Reading(read=ReadOptions, maps={...})
    target = reading.resolve(run_dir)           # reading.target.resolve_target, as `check` calls it
    text = describe_log(run_dir, reading)       # what the log looked like, for a message

`--log PATH` names the program's log relative to RUN_DIR (as `launch` and `supervise` take it);
a text format (`--format text/nanogpt/megatron`, `--pattern`) reads RUN_DIR's `stdout.log`; else
RUN_DIR itself is resolved as `check RUN_DIR` resolves it (`metrics.jsonl`, `trainer_state.json`,
TensorBoard files, an MLflow store, the one CSV or JSONL log). Standard library only.
"""

from __future__ import annotations

import argparse
import dataclasses
import os

from ..files import RunDir
from ..judging import RuleOptions
from ..options import add_flags, option_fields
from ..reading import ReadOptions, Target, parse_maps, read_options, resolve_target, tail_lines

# How much of a log `describe_log` quotes: its last lines, each cut to this many characters.
QUOTE_LINES = 2
QUOTE_CHARS = 160


@dataclasses.dataclass(frozen=True)
class Reading:
    """How to read a run's log: `check`'s reading options (`--format`, `--pattern`, `--run`, `--log`)
    and its key maps (`--map`)."""

    read: ReadOptions = ReadOptions()
    maps: dict[str, str] = dataclasses.field(default_factory=dict)

    def read_for(self, run_dir: str) -> ReadOptions:
        """The reading options for `run_dir`: as given for a log named directly; for a run
        directory, `--log` (relative to RUN_DIR) or `stdout.log` for a text format, as `launch`
        names a launched program's log (what RUN_DIR recorded at launch fills what is not given)."""
        from ..supervising import watch_read

        return self.read if os.path.isfile(run_dir) else watch_read(self.read)

    def resolve(self, run_dir: str) -> Target:
        """The log of `run_dir` and its format: `resolve_target`, as `check` resolves its target."""
        return resolve_target(run_dir, self.read_for(run_dir))

    def given(self) -> bool:
        """Reading options were given (the log is not read as RUN_DIR's own)."""
        return self.read != ReadOptions() or bool(self.maps)

    def flags(self) -> str:
        """The options as a command line shows them (`--format nanogpt --map loss=train/loss`)."""
        out: list[str] = []
        for f in option_fields(ReadOptions):
            value = getattr(self.read, f.name)
            for v in value if isinstance(value, tuple) else (value,) if value is not None else ():
                out.append(f"--{f.name.replace('_', '-')} {v}")
        out += [f"--map {k}={v}" for k, v in self.maps.items()]
        return " ".join(out)


def add_reading_arguments(p: argparse.ArgumentParser) -> None:
    """`check`'s reading options: --format, --pattern, --run, --map, and --log (relative to RUN_DIR)."""
    add_flags(p, ReadOptions, "launch")  # --format, --pattern, --run, --log
    add_flags(p, RuleOptions, "check", skip=tuple(f.name for f in option_fields(RuleOptions) if f.name != "map"))


def reading_from_args(args: argparse.Namespace) -> Reading:
    """The Reading of parsed arguments (a bad value is a ConfigError naming the option)."""
    return Reading(read_options(args), parse_maps(getattr(args, "map", None)))


def _quote(line: bytes) -> str:
    text = line.decode("utf-8", "replace").strip()
    return repr(text if len(text) <= QUOTE_CHARS else text[: QUOTE_CHARS - 3] + "...")


def _file_facts(path: str) -> str:
    try:
        size = os.path.getsize(path)
        lines, _ = tail_lines(path, QUOTE_LINES)
    except OSError as exc:
        return f"{path}: unreadable ({exc.strerror or exc})"
    shown = [_quote(x) for x in lines if x.strip()]
    last = f"; last lines: {' | '.join(shown)}" if shown else ""
    return f"{path}: {size} bytes{last}"


def describe_log(run_dir: str, reading: Reading, target: Target | None = None, *, output: bool = True) -> str:
    """What the log looked like, in one line: which file was read with which format, its size and
    last lines, and (`output`) the program's output (`stdout.log`) when that is another file."""
    try:
        t = target or reading.resolve(run_dir)
    except Exception as exc:  # noqa: BLE001 - a description never fails: it says why
        return f"the log of {run_dir} cannot be resolved: {exc}"
    how = f"--format {t.format}" + (f" {reading.flags()}" if reading.given() else "")
    if os.path.isfile(t.log_path):
        parts = [f"the log, read as {how}: " + _file_facts(t.log_path)]
    elif os.path.isdir(t.log_path):
        parts = [f"the log, read as {how}: {t.log_path} (a folder)"]
    else:
        parts = [f"the log, read as {how}: {t.log_path} does not exist"]
    stdout = RunDir(t.run_dir if os.path.isdir(t.run_dir) else run_dir).stdout
    if output and os.path.isfile(stdout) and os.path.realpath(stdout) != os.path.realpath(t.log_path):
        parts.append("output " + _file_facts(stdout))
    return "; ".join(parts)
