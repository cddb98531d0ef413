"""The one exception hierarchy of runwatch.

    RunwatchError                       anything runwatch raises on purpose
    ├── InvalidRunError (ValueError)    a run directory or log breaks docs/FORMAT.md
    ├── UsageError                      a command line or option that cannot work (exit 2)
    │   └── ConfigError (ValueError)    a bad option, recipe, argument or runwatch.toml value: the
    │                                   message names it, what it must be and what it got
    ├── RunLockedError                  a second logger on a run directory in use
    ├── StoreLockedError                an MLflow SQLite store that a writer kept locked too long
    ├── LogWriteError (OSError)         the logger could not write a record (disk full, EFBIG)
    ├── NotRegularFileError (OSError)   a FIFO, a device, a socket or a directory where a run
    │                                   directory's file should be (read: skipped, never waited on)
    ├── UnsafeWriteError (OSError)      a write runwatch refuses: a symlink, a hard link, a lock
    │                                   file that holds something else than a pid
    ├── NonFiniteLossError              the training loss went NaN/Inf; the session was ended
    ├── RanksOutOfStepError             torch.distributed ranks called RunLogger.step() unequally
    ├── InsufficientRunError            a run too short to judge (`plan`: too few steady windows)
    ├── DataError                       a data set `audit-data` cannot read as a whole (not one bad row)
    └── CheckpointError                 a checkpoint that cannot be read back (`verify_checkpoint`)

    Terminated (KeyboardInterrupt)      SIGTERM, raised in the training loop's main thread by the
                                        logger's handler; like Ctrl-C, no `except Exception` stops it

`run_guarded` maps these to the exit codes below in one place, for `runwatch` and the scripts;
docs/FORMAT.md, "Exit codes", lists them per command. Every class here is exported from
`runwatch` (a test walks the package for exception classes and checks it).
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable

__all__ = [
    "run_guarded",
    "EXIT_OK",
    "EXIT_FAIL",
    "EXIT_USAGE",
    "EXIT_ANOMALY",
    "EXIT_TEMPFAIL",
    "EXIT_INTERRUPTED",
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
]

# --- exit codes -----------------------------------------------------------------------------------
EXIT_OK = 0  # success: a valid run, a clean check, a completed watch, a passed smoke run
EXIT_FAIL = 1  # a RunwatchError: an invalid run (`Invalid training run: ...`), a failed check
EXIT_USAGE = 2  # a UsageError (ConfigError included): a command line or option that cannot work
EXIT_ANOMALY = 7  # `watch` and `check`: an anomaly
EXIT_TEMPFAIL = 75  # `supervise`: preempted (sysexits.h EX_TEMPFAIL, "try again later"), by default
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports a process that SIGINT ended (128 + 2)


class RunwatchError(Exception):
    """Base class of every error runwatch raises on purpose."""


class InvalidRunError(RunwatchError, ValueError):
    """A run directory, manifest or log record breaks the contract."""


class UsageError(RunwatchError):
    """A command line or option value that cannot work."""


class ConfigError(UsageError, ValueError):
    """A configuration value that cannot work: an option, a `RunLogger` recipe or argument, a
    callback's argument, `runwatch.toml`; the message names it, what it must be and what it got.

    A `ValueError` too, so code that validates arguments the Python way catches it; the command
    line treats it as a usage error (exit 2)."""


class RunLockedError(RunwatchError):
    """Another RunLogger holds the run directory."""


class StoreLockedError(RunwatchError):
    """An MLflow SQLite store stayed locked by a writer for longer than a reader waits
    (`runwatch.reading.readers.mlflowstore.LOCK_WAIT_SECONDS`)."""


class LogWriteError(RunwatchError, OSError):
    """Writing a record to the run directory failed."""


class NotRegularFileError(RunwatchError, OSError):
    """A FIFO, a device, a socket or a directory where a regular file of a run directory should be
    (`files.safeio`): never read, never waited on. Its message is `<name> is not a regular file`."""

    def __init__(self, path: str, what: str = "not a regular file", *, is_directory: bool = False) -> None:
        super().__init__(errno.EINVAL, f"{os.path.basename(path)} is {what}")
        self.path = path
        self.is_directory = is_directory

    def __str__(self) -> str:
        return str(self.strerror)


class UnsafeWriteError(RunwatchError, OSError):
    """A write runwatch refuses (`files.safeio`): through a symlink, into a file with other hard
    links, over a lock file that holds something else than a pid."""

    def __str__(self) -> str:
        return str(self.strerror)


class NonFiniteLossError(RunwatchError, FloatingPointError):
    """The loss went non-finite; the logger wrote `session_end` with reason `nonfinite_loss`."""


class RanksOutOfStepError(RunwatchError):
    """Ranks of a torch.distributed run reached a window close with different attempted-update
    counts (each must call RunLogger.step() as often); raised on every rank."""


class InsufficientRunError(RunwatchError):
    """A valid run that is too short to judge: the message says how many more steps are needed."""


class DataError(RunwatchError):
    """An input data set that cannot be read as a whole (a missing file or column, a mixed directory)."""


class CheckpointError(RunwatchError):
    """A checkpoint file that cannot be read back, or holds no tensors."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread so that `with RunLogger(...)` ends the session
    (`interrupted`, error `SIGTERM`). A KeyboardInterrupt, not a RunwatchError: code that catches
    `Exception` lets it through, as it lets Ctrl-C through."""


def run_guarded(command: Callable[[], int]) -> int:
    """Run `command` and return its exit status; an exception becomes a code and one line on stderr.

    UsageError: 2. InvalidRunError: 1, `Invalid training run: <message>`. Any other RunwatchError:
    1, `runwatch: <message>`. Ctrl-C: 130. A reader that closed our stdout (`runwatch ... | head`):
    1 and nothing more, no traceback: the output was not all delivered, and there is no one to
    tell. SystemExit (argparse's --help, --version) keeps its code.
    """
    try:
        code = command()
        sys.stdout.flush()  # here, not at exit: a closed pipe must be caught like any other error
        return code
    except SystemExit as exc:  # --help, --version
        return exc.code if isinstance(exc.code, int) else 0
    except UsageError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_USAGE
    except InvalidRunError as exc:
        print(f"Invalid training run: {exc}", file=sys.stderr)
        return EXIT_FAIL
    except InsufficientRunError as exc:  # cannot judge (plan: cannot project; bench: ended too soon)
        print(f"runwatch: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except RunwatchError as exc:
        print(f"runwatch: {exc}", file=sys.stderr)
        return EXIT_FAIL
    except KeyboardInterrupt:
        print("runwatch: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _discard_stdout()
        return EXIT_FAIL


def _discard_stdout() -> None:
    """Point stdout at /dev/null, as the Python docs recommend after EPIPE: the interpreter's
    final flush of what is still buffered would otherwise fail again and print a traceback."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):  # replaced by something without a descriptor
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)
