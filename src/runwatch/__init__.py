"""runwatch: supervise long training runs.

The names a training script and a user need most, from the faces of their layers:

    from runwatch import RunLogger            # the logger (runwatch.logger): schema-v1 telemetry
    from runwatch import summarize            # the acceptance summary (runwatch.judging)
    from runwatch import resume_checkpoint    # the checkpoint a (supervised) relaunch resumes from
    from runwatch import verify_checkpoint    # a checkpoint read back (torch/safetensors, lazily)

Each layer's package is its face and exports its public names: `runwatch.files`, `runwatch.procs`,
`runwatch.options`, `runwatch.reading`, `runwatch.logger`, `runwatch.integrations`,
`runwatch.judging`, `runwatch.supervising`, `runwatch.preflight`, `runwatch.views`, and
`runwatch.errors` (docs/ARCHITECTURE.md, "The public API: one face per layer").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import lazy

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
    from .files import verify_checkpoint as verify_checkpoint
    from .judging import summarize as summarize
    from .logger import RunLogger as RunLogger
    from .reading import resume_checkpoint as resume_checkpoint

# Imported on first use (PEP 562) from their layers' faces, so that `from runwatch import RunLogger`
# in a training process loads the logger and not the acceptance summary or the resume helpers; the
# exceptions above are imported at once (every public function may raise them).
_PUBLIC: dict[str, tuple[str, ...]] = {
    ".logger": ("RunLogger",),
    ".judging": ("summarize",),
    ".reading": ("resume_checkpoint",),
    ".files": ("verify_checkpoint",),
}
_WHERE = lazy.index(_PUBLIC)

__all__ = [
    *lazy.public(_PUBLIC),
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


def __getattr__(name: str) -> Any:
    return lazy.resolve(__name__, globals(), _WHERE, name)


def __dir__() -> list[str]:
    return lazy.listing(globals(), _WHERE)
