"""runwatch: supervise long training runs.

The logger (`RunLogger`) writes schema-v1 telemetry; `summarize` audits it. Both need only the
standard library. `verify_checkpoint` reads a checkpoint back (torch/safetensors, imported lazily).
"""

from .checkpoint import verify_checkpoint
from .errors import InvalidRunError, NonFiniteLossError, RunLockedError, RunwatchError
from .metrics import RunLogger
from .summary import summarize

__all__ = [
    "RunLogger",
    "summarize",
    "verify_checkpoint",
    "RunwatchError",
    "InvalidRunError",
    "NonFiniteLossError",
    "RunLockedError",
    "__version__",
]

__version__ = "0.1.0"
