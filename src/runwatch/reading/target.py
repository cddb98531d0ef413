"""What a command was pointed at: `resolve_target` turns a path into a `Target` (the run
directory, the log and its format).

    t = resolve_target("runs/a")           # a run directory, a JSONL log, a trainer_state.json,
    t.format, t.log_path, t.run_dir        # TensorBoard files, an MLflow store, a CSV, a text log

A run directory (`metrics.jsonl`) or a Hugging Face output directory (`trainer_state.json`) is read
as such whatever else it holds; other tools' logs are detected by `readers.detect` (by name and
content) or named by `--format`. A folder holding none of these but exactly one log file (a CSV
with a step or epoch column, a `*.jsonl` whose first record has a step, a text log in a preset's
format) is read through that file; so is a folder named with `--format csv/text/nanogpt/megatron`
or `--pattern` (a text log: its `stdout.log`, else the one file whose head the patterns match).

A run directory owns the run: `launch` and `supervise` record in its `launch.json` how they read
the log (`--log`, `--format`, `--pattern`, `--run`, `--map`) and the rule options they judge with;
every reader that resolves the directory here reads it the same way unless told otherwise (a
reading option given wins, one by one: `merge_read`), and the rule options are had from
`recorded_rule_options`. `--log PATH` (relative to the run directory, or absolute) names the log
only: the run's own files (`launch.json`, `exit.json`, `watchdog.json`, the journal, heartbeats)
stay in the run directory. Standard library only.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError, UsageError
from ..files import METRICS, RunDir, recorded_reading
from ..options import option_fields
from .readers import FORMATS, ReadOptions, detect, is_log, sniff_log

# A target that does not exist yet is a run directory unless its name ends like a log file.
FILE_SUFFIXES = (".jsonl", ".json", ".ndjson", ".log", ".txt")
# Files in a run directory that are not its metrics: the supervisor's journal, the process's output.
NOT_LOGS = frozenset({"supervise.jsonl", "stdout.log"})
# Watch options that are not how a run is judged, so neither recorded in launch.json nor taken
# from it: the watch's own process, time limit, polling and actions, and a scheduler's exit codes
# (`map` is recorded with the reading options).
NOT_RECORDED = ("pid", "timeout", "poll", "stop_on_anomaly", "exit_transient", "exit_code", "map")


@dataclass(frozen=True, slots=True)
class Target:
    """What a command was pointed at: the run directory, the log, and how to read it."""

    run_dir: str
    log_path: str
    # "jsonl" (schema v1 when run.json exists beside it, else minimal), "trainer_state", or a
    # `readers` format: "tensorboard", "mlflow", "csv", "text"
    format: str
    read: ReadOptions = ReadOptions()
    # what launch.json recorded and this reading took from it: `--map` items, and who recorded
    # them (`supervise`, `launch`), None when nothing recorded was used
    map: tuple[str, ...] = ()
    recorded_by: str | None = None

    @property
    def manifest_path(self) -> str:
        return RunDir(self.run_dir).manifest

    @property
    def has_manifest(self) -> bool:
        """The log is a `metrics.jsonl` beside a `run.json`, which names its sessions and their
        recipes (a broken or dangling run.json too: reading it says why). The question a caller
        asks before the log is read; once it is, its `RecordParser` tells the facts."""
        return (
            self.format == "jsonl"
            and os.path.basename(self.log_path) == "metrics.jsonl"
            and os.path.lexists(self.manifest_path)
        )

    def schema_v1(self) -> bool:
        """The log is schema v1 (`has_manifest`): this package's own question."""
        return self.has_manifest


def merge_read(given: ReadOptions, recorded: dict[str, Any]) -> ReadOptions:
    """`given` (the command line's reading options) over `recorded` (launch.json's), one by one:
    `--log` and `--run` each, `--format` with `--pattern` together (a pattern belongs to a text
    format). A recorded value that does not fit what is given is left out."""
    fields: dict[str, Any] = {}
    if given.format is None and not given.pattern:
        fields["format"] = recorded.get("format")
        fields["pattern"] = tuple(recorded.get("pattern") or ())
    if given.log is None and recorded.get("log"):
        fields["log"] = recorded["log"]
    if given.run is None and recorded.get("run") and fields.get("format", given.format) in (None, "mlflow"):
        fields["run"] = recorded["run"]
    if not fields:
        return given
    try:
        return dataclasses.replace(given, **fields)
    except ConfigError:  # a recorded pattern that is no longer a valid one, ...: the given options alone
        return given


def recorded_rule_options(run_dir: str, cls: type, command: str | None = None) -> dict[str, Any]:
    """The rule options launch.json recorded for the run (those of the options class `cls` that
    `command` takes, each valid), to merge under the options given: `{**recorded, **given}`."""
    read, rules, _by = recorded_reading(run_dir)
    if read.get("map"):  # (recorded with the reading options)
        rules = {**rules, "map": read["map"]}
    out: dict[str, Any] = {}
    for f in option_fields(cls, command):
        if f.name in rules and (f.name not in NOT_RECORDED or f.name == "map"):
            value = rules[f.name]
            if (value is None and f.metadata["none"]) or f.metadata["check"].ok(value):
                out[f.name] = value
    return out


def resolve_target(target: str, read: ReadOptions | None = None) -> Target:
    """What `target` names and how to read it, the recorded reading options of a run directory
    under `read`'s (see the module docstring); `read.log` names the log inside (or outside) the
    run directory `target`.

    A run directory, a JSONL file or a trainer_state.json → Target (the path may not exist yet).

    A directory without `metrics.jsonl` but with `trainer_state.json` is read through the latter
    (also one level down, in its latest `checkpoint-N/`). Other tools' logs (TensorBoard, MLflow,
    CSV, text) are detected by `readers.detect` (by name) and `readers.sniff_log` (a text log in a
    preset's format), or named by `read.format`; a directory holding none of these but one such log
    is read through it (`single_log`). A directory named with `--format csv`, a text format or
    `--pattern` is read through its one log of that format (UsageError when it holds none, or several).
    """
    target = os.fspath(target)
    read = read or ReadOptions()
    recorded, rec_map, by = _recorded(target, read)
    if by is not None:
        read = recorded
    if read.log and os.path.normpath(read.log) != ".":  # the log is named: the run's own files stay in `target`
        log = read.log if os.path.isabs(read.log) else os.path.join(target, read.log)
        inner = _resolve(log, dataclasses.replace(read, log=None, sessions=True))
        return dataclasses.replace(inner, run_dir=target, map=rec_map, recorded_by=by)
    if by is not None:
        return dataclasses.replace(_resolve(target, read), map=rec_map, recorded_by=by)
    return _resolve(target, read)


def _recorded(target: str, given: ReadOptions) -> tuple[ReadOptions, tuple[str, ...], str | None]:
    """`given` over what the run directory `target` recorded, its recorded `--map`, and who
    recorded them (None, and `given`, when the directory recorded nothing)."""
    if not os.path.isdir(target):
        return given, (), None
    recorded, _rules, by = recorded_reading(target)
    if by is None or not recorded:
        return given, (), None
    merged, maps = merge_read(given, recorded), tuple(recorded.get("map") or ())
    return (merged, maps, by) if merged != given or maps else (given, (), None)


def _resolve(target: str, read: ReadOptions) -> Target:
    if (read.text or read.format == "csv") and os.path.isdir(target):
        log = single_log(target, read)
        if log is None:
            how = "--pattern" if read.pattern else f"--format {read.format}"
            raise UsageError(f"{how}: {target} holds no single such log; give the file")
        return resolve_target(log, read)
    # A run directory (metrics.jsonl) or a Hugging Face output directory (trainer_state.json) is read
    # as before, whatever else it holds (the HF Trainer's TensorBoard files, say), unless --format says.
    own = read.format is None and os.path.isdir(target) and find_trainer_state(target) is not None
    found = None if own else detect(target, read)
    if found is not None:
        fmt, log, run_dir = found
        if fmt == "tensorboard" and not read.sessions and _owned(log):
            read = dataclasses.replace(read, sessions=True)  # a run directory's folder: its launches are sessions
        return Target(run_dir, log, fmt, read)
    if read.format == "jsonl" and os.path.isdir(target):
        return Target(target, RunDir(target).metrics, "jsonl", read)
    if read.format == "jsonl":
        return Target(os.path.dirname(os.path.abspath(target)), target, "jsonl", read)
    if not os.path.exists(target) and not target.endswith(FILE_SUFFIXES):
        target_is_dir = True  # not there yet: a run directory, unless it is named like a log file
    else:
        target_is_dir = os.path.isdir(target)
    if target_is_dir:
        log = RunDir(target).metrics
        if not os.path.exists(log):
            state = find_trainer_state(target)
            if state is not None:
                return Target(target, state, "trainer_state")
            single = single_log(target) if read.format is None else None
            if single is not None:
                return resolve_target(single, read)
        return Target(target, log, "jsonl")
    run_dir = os.path.dirname(os.path.abspath(target))
    if target.endswith(".json") and not target.endswith(".jsonl"):
        return Target(run_dir, target, "trainer_state")
    sniffed = sniff_log(target) if read.format is None and os.path.isfile(target) else None
    if sniffed is not None:  # a text log in a preset's format (nanoGPT, Megatron-LM)
        return Target(run_dir, target, sniffed[0], sniffed[1])
    if read.format is None and os.path.basename(target) != METRICS:  # (runwatch's own log: damage is a finding)
        line = _first_line(target)
        if line is not None and not _is_json(line):
            # never invalid_log for its name alone: a file of another kind needs its format named
            raise UsageError(
                f"{target}: not a JSON-lines log (its first line: {_quote(line)}); name its format with "
                f"--format {'|'.join(f for f in FORMATS if f != 'jsonl')}, or --pattern for a text log"
            )
    return Target(run_dir, target, "jsonl")


# How much of a log's head `_first_line` reads: a first record is far shorter.
HEAD_BYTES = 64 * 1024


def _first_line(path: str) -> bytes | None:
    """The first complete, non-blank line of the regular file `path`; None when it has none yet (or
    cannot be read: the reader says why)."""
    from ..files import read_bounded

    try:
        head = read_bounded(path, HEAD_BYTES)
    except OSError:
        return None
    for line in head.split(b"\n")[:-1]:
        if line.strip():
            return line
    return None


def _is_json(line: bytes) -> bool:
    """`line` is one JSON value (a record, or a value the reader reports as no record)."""
    import json

    try:
        json.loads(line)
    except ValueError:  # (UnicodeDecodeError too)
        return False
    return True


def _quote(line: bytes, limit: int = 60) -> str:
    text = line.decode("utf-8", "replace").strip()
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def _owned(folder: str) -> bool:
    """`folder` is a run directory runwatch launched in (its launch.json or journal lies there)."""
    d = RunDir(folder)
    return os.path.isdir(folder) and (os.path.isfile(d.launch) or os.path.isfile(d.journal))


def single_log(folder: str, read: ReadOptions | None = None) -> str | None:
    """The one log file of a folder that holds no run directory's log, None when there is none or
    more than one. Without a format: a CSV with a step or epoch column, a `*.jsonl` whose first
    record has a step, or a text log in a preset's format (`readers.sniff_log`). With `--format
    csv`: the one CSV of steps; a text log (`read.text`): the folder's `stdout.log` (what `launch`
    writes), else the one file whose head the patterns match."""
    read = read or ReadOptions()
    if read.text and os.path.isfile(RunDir(folder).stdout):
        return RunDir(folder).stdout
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return None
    found = [
        path
        for path in (os.path.join(folder, n) for n in names if n not in NOT_LOGS and not n.startswith("."))
        if os.path.isfile(path) and is_log(path, read)
    ]
    return found[0] if len(found) == 1 else None


def find_trainer_state(run_dir: str) -> str | None:
    """`run_dir/trainer_state.json`, else the one in its latest `checkpoint-N/`; None when neither."""
    direct = os.path.join(run_dir, "trainer_state.json")
    if os.path.isfile(direct):
        return direct
    best = None
    try:
        names = os.listdir(run_dir)
    except OSError:
        return None
    for name in names:
        if name.startswith("checkpoint-") and name[11:].isdigit():
            path = os.path.join(run_dir, name, "trainer_state.json")
            if os.path.isfile(path) and (best is None or int(name[11:]) > best[0]):
                best = (int(name[11:]), path)
    return best[1] if best else None
