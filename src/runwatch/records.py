"""`runwatch.records`, kept for one release where earlier docs and code import it: the one record parser and the reading of any target.

Import from `runwatch.reading` instead. Each name below resolves on first use from where it
lives now; this module exports nothing (no `__all__`) and nothing inside the package imports it.
"""

from __future__ import annotations

from typing import Any

from . import lazy

# module -> the names this module used to export.
_FROM: dict[str, tuple[str, ...]] = {
    "runwatch.reading": (
        "Record",
        "Session",
        "Target",
        "RecordParser",
        "RecordSource",
        "resolve_target",
        "parse_maps",
        "iter_records",
        "load_sessions",
        "parser_for",
        "read_trainer_state",
        "load_trainer_state",
        "MINIMAL_KEYS",
        "MAX_STATE_BYTES",
        "FILE_SUFFIXES",
    ),
}
_WHERE = lazy.index(_FROM)


def __getattr__(name: str) -> Any:
    return lazy.resolve(__name__, globals(), _WHERE, name)


def __dir__() -> list[str]:
    return lazy.listing(globals(), _WHERE)
