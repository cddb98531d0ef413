"""The signals that stop a supervision: a scheduler's preemption and a person's Ctrl-C.

SIGTERM and SIGUSR1 are a preemption (Kubernetes and Slurm's time limit send SIGTERM, Slurm's
`--signal=B:USR1@N` a warning ahead of it); SIGINT is a person at a terminal. `StopSignals`
catches them while a supervision runs, keeps the first one and when it came, and calls back at a
second Ctrl-C (the supervisor then kills the training at once); `sleep` waits, waking for one.
What the supervisor does once asked to stop (stop the tree, requeue, the `preempted` record) is
`Supervisor._interrupted`'s. Standard library only.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from types import FrameType
from typing import Any, TypeAlias

# A scheduler's way to say "stop now, you will be started again".
PREEMPT_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)

# A signal's handler as `signal.signal` takes and returns it (SIG_DFL and SIG_IGN are ints).
_Handler: TypeAlias = Callable[[int, FrameType | None], Any] | int | None


class StopSignals:
    """The preemption signals and SIGINT, caught from `install()` until `restore()`."""

    def __init__(self, on_second_interrupt: Callable[[], None]) -> None:
        self.received: int | None = None  # the signal that asked the supervisor to stop
        self.time: float | None = None  # when it came
        self._again = on_second_interrupt
        self._old: dict[signal.Signals, _Handler] = {}

    def install(self) -> None:
        """Catch the signals; in a thread other than the main one, none (the caller stops us)."""
        try:
            for sig in (*PREEMPT_SIGNALS, signal.SIGINT):
                self._old[sig] = signal.signal(sig, self._on_signal)
        except ValueError:  # not the main thread
            pass

    def restore(self) -> None:
        """Put back the handlers `install` replaced."""
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.received is None:
            self.received, self.time = signum, time.time()
        elif signum == signal.SIGINT == self.received:
            self._again()  # Ctrl-C again while the training stops

    def sleep(self, seconds: float) -> bool:
        """Sleep, waking for a signal; False when the supervisor was asked to stop."""
        end = time.monotonic() + seconds
        while self.received is None:
            left = end - time.monotonic()
            if left <= 0:
                return True
            time.sleep(min(left, 0.2))
        return False
