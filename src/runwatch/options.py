"""The options contract: one definition per option, and the command-line parser.

Placeholder; filled in below.
"""

from __future__ import annotations

import argparse

from .errors import UsageError


class Parser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of exiting, so `main(argv)` returns codes."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")
