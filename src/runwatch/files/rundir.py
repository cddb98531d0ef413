"""A run directory's file names and the `RUNWATCH_*` environment, each written once.

    d = RunDir("runs/a")
    d.metrics, d.stdout, d.verdict, d.journal     # runs/a/metrics.jsonl, runs/a/stdout.log, ...
    os.environ[ENV_RUN_DIR]                       # what `runwatch launch` tells the training

docs/FORMAT.md ("Files") says who writes each file and when. `read_json` is the one reader of
the small JSON files beside the log (launch.json, exit.json, watchdog.json): bounded, never
blocking on a FIFO, None when the file is missing or not JSON. Standard library only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from .safeio import loads_value, read_bounded

# --- the files (docs/FORMAT.md, "Files") -----------------------------------------------------------
METRICS = "metrics.jsonl"  # the logger's records
MANIFEST = "run.json"  # the logger's manifest: sessions, recipe, hardware
PID = "pid"  # the training's process id (`runwatch launch`)
LAUNCH = "launch.json"  # how `runwatch launch` started it: command, pid, start ticks, attempt id
EXIT = "exit.json"  # how it ended, written by the launch's waiter
STDOUT = "stdout.log"  # the training's stdout and stderr
VERDICT = "watchdog.json"  # the watch's liveness while it runs, then its verdict
JOURNAL = "supervise.jsonl"  # the supervisor's journal
LOCK = "supervise.lock"  # held by the one supervisor of the run directory
HEARTBEATS = "heartbeats"  # a folder: one heartbeat file per rank
CONFIG = "runwatch.toml"  # the run's options for watch and supervise
SUPERVISE_LOG = "supervise.log"  # a supervisor's own output, when `runwatch mcp` started it
# Every file runwatch reads or writes in a run directory besides the log: none may lead out of the
# folder a server was given (docs/RELIABILITY.md).
SIDE_FILES = (METRICS, MANIFEST, PID, LAUNCH, EXIT, STDOUT, VERDICT, JOURNAL, LOCK, HEARTBEATS, CONFIG, SUPERVISE_LOG)
# The line `runwatch launch` writes into stdout.log before each start: `--- runwatch launch <time>: <command>`.
LAUNCH_HEADER = "--- runwatch launch "

# --- the environment of a launched training ------------------------------------------------------
ENV_RUN_DIR = "RUNWATCH_RUN_DIR"  # where the logger writes (set by `runwatch launch`)
ENV_WINDOW = "RUNWATCH_WINDOW"  # the logger's window when the code does not pass one
ENV_RESUME_FROM = "RUNWATCH_RESUME_FROM"  # the checkpoint a relaunch resumes from
ENV_ROLLBACK = "RUNWATCH_ROLLBACK"  # "1" for a rollback after a divergence
ENV_SKIP_STEPS = "RUNWATCH_SKIP_STEPS"  # the steps a rollback skips ("A-B")
ENV_ATTEMPT_ID = "RUNWATCH_ATTEMPT_ID"  # every process of one attempt inherits it: the process tree's stop finds them
RESUME_ENV = (ENV_RESUME_FROM, ENV_ROLLBACK, ENV_SKIP_STEPS)

MAX_JSON_BYTES = 1 << 20  # launch.json, exit.json and watchdog.json are a few KB
# How a run's log is read, as launch.json's `read` records it (docs/FORMAT.md, "launch.json").
READ_FIELDS = ("log", "format", "pattern", "run", "map")


@dataclass(frozen=True, slots=True)
class RunDir:
    """The paths of a run directory's files."""

    path: str

    def __fspath__(self) -> str:
        return self.path

    def join(self, name: str) -> str:
        return os.path.join(self.path, name)

    @property
    def metrics(self) -> str:
        return os.path.join(self.path, METRICS)

    @property
    def manifest(self) -> str:
        return os.path.join(self.path, MANIFEST)

    @property
    def pid(self) -> str:
        return os.path.join(self.path, PID)

    @property
    def launch(self) -> str:
        return os.path.join(self.path, LAUNCH)

    @property
    def exit(self) -> str:
        return os.path.join(self.path, EXIT)

    @property
    def stdout(self) -> str:
        return os.path.join(self.path, STDOUT)

    @property
    def verdict(self) -> str:
        return os.path.join(self.path, VERDICT)

    @property
    def journal(self) -> str:
        return os.path.join(self.path, JOURNAL)

    @property
    def lock(self) -> str:
        return os.path.join(self.path, LOCK)

    @property
    def heartbeats(self) -> str:
        return os.path.join(self.path, HEARTBEATS)

    @property
    def config(self) -> str:
        return os.path.join(self.path, CONFIG)


def read_json(path: str, max_bytes: int = MAX_JSON_BYTES) -> Any:
    """The JSON value of a small regular file, strictly (no NaN or Infinity); None when it is
    missing, not a regular file (a FIFO is never waited on), larger than `max_bytes`, or not
    JSON (invalid UTF-8, nested too deeply)."""
    try:
        data = read_bounded(path, max_bytes + 1)
    except OSError:
        return None
    return loads_value(data) if len(data) <= max_bytes else None


def _texts(v: Any) -> tuple[str, ...] | None:
    return tuple(v) if isinstance(v, list) and all(type(x) is str for x in v) else None


def recorded_reading(run_dir: str) -> tuple[dict[str, Any], dict[str, Any], str | None]:
    """How the run's log was read and judged when it was launched: launch.json's `read` (`log`,
    `format`, `run` a str or None; `pattern`, `map` tuples of str), its `rules` (option name →
    a number, a bool, a str or a list of str) and `by` (`supervise`, `launch`). Fields of the
    wrong type are left out (the file is the training's neighbour's to write): ({}, {}, None)
    when nothing usable is recorded."""
    info = read_json(os.path.join(run_dir, LAUNCH))
    if not isinstance(info, dict):
        return {}, {}, None
    read: dict[str, Any] = {}
    raw = info.get("read")
    if isinstance(raw, dict):
        for key in ("log", "format", "run"):
            if type(raw.get(key)) is str and raw[key]:
                read[key] = raw[key]
        for key in ("pattern", "map"):
            texts = _texts(raw.get(key))
            if texts:
                read[key] = texts
    rules: dict[str, Any] = {}
    raw = info.get("rules")
    if isinstance(raw, dict):
        for key, value in raw.items():
            if type(key) is str and (type(value) in (int, float, bool, str) or _texts(value) is not None):
                rules[key] = _texts(value) if isinstance(value, list) else value
    by = info.get("by") if type(info.get("by")) is str else None
    return read, rules, by if read or rules else None
