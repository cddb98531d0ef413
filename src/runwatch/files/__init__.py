"""A run directory's files and their formats: the one place that names them, writes them and reads
them back (schema v1, the run manifest, the heartbeats, checkpoints, provenance), standard library
only.

    from runwatch.files import RunDir, read_manifest, read_heartbeats, verify_checkpoint

    d = RunDir("runs/a")                       # d.metrics, d.manifest, d.verdict, d.journal, ...
    manifest = read_manifest("runs/a")         # run.json, validated
    beats, problems = read_heartbeats("runs/a")  # one Heartbeat a rank, a line per unreadable file
    report = verify_checkpoint("runs/a/ckpt")  # a checkpoint read back (torch/safetensors, lazily)

This is the layer's face: every name below is imported on first use from the module that defines it,
so importing `runwatch.files` imports nothing else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import lazy

if TYPE_CHECKING:
    from .checkpoint import CheckpointReport as CheckpointReport
    from .checkpoint import verify_checkpoint as verify_checkpoint
    from .hardware import GpuInfo as GpuInfo
    from .hardware import detect_hardware as detect_hardware
    from .hardware import gpu_info as gpu_info
    from .hardware import memory_peaks as memory_peaks
    from .hardware import rank_hardware as rank_hardware
    from .heartbeats import HISTORY_WINDOWS as HISTORY_WINDOWS
    from .heartbeats import MAX_HEARTBEAT_BYTES as MAX_HEARTBEAT_BYTES
    from .heartbeats import PHASE_NAME as PHASE_NAME
    from .heartbeats import Heartbeat as Heartbeat
    from .heartbeats import HeartbeatConfig as HeartbeatConfig
    from .heartbeats import current_session as current_session
    from .heartbeats import heartbeat_path as heartbeat_path
    from .heartbeats import parse_heartbeat as parse_heartbeat
    from .heartbeats import read_heartbeats as read_heartbeats
    from .journal import atomic_write as atomic_write
    from .journal import atomic_write_text as atomic_write_text
    from .journal import open_session as open_session
    from .journal import utc_now as utc_now
    from .jsonio import dumps as dumps
    from .jsonio import loads as loads
    from .jsonio import orjson_misread as orjson_misread
    from .jsonio import strict_json as strict_json
    from .lines import MAX_LINE_BYTES as MAX_LINE_BYTES
    from .lines import iter_line_blocks as iter_line_blocks
    from .lines import open_run_file as open_run_file
    from .lines import read_regular_file as read_regular_file
    from .provenance import capture as capture
    from .provenance import data_paths as data_paths
    from .recipe import check_arguments as check_arguments
    from .recipe import check_checkpoint as check_checkpoint
    from .recipe import check_recipe as check_recipe
    from .recipe import check_start as check_start
    from .rundir import CONFIG as CONFIG
    from .rundir import ENV_ATTEMPT_ID as ENV_ATTEMPT_ID
    from .rundir import ENV_RESUME_FROM as ENV_RESUME_FROM
    from .rundir import ENV_ROLLBACK as ENV_ROLLBACK
    from .rundir import ENV_RUN_DIR as ENV_RUN_DIR
    from .rundir import ENV_SKIP_STEPS as ENV_SKIP_STEPS
    from .rundir import ENV_WINDOW as ENV_WINDOW
    from .rundir import EXIT as EXIT
    from .rundir import HEARTBEATS as HEARTBEATS
    from .rundir import JOURNAL as JOURNAL
    from .rundir import LAUNCH_HEADER as LAUNCH_HEADER
    from .rundir import LOCK as LOCK
    from .rundir import MANIFEST as MANIFEST
    from .rundir import METRICS as METRICS
    from .rundir import PID as PID
    from .rundir import RESUME_ENV as RESUME_ENV
    from .rundir import SIDE_FILES as SIDE_FILES
    from .rundir import STDOUT as STDOUT
    from .rundir import VERDICT as VERDICT
    from .rundir import RunDir as RunDir
    from .rundir import read_json as read_json
    from .rundir import recorded_reading as recorded_reading
    from .safeio import escaping as escaping
    from .safeio import inside as inside
    from .safeio import loads_object as loads_object
    from .safeio import loads_value as loads_value
    from .safeio import open_append as open_append
    from .safeio import read_bounded as read_bounded
    from .safeio import read_tail as read_tail
    from .schema import END_REASONS as END_REASONS
    from .schema import SCHEMA_VERSION as SCHEMA_VERSION
    from .schema import SessionValidator as SessionValidator
    from .schema import read_manifest as read_manifest
    from .schema import validate_manifest as validate_manifest
    from .schema import window_tokens as window_tokens

# The public names, module -> names: this face's __all__.
_PUBLIC: dict[str, tuple[str, ...]] = {
    ".checkpoint": ("verify_checkpoint", "CheckpointReport"),
    ".hardware": ("detect_hardware", "rank_hardware", "memory_peaks", "gpu_info", "GpuInfo"),
    ".heartbeats": (
        "HISTORY_WINDOWS",
        "HeartbeatConfig",
        "Heartbeat",
        "heartbeat_path",
        "parse_heartbeat",
        "read_heartbeats",
        "current_session",
        "MAX_HEARTBEAT_BYTES",
        "PHASE_NAME",
    ),
    ".journal": ("open_session", "atomic_write", "atomic_write_text", "utc_now"),
    ".jsonio": ("strict_json", "loads", "dumps", "orjson_misread"),
    ".lines": ("MAX_LINE_BYTES", "read_regular_file", "iter_line_blocks", "open_run_file"),
    ".provenance": ("capture", "data_paths"),
    ".recipe": ("check_recipe", "check_start", "check_arguments", "check_checkpoint"),
    ".rundir": (
        "RunDir",
        "read_json",
        "recorded_reading",
        "METRICS",
        "MANIFEST",
        "PID",
        "EXIT",
        "STDOUT",
        "VERDICT",
        "JOURNAL",
        "LOCK",
        "HEARTBEATS",
        "CONFIG",
        "SIDE_FILES",
        "LAUNCH_HEADER",
        "ENV_RUN_DIR",
        "ENV_WINDOW",
        "ENV_RESUME_FROM",
        "ENV_ROLLBACK",
        "ENV_SKIP_STEPS",
        "ENV_ATTEMPT_ID",
        "RESUME_ENV",
    ),
    ".safeio": ("read_bounded", "read_tail", "loads_value", "loads_object", "open_append", "inside", "escaping"),
    ".schema": (
        "SCHEMA_VERSION",
        "END_REASONS",
        "read_manifest",
        "validate_manifest",
        "SessionValidator",
        "window_tokens",
    ),
}
# The other names the modules listed as exported before the faces: importable from here for one
# release, not in __all__ (import them from the face, or better, use a public name).
_KEPT: dict[str, tuple[str, ...]] = {
    ".checkpoint": ("CHECKPOINT_SUFFIXES",),
    ".hardware": ("device_name",),
    ".journal": ("Journal", "NullJournal", "new_run_id", "new_session_id"),
    ".jsonio": ("json_problem",),
    ".lines": ("iter_lines",),
    ".provenance": ("GIT_TIMEOUT_SECONDS", "HASH_EDGE_BYTES", "data_fingerprint", "git_state"),
    ".rundir": ("READ_FIELDS", "LAUNCH", "SUPERVISE_LOG"),
    ".safeio": ("Records", "tail_lines", "read_records", "append_line", "open_new", "open_lock", "TAIL_CHUNK_BYTES"),
    ".schema": ("EVENTS", "MAX_MANIFEST_BYTES", "WindowValues"),
}
_WHERE = lazy.index(_PUBLIC, _KEPT)

__all__ = lazy.public(_PUBLIC)


def __getattr__(name: str) -> Any:
    return lazy.resolve(__name__, globals(), _WHERE, name)


def __dir__() -> list[str]:
    return lazy.listing(globals(), _WHERE)
