"""runwatch: supervise long training runs.

The logger (`RunLogger`) writes schema-v1 telemetry; `summarize` audits it. Both need only the
standard library. `resume_checkpoint` names the checkpoint a (supervised) relaunch resumes
from. `verify_checkpoint` reads a checkpoint back (torch/safetensors, imported lazily).
"""

from .errors import (
    CheckpointError,
    ConfigError,
    DataError,
    InsufficientRunError,
    InvalidRunError,
    LogWriteError,
    NonFiniteLossError,
    NotRegularFileError,
    RanksOutOfStepError,
    RunLockedError,
    RunwatchError,
    StoreLockedError,
    Terminated,
    UnsafeWriteError,
    UsageError,
)
from .files.checkpoint import verify_checkpoint
from .judging.summary import summarize
from .logger.metrics import RunLogger
from .reading.resume import resume_checkpoint

# Every exception a public function raises is exported here, so callers can catch it by name.
from .version import __version__

__all__ = [
    "RunLogger",
    "summarize",
    "resume_checkpoint",
    "verify_checkpoint",
    "RunwatchError",
    "InvalidRunError",
    "UsageError",
    "ConfigError",
    "RunLockedError",
    "StoreLockedError",
    "LogWriteError",
    "NotRegularFileError",
    "UnsafeWriteError",
    "NonFiniteLossError",
    "RanksOutOfStepError",
    "InsufficientRunError",
    "DataError",
    "CheckpointError",
    "Terminated",
    "__version__",
]
