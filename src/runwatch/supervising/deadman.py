"""The dead-man heartbeat: a URL fetched while the supervisor sees the run make progress
(docs/SUPERVISE.md, "Dead-man heartbeat").

    beat = DeadMan("https://hc-ping.com/<uuid>", every=60.0)
    beat.poll(new_records=True)        # each poll of the watch: fetch if due and a record came
    for failure in beat.failures():    # fetches that failed since the last call
        journal(failure)

An outside monitor (healthchecks.io, Uptime Kuma, a cron job's dead-man switch) alerts when the
fetches stop. They stop when the supervisor dies, and also while the run shows no new record
(a stall, a hang, a log the supervisor cannot read), so the monitor's grace must exceed the
longest quiet stretch of a healthy run (an evaluation, a save).

A fetch is an HTTP GET with a 10 s timeout, made on a thread of its own: a slow or dead URL never
delays a verdict. At most one fetch is in flight; the next is due `every` seconds after the last
one began and only once a new record has arrived since. A failure (an error status, a refused
connection, a timeout) is kept for the caller to journal and never stops anything. Standard
library only.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import TypedDict

# healthchecks.io's own clients use 10 s; a ping that takes longer is no sign of life anyway.
FETCH_TIMEOUT_SECONDS = 10.0
# The body of a ping's answer is not needed: read a little so the connection closes cleanly.
READ_BYTES = 4096


class Failure(TypedDict):
    """One fetch that failed."""

    time: float  # when it began (Unix seconds)
    error: str  # what went wrong, one line


class DeadMan:
    """Fetches `url` at most every `every` seconds while new records arrive (see the module docstring)."""

    def __init__(
        self,
        url: str,
        every: float,
        *,
        timeout: float = FETCH_TIMEOUT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url
        self.every = every
        self.timeout = timeout
        self.clock = clock
        self.fetches = 0  # fetches begun
        self._new = False  # a record arrived since the last fetch began
        self._last: float | None = None  # when the last fetch began (clock)
        self._busy: threading.Thread | None = None
        self._failed: list[Failure] = []
        self._lock = threading.Lock()

    def poll(self, new_records: bool) -> bool:
        """Note whether new records arrived; begin a fetch when one is due. True when one began."""
        if new_records:
            self._new = True
        now = self.clock()
        if not self._new or (self._last is not None and now - self._last < self.every):
            return False
        if self._busy is not None and self._busy.is_alive():
            return False
        self._new = False
        self._last = now
        self.fetches += 1
        self._busy = threading.Thread(target=self._fetch, args=(time.time(),), name="runwatch-heartbeat", daemon=True)
        self._busy.start()
        return True

    def _fetch(self, began: float) -> None:
        try:
            req = urllib.request.Request(self.url, method="GET", headers={"User-Agent": "runwatch"})
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # noqa: S310 - a URL the user gave
                resp.read(READ_BYTES)
        except urllib.error.HTTPError as exc:
            self._fail(began, f"HTTP {exc.code} {exc.reason}")
        except urllib.error.URLError as exc:
            self._fail(began, str(exc.reason))
        except (OSError, ValueError) as exc:  # a timeout while reading, a malformed answer
            self._fail(began, str(exc) or type(exc).__name__)

    def _fail(self, began: float, error: str) -> None:
        with self._lock:
            self._failed.append({"time": round(began, 3), "error": error[:300]})

    def failures(self) -> list[Failure]:
        """The failed fetches since the last call (each once)."""
        with self._lock:
            out, self._failed = self._failed, []
        return out

    def wait(self, timeout: float) -> None:
        """Wait up to `timeout` seconds for a fetch in flight to end (tests; never on a verdict)."""
        busy = self._busy
        if busy is not None:
            busy.join(timeout)
