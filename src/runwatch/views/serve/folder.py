"""The runs under a served folder: which paths are runs, and finding them.

    target = run_target("/runs/a")               # a Target when the path is a run, else None
    for rel, target in find_runs("/runs"):       # every run up to MAX_DEPTH levels down
        ...

`run_target` is the one place that says what a run looks like in a folder of runs (a run
directory, a JSONL log, a trainer_state.json, another tool's log); `find_runs` walks the folder
(hidden folders skipped, a run's own folder not searched further, nothing outside the folder
followed, at most MAX_SCANNED_ENTRIES entries). Each run found is read by `runs.RunView`.
Standard library only.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator

from ...files import recorded_reading
from ...reading import NOT_LOGS, ReadOptions, Target, detect, resolve_target, sniff_log

# How deep below the served folder runs are looked for ("runs/<project>/<sweep>/<run>").
MAX_DEPTH = 4
# A folder tree this large is not a folder of runs: stop listing rather than stall the reader.
MAX_SCANNED_ENTRIES = 20000


def inside(root: str, path: str) -> bool:
    """`path` resolves (symlinks followed) to `root` or below; `root` is already a realpath."""
    real = os.path.realpath(path)
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def run_target(path: str) -> Target | None:
    """The Target when `path` is a run (a run directory, a JSONL log, a trainer_state.json, another
    tool's log), else None.

    This is the one place that says what a run looks like in a folder of runs: a reader of another
    format adds its detection to `readers.detect` / `readers.sniff_log` (and `resolve_target` says
    how to read it).
    """
    try:
        st = os.stat(path)
    except OSError:
        return None
    name = os.path.basename(path)
    if stat.S_ISDIR(st.st_mode):
        if recorded_reading(path)[2] is not None:
            return resolve_target(path)  # a run directory whose launch recorded how to read it: one run, read so
        if not any(os.path.lexists(os.path.join(path, n)) for n in ("metrics.jsonl", "run.json", "trainer_state.json")):
            # a HF output folder (checkpoint-N/trainer_state.json), TensorBoard or MLflow logs
            t = resolve_target(path)
            if t.format == "tensorboard" and not _own_event_files(path):
                return None  # event files one level down: each folder of them is a run of its own
            return t if t.format in ("trainer_state", "tensorboard", "mlflow") else None  # a CSV: its file
        return resolve_target(path)
    if name.endswith(".jsonl") and name not in NOT_LOGS and name != "metrics.jsonl":
        return resolve_target(path)
    if name in NOT_LOGS:
        return None
    found = detect(path, ReadOptions())  # an event file, an MLflow store, a CSV
    if found is not None and found[0] == "mlflow" and name != "mlflow.db":
        return None  # any other SQLite file is not taken for a store
    if found is not None and found[0] != "csv":
        return resolve_target(path)
    if sniff_log(path) is None:
        return None  # a data table, not a log of steps; text that no preset reads
    return resolve_target(path)


def _own_event_files(path: str) -> bool:
    """The folder holds TensorBoard event files itself (not only in its sub-folders: those are
    the runs, as TensorBoard and Lightning's `lightning_logs/version_N/` lay them out)."""
    from ...reading import is_event_file

    try:
        return any(is_event_file(n) for n in os.listdir(path))
    except OSError:
        return False


def find_runs(root: str, max_depth: int = MAX_DEPTH) -> Iterator[tuple[str, Target]]:
    """(path relative to `root` with "/" separators, Target) of every run under `root`.

    A run's own folder is not searched further (its checkpoints are not runs). Hidden folders are
    skipped, and so is anything that resolves outside `root` (a symlink leading out of it).
    """
    root = os.path.realpath(root)
    top = run_target(root)
    if top is not None:  # the folder is itself a run: serve it alone, under its own name
        if inside(root, top.log_path) or not os.path.lexists(top.log_path):
            yield os.path.basename(root) or "run", top
        return
    seen = 0
    stack: list[tuple[str, int]] = [(root, 0)]
    while stack:
        folder, depth = stack.pop()
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        for name in names:
            seen += 1
            if seen > MAX_SCANNED_ENTRIES:
                return
            if name.startswith("."):
                continue
            path = os.path.join(folder, name)
            if not inside(root, path):
                continue
            target = run_target(path)
            if target is not None:
                if inside(root, target.log_path) or not os.path.lexists(target.log_path):
                    yield os.path.relpath(path, root).replace(os.sep, "/"), target
                continue
            if depth + 1 < max_depth and os.path.isdir(path):
                stack.append((path, depth + 1))
