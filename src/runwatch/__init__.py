"""runwatch: supervise long training runs.

The logger (`RunLogger`) writes schema-v1 telemetry; `summarize` audits it. Both need only the
standard library.
"""

from .errors import InvalidRunError, NonFiniteLossError, RunLockedError, RunwatchError
from .metrics import RunLogger
from .summary import summarize

__all__ = [
    "RunLogger",
    "summarize",
    "RunwatchError",
    "InvalidRunError",
    "NonFiniteLossError",
    "RunLockedError",
    "__version__",
]

__version__ = "0.1.0"
