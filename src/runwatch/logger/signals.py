"""SIGTERM and SIGINT around the logger's record commits: a signal never lands between a window's
counters and its record.

`SignalGuard` handles SIGTERM (when the program has not) and SIGINT (when Python's default raises
KeyboardInterrupt): SIGTERM raises `Terminated`, SIGINT `KeyboardInterrupt`, as without it; only
while a commit is in progress (`with guard:`) is the exception held back until the commit is done.
Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import TypeAlias

from ..errors import Terminated as Terminated

# What signal.signal() takes and signal.getsignal() returns: a function, SIG_DFL, SIG_IGN, or None
# (a handler not installed from Python).
Handler: TypeAlias = "Callable[[int, FrameType | None], object] | int | signal.Handlers | None"


class SignalGuard:
    """The signal handlers of one logger, and the deferral of a signal during a commit.

    `with guard:` marks a commit; a signal arriving inside is raised when the outermost commit ends
    without an exception (after a failed commit it waits for `deliver_pending()`).
    """

    def __init__(self) -> None:
        self.pid = os.getpid()  # a forked child (a data-loader worker) must not end the session
        self.terminated = False  # a SIGTERM came
        self._busy = 0
        self._pending: int | None = None
        self._previous: dict[int, tuple[Handler, Handler]] = {}  # signal -> (previous handler, ours)

    def __enter__(self) -> None:
        self._busy += 1

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._busy -= 1
        if exc_type is None and not self._busy and self._pending is not None:
            self.deliver_pending()

    def install(self) -> None:
        """Install the handlers (from the main thread only; elsewhere Python does not allow it)."""
        if threading.current_thread() is not threading.main_thread():
            return
        wanted: list[tuple[signal.Signals, Handler, Handler]] = [
            (signal.SIGTERM, signal.SIG_DFL, self._on_signal),
            (signal.SIGINT, signal.default_int_handler, self._on_signal),
        ]
        if hasattr(signal, "SIGXFSZ"):
            # Past RLIMIT_FSIZE the kernel sends SIGXFSZ, whose default action kills the process
            # with half a record on disk and no message. CPython ignores it at startup; an embedding
            # program may not. Ignored, write() fails with EFBIG and the journal cuts the record
            # back and raises LogWriteError naming the file.
            wanted.append((signal.SIGXFSZ, signal.SIG_DFL, signal.SIG_IGN))
        for signum, default, handler in wanted:
            try:
                current = signal.getsignal(signum)
            except (ValueError, AttributeError):  # pragma: no cover
                continue
            if current is not default:
                continue  # the program handles it itself; leave it be
            signal.signal(signum, handler)
            self._previous[signum] = (current, handler)

    def restore(self) -> None:
        """Put the previous handlers back (those not replaced since by the program)."""
        if not self._previous or threading.current_thread() is not threading.main_thread():
            return
        for signum, (previous, ours) in self._previous.items():
            with contextlib.suppress(ValueError):
                if signal.getsignal(signum) == ours:  # not one installed after ours
                    signal.signal(signum, previous)
        self._previous = {}

    def deliver_pending(self) -> None:
        """Raise the signal held back during a commit, if any."""
        signum, self._pending = self._pending, None
        if signum is not None:
            raise Terminated("SIGTERM") if signum == signal.SIGTERM else KeyboardInterrupt()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if os.getpid() != self.pid:  # a forked child: behave as if we were not here
            previous = self._previous[signum][0]
            signal.signal(signum, previous)
            if previous is signal.SIG_DFL:
                os.kill(os.getpid(), signum)
                return
            raise KeyboardInterrupt()  # SIGINT's default_int_handler
        if signum == signal.SIGTERM:
            self.terminated = True
        if self._busy:
            self._pending = signum
            return
        raise Terminated("SIGTERM") if signum == signal.SIGTERM else KeyboardInterrupt()
