"""runwatch: supervise long training runs.

The logger (`RunLogger`) writes schema-v1 telemetry; `summarize` audits it. Both need only the
standard library. `resume_checkpoint` names the checkpoint a (supervised) relaunch resumes
from. `verify_checkpoint` reads a checkpoint back (torch/safetensors, imported lazily).
"""

from .checkpoint import verify_checkpoint
from .errors import (
    CheckpointError,
    ConfigError,
    DataError,
    InsufficientRunError,
    InvalidRunError,
    LogWriteError,
    NonFiniteLossError,
    RanksOutOfStepError,
    RunLockedError,
    RunwatchError,
    StoreLockedError,
    Terminated,
    UsageError,
)
from .metrics import RunLogger
from .resume import resume_checkpoint
from .summary import summarize

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
    "NonFiniteLossError",
    "RanksOutOfStepError",
    "InsufficientRunError",
    "DataError",
    "CheckpointError",
    "Terminated",
    "__version__",
]
