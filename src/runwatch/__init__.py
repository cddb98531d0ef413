"""runwatch: supervise long training runs.

The logger (`RunLogger`) writes schema-v1 telemetry; `summarize` audits it. Both need only the
standard library. `resume_checkpoint` names the checkpoint a (supervised) relaunch resumes
from. `verify_checkpoint` reads a checkpoint back (torch/safetensors, imported lazily).
"""

import importlib
from typing import TYPE_CHECKING, Any

# Every exception a public function raises is exported here, so callers can catch it by name.
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
from .version import __version__

if TYPE_CHECKING:
    from .files.checkpoint import verify_checkpoint
    from .judging.summary import summarize
    from .logger.metrics import RunLogger
    from .reading.resume import resume_checkpoint

# Imported on first use (PEP 562), so that `from runwatch import RunLogger` in a training process
# loads the logger and not the acceptance summary or the resume helpers; the exceptions above are
# imported at once (every public function may raise them).
_LAZY = {
    "RunLogger": ".logger.metrics",
    "summarize": ".judging.summary",
    "resume_checkpoint": ".reading.resume",
    "verify_checkpoint": ".files.checkpoint",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'runwatch' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # later lookups find it without this hook
    return value


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
