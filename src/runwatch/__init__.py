"""runwatch: supervise long training runs.

The logger (`RunLogger`) writes schema-v1 telemetry; `summarize` audits it. Both need only the
standard library. `resume_checkpoint` names the checkpoint a (supervised) relaunch resumes
from. `verify_checkpoint` reads a checkpoint back (torch/safetensors, imported lazily).
"""

from .checkpoint import verify_checkpoint
from .errors import InvalidRunError, NonFiniteLossError, RunLockedError, RunwatchError
from .metrics import RunLogger
from .resume import resume_checkpoint
from .summary import summarize

__all__ = [
    "RunLogger",
    "summarize",
    "resume_checkpoint",
    "verify_checkpoint",
    "RunwatchError",
    "InvalidRunError",
    "NonFiniteLossError",
    "RunLockedError",
    "__version__",
]

__version__ = "0.1.0"
