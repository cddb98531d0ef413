"""A run's list facts, kept until something they come from changes: 1000 runs list in milliseconds.

    cache = FactsCache("/runs/a", "runs/a")
    cache.get(key, now, compute)     # compute() only when `key`, a side file or the clock says so

Working out a run's `status` facts reads its side files (pid, watchdog.json, launch.json,
heartbeats, the tail of stdout.log) and walks its last records: about a millisecond a run, a
second for a list of 1000, every time a page polls. The facts change only when the run's log was
read further (`key`: the reader's version, its errors), when a side file changes (the folder's
mtime), or with time: a process that dies or a watchdog that stops polling changes no file. So
the facts are kept, their age is moved on with the clock, and they are worked out again when
the key or a side file changed, or after `MAX_AGE_SECONDS` (spread over a range per run, so that
1000 runs do not all expire in the same request). Standard library only.
"""

from __future__ import annotations

import os
import time
import zlib
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from ...files import HEARTBEATS
from ..checkin import Status

Facts = TypeVar("Facts", bound=Status)  # the list's summary of a run (runs.RunSummary)


# What is stat-ed for a change of the side files: the run directory itself and its heartbeats/.
# Their writers replace them atomically (a temp file renamed over: pid, launch.json,
# watchdog.json, exit.json, heartbeats/rank-N.json), which changes the folder's mtime; two stats
# a run instead of one a file. (stdout.log is appended in place: it matters, for the last error,
# once the process is gone, which the clock catches.)
SIDE_FILES = (".", HEARTBEATS)
# Facts unchanged by any file are worked out again after 5 to 10 s (per run): how late a list
# may say that a process died or a watchdog stopped, when nothing else changed.
MAX_AGE_SECONDS = 10.0


def _signature(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


class FactsCache(Generic[Facts]):
    """One run's facts (a dict with `age_seconds`), and what they were worked out from."""

    def __init__(self, run_dir: str, name: str) -> None:
        self.paths = [os.path.normpath(os.path.join(run_dir, n)) for n in SIDE_FILES]
        # 0.5 to 1.0 x MAX_AGE_SECONDS, fixed per run: expiries spread over time
        self.max_age = MAX_AGE_SECONDS * (0.5 + (zlib.crc32(name.encode()) % 1000) / 2000)
        self.key: Hashable = None
        self.facts: Facts | None = None
        self.at = 0.0  # the clock (monotonic) when the facts were worked out
        self.now = 0.0  # the `now` they were worked out for

    def get(self, key: Hashable, now: float, compute: Callable[[], Facts]) -> Facts:
        """The facts for `now`: kept ones with their age moved on, or `compute()`'s."""
        full = (key, tuple(_signature(p) for p in self.paths))
        clock = time.monotonic()
        if self.facts is None or full != self.key or clock - self.at >= self.max_age:
            facts = compute()
            self.key, self.facts, self.at, self.now = full, facts.copy(), clock, now
            return facts
        out = self.facts.copy()
        age = out["age_seconds"]
        if age is not None:
            out["age_seconds"] = round(age + (now - self.now), 1)
        return out
