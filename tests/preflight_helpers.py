"""Custom `--check MODULE:FUNCTION` functions for the audit tests (imported by the workers too)."""

from __future__ import annotations

import os
import signal
import time

MARK_HANG = "#HANG"
MARK_CRASH = "#CRASH"
MARK_INTERRUPT = "#INTERRUPT"


def accept_all(text: str) -> None:
    """Accepts every row, so a normalizer's failures show as such."""
    return None


def hang_on_marker(text: str) -> None:
    """Hangs on a row holding MARK_HANG; rejects rows starting with 'bad' with a returned reason."""
    if MARK_HANG in text:
        time.sleep(3600)
    if text.startswith("bad"):
        return "starts with bad"
    return None


def crash_on_marker(text: str) -> None:
    """Kills its own process (as a segfault in C code would) on a row holding MARK_CRASH."""
    if MARK_CRASH in text:
        os.kill(os.getpid(), signal.SIGKILL)
    return None


def interrupt_on_marker(text: str) -> None:
    """Raises KeyboardInterrupt on a row holding MARK_INTERRUPT (with --workers 0: the audit fails)."""
    if MARK_INTERRUPT in text:
        raise KeyboardInterrupt
    return None
